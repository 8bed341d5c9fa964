//! The classic ASCII (text) protocol, server side: split request lines into commands and encode
//! replies. No I/O and no allocation: commands borrow the caller's read buffer.
//!
//! The rules follow memcached 1.6.45's request parser (`proto_parser.c`, `proto_text.c`): tokens
//! are separated by single spaces (runs of spaces collapse, tabs belong to tokens), a line ends at
//! `\n` with an optional `\r` before it, at most 23 tokens are looked at except for the keys of a
//! get. A classic command with fewer tokens than it needs is `CLIENT_ERROR bad command line
//! format`; tokens past those it reads are ignored; `noreply` is the last token read, and
//! silences every reply of the command, errors included (an unknown command's `ERROR` too).

use crate::KEY_MAX_LENGTH;

mod encode;
mod number;
pub(crate) mod scan;

pub use encode::{encode_number, encode_only_value, encode_stat, encode_value};
pub use number::{parse_i32, parse_u32, parse_u64, token_i32, token_u32, token_u64};
use scan::{bytes_below, first_below, memchr, newline_or_nul, search_head, ONES};

/// memcached closes a connection whose pending line has no `\n` after this many bytes, unless the
/// line is a get/gets (multi-key gets may be long).
pub const MAX_LINE_WITHOUT_NEWLINE: usize = 2048;

/// memcached looks at this many tokens (the last one being the unparsed rest of the line).
const MAX_TOKENS: usize = 24;

/// The write commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// One parsed request line. Storage commands are followed by `bytes` of data and `\r\n`, which
/// the caller reads with [`data_block`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// get/gets (`touch: None`) and gat/gats (`touch: Some(exptime)`).
    Get {
        keys: Keys<'a>,
        with_cas: bool,
        touch: Option<i64>,
    },
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        bytes: usize,
        cas_unique: u64,
        noreply: bool,
    },
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `delay` is memcached's exptime rule (0 or negative = now).
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    /// `stats [subcommand [args...]]`: `args` holds everything after `stats`.
    Stats {
        args: Keys<'a>,
    },
    /// memcached's admin and debug commands whose arguments the server reads (`args`: the words
    /// after the command, a final `noreply` included).
    Admin {
        command: AdminCommand,
        args: Keys<'a>,
        noreply: bool,
    },
    Quit,
    /// `shutdown [graceful]`; the mode is checked only when shutdown is enabled (`-A`), as in
    /// memcached.
    Shutdown {
        mode: ShutdownMode,
        noreply: bool,
    },
    /// A meta command (`mg ms md ma me mn`): the whole line, for [`crate::meta::parse`]. An `ms`
    /// line is followed by a data block, as a storage command is.
    Meta {
        line: &'a [u8],
    },
}

/// An admin or debug command of memcached 1.6 (see [`Command::Admin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    /// `watch [fetchers|mutations|evictions|connevents|...]` (the only one `noreply` does not
    /// silence).
    Watch,
    /// `lru_crawler crawl|metadump|enable|disable|sleep|tocrawl ...`
    LruCrawler,
    /// `slabs automove|reassign ...`
    Slabs,
    /// `lru mode|temp_ttl|tune ...`
    Lru,
    /// `cache_memlimit <megabytes>`
    CacheMemlimit,
    /// `refresh_certs`: reload the TLS certificate and key.
    RefreshCerts,
    /// `extstore SETTING VALUE`: change a knob of the flash tier.
    Extstore,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    Now,
    Graceful,
    Invalid,
}

/// A command line that gets an error reply instead of running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reply: &'static [u8],
    /// The line asked for `noreply`: memcached sends nothing, not even the error.
    pub noreply: bool,
    /// An HTTP request line (an unknown command whose last token starts with `HTTP/`):
    /// memcached closes the connection at once, without a reply and dropping replies not yet
    /// sent, so a browser or a web client tricked into connecting cannot talk to the cache.
    pub hang_up: bool,
    /// Bytes after the line to skip: a storage command refused after its length was read has
    /// its data block (and `\r\n`) swallowed, as memcached 1.6.45 does; 0 otherwise.
    pub swallow: usize,
}

pub const ERROR: &[u8] = b"ERROR\r\n";
pub const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
pub const BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
pub const BAD_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
pub const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
pub const NON_NUMERIC: &[u8] = b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
pub const OUT_OF_MEMORY_STORING: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
pub const OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory\r\n";
pub const FLUSH_DISABLED: &[u8] = b"CLIENT_ERROR flush_all not allowed\r\n";
pub const SHUTDOWN_DISABLED: &[u8] = b"SERVER_ERROR: shutdown not enabled\r\n";
pub const BAD_SHUTDOWN: &[u8] = b"CLIENT_ERROR invalid shutdown mode\r\n";
pub const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";
pub const STORED: &[u8] = b"STORED\r\n";
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
pub const EXISTS: &[u8] = b"EXISTS\r\n";
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
pub const DELETED: &[u8] = b"DELETED\r\n";
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
pub const OK: &[u8] = b"OK\r\n";
pub const END: &[u8] = b"END\r\n";
pub const RESET: &[u8] = b"RESET\r\n";

/// What the front of a read buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// No complete line yet: read more.
    Incomplete,
    /// A line without `\n` grew past what memcached tolerates: close the connection.
    LineTooLong,
    /// A complete line of `consumed` bytes (newline included).
    Line {
        consumed: usize,
        parsed: Result<Command<'a>, Rejection>,
    },
}

