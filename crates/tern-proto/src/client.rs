//! Client side of the protocols, for `tern bench`: encode requests, parse replies.
//!
//! Encoders append to a caller-owned buffer (reused across requests, so nothing is allocated per
//! request). Parsers look at the bytes received so far and return `Ok(None)` until one whole reply
//! is there; they keep no state, so a caller simply retries when more bytes arrive.

/// Which of memcached's three request syntaxes to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// The classic text protocol (`get`, `set`, ...).
    Ascii,
    /// The meta text protocol (`mg`, `ms`, `md`, `ma`, `mn`).
    Meta,
    /// The binary protocol (24-byte headers).
    Binary,
}

/// The operations a load generator issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Get,
    /// One request for several keys, answered as one reply.
    MultiGet,
    Set,
    Delete,
    /// Increment by one.
    Incr,
    /// Reset a key's TTL without fetching it.
    Touch,
}

/// How the server answered one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Stored, deleted, touched, incremented, or a get that was answered (see `hits`/`misses`).
    Ok,
    NotFound,
    NotStored,
    Exists,
    Error(ErrorKind),
}

/// The failures memcached reports, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `ERROR`: the server did not know the command.
    Error,
    /// `CLIENT_ERROR ...`
    ClientError,
    /// `SERVER_ERROR ...`
    ServerError,
    /// A binary-protocol status other than the ones `Status` names.
    BinaryStatus(u16),
}

/// One complete reply found at the start of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Bytes the reply took: drop them before parsing the next one.
    pub len: usize,
    pub status: Status,
    /// Keys found (gets only).
    pub hits: u32,
    /// Keys asked for and not found (gets only).
    pub misses: u32,
}

/// The bytes cannot be a reply to the request: the stream is out of step and must be dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed reply: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

const BIN_REQUEST: u8 = 0x80;
const BIN_RESPONSE: u8 = 0x81;
const BIN_HEADER: usize = 24;
const OP_GET: u8 = 0x00;
const OP_SET: u8 = 0x01;
const OP_DELETE: u8 = 0x04;
const OP_INCREMENT: u8 = 0x05;
const OP_NOOP: u8 = 0x0a;
const OP_GETKQ: u8 = 0x0d;
const OP_TOUCH: u8 = 0x1c;

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn binary_header(out: &mut Vec<u8>, opcode: u8, key_len: usize, extras_len: u8, body_len: usize) {
    out.push(BIN_REQUEST);
    out.push(opcode);
    out.extend_from_slice(&(key_len as u16).to_be_bytes());
    out.push(extras_len);
    out.push(0); // data type
    out.extend_from_slice(&0u16.to_be_bytes()); // vbucket
    out.extend_from_slice(&(body_len as u32).to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes()); // opaque
    out.extend_from_slice(&0u64.to_be_bytes()); // cas
}

/// A text request of one line: `<verb><key><tail>`.
fn text_line(out: &mut Vec<u8>, verb: &[u8], key: &[u8], tail: &[u8]) {
    out.extend_from_slice(verb);
    out.extend_from_slice(key);
    out.extend_from_slice(tail);
}

/// `get <key>`.
pub fn encode_get(dialect: Dialect, out: &mut Vec<u8>, key: &[u8]) {
    match dialect {
        Dialect::Ascii => text_line(out, b"get ", key, b"\r\n"),
        Dialect::Meta => text_line(out, b"mg ", key, b" v\r\n"),
        Dialect::Binary => {
            binary_header(out, OP_GET, key.len(), 0, key.len());
            out.extend_from_slice(key);
        }
    }
}

/// One request for all `keys`; its reply ends with a terminator the parser waits for (`END`,
/// meta's `MN`, or binary's quiet gets followed by a `NOOP`).
pub fn encode_multiget<'k>(
    dialect: Dialect,
    out: &mut Vec<u8>,
    keys: impl IntoIterator<Item = &'k [u8]>,
) {
    match dialect {
        Dialect::Ascii => {
            out.extend_from_slice(b"get");
            for key in keys {
                out.push(b' ');
                out.extend_from_slice(key);
            }
            out.extend_from_slice(b"\r\n");
        }
        Dialect::Meta => {
            for key in keys {
                text_line(out, b"mg ", key, b" v q\r\n");
            }
            out.extend_from_slice(b"mn\r\n");
        }
        Dialect::Binary => {
            for key in keys {
                binary_header(out, OP_GETKQ, key.len(), 0, key.len());
                out.extend_from_slice(key);
            }
            binary_header(out, OP_NOOP, 0, 0, 0);
        }
    }
}

