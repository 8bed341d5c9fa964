//! memcached's binary protocol, server side: request parsing and response encoding.
//!
//! A connection speaks binary when its first byte is [`REQUEST_MAGIC`] (0x80), as memcached
//! decides. Every packet is a 24-byte header followed by `extras`, `key` and `value`:
//!
//! ```text
//!  0 magic | 1 opcode | 2-3 key length | 4 extras length | 5 data type | 6-7 vbucket/status
//!  8-11 total body length | 12-15 opaque | 16-23 CAS        (all big-endian)
//! ```
//!
//! [`parse_request`] looks at a read buffer and returns [`Parsed::Incomplete`] (with the frame
//! length when the header is known, so the caller can reserve), [`Parsed::Request`] borrowing
//! key, extras and value from the buffer, or [`Parsed::Reject`] telling which error status to
//! send and whether to close the connection or skip the frame. Validation follows memcached's
//! `proto_bin.c`: wrong extras/key/body lengths answer `Invalid arguments` and close, an
//! unknown opcode answers `Unknown command` and skips the frame, a value above the item size
//! limit answers `Too large` and skips it, a bad magic byte closes without a reply.
//!
//! # Quiet commands: how the executor batches them
//! The `*Q` opcodes ([`Opcode::is_quiet`]) let clients pipeline without waiting. memcached
//! (and [`reply_suppressed`]) drops the reply of a quiet command when it would say nothing
//! new: a success for the storage, delete, arithmetic, flush and quit commands, and a miss
//! (`Key not found`) for GetQ/GetKQ/GATQ/GATKQ; hits and every other error are still sent.
//! The server appends replies to the connection's output buffer and writes them when the
//! read buffer has no complete request left (or at a non-quiet command such as Noop, which
//! memcached uses as the "flush the pipeline" marker); a quiet command never forces a write.
//!
//! # Executing requests (what the server does per command, as memcached's `proto_bin.c`)
//! Expirations use memcached's exptime rule (0 never, above 30 days an absolute Unix time).
//! Replies echo the request's opcode and opaque; CAS in a reply is the item's (0 on errors).
//!
//! * **Get/GetK (+Q)** — hit: [`write_value`] (flags, the key for the K forms, value; CAS).
//!   Miss: [`write_miss`], hidden for the Q forms.
//! * **GAT/GATK (+Q)**, **Touch** — set the TTL, then as Get; Touch replies with flags but no
//!   value (pass an empty value). Miss: `Key not found` (hidden for GATQ/GATKQ).
//! * **Set/Add/Replace (+Q)** — request CAS nonzero: compare and swap (missing: `Key not
//!   found`; different: `Key exists`). Add on a present key: `Key exists`; Replace on an absent
//!   one: `Key not found`. Success: [`write_ok`] with the new CAS. A value over the limit is
//!   already a [`Reject`]: for Set also remove the old item ([`Reject::key`]).
//! * **Append/Prepend (+Q)** — keep the item's flags and TTL; absent: `Not stored`; CAS
//!   checked when nonzero.
//! * **Delete (+Q)** — CAS checked when nonzero (`Key exists`); absent: `Key not found`.
//! * **Increment/Decrement (+Q)** — value must be a decimal u64 (else `Non-numeric`); incr
//!   wraps at 2^64, decr stops at 0; CAS checked when nonzero. Miss: with `exptime ==`
//!   [`NO_CREATE`] reply `Key not found`; otherwise store `initial` (as decimal text, flags 0,
//!   that exptime) *without* applying the delta and reply it. [`write_counter`] with the CAS.
//! * **Flush (+Q)** — `delay == 0`: invalidate everything now; else at that exptime.
//! * **Noop** — [`write_ok`]; then write out everything buffered (the batch ends here).
//! * **Quit (+Q)** — [`write_ok`] unless QuitQ, then close after writing.
//! * **Version** — [`write_version`]. **Verbosity** — [`write_ok`].
//! * **Stat** — empty key: every general stat, one [`write_stat`] each, then
//!   [`write_stat_end`]; `"reset"`: reset, then just the end packet; a known group
//!   (`settings`, `items`, `slabs`, `sizes`, `conns`): its stats and the end packet; anything
//!   else: `Key not found`.
//! * **Rejects** — [`write_error`] unless `status` is `None`; then close or skip per
//!   [`Reject::then`]. Out of memory while storing: `Out of memory`, value skipped.

use std::fmt;

use crate::KEY_MAX_LENGTH;

/// First byte of every request; also how a connection is recognised as binary.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Size of the fixed packet header.
pub const HEADER_LEN: usize = 24;
/// Increment/decrement expiration meaning "fail with Key not found instead of creating".
pub const NO_CREATE: u32 = 0xffff_ffff;

/// Response status codes (the header's bytes 6-7 in a response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    NonNumeric = 0x06,
    AuthError = 0x20,
    /// SASL: the mechanism needs another step; the body is the server's challenge.
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// The body text memcached sends with an error status (`write_bin_error`).
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::AuthContinue => b"",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }
}