/// Finds the first request line in `buf` and parses it. `max_line` bounds a get/gets line still
/// waiting for its newline.
#[inline(always)]
pub fn parse(buf: &[u8], max_line: usize) -> Frame<'_> {
    // A one-key get, the commonest line, is recognised in one scan, inlined into the caller;
    // other lines go on from where it stopped (nothing before that is a newline or a NUL).
    let mut searched = 0;
    if let Some(rest) = buf.strip_prefix(b"get ") {
        match one_key_get(rest) {
            Ok(frame) => return frame,
            Err(clean) => searched = 4 + clean,
        }
    }
    parse_from(buf, max_line, searched)
}

/// [`parse`] once the first `searched` bytes of `buf` are known to hold no newline or NUL.
#[inline(never)]
fn parse_from(buf: &[u8], max_line: usize, searched: usize) -> Frame<'_> {
    let incomplete = || {
        if buf.len() > MAX_LINE_WITHOUT_NEWLINE && !may_grow_long(buf, max_line) {
            Frame::LineTooLong
        } else {
            Frame::Incomplete
        }
    };
    // One pass finds the line's end and whether a NUL comes first.
    let Some(end) = newline_or_nul(&buf[searched..]).map(|i| searched + i) else {
        return incomplete();
    };
    let (line, newline) = if buf[end] == b'\n' {
        let mut line = &buf[..end];
        if line.len() > 1 && line[line.len() - 1] == b'\r' {
            line = &line[..line.len() - 1];
        }
        (line, end)
    } else {
        // memcached handles the line as a C string: a NUL ends it.
        let Some(newline) = memchr(b'\n', &buf[end..]) else {
            return incomplete();
        };
        (&buf[..end], end + newline)
    };
    // memcached 1.6.45 refuses a line of under 4 bytes, its line ending included (an empty or
    // blank line, `mn\n`), before it looks at the command.
    let parsed = if newline + 1 < 4 {
        reject(BAD_FORMAT, false)
    } else {
        parse_line(line)
    };
    Frame::Line {
        consumed: newline + 1,
        parsed,
    }
}

/// `rest` follows `get `: a key of printable bytes then `\n` or `\r\n` is the whole line, as
/// [`parse_line`] would split it. Otherwise `Err` with how many bytes at the front hold no
/// newline or NUL.
#[inline(always)]
fn one_key_get(rest: &[u8]) -> Result<Frame<'_>, usize> {
    let (key_len, consumed) = one_key_get_line(rest)?;
    Ok(Frame::Line {
        consumed: 4 + consumed,
        parsed: Ok(Command::Get {
            keys: Keys::one(&rest[..key_len]),
            with_cas: false,
            touch: None,
        }),
    })
}

/// [`one_key_get`]'s test, shared with the look-ahead (`crate::lookahead`), so that what it
/// takes for a one-key get is exactly what the parser does: the key's length and the bytes
/// `rest`'s line takes. The key is of legal length: its end is found among the first `SHORT`
/// bytes (a longer key goes to the general path, which refuses it).
#[inline(always)]
pub(crate) fn one_key_get_line(rest: &[u8]) -> Result<(usize, usize), usize> {
    // Space, newline, NUL, and the other control bytes (tab and `\r` belong to a key, but are
    // rare enough to leave to the general path).
    let Some(end) = first_below(b'!', rest) else {
        return Err(0);
    };
    let consumed = match rest[end] {
        b'\n' => end + 1,
        b'\r' if rest.get(end + 1) == Some(&b'\n') => end + 2,
        _ => return Err(end),
    };
    if end == 0 {
        return Err(0);
    }
    Ok((end, consumed))
}

// `one_key_get_line`'s keys are shorter than `SHORT`, so never too long.
const _: () = assert!(scan::SHORT <= KEY_MAX_LENGTH);

/// memcached lets only get/gets lines (after at most 100 leading spaces) run past 2048 bytes.
fn may_grow_long(buf: &[u8], max_line: usize) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= 100
        && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
        && buf.len() <= max_line
}

/// Space-separated tokens of part of a line (keys of a get, arguments of stats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a> {
    /// The next token, split off ahead (empty once none is left): a one-key get line hands its
    /// key over already split, without a second scan.
    next: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Keys<'a> {
    pub fn new(line: &'a [u8]) -> Keys<'a> {
        let (next, rest) = split_token(line);
        Keys { next, rest }
    }

    /// `token` alone: it holds no space and is not empty.
    #[inline(always)]
    fn one(token: &'a [u8]) -> Keys<'a> {
        Keys {
            next: token,
            rest: &token[token.len()..],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.next.is_empty()
    }

    /// The only token, when there is exactly one (a one-key get line).
    #[inline]
    pub fn only(&self) -> Option<&'a [u8]> {
        (!self.next.is_empty() && self.rest.is_empty()).then_some(self.next)
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.next.is_empty() {
            return None;
        }
        let token = self.next;
        (self.next, self.rest) = split_token(self.rest);
        Some(token)
    }
}

/// The first space-separated token of `s` (empty if none) and what follows it.
#[inline(always)]
fn split_token(s: &[u8]) -> (&[u8], &[u8]) {
    // After the last key (a one-key get's only one) this is all that runs in the caller.
    if s.is_empty() {
        return (s, s);
    }
    let (start, end) = token_bounds(s);
    (&s[start..end], &s[end..])
}

/// Where the first token of a non-empty `s` starts and ends (both `s.len()` when there is none).
/// Two indices come back in registers, and a long token's search is a tail call, so this saves
/// no registers where it is not inlined.
#[inline(never)]
fn token_bounds(s: &[u8]) -> (usize, usize) {
    let Some(start) = s.iter().position(|&b| b != b' ') else {
        return (s.len(), s.len());
    };
    let token = &s[start..];
    match search_head(token, |w| bytes_below(w ^ (ONES * u64::from(b' ')), 1)) {
        Ok(end) => (start, start + end),
        Err(searched) if searched == token.len() => (start, s.len()),
        Err(searched) => long_token_bounds(s, start + searched, start),
    }
}

/// [`token_bounds`] past the head it searched: from `searched` on, for the token at `start`.
#[cold]
#[inline(never)]
fn long_token_bounds(s: &[u8], searched: usize, start: usize) -> (usize, usize) {
    let end = memchr::memchr(b' ', &s[searched..]).map_or(s.len(), |i| searched + i);
    (start, end)
}

/// The first tokens of a line, as memcached's tokenizer sees them: up to 23 tokens, then the
/// unparsed rest; `count` is memcached's `ntokens` (the tokens plus the terminal one).
struct Tokens<'a> {
    tokens: [&'a [u8]; MAX_TOKENS],
    count: usize,
}

impl<'a> Tokens<'a> {
    fn split(line: &'a [u8]) -> Tokens<'a> {
        let mut tokens = [&line[..0]; MAX_TOKENS];
        let mut n = 0;
        let mut keys = Keys::new(line);
        while n < MAX_TOKENS - 1 {
            match keys.next() {
                Some(token) => {
                    tokens[n] = token;
                    n += 1;
                }
                None => break,
            }
        }
        Tokens {
            tokens,
            count: n + 1,
        }
    }

    fn get(&self, i: usize) -> &'a [u8] {
        self.tokens[i]
    }

    /// 1.6.45's `_process_request_noreply`: the last token read is `noreply`.
    fn noreply(&self) -> bool {
        self.count >= 2 && self.tokens[self.count - 2] == b"noreply"
    }

    /// The key (the token after the command); one longer than memcached allows is a bad
    /// command line.
    fn key(&self, noreply: bool) -> Result<&'a [u8], Rejection> {
        let key = self.get(1);
        if key.len() > KEY_MAX_LENGTH {
            return Err(Rejection {
                reply: BAD_FORMAT,
                noreply,
                hang_up: false,
                swallow: 0,
            });
        }
        Ok(key)
    }
}