/// `set <key>` with flags 0 and `ttl` seconds (0: never expires).
pub fn encode_set(dialect: Dialect, out: &mut Vec<u8>, key: &[u8], value: &[u8], ttl: u32) {
    match dialect {
        Dialect::Ascii => {
            text_line(out, b"set ", key, b" 0 ");
            push_decimal(out, ttl.into());
            out.push(b' ');
            push_decimal(out, value.len() as u64);
            out.extend_from_slice(b"\r\n");
        }
        Dialect::Meta => {
            text_line(out, b"ms ", key, b" ");
            push_decimal(out, value.len() as u64);
            out.extend_from_slice(b" T");
            push_decimal(out, ttl.into());
            out.extend_from_slice(b"\r\n");
        }
        Dialect::Binary => {
            binary_header(out, OP_SET, key.len(), 8, 8 + key.len() + value.len());
            out.extend_from_slice(&0u32.to_be_bytes()); // flags
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
            return;
        }
    }
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `delete <key>`.
pub fn encode_delete(dialect: Dialect, out: &mut Vec<u8>, key: &[u8]) {
    match dialect {
        Dialect::Ascii => text_line(out, b"delete ", key, b"\r\n"),
        Dialect::Meta => text_line(out, b"md ", key, b"\r\n"),
        Dialect::Binary => {
            binary_header(out, OP_DELETE, key.len(), 0, key.len());
            out.extend_from_slice(key);
        }
    }
}

/// `incr <key> 1`; a missing key is not created (memcached's ASCII behaviour, in every dialect).
pub fn encode_incr(dialect: Dialect, out: &mut Vec<u8>, key: &[u8]) {
    match dialect {
        Dialect::Ascii => text_line(out, b"incr ", key, b" 1\r\n"),
        Dialect::Meta => text_line(out, b"ma ", key, b"\r\n"),
        Dialect::Binary => {
            binary_header(out, OP_INCREMENT, key.len(), 20, 20 + key.len());
            out.extend_from_slice(&1u64.to_be_bytes()); // delta
            out.extend_from_slice(&0u64.to_be_bytes()); // initial value
            out.extend_from_slice(&u32::MAX.to_be_bytes()); // all ones: fail if missing
            out.extend_from_slice(key);
        }
    }
}

/// `touch <key> <ttl>`.
pub fn encode_touch(dialect: Dialect, out: &mut Vec<u8>, key: &[u8], ttl: u32) {
    match dialect {
        Dialect::Ascii | Dialect::Meta => {
            let (verb, flag): (&[u8], &[u8]) = match dialect {
                Dialect::Ascii => (b"touch ", b" "),
                _ => (b"mg ", b" T"),
            };
            text_line(out, verb, key, flag);
            push_decimal(out, ttl.into());
            out.extend_from_slice(b"\r\n");
        }
        Dialect::Binary => {
            binary_header(out, OP_TOUCH, key.len(), 4, 4 + key.len());
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(key);
        }
    }
}

/// Parses the reply to one `op` request (asking for `keys` keys) at the start of `buf`.
pub fn parse_reply(
    dialect: Dialect,
    op: Op,
    keys: u32,
    buf: &[u8],
) -> Result<Option<Reply>, Malformed> {
    match dialect {
        Dialect::Ascii | Dialect::Meta => parse_text(dialect, op, keys, buf),
        Dialect::Binary => parse_binary(op, keys, buf),
    }
}

/// The line starting at `from` without its `\r\n`, and where the next one starts.
fn line_at(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = &buf[from..];
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let line = rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]);
    Some((line, from + nl + 1))
}

fn error_line(line: &[u8]) -> Option<ErrorKind> {
    if line == b"ERROR" || line.starts_with(b"ERROR ") {
        Some(ErrorKind::Error)
    } else if line.starts_with(b"CLIENT_ERROR") {
        Some(ErrorKind::ClientError)
    } else if line.starts_with(b"SERVER_ERROR") {
        Some(ErrorKind::ServerError)
    } else {
        None
    }
}

fn parse_decimal(field: &[u8]) -> Option<usize> {
    if field.is_empty() || field.len() > 19 {
        return None;
    }
    field.iter().try_fold(0usize, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + usize::from(b - b'0'))
    })
}