/// Every opcode tern answers. Others get [`Status::UnknownCommand`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    Get = 0x00,
    Set = 0x01,
    Add = 0x02,
    Replace = 0x03,
    Delete = 0x04,
    Increment = 0x05,
    Decrement = 0x06,
    Quit = 0x07,
    Flush = 0x08,
    GetQ = 0x09,
    Noop = 0x0a,
    Version = 0x0b,
    GetK = 0x0c,
    GetKQ = 0x0d,
    Append = 0x0e,
    Prepend = 0x0f,
    Stat = 0x10,
    SetQ = 0x11,
    AddQ = 0x12,
    ReplaceQ = 0x13,
    DeleteQ = 0x14,
    IncrementQ = 0x15,
    DecrementQ = 0x16,
    QuitQ = 0x17,
    FlushQ = 0x18,
    AppendQ = 0x19,
    PrependQ = 0x1a,
    Verbosity = 0x1b,
    Touch = 0x1c,
    Gat = 0x1d,
    GatQ = 0x1e,
    GatK = 0x23,
    GatKQ = 0x24,
}

impl Opcode {
    /// The opcode for a header byte, if tern implements it.
    pub fn from_u8(byte: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match byte {
            0x00 => Get,
            0x01 => Set,
            0x02 => Add,
            0x03 => Replace,
            0x04 => Delete,
            0x05 => Increment,
            0x06 => Decrement,
            0x07 => Quit,
            0x08 => Flush,
            0x09 => GetQ,
            0x0a => Noop,
            0x0b => Version,
            0x0c => GetK,
            0x0d => GetKQ,
            0x0e => Append,
            0x0f => Prepend,
            0x10 => Stat,
            0x11 => SetQ,
            0x12 => AddQ,
            0x13 => ReplaceQ,
            0x14 => DeleteQ,
            0x15 => IncrementQ,
            0x16 => DecrementQ,
            0x17 => QuitQ,
            0x18 => FlushQ,
            0x19 => AppendQ,
            0x1a => PrependQ,
            0x1b => Verbosity,
            0x1c => Touch,
            0x1d => Gat,
            0x1e => GatQ,
            0x23 => GatK,
            0x24 => GatKQ,
            _ => return None,
        })
    }

    /// Quiet opcodes suppress some replies; see the module docs and [`reply_suppressed`].
    pub fn is_quiet(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            GetQ | GetKQ
                | SetQ
                | AddQ
                | ReplaceQ
                | DeleteQ
                | IncrementQ
                | DecrementQ
                | QuitQ
                | FlushQ
                | AppendQ
                | PrependQ
                | GatQ
                | GatKQ
        )
    }
}

/// How a storage command treats an existing item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
}

/// Which end of the existing value a concatenation extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConcatMode {
    Append,
    Prepend,
}

/// Direction of an arithmetic command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithMode {
    Increment,
    Decrement,
}

/// A validated request; every slice borrows from the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub opcode: Opcode,
    /// Echoed unchanged in every response to this request.
    pub opaque: u32,
    /// The request's CAS: compare-and-swap for storage, delete and arithmetic when nonzero.
    pub cas: u64,
    pub command: Command<'a>,
}

impl Request<'_> {
    /// Whether this is a quiet (`*Q`) opcode.
    pub fn is_quiet(&self) -> bool {
        self.opcode.is_quiet()
    }
}

