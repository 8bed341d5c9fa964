//! `-Y/--auth-file` and `-S`: the gate an unauthenticated connection's input passes first. With
//! `-Y`, until a connection authenticates, its first request must be the authenticating `set
//! <key> <flags> <exptime> <len>` whose data is `<user> <password>`; anything else, in any wire
//! format (classic, meta or binary), is answered `CLIENT_ERROR unauthenticated` and the
//! connection closed, as memcached does. With `-S`, SASL (libsasl2) over the binary protocol. The
//! check runs once per connection, at the serve loop's entry (`conn.rs` calls [`gate`]), so no
//! wire format needs one of its own. The users and their passwords are server-wide state
//! ([`AuthFile`], [`Sasl`]); a connection's SASL exchange is its own ([`SaslConn`]).

use std::sync::atomic::Ordering;

use tern_proto::ascii::{self, Command, Frame, StoreKind};

use crate::state::credentials::AuthFile;
use crate::state::sasl::{Outcome, Sasl, SaslConn};
use crate::wire::framing::Replies;

pub const UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
pub const FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";

const SASL_LIST_MECHS: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const SASL_STEP: u8 = 0x22;
/// memcached's `MAX_SASL_MECH_LEN`: a longer mechanism name is refused as invalid.
const MAX_MECH_LEN: usize = 32;

/// `-S`: an unauthenticated connection's binary frames, as memcached serves them: the mechanism
/// list, `version`, and SASL authentication through libsasl2 (`sasl`: the connection's SASL
/// state, made on its first SASL request and kept until it closes). An exchange that needs
/// another step (CRAM-MD5's challenge) answers status 0x21 with the challenge; a failed one
/// answers `Auth failure.` (status 0x20) and may be retried; any other request gets status
/// 0x20 and the connection is closed. Text is refused by closing the connection, unanswered.
pub fn sasl_gate(
    server: &Sasl,
    sasl: &mut Option<SaslConn>,
    input: &[u8],
    out: &mut impl Replies,
) -> Gate {
    use tern_proto::binary::{self as bin, ResponseHeader, Status, HEADER_LEN};
    let mut consumed = 0;
    loop {
        let rest = &input[consumed..];
        if rest.is_empty() {
            return Gate::Wait { consumed };
        }
        if rest[0] != bin::REQUEST_MAGIC {
            return Gate::Refused;
        }
        if rest.len() < HEADER_LEN {
            return Gate::Need {
                need: consumed + HEADER_LEN,
                exact: true,
            };
        }
        let opcode = rest[1];
        let key_len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let extras_len = usize::from(rest[4]);
        let body_len = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
        let opaque = u32::from_be_bytes([rest[12], rest[13], rest[14], rest[15]]);
        // No frame before authentication is large; a client claiming otherwise is refused.
        if body_len > 64 * 1024 || key_len + extras_len > body_len {
            bin::write_error(out.buf(), opcode, opaque, Status::AuthError);
            return Gate::Refused;
        }
        let Some(frame) = rest.get(..HEADER_LEN + body_len) else {
            return Gate::Need {
                need: consumed + HEADER_LEN + body_len,
                exact: true,
            };
        };
        consumed += frame.len();
        let key = &frame[HEADER_LEN + extras_len..HEADER_LEN + extras_len + key_len];
        let value = &frame[HEADER_LEN + extras_len + key_len..];
        let reply = |out: &mut Vec<u8>, status: Status, body: &[u8]| {
            ResponseHeader {
                body_len: body.len() as u32,
                ..ResponseHeader::new(opcode, status, opaque)
            }
            .write(out);
            out.extend_from_slice(body);
        };
        if matches!(opcode, SASL_LIST_MECHS | SASL_AUTH | SASL_STEP) && sasl.is_none() {
            *sasl = server.conn();
        }
        match (opcode, sasl.as_mut()) {
            (0x0b, _) => bin::write_version(out.buf(), opaque, crate::ops::VERSION),
            (SASL_LIST_MECHS, Some(conn)) => match conn.mechanisms() {
                Some(list) => reply(out.buf(), Status::Success, &list),
                None => bin::write_error(out.buf(), opcode, opaque, Status::AuthError),
            },
            (SASL_AUTH | SASL_STEP, _) if key_len > MAX_MECH_LEN => {
                bin::write_error(out.buf(), opcode, opaque, Status::InvalidArguments);
            }
            (SASL_AUTH | SASL_STEP, Some(conn)) => {
                let outcome = match opcode {
                    SASL_AUTH => conn.start(key, value),
                    _ => conn.step(value),
                };
                match outcome {
                    Outcome::Authenticated => {
                        server.attempts.fetch_add(1, Ordering::Relaxed);
                        reply(out.buf(), Status::Success, b"Authenticated");
                        return Gate::Open { consumed };
                    }
                    // As memcached: a step to come is not counted in `auth_cmds`.
                    Outcome::Continue(challenge) => {
                        reply(out.buf(), Status::AuthContinue, &challenge)
                    }
                    Outcome::Failed => {
                        server.attempts.fetch_add(1, Ordering::Relaxed);
                        server.failures.fetch_add(1, Ordering::Relaxed);
                        bin::write_error(out.buf(), opcode, opaque, Status::AuthError);
                    }
                }
            }
            (SASL_LIST_MECHS | SASL_AUTH | SASL_STEP, None) => {
                server.attempts.fetch_add(1, Ordering::Relaxed);
                server.failures.fetch_add(1, Ordering::Relaxed);
                bin::write_error(out.buf(), opcode, opaque, Status::AuthError);
            }
            _ => {
                bin::write_error(out.buf(), opcode, opaque, Status::AuthError);
                return Gate::Refused;
            }
        }
    }
}