fn reject(reply: &'static [u8], noreply: bool) -> Result<Command<'static>, Rejection> {
    Err(Rejection {
        reply,
        noreply,
        hang_up: false,
        swallow: 0,
    })
}

/// Parses one request line (without its line ending).
pub fn parse_line(line: &[u8]) -> Result<Command<'_>, Rejection> {
    // The common lines first, without tokenizing: the keys of a get are split by the caller.
    if let Some(rest) = line.strip_prefix(b"get ") {
        return plain_get(rest, false);
    }
    if let Some(rest) = line.strip_prefix(b"gets ") {
        return plain_get(rest, true);
    }
    if let Some(rest) = line.strip_prefix(b"set ") {
        if let Some(set) = plain_set(rest) {
            return Ok(set);
        }
    }
    parse_tokens(line)
}

/// `set <key> <flags> <exptime> <bytes>[ noreply]` with single spaces and plain decimal numbers
/// of at most 9 digits; `None` for anything else (the tokenizer then decides). One scan: the key
/// ends at the first space (searched a word at a time, inlined; a key past the searched head goes
/// to the tokenizer), and each number's digits are folded as they are met (an iterator split and
/// a fold per field cost a set about 290 instructions).
#[inline]
fn plain_set(rest: &[u8]) -> Option<Command<'_>> {
    let key_len = search_head(rest, |w| bytes_below(w ^ (ONES * u64::from(b' ')), 1)).ok()?;
    if key_len == 0 || key_len > KEY_MAX_LENGTH {
        return None;
    }
    let mut at = key_len + 1;
    let mut number = |last: bool| {
        // A field of one digit (flags and exptime mostly are `0`) in one two-byte test.
        if !last {
            if let Some(&[digit @ b'0'..=b'9', b' ']) = rest.get(at..at + 2) {
                at += 2;
                return Some(u32::from(digit - b'0'));
            }
        }
        let start = at;
        let mut n = 0u32;
        while let Some(&b) = rest.get(at) {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            // Wrapping: ten digits or more are refused below, after the scan.
            n = n.wrapping_mul(10).wrapping_add(u32::from(digit));
            at += 1;
        }
        if !(1..=9).contains(&(at - start)) {
            return None;
        }
        if !last {
            (rest.get(at) == Some(&b' ')).then_some(())?;
            at += 1;
        }
        Some(n)
    };
    let (flags, exptime, bytes) = (number(false)?, number(false)?, number(true)?);
    let noreply = match &rest[at..] {
        b"" => false,
        b" noreply" => true,
        _ => return None,
    };
    Some(Command::Store {
        kind: StoreKind::Set,
        key: &rest[..key_len],
        flags,
        exptime: i64::from(exptime),
        bytes: bytes as usize,
        cas_unique: 0,
        noreply,
    })
}

/// get/gets: the keys are the rest of the line from its first key on; no key is a bad command
/// line.
#[inline]
fn plain_get(rest: &[u8], with_cas: bool) -> Result<Command<'_>, Rejection> {
    match rest.iter().position(|&b| b != b' ') {
        Some(first) => Ok(Command::Get {
            keys: Keys::new(&rest[first..]),
            with_cas,
            touch: None,
        }),
        None => reject(BAD_FORMAT, false),
    }
}