/// What a request asks for, with its decoded extras.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// Get, GetQ, GetK, GetKQ. `with_key`: the reply carries the key (GetK*).
    Get { key: &'a [u8], with_key: bool },
    /// GAT, GATQ, GATK, GATKQ: get and set a new expiration.
    GetAndTouch {
        key: &'a [u8],
        exptime: u32,
        with_key: bool,
    },
    /// Touch: set a new expiration; the reply carries the flags but no value.
    Touch { key: &'a [u8], exptime: u32 },
    /// Set, Add, Replace (+Q). With a nonzero request CAS the store is a compare-and-swap.
    Store {
        mode: StoreMode,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
    },
    /// Append, Prepend (+Q). Flags and expiration of the existing item are kept.
    Concat {
        mode: ConcatMode,
        key: &'a [u8],
        value: &'a [u8],
    },
    /// Delete (+Q); CAS-checked when the request CAS is nonzero.
    Delete { key: &'a [u8] },
    /// Increment, Decrement (+Q). On a miss, create the item holding `initial` with
    /// `exptime` unless `exptime == NO_CREATE`.
    Arithmetic {
        mode: ArithMode,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
    },
    /// Quit (+Q): reply (unless quiet), then close.
    Quit,
    /// Flush (+Q): invalidate all items now (`delay == 0`) or at the expiration `delay`.
    Flush { delay: u32 },
    /// Noop: reply; the client's marker for the end of a quiet batch.
    Noop,
    /// Version: reply with the version string as value.
    Version,
    /// Stat: empty key for general stats, or a group name ("settings", "items", ...).
    Stat { key: &'a [u8] },
    /// Verbosity: set the log level (memcached 1.6 dropped it; 1.4 answered success).
    Verbosity { level: u32 },
}

/// What to do with the connection after sending a rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Close after the reply has been written (memcached's `close_after_write`).
    Close,
    /// Drop this many bytes from the start of the buffer (the whole frame); some of them may
    /// not have arrived yet and must be discarded as they come.
    Skip(usize),
}

/// A request that gets an error reply instead of being executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject<'a> {
    /// The raw opcode byte, echoed in the reply.
    pub opcode: u8,
    pub opaque: u32,
    /// `None`: send nothing (bad magic), just close.
    pub status: Option<Status>,
    pub then: Then,
    /// For [`Status::TooLarge`]: the refused command's key (the server decides whether the
    /// old value goes, as memcached removes it for a failed set). Empty otherwise.
    pub key: &'a [u8],
}

/// Result of looking at the start of a read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not enough bytes: the frame needs at least this many in total.
    Incomplete(usize),
    /// A request and the number of bytes it used.
    Request(Request<'a>, usize),
    Reject(Reject<'a>),
}

/// The fixed header of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    magic: u8,
    opcode: u8,
    key_len: usize,
    extras_len: usize,
    body_len: usize,
    opaque: u32,
    cas: u64,
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

impl Header {
    fn read(b: &[u8]) -> Header {
        Header {
            magic: b[0],
            opcode: b[1],
            key_len: be_u16(&b[2..]) as usize,
            extras_len: b[4] as usize,
            body_len: be_u32(&b[8..]) as usize,
            opaque: be_u32(&b[12..]),
            cas: be_u64(&b[16..]),
        }
    }
}

/// For a frame whose header has arrived but not all of its body (see
/// [`Parsed::Incomplete`]): a [`Reject`] answering it with `status` and skipping its `len`
/// bytes, carrying its key when that has arrived. `None` before the header is in.
pub fn reject_incomplete(buf: &[u8], len: usize, status: Status) -> Option<Reject<'_>> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    let h = Header::read(buf);
    let key_start = HEADER_LEN + h.extras_len;
    Some(Reject {
        opcode: h.opcode,
        opaque: h.opaque,
        status: Some(status),
        then: Then::Skip(len),
        key: buf
            .get(key_start..key_start + h.key_len)
            .unwrap_or_default(),
    })
}

/// Parses the request at the start of `buf`.
///
/// `max_value_len` is the largest value the store accepts (memcached's `-I` minus overhead);
/// a storage command above it is rejected with [`Status::TooLarge`] as soon as its header and
/// key are in, without waiting for (or buffering) the value.
pub fn parse_request(buf: &[u8], max_value_len: usize) -> Parsed<'_> {
    if buf.len() < HEADER_LEN {
        return Parsed::Incomplete(HEADER_LEN);
    }
    let h = Header::read(buf);
    let reject = |status: Option<Status>, then: Then| {
        Parsed::Reject(Reject {
            opcode: h.opcode,
            opaque: h.opaque,
            status,
            then,
            key: &[],
        })
    };
    if h.magic != REQUEST_MAGIC {
        return reject(None, Then::Close);
    }
    // Same order of checks as memcached's dispatch_bin_command.
    if h.key_len + h.extras_len > h.body_len {
        return reject(Some(Status::UnknownCommand), Then::Close);
    }
    if h.key_len > KEY_MAX_LENGTH {
        return reject(Some(Status::InvalidArguments), Then::Close);
    }
    let frame_len = HEADER_LEN + h.body_len;
    let Some(opcode) = Opcode::from_u8(h.opcode) else {
        // memcached swallows `body_len` bytes after the key, eating the next request's start;
        // skipping exactly this frame keeps the stream in sync.
        return reject(Some(Status::UnknownCommand), Then::Skip(frame_len));
    };
    if !lengths_valid(opcode, &h) {
        return reject(Some(Status::InvalidArguments), Then::Close);
    }
    let value_len = h.body_len - h.key_len - h.extras_len;
    if value_len > max_value_len && takes_value(opcode) {
        let key_end = HEADER_LEN + h.extras_len + h.key_len;
        if buf.len() < key_end {
            return Parsed::Incomplete(key_end);
        }
        return Parsed::Reject(Reject {
            opcode: h.opcode,
            opaque: h.opaque,
            status: Some(Status::TooLarge),
            then: Then::Skip(frame_len),
            key: &buf[HEADER_LEN + h.extras_len..key_end],
        });
    }
    if buf.len() < frame_len {
        return Parsed::Incomplete(frame_len);
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + h.extras_len];
    let key_end = HEADER_LEN + h.extras_len + h.key_len;
    let key = &buf[HEADER_LEN + h.extras_len..key_end];
    let value = &buf[key_end..frame_len];
    let command = command(opcode, extras, key, value);
    let request = Request {
        opcode,
        opaque: h.opaque,
        cas: h.cas,
        command,
    };
    Parsed::Request(request, frame_len)
}

fn takes_value(opcode: Opcode) -> bool {
    use Opcode::*;
    matches!(
        opcode,
        Set | SetQ | Add | AddQ | Replace | ReplaceQ | Append | AppendQ | Prepend | PrependQ
    )
}

/// memcached's per-opcode length rules; anything else is "Invalid arguments".
fn lengths_valid(opcode: Opcode, h: &Header) -> bool {
    use Opcode::*;
    let (key, extras, body) = (h.key_len, h.extras_len, h.body_len);
    match opcode {
        Version | Noop | Quit | QuitQ => key == 0 && extras == 0 && body == 0,
        Flush | FlushQ => key == 0 && body == extras && (extras == 0 || extras == 4),
        Set | SetQ | Add | AddQ | Replace | ReplaceQ => extras == 8 && key != 0 && body >= key + 8,
        Get | GetQ | GetK | GetKQ | Delete | DeleteQ => extras == 0 && key > 0 && body == key,
        Increment | IncrementQ | Decrement | DecrementQ => {
            key > 0 && extras == 20 && body == key + extras
        }
        Append | AppendQ | Prepend | PrependQ => key > 0 && extras == 0,
        Stat => extras == 0 && body == key,
        // memcached 1.4 required exactly a 4-byte level and nothing else.
        Verbosity => key == 0 && extras == 4 && body == 4,
        // memcached accepts trailing bytes here; they cannot mean anything, so tern refuses
        // them rather than silently ignore a malformed frame.
        Touch | Gat | GatQ | GatK | GatKQ => extras == 4 && key != 0 && body == key + 4,
    }
}