/// What the gate made of an unauthenticated connection's input.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Authenticated by the first `consumed` bytes (`STORED` was written).
    Open { consumed: usize },
    /// The authenticating request is not all here: `need` bytes in all.
    Need { need: usize, exact: bool },
    /// Refused (the reply was written): close once it is sent.
    Refused,
    /// Still unauthenticated after answering the first `consumed` bytes (never 0: a refused
    /// line, a failed attempt, SASL's mechanism list): the next request goes to the gate too.
    Wait { consumed: usize },
}

/// Runs an unauthenticated connection's first request: the authenticating `set`, or a refusal.
pub fn gate(auth: &AuthFile, input: &[u8], max_line: usize, out: &mut impl Replies) -> Gate {
    if input.first() == Some(&tern_proto::binary::REQUEST_MAGIC) {
        // memcached answers a binary client of a -Y server in text, then hangs up.
        out.buf().extend_from_slice(UNAUTHENTICATED);
        return Gate::Refused;
    }
    let (line, command) = match ascii::parse(input, max_line) {
        Frame::Incomplete => {
            return Gate::Need {
                need: input.len() + 1,
                exact: false,
            }
        }
        Frame::LineTooLong => {
            out.buf().extend_from_slice(UNAUTHENTICATED);
            return Gate::Refused;
        }
        Frame::Line { consumed, parsed } => (consumed, parsed),
    };
    let Ok(Command::Store {
        kind: StoreKind::Set,
        bytes,
        noreply,
        ..
    }) = command
    else {
        // As memcached: the line is answered and the connection stays, so the client may
        // still authenticate (a data block after a refused line reads as lines of its own).
        out.buf().extend_from_slice(UNAUTHENTICATED);
        return Gate::Wait { consumed: line };
    };
    let Some(block) = ascii::data_block(&input[line..], bytes) else {
        return Gate::Need {
            need: line + bytes + 2,
            exact: true,
        };
    };
    auth.attempts.fetch_add(1, Ordering::Relaxed);
    let credentials = block.unwrap_or_default();
    let mut words = credentials.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let ok = match (words.next(), words.next()) {
        (Some(user), Some(password)) => auth.check(user, password),
        _ => false,
    };
    if ok {
        // pymemcache sends its sets with noreply by default.
        if !noreply {
            out.buf().extend_from_slice(ascii::STORED);
        }
        Gate::Open {
            consumed: line + bytes + 2,
        }
    } else {
        auth.failures.fetch_add(1, Ordering::Relaxed);
        out.buf().extend_from_slice(FAILURE);
        Gate::Wait {
            consumed: line + bytes + 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    struct Out(Vec<u8>);
    impl Replies for Out {
        fn buf(&mut self) -> &mut Vec<u8> {
            &mut self.0
        }
    }

    fn file(text: &str) -> (AuthFile, PathBuf) {
        let path =
            std::env::temp_dir().join(format!("tern-auth-{}-{}", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        (AuthFile::load(&path).unwrap(), path)
    }

    #[test]
    fn the_gate_takes_the_authenticating_set_and_refuses_the_rest() {
        let (auth, path) = file("alice:secret\n");
        let mut out = Out(Vec::new());
        let input = b"set k 0 0 12\r\nalice secret\r\nget k\r\n";
        assert_eq!(
            gate(&auth, &input[..10], 1024, &mut out),
            Gate::Need {
                need: 11,
                exact: false
            }
        );
        assert_eq!(
            gate(&auth, &input[..20], 1024, &mut out),
            Gate::Need {
                need: 28,
                exact: true
            }
        );
        assert_eq!(
            gate(&auth, input, 1024, &mut out),
            Gate::Open { consumed: 28 }
        );
        assert_eq!(out.0, b"STORED\r\n");
        // A refused line is answered and consumed alone; the connection waits for more.
        for (refused, line) in [
            (&b"get k\r\n"[..], 7),
            (b"mg k v\r\n", 8),
            (b"add k 0 0 12\r\nalice secret\r\n", 14),
        ] {
            let mut out = Out(Vec::new());
            assert_eq!(
                gate(&auth, refused, 1024, &mut out),
                Gate::Wait { consumed: line }
            );
            assert_eq!(out.0, UNAUTHENTICATED);
        }
        let mut out = Out(Vec::new());
        assert_eq!(
            gate(&auth, &[0x80, 0x0a, 0, 0], 1024, &mut out),
            Gate::Refused,
            "a binary frame closes"
        );
        assert_eq!(out.0, UNAUTHENTICATED);
        let mut out = Out(Vec::new());
        let quiet = b"set k 0 0 12 noreply\r\nalice secret\r\n";
        let consumed = quiet.len();
        assert_eq!(gate(&auth, quiet, 1024, &mut out), Gate::Open { consumed });
        assert!(out.0.is_empty(), "noreply");
        let mut out = Out(Vec::new());
        assert_eq!(
            gate(&auth, b"set k 0 0 9\r\nalice bad\r\n", 1024, &mut out),
            Gate::Wait { consumed: 24 }
        );
        assert_eq!(out.0, FAILURE);
        assert_eq!(auth.attempts.load(Ordering::Relaxed), 3);
        assert_eq!(auth.failures.load(Ordering::Relaxed), 1);
        std::fs::remove_file(path).unwrap();
    }
}