/// Any line, split as memcached's tokenizer does. Kept out of line so that a fast-path line
/// does not pay for its 24-token frame (about 4 instructions per line under callgrind).
#[inline(never)]
fn parse_tokens(line: &[u8]) -> Result<Command<'_>, Rejection> {
    let t = Tokens::split(line);
    let n = t.count;
    let cmd = t.get(0);
    if n < 2 || cmd.len() < 2 {
        return reject(ERROR, false);
    }
    // 1.6.45 names the command by the bytes before the line's first space, so after a leading
    // space only the commands it looks up by their first token (its `text_cmd_entries`) are
    // known.
    let cmd = if line[0] == b' ' && !is_looked_up_by_token(cmd) {
        &b""[..]
    } else {
        cmd
    };
    // The real tokens (memcached's `ntokens`): fewer than a command needs is a bad format, its
    // `noreply` unread.
    let tokens = n - 1;
    let need = |min: usize| {
        if tokens >= min {
            Ok(())
        } else {
            reject(BAD_FORMAT, false).map(|_| ())
        }
    };
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let with_cas = cmd.len() == 4;
            let start = |token: &[u8]| token.as_ptr() as usize - line.as_ptr() as usize;
            if cmd.starts_with(b"gat") {
                need(3)?;
                let Some(exptime) = token_i32(t.get(1)) else {
                    return reject(BAD_EXPTIME, false);
                };
                Ok(Command::Get {
                    keys: Keys::new(&line[start(t.get(2))..]),
                    with_cas,
                    touch: Some(exptime),
                })
            } else {
                need(2)?;
                Ok(Command::Get {
                    keys: Keys::new(&line[start(t.get(1))..]),
                    with_cas,
                    touch: None,
                })
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            let kind = match cmd {
                b"set" => StoreKind::Set,
                b"add" => StoreKind::Add,
                b"replace" => StoreKind::Replace,
                b"append" => StoreKind::Append,
                b"prepend" => StoreKind::Prepend,
                _ => StoreKind::Cas,
            };
            need(5)?;
            // The length first, to know what to skip; until it is read nothing is skipped and
            // `noreply` is not looked at.
            let bytes = match token_i32(t.get(4)) {
                Some(bytes) if (0..=i32::MAX as i64 - 2).contains(&bytes) => bytes as usize,
                _ => return reject(BAD_FORMAT, false),
            };
            let noreply = t.noreply();
            let refuse = || {
                Err(Rejection {
                    reply: BAD_FORMAT,
                    noreply,
                    hang_up: false,
                    swallow: bytes + 2,
                })
            };
            if t.get(1).len() > KEY_MAX_LENGTH {
                return refuse();
            }
            let (Some(flags), Some(exptime)) = (parse_u32(t.get(2)), parse_i32(t.get(3))) else {
                return refuse();
            };
            let cas_unique = match kind {
                // A missing unique (`cas k 0 0 1`) is an empty token.
                StoreKind::Cas => match token_u64(t.get(5)).filter(|_| tokens >= 6) {
                    Some(unique) => unique,
                    None => return refuse(),
                },
                _ => 0,
            };
            Ok(Command::Store {
                kind,
                key: t.get(1),
                flags,
                exptime,
                bytes,
                cas_unique,
                noreply,
            })
        }
        b"incr" | b"decr" => {
            need(3)?;
            let noreply = t.noreply();
            let key = t.key(noreply)?;
            let Some(delta) = token_u64(t.get(2)) else {
                return reject(BAD_DELTA, noreply);
            };
            Ok(Command::Arith {
                incr: cmd == b"incr",
                key,
                delta,
                noreply,
            })
        }
        b"delete" => {
            // Since 1.6.40 whatever follows the key is ignored but a final `noreply` (the old
            // hold time `0` included).
            need(2)?;
            let noreply = t.noreply();
            let key = t.key(noreply)?;
            Ok(Command::Delete { key, noreply })
        }
        b"touch" => {
            need(3)?;
            let noreply = t.noreply();
            let key = t.key(noreply)?;
            let Some(exptime) = token_i32(t.get(2)) else {
                return reject(BAD_EXPTIME, noreply);
            };
            Ok(Command::Touch {
                key,
                exptime,
                noreply,
            })
        }
        b"flush_all" => {
            let noreply = t.noreply();
            let mut delay = 0;
            if tokens != if noreply { 2 } else { 1 } {
                match token_i32(t.get(1)) {
                    Some(d) => delay = d,
                    None => return reject(BAD_EXPTIME, noreply),
                }
            }
            Ok(Command::FlushAll { delay, noreply })
        }
        b"version" => Ok(Command::Version),
        b"quit" => Ok(Command::Quit),
        b"verbosity" => {
            let noreply = t.noreply();
            match token_u32(t.get(1)).filter(|_| tokens >= 2) {
                Some(level) => Ok(Command::Verbosity { level, noreply }),
                None => reject(BAD_FORMAT, noreply),
            }
        }
        b"stats" => {
            let start = t.get(0).as_ptr() as usize - line.as_ptr() as usize + 5;
            Ok(Command::Stats {
                args: Keys::new(&line[start..]),
            })
        }
        b"watch" | b"lru_crawler" | b"slabs" | b"lru" | b"cache_memlimit" | b"refresh_certs"
        | b"extstore" => {
            let command = match cmd {
                b"refresh_certs" => AdminCommand::RefreshCerts,
                b"extstore" => AdminCommand::Extstore,
                b"watch" => AdminCommand::Watch,
                b"lru_crawler" => AdminCommand::LruCrawler,
                b"slabs" => AdminCommand::Slabs,
                b"lru" => AdminCommand::Lru,
                _ => AdminCommand::CacheMemlimit,
            };
            let start = t.get(0).as_ptr() as usize - line.as_ptr() as usize + cmd.len();
            Ok(Command::Admin {
                command,
                args: Keys::new(&line[start..]),
                noreply: command != AdminCommand::Watch && t.noreply(),
            })
        }
        b"shutdown" => Ok(Command::Shutdown {
            mode: match tokens {
                1 => ShutdownMode::Now,
                // memcached compares only the token's own length: `shutdown g` is graceful.
                2 if b"graceful".starts_with(t.get(1)) => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            },
            noreply: t.noreply(),
        }),
        b"mg" | b"ms" | b"md" | b"ma" | b"me" | b"mn" => Ok(Command::Meta { line }),
        _ if t.get(n - 2).starts_with(b"HTTP/") => Err(Rejection {
            reply: b"",
            noreply: false,
            hang_up: true,
            swallow: 0,
        }),
        _ => reject(ERROR, t.noreply()),
    }
}

