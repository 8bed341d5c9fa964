//! What the serve loops of the text protocol (`text.rs`) and the binary protocol (`binary.rs`)
//! share: where replies go ([`Replies`]), how far a loop got through its input ([`Progress`]),
//! and what a connection does after a request ([`After`], [`Step`]). A TCP or unix connection
//! (`conn.rs`) and a UDP datagram (`udp.rs`) drive both loops the same way.

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum After {
    #[default]
    Continue,
    /// Send what is queued, then close (`quit`).
    CloseAfterWrite,
    /// Close at once, dropping queued replies (`shutdown`).
    CloseNow,
    /// Close at once for a protocol error (an overlong line, an HTTP request): watch's
    /// `conn_close ... reason=error`.
    HangUp,
    /// Send what is queued, then stream these `watch` kinds and serve nothing more.
    Watch(u8),
    /// Stream `lru_crawler metadump`'s lines, then `END`, then go on serving.
    Metadump,
}

/// What the text serve loop does with its input after a command line that may carry a data
/// block (a storage command, `ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The command ran; drop this many bytes after the line (its data block).
    Done(usize),
    /// The data block has not fully arrived: this many bytes after the line are needed.
    Need(usize),
    /// An error was answered; discard this many bytes after the line, arrived or not.
    Swallow(usize),
    /// A multi-key get stopped before a key, its replies backlogged or the key's item on
    /// flash not read yet: it goes on later from there (see [`Resume`]). The keys' addresses (`as_ptr() as usize`), as the serve loop
    /// turns them into offsets in its line.
    Resume { first_key: usize, next_key: usize },
}

/// A multi-key get that stopped before one of its keys because so many replies wait for the
/// client (a reply larger than memory could hold streams this way): the request at
/// [`Progress::consumed`] stays in the read buffer, and its first `prefix` bytes (the command
/// and its arguments, up to the first key) are moved to end just before `next_key`, which
/// makes the rest of the line a request of its own, run once the client has read. Offsets are
/// from the start of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    pub prefix: usize,
    pub next_key: usize,
}

impl Resume {
    /// The resume of a get whose line starts `line`, from `Step::Resume`'s key addresses.
    pub fn in_line(line: &[u8], first_key: usize, next_key: usize) -> Resume {
        let start = line.as_ptr() as usize;
        Resume {
            prefix: first_key - start,
            next_key: next_key - start,
        }
    }
}

/// Where a serve loop appends its replies, with the transport's hooks.
pub trait Replies {
    fn buf(&mut self) -> &mut Vec<u8>;

    /// Between two keys of a multi-key get: UDP sends each key's value as its own message.
    #[inline]
    fn between_keys(&mut self) {}

    /// After each request: UDP sends each response as its own message.
    #[inline]
    fn request_done(&mut self) {}

    /// Whether the transport can hold a request of `bytes` bytes while the rest of it arrives:
    /// a connection's read buffer grows only within `-o read_buf_mem_limit`. A datagram
    /// arrives whole, so it has nothing to hold.
    #[inline]
    fn hold(&mut self, _bytes: usize) -> bool {
        true
    }

    /// True when so many replies wait for the client that serving should stop until it reads.
    #[inline]
    fn backlogged(&self) -> bool {
        false
    }
}

/// How far a serve loop got through its input.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the input used up.
    pub consumed: usize,
    /// Bytes the next request needs (from the end of `consumed`) before it can run; 0 if none.
    pub need: usize,
    /// `need` is exact (a data block or a frame whose length is known), so a buffer grows to it
    /// and no further.
    pub need_exact: bool,
    /// Bytes still to discard beyond the input (the rest of a refused request's data).
    pub swallow: usize,
    /// Stopped with requests left: at the request budget (`-R`), at the backlog bound, or
    /// inside a get (`resume`).
    pub yielded: bool,
    /// The request at `consumed` is a get stopped before one of its keys.
    pub resume: Option<Resume>,
    /// The request at `consumed` (or the rest of a get, with `resume`) waits for flash reads
    /// (`Ops::flash_deferred`): ask for them, and serve again once woken.
    pub awaiting_flash: bool,
    pub after: After,
}

impl Progress {
    /// Skips `len` bytes of a refused request starting at `consumed`, of an input of
    /// `input_len` bytes: what has not arrived is swallowed later. False when the skip ran past
    /// the input (the loop must stop).
    pub fn skip(&mut self, len: usize, input_len: usize) -> bool {
        let end = self.consumed + len;
        if end <= input_len {
            self.consumed = end;
            true
        } else {
            self.swallow = end - input_len;
            self.consumed = input_len;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipping_past_the_input_swallows_the_rest() {
        let mut p = Progress {
            consumed: 10,
            ..Progress::default()
        };
        assert!(p.skip(5, 20));
        assert_eq!((p.consumed, p.swallow), (15, 0));
        assert!(!p.skip(8, 20));
        assert_eq!((p.consumed, p.swallow), (20, 3));
    }
}