fn malformed(line: &[u8]) -> Malformed {
    Malformed(String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned())
}

fn reply(len: usize, status: Status) -> Option<Reply> {
    Some(Reply {
        len,
        status,
        hits: 0,
        misses: 0,
    })
}

fn parse_text(dialect: Dialect, op: Op, keys: u32, buf: &[u8]) -> Result<Option<Reply>, Malformed> {
    let is_get = matches!(op, Op::Get | Op::MultiGet);
    // A meta `mg` without `q` answers a miss with `EN`; with `q` (multiget) misses are silent.
    let (value_prefix, size_field): (&[u8], usize) = match dialect {
        Dialect::Meta => (b"VA ", 1),
        _ => (b"VALUE ", 3),
    };
    let mut pos = 0;
    let mut hits = 0u32;
    loop {
        let Some((line, next)) = line_at(buf, pos) else {
            return Ok(None);
        };
        if let Some(kind) = error_line(line) {
            return Ok(reply(next, Status::Error(kind)));
        }
        if is_get && line.starts_with(value_prefix) {
            let size = line
                .split(|&b| b == b' ')
                .nth(size_field)
                .and_then(parse_decimal)
                .ok_or_else(|| malformed(line))?;
            let end = next + size + 2;
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[end - 2..end] != b"\r\n" {
                return Err(malformed(line));
            }
            hits += 1;
            pos = end;
            let single_meta_get = dialect == Dialect::Meta && op == Op::Get;
            if !single_meta_get {
                continue;
            }
            return Ok(Some(Reply {
                len: end,
                status: Status::Ok,
                hits,
                misses: 0,
            }));
        }
        let status = match (dialect, op, line) {
            (Dialect::Ascii, Op::Get | Op::MultiGet, b"END")
            | (Dialect::Meta, Op::MultiGet, b"MN") => {
                return Ok(Some(Reply {
                    len: next,
                    status: Status::Ok,
                    hits,
                    misses: keys.saturating_sub(hits),
                }));
            }
            (Dialect::Meta, Op::Get, b"EN") => {
                return Ok(Some(Reply {
                    len: next,
                    status: Status::Ok,
                    hits: 0,
                    misses: 1,
                }));
            }
            (_, Op::Set, b"STORED" | b"HD")
            | (_, Op::Delete, b"DELETED" | b"HD")
            | (_, Op::Touch, b"TOUCHED" | b"HD")
            | (Dialect::Meta, Op::Incr, b"HD") => Status::Ok,
            (Dialect::Ascii, Op::Incr, number) if parse_decimal(number).is_some() => Status::Ok,
            (_, _, b"NOT_FOUND" | b"NF") | (Dialect::Meta, Op::Touch, b"EN") => Status::NotFound,
            (_, Op::Set, b"NOT_STORED" | b"NS") => Status::NotStored,
            (_, Op::Set, b"EXISTS" | b"EX") => Status::Exists,
            _ => return Err(malformed(line)),
        };
        return Ok(reply(next, status));
    }
}

struct BinaryPacket {
    opcode: u8,
    status: u16,
    len: usize,
}

fn binary_packet(buf: &[u8]) -> Result<Option<BinaryPacket>, Malformed> {
    if buf.len() < BIN_HEADER {
        return Ok(None);
    }
    if buf[0] != BIN_RESPONSE {
        return Err(Malformed(format!("binary magic {:#04x}", buf[0])));
    }
    let body = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    let len = BIN_HEADER + body;
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some(BinaryPacket {
        opcode: buf[1],
        status: u16::from_be_bytes([buf[6], buf[7]]),
        len,
    }))
}

fn binary_status(status: u16) -> Status {
    match status {
        0x0000 => Status::Ok,
        0x0001 => Status::NotFound,
        0x0002 => Status::Exists,
        0x0005 => Status::NotStored,
        0x0081 => Status::Error(ErrorKind::Error),
        0x0004 | 0x0006 => Status::Error(ErrorKind::ClientError),
        0x0082 | 0x0084 | 0x0085 => Status::Error(ErrorKind::ServerError),
        other => Status::Error(ErrorKind::BinaryStatus(other)),
    }
}