/// The commands 1.6.45 finds by the line's first token rather than by its first bytes.
fn is_looked_up_by_token(cmd: &[u8]) -> bool {
    matches!(
        cmd,
        b"shutdown"
            | b"slabs"
            | b"cache_memlimit"
            | b"flush_all"
            | b"lru_crawler"
            | b"verbosity"
            | b"lru"
            | b"extstore"
            | b"refresh_certs"
    )
}

/// The data block of a storage command: `bytes` of value then `\r\n`, at the front of `buf`.
/// `None` until all of it has arrived; `Err` when it does not end in `\r\n` (memcached consumes
/// the block anyway and answers `CLIENT_ERROR bad data chunk`).
pub fn data_block(buf: &[u8], bytes: usize) -> Option<Result<&[u8], ()>> {
    let block = buf.get(..bytes + 2)?;
    Some(if block.ends_with(b"\r\n") {
        Ok(&block[..bytes])
    } else {
        Err(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xorshift;
    use scan::SHORT;

    fn line(s: &str) -> Result<Command<'_>, Rejection> {
        parse_line(s.as_bytes())
    }

    fn rejected(s: &str) -> &'static [u8] {
        line(s).expect_err(s).reply
    }

    fn keys(k: Keys<'_>) -> Vec<&[u8]> {
        k.collect()
    }

    #[test]
    fn frames_wait_for_the_newline_and_strip_cr() {
        assert_eq!(parse(b"get a", 1 << 20), Frame::Incomplete);
        assert_eq!(parse(b"", 1 << 20), Frame::Incomplete);
        let Frame::Line { consumed, parsed } = parse(b"version\r\nget a", 1 << 20) else {
            panic!()
        };
        assert_eq!((consumed, parsed), (9, Ok(Command::Version)));
        let Frame::Line { consumed, parsed } = parse(b"version\n", 1 << 20) else {
            panic!()
        };
        assert_eq!((consumed, parsed), (8, Ok(Command::Version)));
    }

    #[test]
    fn long_lines_close_unless_a_get() {
        let junk = vec![b'x'; MAX_LINE_WITHOUT_NEWLINE + 1];
        assert_eq!(parse(&junk, 1 << 20), Frame::LineTooLong);
        let mut get = b"get ".to_vec();
        get.resize(MAX_LINE_WITHOUT_NEWLINE + 1, b'k');
        assert_eq!(parse(&get, 1 << 20), Frame::Incomplete);
        assert_eq!(parse(&get, 2048), Frame::LineTooLong);
    }

    #[test]
    fn get_family() {
        let Ok(Command::Get {
            keys: k,
            with_cas,
            touch,
        }) = line("get a  bb ccc")
        else {
            panic!()
        };
        assert_eq!(keys(k), [&b"a"[..], b"bb", b"ccc"]);
        assert!(!with_cas && touch.is_none());
        let Ok(Command::Get {
            keys: k,
            with_cas,
            touch,
        }) = line("gats 100 x y")
        else {
            panic!()
        };
        assert_eq!(keys(k), [&b"x"[..], b"y"]);
        assert!(with_cas);
        assert_eq!(touch, Some(100));
        // 1.6.45: a get without a key is a bad command line (1.6.18: `ERROR`).
        for keyless in ["get", "gets", "get  ", "gat", "gats 10"] {
            assert_eq!(rejected(keyless), BAD_FORMAT, "{keyless}");
        }
        assert_eq!(rejected("gat x k"), BAD_EXPTIME);
        assert_eq!(rejected("gat +1 k"), BAD_EXPTIME);
        let many: String = (0..100).map(|i| format!(" k{i}")).collect();
        let long_get = format!("get{many}");
        let Ok(Command::Get { keys: k, .. }) = parse_line(long_get.as_bytes()) else {
            panic!()
        };
        assert_eq!(k.count(), 100);
    }

    #[test]
    fn storage_commands() {
        assert_eq!(
            line("set k 5 10 3"),
            Ok(Command::Store {
                kind: StoreKind::Set,
                key: b"k",
                flags: 5,
                exptime: 10,
                bytes: 3,
                cas_unique: 0,
                noreply: false
            })
        );
        let Ok(Command::Store {
            kind,
            cas_unique,
            noreply,
            ..
        }) = line("cas k 0 0 1 77 noreply")
        else {
            panic!()
        };
        assert_eq!((kind, cas_unique, noreply), (StoreKind::Cas, 77, true));
        for cmd in ["add", "replace", "append", "prepend"] {
            assert!(line(&format!("{cmd} k 0 0 1")).is_ok(), "{cmd}");
        }
        // 1.6.45: too few tokens, or a length that does not parse, is a bad command line with
        // nothing skipped; a refusal after the length was read skips the data block.
        let refused = |s: &str| {
            let r = line(s).expect_err(s);
            (r.reply, r.noreply, r.swallow)
        };
        for short in ["cas", "cas k", "set", "set k 0 0", "add k 0 0", "prepend"] {
            assert_eq!(refused(short), (BAD_FORMAT, false, 0), "{short}");
        }
        assert_eq!(refused("set k 0 0 -1"), (BAD_FORMAT, false, 0));
        assert_eq!(refused("set k 0 0 +1 noreply"), (BAD_FORMAT, false, 0));
        assert_eq!(refused("cas k 0 0 1"), (BAD_FORMAT, false, 3));
        assert_eq!(refused("cas k 0 0 1 noreply"), (BAD_FORMAT, true, 3));
        assert_eq!(refused("cas k 0 0 1 x"), (BAD_FORMAT, false, 3));
        assert_eq!(refused("set k x 0 1"), (BAD_FORMAT, false, 3));
        assert_eq!(refused("set k -1 0 1"), (BAD_FORMAT, false, 3));
        assert_eq!(refused("set k 0 x 10 noreply"), (BAD_FORMAT, true, 12));
        // Tokens past the ones read are ignored; `noreply` is the last.
        let Ok(Command::Store { bytes, noreply, .. }) = line("set k 0 0 1 2 noreply") else {
            panic!()
        };
        assert_eq!((bytes, noreply), (1, true));
        let Ok(Command::Store { cas_unique, .. }) = line("cas k 0 0 1 7 8") else {
            panic!()
        };
        assert_eq!(cas_unique, 7);
        assert_eq!(
            rejected(&format!("set {} 0 0 1", "k".repeat(251))),
            BAD_FORMAT
        );
        assert!(line(&format!("set {} 0 0 1", "k".repeat(250))).is_ok());
        assert_eq!(
            line("set k 999999999 999999999 999999999 noreply"),
            Ok(Command::Store {
                kind: StoreKind::Set,
                key: b"k",
                flags: 999_999_999,
                exptime: 999_999_999,
                bytes: 999_999_999,
                cas_unique: 0,
                noreply: true
            })
        );
        let Ok(Command::Store { noreply, .. }) = line("set k 0 0 1 other") else {
            panic!()
        };
        assert!(!noreply);
        let Ok(Command::Store { exptime, .. }) = line("set k 0 -1 1") else {
            panic!()
        };
        assert_eq!(exptime, -1);
        let Ok(Command::Store { flags, .. }) = line("set k 4294967295 0 1") else {
            panic!()
        };
        assert_eq!(flags, u32::MAX);
    }

    #[test]
    fn delete_incr_touch() {
        assert_eq!(
            line("delete k"),
            Ok(Command::Delete {
                key: b"k",
                noreply: false
            })
        );
        // Since 1.6.40 only a final `noreply` counts after the key.
        for (delete, noreply) in [
            ("delete k 0", false),
            ("delete k 1", false),
            ("delete k noreplY", false),
            ("delete k noreply x", false),
            ("delete k 0 noreply", true),
            ("delete k x y noreply", true),
        ] {
            assert_eq!(
                line(delete),
                Ok(Command::Delete { key: b"k", noreply }),
                "{delete}"
            );
        }
        assert_eq!(rejected("delete"), BAD_FORMAT);
        // 23 tokens are read: a `noreply` past them is not seen.
        let many = |n: usize| format!("delete k{} noreply", " x".repeat(n));
        assert!(matches!(
            line(&many(20)),
            Ok(Command::Delete { noreply: true, .. })
        ));
        assert!(matches!(
            line(&many(21)),
            Ok(Command::Delete { noreply: false, .. })
        ));
        assert_eq!(
            line("incr n 18446744073709551615"),
            Ok(Command::Arith {
                incr: true,
                key: b"n",
                delta: u64::MAX,
                noreply: false
            })
        );
        assert_eq!(rejected("decr n x"), BAD_DELTA);
        assert_eq!(rejected("incr n -1"), BAD_DELTA);
        assert_eq!(rejected("incr n 18446744073709551616"), BAD_DELTA);
        assert_eq!(rejected("incr n +1"), BAD_DELTA);
        assert_eq!(rejected("incr n"), BAD_FORMAT);
        assert_eq!(rejected("touch k"), BAD_FORMAT);
        assert!(matches!(
            line("incr n 1 2"),
            Ok(Command::Arith { delta: 1, .. })
        ));
        assert_eq!(
            line("touch k 10 noreply"),
            Ok(Command::Touch {
                key: b"k",
                exptime: 10,
                noreply: true
            })
        );
        assert_eq!(rejected("touch k x"), BAD_EXPTIME);
    }

    #[test]
    fn admin_commands() {
        assert_eq!(
            line("flush_all"),
            Ok(Command::FlushAll {
                delay: 0,
                noreply: false
            })
        );
        assert_eq!(
            line("flush_all 10 noreply"),
            Ok(Command::FlushAll {
                delay: 10,
                noreply: true
            })
        );
        assert_eq!(
            line("flush_all noreply"),
            Ok(Command::FlushAll {
                delay: 0,
                noreply: true
            })
        );
        assert_eq!(rejected("flush_all x"), BAD_EXPTIME);
        assert_eq!(line("version"), Ok(Command::Version));
        assert_eq!(line("quit"), Ok(Command::Quit));
        assert_eq!(
            line("verbosity 1"),
            Ok(Command::Verbosity {
                level: 1,
                noreply: false
            })
        );
        assert_eq!(rejected("verbosity"), BAD_FORMAT);
        assert!(line("verbosity noreply").unwrap_err().noreply);
        assert_eq!(
            line("verbosity 1 2 3"),
            Ok(Command::Verbosity {
                level: 1,
                noreply: false
            })
        );
        assert!(matches!(
            line("flush_all 1 2 3"),
            Ok(Command::FlushAll { delay: 1, .. })
        ));
        let Ok(Command::Stats { args }) = line("stats settings") else {
            panic!()
        };
        assert_eq!(keys(args), [&b"settings"[..]]);
        let Ok(Command::Stats { args }) = line("stats") else {
            panic!()
        };
        assert!(args.is_empty());
        assert_eq!(
            line("shutdown graceful"),
            Ok(Command::Shutdown {
                mode: ShutdownMode::Graceful,
                noreply: false
            })
        );
        assert_eq!(
            line("shutdown g"),
            Ok(Command::Shutdown {
                mode: ShutdownMode::Graceful,
                noreply: false
            })
        );
        assert_eq!(
            line("shutdown now"),
            Ok(Command::Shutdown {
                mode: ShutdownMode::Invalid,
                noreply: false
            })
        );
        assert_eq!(
            line("shutdown noreply"),
            Ok(Command::Shutdown {
                mode: ShutdownMode::Invalid,
                noreply: true
            })
        );
        let Ok(Command::Admin { noreply, .. }) = line("lru_crawler enable noreply") else {
            panic!()
        };
        assert!(noreply);
        let Ok(Command::Admin { noreply, .. }) = line("watch noreply") else {
            panic!()
        };
        assert!(!noreply);
        // Found by its token, as memcached built with extstore finds it (a leading space too).
        for text in [
            "extstore item_size 100 noreply",
            " extstore item_size 100 noreply",
        ] {
            let Ok(Command::Admin {
                command: AdminCommand::Extstore,
                args,
                noreply: true,
            }) = line(text)
            else {
                panic!("{text}")
            };
            let words: Vec<&[u8]> = args.collect();
            assert_eq!(words, [&b"item_size"[..], b"100", b"noreply"]);
        }
    }

    #[test]
    fn unknown_and_short_commands_are_errors() {
        for bad in ["", "x", "bogus", "mz k v", "MG k", "GET k", "   "] {
            assert_eq!(rejected(bad), ERROR, "{bad:?}");
        }
        // 1.6.45: `noreply` silences an unknown command's `ERROR` too.
        assert!(line("bogus noreply").unwrap_err().noreply);
        // After a leading space 1.6.45 knows only the commands it looks up by token.
        for spaced in [" get k", " delete k", "  version", " mn"] {
            assert_eq!(rejected(spaced), ERROR, "{spaced:?}");
        }
        assert!(line(" verbosity 1").is_ok());
    }

    #[test]
    fn meta_lines_are_handed_over_whole() {
        for meta in ["mg k v", "ms k 2 T0", "md k q", "ma k", "me k", "mn", "mg"] {
            assert_eq!(
                line(meta),
                Ok(Command::Meta {
                    line: meta.as_bytes()
                })
            );
        }
    }

    #[test]
    fn set_lines_with_keys_past_the_searched_head_parse_alike() {
        for key_len in [
            SHORT - 1,
            SHORT,
            SHORT + 1,
            KEY_MAX_LENGTH,
            KEY_MAX_LENGTH + 1,
        ] {
            let key = vec![b'k'; key_len];
            let line = [&b"set "[..], &key, b" 5 0 3 noreply"].concat();
            assert_eq!(parse_line(&line), parse_tokens(&line), "{key_len}");
            if key_len <= KEY_MAX_LENGTH {
                assert!(matches!(
                    parse_line(&line),
                    Ok(Command::Store { key: k, flags: 5, bytes: 3, noreply: true, .. }) if k == &key[..]
                ));
            }
        }
    }

    #[test]
    fn data_blocks_need_crlf() {
        assert_eq!(data_block(b"abc\r", 3), None);
        assert_eq!(data_block(b"abc\r\nmore", 3), Some(Ok(&b"abc"[..])));
        assert_eq!(data_block(b"abcde", 3), Some(Err(())));
        assert_eq!(data_block(b"\r\n", 0), Some(Ok(&b""[..])));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_frames_stay_in_bounds() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
        let alphabet = b"getsadcrpnilouvfh_0123456789 -+\r\n\t\x00\xffk";
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let buf: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            match parse(&buf, 4096) {
                Frame::Line { consumed, parsed } => {
                    assert!(consumed >= 1 && consumed <= buf.len());
                    assert_eq!(buf[consumed - 1], b'\n');
                    if let Ok(Command::Store { bytes, .. }) = parsed {
                        assert!(bytes <= i32::MAX as usize);
                    }
                }
                Frame::Incomplete => assert!(!buf.contains(&b'\n')),
                Frame::LineTooLong => unreachable!("64 bytes is never too long"),
            }
        }
    }

    #[test]
    fn fast_paths_agree_with_the_tokenizer() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15u64);
        let alphabet = b"getsk \t0";
        let set_alphabet = b"k 0123456789-+\tnoreply";
        let (mut fast_gets, mut fast_sets) = (0, 0);
        for _ in 0..100_000 {
            let len = (next() % 24) as usize;
            let choice = (next() % 6) as usize;
            let letters: &[u8] = if choice >= 4 { set_alphabet } else { alphabet };
            let mut line: Vec<u8> = (0..len)
                .map(|_| letters[(next() % letters.len() as u64) as usize])
                .collect();
            if choice == 5 {
                // Half the flags and exptimes one digit, as most sets' are (a path of its own).
                let mut field = |wide: u64| next() % if next() % 2 == 0 { 10 } else { wide };
                let (flags, exptime) = (field(1_500_000_000), field(100_000));
                line = format!("k{} {flags} {exptime} {}", next() % 300, next() % 4).into_bytes();
                if next() % 2 == 0 {
                    let at = next() as usize % line.len();
                    line.splice(
                        at..at,
                        [b' ', b'0', b'\t'][next() as usize % 3..].iter().copied(),
                    );
                }
                if next() % 2 == 0 {
                    line.extend_from_slice(b" noreply");
                }
            }
            let prefix: &[u8] = [&b"get "[..], b"gets ", b"get", b"", b"set ", b"set "][choice];
            line.splice(0..0, prefix.iter().copied());
            let (fast, slow) = (parse_line(&line), parse_tokens(&line));
            match fast {
                Ok(Command::Get { .. }) => fast_gets += 1,
                Ok(Command::Store { .. }) if plain_set(&line[4..]).is_some() => fast_sets += 1,
                _ => {}
            }
            match (fast, slow) {
                (Ok(Command::Get { keys: a, .. }), Ok(Command::Get { keys: b, .. })) => {
                    assert_eq!(keys(a), keys(b), "{line:?}");
                    assert_eq!(fast, slow, "{line:?}");
                }
                _ => assert_eq!(fast, slow, "{line:?}"),
            }
        }
        // Both fast paths were taken often, not only the tokenizer.
        assert!(
            fast_gets > 10_000 && fast_sets > 3_000,
            "{fast_gets} {fast_sets}"
        );
    }

    #[test]
    fn keys_split_on_spaces_as_a_plain_split_does() {
        let mut next = xorshift(0x5851_F42D_4C95_7F2Du64);
        for _ in 0..5_000 {
            // Runs of spaces and tokens both short and past the searched head (`SHORT`).
            let mut line = Vec::new();
            for _ in 0..next() % 6 {
                let spaces = [0, 1, 1, 2, 9, SHORT + 3][(next() % 6) as usize];
                line.resize(line.len() + spaces, b' ');
                let token = [1, 7, 8, 12, 17, SHORT - 1, SHORT, SHORT + 9][(next() % 8) as usize];
                line.extend((0..token).map(|i| [b'k', b'\t', 0xff][(i + next() as usize) % 3]));
            }
            let plain: Vec<&[u8]> = line
                .split(|&b| b == b' ')
                .filter(|t| !t.is_empty())
                .collect();
            assert_eq!(keys(Keys::new(&line)), plain, "{line:?}");
            assert_eq!(Keys::new(&line).is_empty(), plain.is_empty());
        }
    }

    /// `parse` with its one-key get path against the general path alone.
    fn parse_both_ways(buf: &[u8]) {
        let (fast, general) = (parse(buf, 4096), parse_from(buf, 4096, 0));
        if let (
            Frame::Line {
                parsed: Ok(Command::Get { keys: a, .. }),
                ..
            },
            Frame::Line {
                parsed: Ok(Command::Get { keys: b, .. }),
                ..
            },
        ) = (&fast, &general)
        {
            assert_eq!(keys(*a), keys(*b), "{buf:?}");
        }
        assert_eq!(fast, general, "{buf:?}");
    }

    #[test]
    fn one_key_gets_parse_as_the_general_path_does() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1Du64);
        let alphabet = b"kK:9 \r\n\t\x00\x01\x1f!\x7f\x80\xff";
        for _ in 0..200_000 {
            let len = (next() % 40) as usize;
            let mut buf = b"get ".to_vec();
            buf.extend((0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]));
            parse_both_ways(&buf);
        }
        for key_len in [
            1, 7, 8, 9, 15, 16, 17, 120, 123, 124, 125, 200, 250, 251, 300,
        ] {
            let key = "k".repeat(key_len);
            for line in [
                format!("get {key}\r\n"),
                format!("get {key}\n"),
                format!("get {key}\r\nget k\r\n"),
                format!("get {key} \r\n"),
                format!("get {key}\r"),
                format!("get {key}"),
                format!("get {key}\0\r\n"),
            ] {
                parse_both_ways(line.as_bytes());
            }
        }
        let Frame::Line { consumed, parsed } = parse(b"get key:1\r\nget x\r\n", 4096) else {
            panic!()
        };
        assert_eq!(consumed, 11);
        let Ok(Command::Get { keys: k, .. }) = parsed else {
            panic!()
        };
        assert_eq!(k, Keys::new(b"key:1"));
        assert_eq!(keys(k), [&b"key:1"[..]]);
    }

    #[test]
    fn a_nul_ends_the_line_but_not_the_frame() {
        let Frame::Line { consumed, parsed } = parse(b"get a\0 b\r\nversion\r\n", 1 << 20) else {
            panic!()
        };
        assert_eq!(consumed, 10);
        let Ok(Command::Get { keys: k, .. }) = parsed else {
            panic!()
        };
        assert_eq!(keys(k), [&b"a"[..]]);
        assert_eq!(parse(b"get a\0 b", 1 << 20), Frame::Incomplete);
        // memcached 1.6.45 (1.6.18 said ERROR): a line of under 4 bytes is a bad format.
        for short in [
            &b"\0\n"[..],
            b"\0\r\n",
            b"\n",
            b"\r\n",
            b" \n",
            b"mn\n",
            b"x\r\n",
        ] {
            let Frame::Line { parsed, .. } = parse(short, 1 << 20) else {
                panic!()
            };
            assert_eq!(parsed, reject(BAD_FORMAT, false), "{short:?}");
        }
        let Frame::Line { parsed, .. } = parse(b"\0  \n", 1 << 20) else {
            panic!()
        };
        assert_eq!(parsed, reject(ERROR, false));
    }

    #[test]
    fn http_request_lines_hang_up() {
        // As memcached 1.6.18 answers them (checked with nc): an unknown command whose last
        // token starts with HTTP/ closes the connection; known commands and other lines do not.
        for http in [
            "GET / HTTP/1.0",
            "PUT /a HTTP/1.1",
            "DELETE HTTP/1.1",
            "FOO / HTTP/1.0",
        ] {
            assert!(line(http).expect_err(http).hang_up, "{http}");
        }
        for other in ["GET /", "GET / HTTP/1.0 x", "bogus"] {
            let rejection = line(other).expect_err(other);
            assert_eq!(
                (rejection.reply, rejection.hang_up),
                (ERROR, false),
                "{other}"
            );
        }
        assert!(line("get a HTTP/1.1").is_ok(), "a get of two keys");
    }
}