fn command<'a>(opcode: Opcode, extras: &[u8], key: &'a [u8], value: &'a [u8]) -> Command<'a> {
    use Opcode::*;
    let store = |mode| Command::Store {
        mode,
        key,
        flags: be_u32(extras),
        exptime: be_u32(&extras[4..]),
        value,
    };
    let arith = |mode| Command::Arithmetic {
        mode,
        key,
        delta: be_u64(extras),
        initial: be_u64(&extras[8..]),
        exptime: be_u32(&extras[16..]),
    };
    match opcode {
        Get | GetQ => Command::Get {
            key,
            with_key: false,
        },
        GetK | GetKQ => Command::Get {
            key,
            with_key: true,
        },
        Gat | GatQ => Command::GetAndTouch {
            key,
            exptime: be_u32(extras),
            with_key: false,
        },
        GatK | GatKQ => Command::GetAndTouch {
            key,
            exptime: be_u32(extras),
            with_key: true,
        },
        Touch => Command::Touch {
            key,
            exptime: be_u32(extras),
        },
        Set | SetQ => store(StoreMode::Set),
        Add | AddQ => store(StoreMode::Add),
        Replace | ReplaceQ => store(StoreMode::Replace),
        Append | AppendQ => Command::Concat {
            mode: ConcatMode::Append,
            key,
            value,
        },
        Prepend | PrependQ => Command::Concat {
            mode: ConcatMode::Prepend,
            key,
            value,
        },
        Delete | DeleteQ => Command::Delete { key },
        Increment | IncrementQ => arith(ArithMode::Increment),
        Decrement | DecrementQ => arith(ArithMode::Decrement),
        Quit | QuitQ => Command::Quit,
        Flush | FlushQ => Command::Flush {
            delay: if extras.len() == 4 { be_u32(extras) } else { 0 },
        },
        Noop => Command::Noop,
        Version => Command::Version,
        Stat => Command::Stat { key },
        Verbosity => Command::Verbosity {
            level: be_u32(extras),
        },
    }
}

/// Whether memcached would send nothing for `opcode` finishing with `status`.
///
/// Quiet opcodes drop successes, and the quiet gets also drop misses; errors always go out.
pub fn reply_suppressed(opcode: Opcode, status: Status) -> bool {
    use Opcode::*;
    match opcode {
        GetQ | GetKQ | GatQ | GatKQ => status == Status::KeyNotFound,
        _ => opcode.is_quiet() && status == Status::Success,
    }
}

/// A response header; [`ResponseHeader::write`] appends its 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    /// The request's opcode byte, echoed.
    pub opcode: u8,
    pub status: Status,
    pub key_len: u16,
    pub extras_len: u8,
    /// Extras + key + value length.
    pub body_len: u32,
    /// The request's opaque, echoed.
    pub opaque: u32,
    pub cas: u64,
}