fn parse_binary(op: Op, keys: u32, buf: &[u8]) -> Result<Option<Reply>, Malformed> {
    if op != Op::MultiGet {
        let Some(packet) = binary_packet(buf)? else {
            return Ok(None);
        };
        let status = binary_status(packet.status);
        let (status, hits, misses) = match (op, status) {
            (Op::Get, Status::Ok) => (Status::Ok, 1, 0),
            (Op::Get, Status::NotFound) => (Status::Ok, 0, 1),
            (_, status) => (status, 0, 0),
        };
        return Ok(Some(Reply {
            len: packet.len,
            status,
            hits,
            misses,
        }));
    }
    // Quiet gets answer hits only; the NOOP's answer closes the batch.
    let mut pos = 0;
    let mut hits = 0u32;
    let mut failure = None;
    loop {
        let Some(packet) = binary_packet(&buf[pos..])? else {
            return Ok(None);
        };
        pos += packet.len;
        match packet.opcode {
            OP_NOOP => {
                return Ok(Some(Reply {
                    len: pos,
                    status: failure.unwrap_or(Status::Ok),
                    hits,
                    misses: keys.saturating_sub(hits),
                }))
            }
            OP_GETKQ => match binary_status(packet.status) {
                Status::Ok => hits += 1,
                Status::NotFound => {}
                other => failure = Some(other),
            },
            other => {
                return Err(Malformed(format!(
                    "binary opcode {other:#04x} in a multiget"
                )))
            }
        }
    }
}

/// memcached's UDP frame header: every datagram starts with these 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    pub request_id: u16,
    pub sequence: u16,
    pub datagrams: u16,
}

pub const UDP_HEADER_LEN: usize = 8;

/// Appends the frame header of a one-datagram request.
pub fn encode_udp_header(out: &mut Vec<u8>, request_id: u16) {
    out.extend_from_slice(&request_id.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes()); // sequence number
    out.extend_from_slice(&1u16.to_be_bytes()); // datagrams in this message
    out.extend_from_slice(&0u16.to_be_bytes()); // reserved
}