impl ResponseHeader {
    /// A header with no extras, key or body, for `status`.
    pub fn new(opcode: u8, status: Status, opaque: u32) -> ResponseHeader {
        ResponseHeader {
            opcode,
            status,
            key_len: 0,
            extras_len: 0,
            body_len: 0,
            opaque,
            cas: 0,
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(RESPONSE_MAGIC);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(0); // data type: raw bytes
        out.extend_from_slice(&(self.status as u16).to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }
}

/// An error reply carrying memcached's message text, CAS 0. Also the reply to a [`Reject`].
pub fn write_error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: Status) {
    let msg = status.message();
    ResponseHeader {
        body_len: msg.len() as u32,
        ..ResponseHeader::new(opcode, status, opaque)
    }
    .write(out);
    out.extend_from_slice(msg);
}

/// A success with no body: Set/Add/Replace/Append/Prepend (with the new CAS), Delete, Flush,
/// Noop, Quit, Verbosity (CAS 0).
pub fn write_ok(out: &mut Vec<u8>, opcode: Opcode, opaque: u32, cas: u64) {
    ResponseHeader {
        cas,
        ..ResponseHeader::new(opcode as u8, Status::Success, opaque)
    }
    .write(out);
}

/// A hit for Get*/GAT* (value) or Touch (pass an empty value): 4-byte flags extras, the key
/// when `key` is given (GetK, GetKQ, GatK, GatKQ), then the value.
pub fn write_value(
    out: &mut Vec<u8>,
    opcode: Opcode,
    opaque: u32,
    cas: u64,
    flags: u32,
    key: Option<&[u8]>,
    value: &[u8],
) {
    let key = key.unwrap_or(&[]);
    ResponseHeader {
        key_len: key.len() as u16,
        extras_len: 4,
        body_len: (4 + key.len() + value.len()) as u32,
        cas,
        ..ResponseHeader::new(opcode as u8, Status::Success, opaque)
    }
    .write(out);
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// A get miss. GetK/GetKQ/GatK/GatKQ return the key as key *and* body as memcached does
/// (`write_bin_miss_response`); the others return the "Not found" text.
pub fn write_miss(out: &mut Vec<u8>, opcode: Opcode, opaque: u32, key: Option<&[u8]>) {
    match key {
        Some(key) => {
            ResponseHeader {
                key_len: key.len() as u16,
                body_len: key.len() as u32,
                ..ResponseHeader::new(opcode as u8, Status::KeyNotFound, opaque)
            }
            .write(out);
            out.extend_from_slice(key);
        }
        None => write_error(out, opcode as u8, opaque, Status::KeyNotFound),
    }
}

/// Increment/Decrement success: the new value as an 8-byte big-endian body.
pub fn write_counter(out: &mut Vec<u8>, opcode: Opcode, opaque: u32, cas: u64, value: u64) {
    ResponseHeader {
        body_len: 8,
        cas,
        ..ResponseHeader::new(opcode as u8, Status::Success, opaque)
    }
    .write(out);
    out.extend_from_slice(&value.to_be_bytes());
}

/// Version reply: the version string as value.
pub fn write_version(out: &mut Vec<u8>, opaque: u32, version: &str) {
    ResponseHeader {
        body_len: version.len() as u32,
        ..ResponseHeader::new(Opcode::Version as u8, Status::Success, opaque)
    }
    .write(out);
    out.extend_from_slice(version.as_bytes());
}

/// One statistic of a Stat reply: name as key, value as body. Any `Display` value is
/// formatted straight into `out`.
pub fn write_stat(out: &mut Vec<u8>, opaque: u32, name: &str, value: impl fmt::Display) {
    use std::io::Write as _;
    let start = out.len();
    ResponseHeader {
        key_len: name.len() as u16,
        ..ResponseHeader::new(Opcode::Stat as u8, Status::Success, opaque)
    }
    .write(out);
    out.extend_from_slice(name.as_bytes());
    let value_start = out.len();
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{value}");
    // The body length is known only now: patch it into the header.
    let body = (out.len() - value_start + name.len()) as u32;
    out[start + 8..start + 12].copy_from_slice(&body.to_be_bytes());
}

/// The empty-key packet that ends a Stat reply.
pub fn write_stat_end(out: &mut Vec<u8>, opaque: u32) {
    ResponseHeader::new(Opcode::Stat as u8, Status::Success, opaque).write(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1024 * 1024;

    /// Builds a request frame the way a client does.
    fn frame(
        opcode: u8,
        extras: &[u8],
        key: &[u8],
        value: &[u8],
        opaque: u32,
        cas: u64,
    ) -> Vec<u8> {
        let mut v = vec![REQUEST_MAGIC, opcode];
        v.extend_from_slice(&(key.len() as u16).to_be_bytes());
        v.push(extras.len() as u8);
        v.extend_from_slice(&[0, 0, 0]);
        v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        v.extend_from_slice(&opaque.to_be_bytes());
        v.extend_from_slice(&cas.to_be_bytes());
        v.extend_from_slice(extras);
        v.extend_from_slice(key);
        v.extend_from_slice(value);
        v
    }

    #[test]
    fn an_incomplete_frame_is_rejected_with_its_key_once_that_is_in() {
        let f = frame(0x01, &[0; 8], b"key", &[b'v'; 1000], 9, 0);
        let Parsed::Incomplete(len) = parse_request(&f[..500], MAX) else {
            panic!("a partial frame parsed");
        };
        assert_eq!(len, f.len());
        assert_eq!(reject_incomplete(&f[..23], len, Status::OutOfMemory), None);
        let header_only = reject_incomplete(&f[..24], len, Status::OutOfMemory).unwrap();
        assert_eq!(header_only.key, b"");
        let reject = reject_incomplete(&f[..500], len, Status::OutOfMemory).unwrap();
        assert_eq!(
            (reject.opcode, reject.opaque, reject.key),
            (0x01, 9, &b"key"[..])
        );
        assert_eq!(reject.status, Some(Status::OutOfMemory));
        assert_eq!(reject.then, Then::Skip(f.len()));
    }

    fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
        let mut e = flags.to_be_bytes().to_vec();
        e.extend_from_slice(&exptime.to_be_bytes());
        e
    }

    fn parse(buf: &[u8]) -> Parsed<'_> {
        parse_request(buf, MAX)
    }

    fn request(buf: &[u8]) -> Request<'_> {
        match parse(buf) {
            Parsed::Request(r, n) => {
                assert_eq!(n, buf.len());
                r
            }
            other => panic!("expected a request, got {other:?}"),
        }
    }