pub fn parse_udp_header(datagram: &[u8]) -> Option<UdpHeader> {
    let h = datagram.get(..UDP_HEADER_LEN)?;
    Some(UdpHeader {
        request_id: u16::from_be_bytes([h[0], h[1]]),
        sequence: u16::from_be_bytes([h[2], h[3]]),
        datagrams: u16::from_be_bytes([h[4], h[5]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(d: Dialect, op: Op, keys: u32, buf: &[u8]) -> Reply {
        parse_reply(d, op, keys, buf).unwrap().expect("complete")
    }

    #[test]
    fn ascii_multiget_counts_hits_and_waits_for_end() {
        let buf = b"VALUE a 0 3\r\nabc\r\nVALUE c 5 1\r\nx\r\nEND\r\n";
        for cut in 0..buf.len() {
            assert_eq!(
                parse_reply(Dialect::Ascii, Op::MultiGet, 3, &buf[..cut]),
                Ok(None)
            );
        }
        let r = parsed(Dialect::Ascii, Op::MultiGet, 3, buf);
        assert_eq!(
            (r.len, r.hits, r.misses, r.status),
            (buf.len(), 2, 1, Status::Ok)
        );
    }

    #[test]
    fn value_bytes_that_look_like_end_are_data() {
        let buf = b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\n";
        let r = parsed(Dialect::Ascii, Op::Get, 1, buf);
        assert_eq!((r.len, r.hits), (buf.len(), 1));
    }

    #[test]
    fn text_statuses() {
        let cases: &[(Dialect, Op, &[u8], Status)] = &[
            (Dialect::Ascii, Op::Set, b"STORED\r\n", Status::Ok),
            (
                Dialect::Ascii,
                Op::Set,
                b"NOT_STORED\r\n",
                Status::NotStored,
            ),
            (
                Dialect::Ascii,
                Op::Delete,
                b"NOT_FOUND\r\n",
                Status::NotFound,
            ),
            (Dialect::Ascii, Op::Incr, b"42\r\n", Status::Ok),
            (Dialect::Ascii, Op::Touch, b"TOUCHED\r\n", Status::Ok),
            (Dialect::Meta, Op::Set, b"HD\r\n", Status::Ok),
            (Dialect::Meta, Op::Touch, b"EN\r\n", Status::NotFound),
            (Dialect::Meta, Op::Incr, b"NF\r\n", Status::NotFound),
            (
                Dialect::Ascii,
                Op::Incr,
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                Status::Error(ErrorKind::ClientError),
            ),
            (
                Dialect::Meta,
                Op::Get,
                b"SERVER_ERROR out of memory\r\n",
                Status::Error(ErrorKind::ServerError),
            ),
            (
                Dialect::Ascii,
                Op::Get,
                b"ERROR\r\n",
                Status::Error(ErrorKind::Error),
            ),
        ];
        for (d, op, buf, status) in cases {
            let r = parsed(*d, *op, 1, buf);
            assert_eq!(
                (r.len, r.status),
                (buf.len(), *status),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
        }
        assert!(parse_reply(Dialect::Ascii, Op::Set, 1, b"DELETED\r\n").is_err());
    }

    #[test]
    fn meta_get_and_multiget() {
        let r = parsed(Dialect::Meta, Op::Get, 1, b"VA 2 f0\r\nhi\r\nEN\r\n");
        assert_eq!((r.len, r.hits, r.misses), (13, 1, 0));
        let r = parsed(Dialect::Meta, Op::Get, 1, b"EN\r\n");
        assert_eq!((r.hits, r.misses), (0, 1));
        let buf = b"VA 1\r\na\r\nVA 1\r\nb\r\nMN\r\n";
        let r = parsed(Dialect::Meta, Op::MultiGet, 4, buf);
        assert_eq!((r.len, r.hits, r.misses), (buf.len(), 2, 2));
    }

    #[test]
    fn encoders_write_memcached_syntax() {
        let mut out = Vec::new();
        encode_set(Dialect::Ascii, &mut out, b"k", b"vv", 30);
        encode_set(Dialect::Meta, &mut out, b"k", b"vv", 0);
        encode_multiget(Dialect::Ascii, &mut out, [&b"a"[..], b"b"]);
        encode_multiget(Dialect::Meta, &mut out, [&b"a"[..]]);
        encode_touch(Dialect::Ascii, &mut out, b"k", 7);
        encode_incr(Dialect::Ascii, &mut out, b"k");
        encode_delete(Dialect::Meta, &mut out, b"k");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "set k 0 30 2\r\nvv\r\nms k 2 T0\r\nvv\r\nget a b\r\nmg a v q\r\nmn\r\n\
             touch k 7\r\nincr k 1\r\nmd k\r\n"
        );
    }

    fn binary_response(opcode: u8, status: u16, body: &[u8]) -> Vec<u8> {
        let mut p = vec![BIN_RESPONSE, opcode, 0, 0, 0, 0];
        p.extend_from_slice(&status.to_be_bytes());
        p.extend_from_slice(&(body.len() as u32).to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(body);
        p
    }

    #[test]
    fn binary_requests_and_replies() {
        let mut out = Vec::new();
        encode_set(Dialect::Binary, &mut out, b"key", b"value", 9);
        assert_eq!(out.len(), 24 + 8 + 3 + 5);
        assert_eq!(&out[..2], &[BIN_REQUEST, OP_SET]);
        assert_eq!(u32::from_be_bytes(out[8..12].try_into().unwrap()), 16);

        let hit = binary_response(OP_GET, 0, b"\0\0\0\0abc");
        let r = parsed(Dialect::Binary, Op::Get, 1, &hit);
        assert_eq!((r.len, r.hits, r.misses), (hit.len(), 1, 0));
        assert_eq!(
            parse_reply(Dialect::Binary, Op::Get, 1, &hit[..hit.len() - 1]),
            Ok(None)
        );
        let r = parsed(
            Dialect::Binary,
            Op::Set,
            1,
            &binary_response(OP_SET, 5, b""),
        );
        assert_eq!(r.status, Status::NotStored);

        let mut batch = binary_response(OP_GETKQ, 0, b"\0\0\0\0kv");
        batch.extend(binary_response(OP_NOOP, 0, b""));
        let r = parsed(Dialect::Binary, Op::MultiGet, 3, &batch);
        assert_eq!(
            (r.len, r.hits, r.misses, r.status),
            (batch.len(), 1, 2, Status::Ok)
        );
    }

    #[test]
    fn udp_header_round_trip() {
        let mut out = Vec::new();
        encode_udp_header(&mut out, 0xbeef);
        let h = parse_udp_header(&out).unwrap();
        assert_eq!((h.request_id, h.sequence, h.datagrams), (0xbeef, 0, 1));
    }
}