    fn rejected(buf: &[u8]) -> Reject<'_> {
        match parse(buf) {
            Parsed::Reject(r) => r,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn incomplete_until_the_whole_frame_is_there() {
        let f = frame(0x01, &set_extras(1, 2), b"key", b"value", 7, 0);
        assert_eq!(parse(&f[..0]), Parsed::Incomplete(HEADER_LEN));
        assert_eq!(parse(&f[..23]), Parsed::Incomplete(HEADER_LEN));
        for cut in HEADER_LEN..f.len() {
            assert_eq!(parse(&f[..cut]), Parsed::Incomplete(f.len()), "cut {cut}");
        }
        assert!(matches!(parse(&f), Parsed::Request(_, n) if n == f.len()));
    }

    #[test]
    fn parses_only_the_first_of_pipelined_frames() {
        let mut f = frame(0x09, &[], b"a", b"", 1, 0);
        let first = f.len();
        f.extend(frame(0x0a, &[], b"", b"", 2, 0));
        match parse(&f) {
            Parsed::Request(r, n) => {
                assert_eq!(n, first);
                assert_eq!(r.opcode, Opcode::GetQ);
                assert!(r.is_quiet());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn set_family_decodes_extras_key_value_and_cas() {
        for (op, opcode, mode) in [
            (0x01, Opcode::Set, StoreMode::Set),
            (0x11, Opcode::SetQ, StoreMode::Set),
            (0x02, Opcode::Add, StoreMode::Add),
            (0x12, Opcode::AddQ, StoreMode::Add),
            (0x03, Opcode::Replace, StoreMode::Replace),
            (0x13, Opcode::ReplaceQ, StoreMode::Replace),
        ] {
            let f = frame(
                op,
                &set_extras(0xdeadbeef, 300),
                b"k",
                b"v\r\nx",
                0x01020304,
                99,
            );
            let r = request(&f);
            assert_eq!(r.opcode, opcode);
            assert_eq!(r.opaque, 0x01020304);
            assert_eq!(r.cas, 99);
            assert_eq!(
                r.command,
                Command::Store {
                    mode,
                    key: b"k",
                    flags: 0xdeadbeef,
                    exptime: 300,
                    value: b"v\r\nx"
                }
            );
        }
    }

    #[test]
    fn empty_values_are_allowed() {
        let f = frame(0x01, &set_extras(0, 0), b"k", b"", 0, 0);
        assert!(matches!(
            request(&f).command,
            Command::Store { value: b"", .. }
        ));
        let f = frame(0x0e, &[], b"k", b"", 0, 0);
        assert!(matches!(
            request(&f).command,
            Command::Concat { value: b"", .. }
        ));
    }

    #[test]
    fn get_family() {
        for (op, with_key) in [(0x00, false), (0x09, false), (0x0c, true), (0x0d, true)] {
            let f = frame(op, &[], b"foo", b"", 5, 0);
            let r = request(&f);
            assert_eq!(
                r.command,
                Command::Get {
                    key: b"foo",
                    with_key
                }
            );
        }
        for (op, with_key) in [(0x1d, false), (0x1e, false), (0x23, true), (0x24, true)] {
            let f = frame(op, &10u32.to_be_bytes(), b"foo", b"", 5, 0);
            let r = request(&f);
            assert_eq!(
                r.command,
                Command::GetAndTouch {
                    key: b"foo",
                    exptime: 10,
                    with_key
                }
            );
        }
        let f = frame(0x1c, &77u32.to_be_bytes(), b"foo", b"", 5, 0);
        let r = request(&f);
        assert_eq!(
            r.command,
            Command::Touch {
                key: b"foo",
                exptime: 77
            }
        );
    }

    #[test]
    fn arithmetic_decodes_delta_initial_and_no_create() {
        let mut extras = 5u64.to_be_bytes().to_vec();
        extras.extend_from_slice(&100u64.to_be_bytes());
        extras.extend_from_slice(&NO_CREATE.to_be_bytes());
        for (op, mode) in [
            (0x05, ArithMode::Increment),
            (0x15, ArithMode::Increment),
            (0x06, ArithMode::Decrement),
            (0x16, ArithMode::Decrement),
        ] {
            let f = frame(op, &extras, b"n", b"", 0, 3);
            let r = request(&f);
            assert_eq!(
                r.command,
                Command::Arithmetic {
                    mode,
                    key: b"n",
                    delta: 5,
                    initial: 100,
                    exptime: NO_CREATE
                }
            );
            assert_eq!(r.cas, 3);
        }
    }

    #[test]
    fn simple_commands() {
        assert_eq!(
            request(&frame(0x0a, &[], b"", b"", 0, 0)).command,
            Command::Noop
        );
        assert_eq!(
            request(&frame(0x0b, &[], b"", b"", 0, 0)).command,
            Command::Version
        );
        assert_eq!(
            request(&frame(0x07, &[], b"", b"", 0, 0)).command,
            Command::Quit
        );
        assert_eq!(
            request(&frame(0x17, &[], b"", b"", 0, 0)).opcode,
            Opcode::QuitQ
        );
        assert_eq!(
            request(&frame(0x08, &[], b"", b"", 0, 0)).command,
            Command::Flush { delay: 0 }
        );
        let f = frame(0x18, &30u32.to_be_bytes(), b"", b"", 0, 0);
        let r = request(&f);
        assert_eq!(
            (r.opcode, r.command),
            (Opcode::FlushQ, Command::Flush { delay: 30 })
        );
        assert_eq!(
            request(&frame(0x10, &[], b"", b"", 0, 0)).command,
            Command::Stat { key: b"" }
        );
        assert_eq!(
            request(&frame(0x10, &[], b"items", b"", 0, 0)).command,
            Command::Stat { key: b"items" }
        );
        assert_eq!(
            request(&frame(0x1b, &2u32.to_be_bytes(), b"", b"", 0, 0)).command,
            Command::Verbosity { level: 2 }
        );
        assert_eq!(
            request(&frame(0x04, &[], b"gone", b"", 0, 0)).command,
            Command::Delete { key: b"gone" }
        );
        assert_eq!(
            request(&frame(0x0f, &[], b"k", b"pre", 0, 0)).command,
            Command::Concat {
                mode: ConcatMode::Prepend,
                key: b"k",
                value: b"pre"
            }
        );
    }

    #[test]
    fn bad_magic_closes_without_reply() {
        let mut f = frame(0x0a, &[], b"", b"", 0, 0);
        f[0] = 0x81;
        let r = rejected(&f);
        assert_eq!((r.status, r.then), (None, Then::Close));
    }

    #[test]
    fn wrong_lengths_are_invalid_arguments_and_close() {
        let cases: Vec<Vec<u8>> = vec![
            frame(0x00, &[], b"", b"", 0, 0),                // get without key
            frame(0x00, &[1, 2, 3, 4], b"k", b"", 0, 0),     // get with extras
            frame(0x00, &[], b"k", b"v", 0, 0),              // get with value
            frame(0x01, &[0; 4], b"k", b"v", 0, 0),          // set with short extras
            frame(0x01, &set_extras(0, 0), b"", b"v", 0, 0), // set without key
            frame(0x05, &[0; 8], b"k", b"", 0, 0),           // incr with short extras
            frame(0x05, &[0; 20], b"k", b"x", 0, 0),         // incr with value
            frame(0x0e, &[0; 4], b"k", b"v", 0, 0),          // append with extras
            frame(0x04, &[], b"k", b"x", 0, 0),              // delete with value
            frame(0x0a, &[], b"k", b"", 0, 0),               // noop with key
            frame(0x0b, &[], b"", b"x", 0, 0),               // version with body
            frame(0x07, &[0; 4], b"", b"", 0, 0),            // quit with extras
            frame(0x08, &[0; 2], b"", b"", 0, 0),            // flush with 2-byte extras
            frame(0x08, &[], b"k", b"", 0, 0),               // flush with key
            frame(0x10, &[0; 4], b"", b"", 0, 0),            // stat with extras
            frame(0x1c, &[], b"k", b"", 0, 0),               // touch without extras
            frame(0x1d, &[0; 4], b"", b"", 0, 0),            // gat without key
            frame(0x1b, &[], b"", b"", 0, 0),                // verbosity without level
        ];
        for f in &cases {
            let r = rejected(f);
            assert_eq!(r.status, Some(Status::InvalidArguments), "{f:?}");
            assert_eq!(r.then, Then::Close);
            assert_eq!(r.opcode, f[1]);
        }
    }

    #[test]
    fn key_longer_than_memcached_allows_is_invalid() {
        let key = vec![b'k'; KEY_MAX_LENGTH + 1];
        let f = frame(0x00, &[], &key, b"", 9, 0);
        let r = rejected(&f);
        assert_eq!(r.status, Some(Status::InvalidArguments));
        assert_eq!(r.opaque, 9);
        let key = vec![b'k'; KEY_MAX_LENGTH];
        assert!(matches!(
            parse(&frame(0x00, &[], &key, b"", 9, 0)),
            Parsed::Request(..)
        ));
    }

    #[test]
    fn lengths_beyond_the_body_are_unknown_command_and_close() {
        let mut f = frame(0x00, &[], b"key", b"", 0, 0);
        f[8..12].copy_from_slice(&2u32.to_be_bytes()); // body shorter than the key
        let r = rejected(&f);
        assert_eq!(
            (r.status, r.then),
            (Some(Status::UnknownCommand), Then::Close)
        );
    }

    #[test]
    fn unknown_opcode_skips_exactly_its_frame() {
        let f = frame(0x42, &[1], b"key", b"value", 3, 0);
        let r = rejected(&f[..HEADER_LEN]);
        assert_eq!(r.status, Some(Status::UnknownCommand));
        assert_eq!(r.then, Then::Skip(f.len()));
        assert_eq!(r.opaque, 3);
        assert_eq!(r.opcode, 0x42);
    }

    #[test]
    fn too_large_value_is_rejected_before_it_arrives() {
        let value = vec![b'x'; 100];
        let f = frame(0x01, &set_extras(0, 0), b"big", &value, 4, 0);
        let key_end = HEADER_LEN + 8 + 3;
        assert_eq!(
            parse_request(&f[..key_end - 1], 99),
            Parsed::Incomplete(key_end)
        );
        let Parsed::Reject(r) = parse_request(&f[..key_end], 99) else {
            panic!()
        };
        assert_eq!(r.status, Some(Status::TooLarge));
        assert_eq!(r.then, Then::Skip(f.len()));
        assert_eq!(
            r.key, b"big",
            "the server decides what happens to the old value"
        );
        let add = frame(0x12, &set_extras(0, 0), b"k", &value, 4, 0);
        let Parsed::Reject(r) = parse_request(&add, 99) else {
            panic!()
        };
        assert_eq!((r.status, r.key), (Some(Status::TooLarge), &b"k"[..]));
        assert!(matches!(parse_request(&f, 100), Parsed::Request(..)));
    }

    #[test]
    fn huge_body_length_on_a_get_is_invalid_not_a_huge_wait() {
        let mut f = frame(0x00, &[], b"k", b"", 0, 0);
        f[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(rejected(&f).status, Some(Status::InvalidArguments));
    }

    #[test]
    fn quiet_suppression_rules() {
        use Opcode::*;
        for op in [GetQ, GetKQ, GatQ, GatKQ] {
            assert!(reply_suppressed(op, Status::KeyNotFound));
            assert!(
                !reply_suppressed(op, Status::Success),
                "hits are always sent"
            );
        }
        for op in [
            SetQ, AddQ, ReplaceQ, DeleteQ, IncrementQ, DecrementQ, AppendQ, PrependQ, QuitQ, FlushQ,
        ] {
            assert!(reply_suppressed(op, Status::Success), "{op:?}");
            for err in [
                Status::KeyNotFound,
                Status::KeyExists,
                Status::NotStored,
                Status::NonNumeric,
            ] {
                assert!(!reply_suppressed(op, err), "{op:?} {err:?}");
            }
        }
        for op in [Get, Set, Delete, Noop, Increment, Flush] {
            assert!(!reply_suppressed(op, Status::Success));
            assert!(!reply_suppressed(op, Status::KeyNotFound));
        }
    }

    fn header_of(out: &[u8]) -> (u8, u8, u16, u8, u16, u32, u32, u64) {
        (
            out[0],
            out[1],
            be_u16(&out[2..]),
            out[4],
            be_u16(&out[6..]),
            be_u32(&out[8..]),
            be_u32(&out[12..]),
            be_u64(&out[16..]),
        )
    }

    #[test]
    fn value_replies() {
        let mut out = Vec::new();
        write_value(
            &mut out,
            Opcode::GetK,
            0xaabbccdd,
            42,
            7,
            Some(b"key"),
            b"value",
        );
        assert_eq!(header_of(&out), (0x81, 0x0c, 3, 4, 0, 12, 0xaabbccdd, 42));
        assert_eq!(&out[24..], b"\0\0\0\x07keyvalue");
        out.clear();
        write_value(&mut out, Opcode::Touch, 1, 42, 7, None, b"");
        assert_eq!(header_of(&out), (0x81, 0x1c, 0, 4, 0, 4, 1, 42));
        assert_eq!(out.len(), 28);
    }

    #[test]
    fn miss_replies() {
        let mut out = Vec::new();
        write_miss(&mut out, Opcode::Get, 5, None);
        assert_eq!(header_of(&out), (0x81, 0x00, 0, 0, 1, 9, 5, 0));
        assert_eq!(&out[24..], b"Not found");
        out.clear();
        write_miss(&mut out, Opcode::GetKQ, 5, Some(b"abc"));
        assert_eq!(header_of(&out), (0x81, 0x0d, 3, 0, 1, 3, 5, 0));
        assert_eq!(&out[24..], b"abc");
    }

    #[test]
    fn error_ok_counter_version_replies() {
        let mut out = Vec::new();
        write_error(&mut out, 0x42, 8, Status::UnknownCommand);
        assert_eq!(header_of(&out), (0x81, 0x42, 0, 0, 0x81, 15, 8, 0));
        assert_eq!(&out[24..], b"Unknown command");
        out.clear();
        write_ok(&mut out, Opcode::Set, 8, 1234);
        assert_eq!(header_of(&out), (0x81, 0x01, 0, 0, 0, 0, 8, 1234));
        out.clear();
        write_counter(&mut out, Opcode::Increment, 8, 3, 0x0102030405060708);
        assert_eq!(header_of(&out), (0x81, 0x05, 0, 0, 0, 8, 8, 3));
        assert_eq!(&out[24..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        out.clear();
        write_version(&mut out, 8, "1.6.18");
        assert_eq!(header_of(&out), (0x81, 0x0b, 0, 0, 0, 6, 8, 0));
        assert_eq!(&out[24..], b"1.6.18");
    }

    #[test]
    fn every_error_status_has_memcached_text() {
        let all = [
            Status::KeyNotFound,
            Status::KeyExists,
            Status::TooLarge,
            Status::InvalidArguments,
            Status::NotStored,
            Status::NonNumeric,
            Status::AuthError,
            Status::UnknownCommand,
            Status::OutOfMemory,
        ];
        for s in all {
            assert!(!s.message().is_empty(), "{s:?}");
        }
        assert_eq!(Status::NonNumeric as u16, 6);
        assert_eq!(Status::OutOfMemory as u16, 0x82);
    }

    #[test]
    fn stat_stream_ends_with_an_empty_packet() {
        let mut out = Vec::new();
        write_stat(&mut out, 9, "pid", 1234);
        write_stat(&mut out, 9, "version", "1.0");
        write_stat_end(&mut out, 9);
        assert_eq!(header_of(&out), (0x81, 0x10, 3, 0, 0, 7, 9, 0));
        assert_eq!(&out[24..31], b"pid1234");
        let second = &out[31..];
        assert_eq!(header_of(second), (0x81, 0x10, 7, 0, 0, 10, 9, 0));
        assert_eq!(&second[24..34], b"version1.0");
        let end = &second[34..];
        assert_eq!(header_of(end), (0x81, 0x10, 0, 0, 0, 0, 9, 0));
        assert_eq!(end.len(), 24);
    }

    #[test]
    fn every_opcode_round_trips_through_from_u8() {
        for byte in 0..=255u8 {
            if let Some(op) = Opcode::from_u8(byte) {
                assert_eq!(op as u8, byte);
            }
        }
    }
}
