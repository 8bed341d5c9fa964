//! memcached's meta commands (`mg`, `ms`, `md`, `ma`, `me`, `mn`), server side: parse one
//! command line into a typed [`Request`] and encode the reply.
//!
//! The caller splits lines as for ASCII commands ([`crate::ascii::parse`] finds them; [`is_meta`]
//! tells a meta line) and hands [`parse`] the line without its terminator. For `ms` it then
//! reads the data block of [`Command::Set`]'s `data_len` bytes plus `\r\n` exactly as for `set`
//! ([`crate::ascii::data_block`]; a block not ending in `\r\n` gets
//! [`ErrorReply::BadDataChunk`]). Errors come back as [`ParseError`]: the exact memcached line to send and,
//! for `ms`, how many bytes of data block to swallow, so a bad request never desyncs the stream.
//!
//! Parsing follows memcached 1.6.18 (Debian's, our reference peer), byte for byte in its error
//! replies. Where newer memcached (1.6.45, the project's reference) adds flags the parser reads
//! them too: `E` (the client sets the CAS the item gets, parsed into [`Flags::new_cas`]) and `x`
//! (md: drop the value, keep the item), both answered `CLIENT_ERROR invalid flag` by 1.6.18; the
//! server runs both as 1.6.45 does. docs/protocols.md lists where tern's meta commands differ
//! from memcached's.
//!
//! # Executing requests (what the server does per command)
//!
//! TTL tokens (`T`, `N`, `R`) follow memcached's exptime rule, as for ASCII commands: 0 never
//! expires, negative expires at once, above 30 days is an absolute Unix time. `E` (when given)
//! is the CAS any item this request creates or modifies gets instead of a fresh one (`ms E0` is
//! no `E`; on the other commands `E0` gives CAS 0, as 1.6.45); a request that changes nothing
//! (an `mg` hit, even with `T`) ignores it. The store keeps per item: CAS, client flags, TTL, last access,
//! fetched-before, stale and win-token-sent. memcached also marks an item stored with a base64
//! key, so that mg's `k` and `me` show its key in base64 whatever form a later request uses;
//! tern's store keeps no such mark, so the server fills [`ItemInfo::key_binary`] and
//! [`DebugInfo::key_binary`] from the request (the key is echoed as this request sent it).
//! Build the reply with [`write_reply`], filling [`ItemInfo`] from the item *as it was before*
//! this request for `h` and `l`, and after it for the rest.
//!
//! * **mg** — look up [`Key::bytes`]. Miss: with `N`, create an empty item (flags 0, TTL `N`,
//!   CAS `E` if given), reply as a hit with `won`; without `N`, [`Code::Miss`] (only `O`/`k`
//!   echoed; hidden by `q`). Hit: `T` sets the TTL (a touch); `won` if the item is stale and its token was not
//!   yet sent, or if `R` is given, the item has a TTL, its remaining TTL is below `R`, and no
//!   token was sent; `win_sent_before` if the token had been sent before this request; `stale`
//!   from the item. When `won`, set the item's win-token-sent. Then mark it fetched and set its
//!   last access (memcached also bumps its LRU), unless `u`. Reply [`Code::Value`] with the
//!   value when `v` (unless `C` names the item's CAS: the client has this version), else
//!   [`Code::Stored`] (`HD`); `q` does not hide hits. 1.6.18 prints `t` at its position among
//!   the flags, so `t` before `T` shows the old TTL; tern's server reports the TTL after `T`.
//! * **ms** — check the value size first (too large: [`ErrorReply::TooLarge`], remove the old
//!   item as memcached does so no stale value survives). Mode `S` stores (with `C`: compare and
//!   swap, [`Code::NotFound`] if missing, [`Code::Exists`] if different); `E` add (NS if
//!   present); `R` replace (NS if absent; with `C` as CAS); `A`/`P` append/prepend, keeping the
//!   item's flags and TTL, NS if absent unless `N` is given, then create the item from the data
//!   with TTL `N` (newer memcached; 1.6.18 answers NS), `C` checked if given. `I` with `C`: a
//!   `C` *lower* than the item's CAS still stores, marking the new item stale. New items take
//!   flags `F`, TTL `T` (0 if absent), CAS `E` or a fresh one. Reply `HD` (hidden by `q`),
//!   `NS`, `EX` or `NF`; `c` returns the new CAS and `s` the stored value's size (pass the
//!   item), `c0` and the data's size otherwise (pass `None`).
//! * **md** — miss: `NF` (not hidden by `q`). `C` not matching: `EX`. With `x` (1.6.45):
//!   replace the item with an empty one with flags `F` (else 0), TTL `T` (else none), no
//!   marks, keeping its CAS (or taking `E`). With `I` (after `x`'s rewrite, if any): keep the
//!   item, mark it stale, clear its win-token-sent, give it a new CAS (`E` if given), and set
//!   the TTL to `T` if given. Neither: unlink (`T` alone changes nothing). Reply `HD` (hidden
//!   by `q`).
//! * **ma** — `C` not matching: `EX`. Hit: the value must be a decimal u64 (else
//!   [`ErrorReply::NonNumeric`]); increment by `D` wrapping at 2^64, decrement by `D` stopping
//!   at 0; new CAS (`E` if given); `T` sets the TTL. Miss with `N`: create the item holding
//!   `J` (delta not applied), TTL `N`, CAS `E` if given (`NS` if that fails); miss without
//!   `N`: `NF`. Reply
//!   [`Code::Value`] with the number's digits when `v`, else `HD`; `c` and `t` from the item;
//!   `q` hides the success only.
//! * **me** — hit: [`write_debug`]; miss: [`Code::Miss`]. No LRU bump.
//! * **mn** — [`write_noop`]. With `q` pipelines the client ends a batch with `mn`; since the
//!   server answers in order, `MN` arrives after every reply of the batch.
//!
//! Return flags are echoed in the order the client sent them, as memcached does; the reply
//! encoder walks the request's flag tokens again instead of storing them, so a request holds
//! no per-flag allocation.

use base64::Engine as _;

use crate::ascii;
// The limit applies to the key token as sent (before base64 decoding).
use crate::KEY_MAX_LENGTH;

/// Longest `O` token, the `O` included (memcached's `MFLAG_MAX_OPAQUE_LENGTH`).
pub const MAX_OPAQUE_LEN: usize = 32;
/// Room for a decoded base64 key: a 250-byte token decodes to at most 186 bytes.
const MAX_DECODED_KEY: usize = KEY_MAX_LENGTH / 4 * 3;

/// Which meta command a line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `mg <key> <flags>*`
    Get,
    /// `ms <key> <datalen> <flags>*` followed by a data block of `data_len` bytes + `\r\n`.
    Set { data_len: usize, mode: SetMode },
    /// `md <key> <flags>*`
    Delete,
    /// `ma <key> <flags>*`
    Arithmetic { mode: ArithMode },
    /// `me <key> [b]`: human-readable item metadata.
    Debug,
    /// `mn`: replies `MN`, the end marker of a quiet pipeline.
    NoOp,
}

/// `ms` mode (`M` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMode {
    /// `MS` (default): store unconditionally, or compare-and-swap with `C`.
    Set,
    /// `ME`: store only if absent (`NS` if present).
    Add,
    /// `MR`: store only if present (`NS` if absent).
    Replace,
    /// `MA`: append to the existing value (`NS` on a miss unless `N` vivifies).
    Append,
    /// `MP`: prepend to the existing value (`NS` on a miss unless `N` vivifies).
    Prepend,
}

/// `ma` mode (`M` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithMode {
    /// `MI`, `M+` (default).
    Increment,
    /// `MD`, `M-`: stops at 0 instead of wrapping.
    Decrement,
}

/// The key, as sent and as the store sees it (base64-decoded with `b`).
#[derive(Clone, Copy)]
pub struct Key<'a> {
    token: &'a [u8],
    decoded: [u8; MAX_DECODED_KEY],
    decoded_len: u8,
    binary: bool,
}

impl<'a> Key<'a> {
    fn text(token: &'a [u8]) -> Key<'a> {
        Key {
            token,
            decoded: [0; MAX_DECODED_KEY],
            decoded_len: 0,
            binary: false,
        }
    }

    /// The key to look up in the store.
    pub fn bytes(&self) -> &[u8] {
        if self.binary {
            &self.decoded[..self.decoded_len as usize]
        } else {
            self.token
        }
    }

    /// Appends the key as replies show it (`k`, `me`): raw, or base64-encoded when `base64`.
    /// memcached decides by the *item's* binary-key mark when it has an item, and encodes the
    /// decoded bytes canonically (it accepts non-zero trailing bits, so `Zm9=` shows as `Zm8=`).
    fn write_echo(&self, out: &mut Vec<u8>, base64: bool) {
        if !base64 {
            out.extend_from_slice(self.bytes());
            return;
        }
        let mut buf = [0u8; KEY_MAX_LENGTH + 2];
        let n = base64::engine::general_purpose::STANDARD
            .encode_slice(self.bytes(), &mut buf)
            .expect("a key of at most 250 bytes encodes in 252");
        out.extend_from_slice(&buf[..n]);
    }

    /// Whether the client sent the key base64-encoded (`b`): replies echoing it add ` b`.
    pub fn is_binary(&self) -> bool {
        self.binary
    }
}

impl std::fmt::Debug for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("token", &String::from_utf8_lossy(self.token))
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.token == other.token && self.binary == other.binary
    }
}

/// Every flag memcached documents, decoded. What each means for each command is spelled out
/// on the fields; unset flags have memcached's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags<'a> {
    /// `b`: key is base64 (already decoded into [`Key::bytes`]).
    pub base64_key: bool,
    /// `c`: return the CAS (mg, ma: item's; ms: new one, `c0` when not stored).
    pub return_cas: bool,
    /// `f`: return client flags (mg).
    pub return_client_flags: bool,
    /// `h`: return whether the item was fetched before this request, `0`/`1` (mg).
    pub return_hit: bool,
    /// `k`: return the key (all).
    pub return_key: bool,
    /// `l`: return seconds since last access, before this request (mg).
    pub return_last_access: bool,
    /// `O<token>`: opaque echoed in the reply (all); the token without its `O`.
    pub opaque: Option<&'a [u8]>,
    /// `q`: quiet, suppress the nominal reply (see [`suppressed`]).
    pub quiet: bool,
    /// `s`: return the value size (mg; ms: the stored item's, 1.6.45).
    pub return_size: bool,
    /// `t`: return remaining TTL in seconds, `-1` for none (mg, ma).
    pub return_ttl: bool,
    /// `u`: don't bump in the LRU, nor mark fetched, nor update last access (mg).
    pub no_bump: bool,
    /// `v`: return the value as a data block, `VA <size>` instead of `HD` (mg, ma).
    pub return_value: bool,
    /// `C<u64>`: compare CAS (ms, md, ma; mg: no value when it matches).
    pub compare_cas: Option<u64>,
    /// `E<u64>`: the CAS to give the item this request creates or modifies, instead of a fresh
    /// one (ms, md, ma, and mg when it vivifies; 1.6.45, refused by 1.6.18).
    pub new_cas: Option<u64>,
    /// `F<u32>`: client flags to store (ms), 0 if absent.
    pub client_flags: u32,
    /// `I`: invalidate. md: mark stale instead of deleting; ms with `C`: a CAS older than the
    /// item's still stores, but marks the item stale.
    pub invalidate: bool,
    /// `N<ttl>`: vivify on miss with this TTL (mg: empty item + `W`; ms append/prepend: create
    /// from the data; ma: create holding `J`).
    pub vivify_ttl: Option<i32>,
    /// `R<ttl>`: mg: win the recache (`W`) if the remaining TTL is below this.
    pub recache_ttl: Option<i32>,
    /// `T<ttl>`: new TTL (mg: touch on hit; ms: item TTL; md with `I`: stale TTL; ma: on
    /// success).
    pub ttl: Option<i32>,
    /// `J<u64>`: ma initial value when vivifying, default 0.
    pub initial: u64,
    /// `D<u64>`: ma delta, default 1.
    pub delta: u64,
    /// `x`: md removes the value but keeps the item (newer memcached; not 1.6.18).
    pub remove_value: bool,
}

impl Default for Flags<'_> {
    fn default() -> Self {
        Flags {
            base64_key: false,
            return_cas: false,
            return_client_flags: false,
            return_hit: false,
            return_key: false,
            return_last_access: false,
            opaque: None,
            quiet: false,
            return_size: false,
            return_ttl: false,
            no_bump: false,
            return_value: false,
            compare_cas: None,
            new_cas: None,
            client_flags: 0,
            invalidate: false,
            vivify_ttl: None,
            recache_ttl: None,
            ttl: None,
            initial: 0,
            delta: 1,
            remove_value: false,
        }
    }
}

/// One parsed meta command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request<'a> {
    pub command: Command,
    /// Empty for `mn`.
    pub key: Key<'a>,
    pub flags: Flags<'a>,
    /// The flag tokens as sent, for echoing return flags in request order.
    flag_tokens: &'a [u8],
}

impl Request<'_> {
    /// Whether flag `a` comes before flag `b` in the line (both present): memcached applies
    /// each flag at its place, so `t` before `T` reports the TTL from before the touch.
    pub fn flag_before(&self, a: u8, b: u8) -> bool {
        let flags = || tokens(self.flag_tokens).map(|t| t[0]);
        match (flags().position(|f| f == a), flags().position(|f| f == b)) {
            (Some(a), Some(b)) => a < b,
            _ => false,
        }
    }
}

/// A reply line memcached sends for a bad request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReply {
    /// `ERROR`: unknown command, or a meta command without its key.
    Error,
    BadFormat,
    BadToken,
    InvalidFlag,
    DuplicateFlag,
    /// md and ma say this for any flag error.
    InvalidOrDuplicateFlag,
    KeyDecode,
    /// mg's wording.
    GetOptionsTooLong,
    OptionsTooLong,
    OpaqueTooLong,
    ModeLength,
    SetMode,
    ArithMode,
    InitialValue,
    DeltaValue,
    /// The `ms` data block did not end with `\r\n`.
    BadDataChunk,
    /// Errors the server answers (not the parser), here so every meta error string lives in
    /// one place.
    NonNumeric,
    TooLarge,
    OutOfMemory,
}

impl ErrorReply {
    /// The line without `\r\n`.
    pub fn message(self) -> &'static str {
        use ErrorReply::*;
        match self {
            Error => "ERROR",
            BadFormat => "CLIENT_ERROR bad command line format",
            BadToken => "CLIENT_ERROR bad token in command line format",
            InvalidFlag => "CLIENT_ERROR invalid flag",
            DuplicateFlag => "CLIENT_ERROR duplicate flag",
            InvalidOrDuplicateFlag => "CLIENT_ERROR invalid or duplicate flag",
            KeyDecode => "CLIENT_ERROR error decoding key",
            GetOptionsTooLong => "CLIENT_ERROR options flags are too long",
            OptionsTooLong => "CLIENT_ERROR options flags too long",
            OpaqueTooLong => "CLIENT_ERROR opaque token too long",
            ModeLength => "CLIENT_ERROR incorrect length for M token",
            SetMode => "CLIENT_ERROR invalid mode for ms M token",
            ArithMode => "CLIENT_ERROR invalid mode for ma M token",
            InitialValue => "CLIENT_ERROR invalid numeric initial value",
            DeltaValue => "CLIENT_ERROR invalid numeric delta value",
            BadDataChunk => "CLIENT_ERROR bad data chunk",
            NonNumeric => "CLIENT_ERROR cannot increment or decrement non-numeric value",
            TooLarge => "SERVER_ERROR object too large for cache",
            OutOfMemory => "SERVER_ERROR out of memory storing object",
        }
    }
}

/// A line that gets an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError {
    pub reply: ErrorReply,
    /// Bytes of data block (with its `\r\n`) to discard after the line: nonzero only for an
    /// `ms` whose length was readable, as memcached swallows it.
    pub swallow: usize,
}

impl ParseError {
    fn new(reply: ErrorReply) -> ParseError {
        ParseError { reply, swallow: 0 }
    }
}

/// Whether `line` (no `\r\n`) starts with a meta command the caller should hand to [`parse`].
pub fn is_meta(line: &[u8]) -> bool {
    matches!(
        line,
        [b'm', b'g' | b's' | b'd' | b'a' | b'e' | b'n']
            | [b'm', b'g' | b's' | b'd' | b'a' | b'e' | b'n', b' ', ..]
    )
}

fn tokens(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&b| b == b' ').filter(|t| !t.is_empty())
}

/// Whether `rest` holds more than `limit` tokens. Counting costs a pass over the line, so it
/// is done only when the line is long enough to hold that many (one byte and a space each).
fn more_tokens_than(rest: &[u8], limit: usize) -> bool {
    rest.len() > 2 * limit && tokens(rest).nth(limit).is_some()
}

/// Splits off the first token, returning it and the rest of the line.
fn next_token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let start = s.iter().position(|&b| b != b' ')?;
    let s = &s[start..];
    let end = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

/// memcached's `safe_strtol` on a 64-bit host: C `strtol` (leading white space, a sign, digits,
/// then the end or white space), any `long` accepted and silently truncated to 32 bits, as
/// 1.6.18 does for `T`, `N`, `R` and the `ms` length.
fn strtol(token: &[u8]) -> Option<i32> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = token
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(token.len());
    let token = &token[start..];
    let sign = usize::from(matches!(token.first(), Some(b'+' | b'-')));
    let digits = token[sign..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let (number, rest) = token.split_at(sign + digits);
    if digits == 0 || rest.first().is_some_and(|b| !is_space(b)) {
        return None;
    }
    // Out of `long` range is ERANGE, which memcached refuses.
    let value: i64 = std::str::from_utf8(number).ok()?.parse().ok()?;
    Some(value as i32)
}

/// Parses one meta command line, without its `\r\n`.
pub fn parse(line: &[u8]) -> Result<Request<'_>, ParseError> {
    let Some((verb, rest)) = next_token(line) else {
        return Err(ParseError::new(ErrorReply::Error));
    };
    let command = match verb {
        b"mg" => Command::Get,
        b"ms" => Command::Set {
            data_len: 0,
            mode: SetMode::Set,
        },
        b"md" => Command::Delete,
        b"ma" => Command::Arithmetic {
            mode: ArithMode::Increment,
        },
        b"me" => Command::Debug,
        b"mn" => {
            // memcached ignores anything after mn.
            return Ok(Request {
                command: Command::NoOp,
                key: Key::text(b""),
                flags: Flags::default(),
                flag_tokens: b"",
            });
        }
        _ => return Err(ParseError::new(ErrorReply::Error)),
    };
    // memcached 1.6.45 answers a meta command without a key so (1.6.18 said `ERROR`).
    let Some((key_token, mut rest)) = next_token(rest) else {
        return Err(ParseError::new(ErrorReply::BadFormat));
    };
    if key_token.len() > KEY_MAX_LENGTH {
        return Err(ParseError::new(ErrorReply::BadFormat));
    }
    if command == Command::Debug {
        return parse_debug(key_token, rest);
    }
    let mut data_len = 0;
    if let Command::Set { .. } = command {
        let Some((len_token, after)) = next_token(rest) else {
            return Err(ParseError::new(ErrorReply::BadFormat));
        };
        rest = after;
        // memcached's checks: the flag count first, then the length (as an i32).
        if more_tokens_than(rest, 16) {
            return Err(ParseError::new(ErrorReply::OptionsTooLong));
        }
        data_len = match strtol(len_token) {
            Some(n) if (0..=i32::MAX - 2).contains(&n) => n as usize,
            _ => return Err(ParseError::new(ErrorReply::BadFormat)),
        };
    } else if more_tokens_than(rest, 17) {
        let reply = if command == Command::Get {
            ErrorReply::GetOptionsTooLong
        } else {
            ErrorReply::OptionsTooLong
        };
        return Err(ParseError::new(reply));
    }
    let swallow = match command {
        Command::Set { .. } => data_len + 2,
        _ => 0,
    };
    let fail = |reply| ParseError { reply, swallow };
    let mut req = Request {
        command,
        key: Key::text(key_token),
        flags: Flags::default(),
        flag_tokens: rest,
    };
    let mode = parse_flags(&mut req.key, &mut req.flags, rest).map_err(|reply| {
        // ma collapses every flag error into one message (md did too before 1.6.45).
        fail(match command {
            Command::Arithmetic { .. } => ErrorReply::InvalidOrDuplicateFlag,
            _ => reply,
        })
    })?;
    req.command = match command {
        Command::Set { .. } => Command::Set {
            data_len,
            mode: match mode {
                None | Some(b'S') => SetMode::Set,
                Some(b'E') => SetMode::Add,
                Some(b'A') => SetMode::Append,
                Some(b'P') => SetMode::Prepend,
                Some(b'R') => SetMode::Replace,
                Some(_) => return Err(fail(ErrorReply::SetMode)),
            },
        },
        Command::Arithmetic { .. } => Command::Arithmetic {
            mode: match mode {
                None | Some(b'I' | b'+') => ArithMode::Increment,
                Some(b'D' | b'-') => ArithMode::Decrement,
                Some(_) => return Err(fail(ErrorReply::ArithMode)),
            },
        },
        other => other,
    };
    if req
        .flags
        .opaque
        .is_some_and(|o| o.len() + 1 > MAX_OPAQUE_LEN)
    {
        return Err(fail(ErrorReply::OpaqueTooLong));
    }
    Ok(req)
}

fn parse_debug<'a>(key_token: &'a [u8], rest: &'a [u8]) -> Result<Request<'a>, ParseError> {
    let mut req = Request {
        command: Command::Debug,
        key: Key::text(key_token),
        flags: Flags::default(),
        flag_tokens: b"",
    };
    if let Some((b"b", _)) = next_token(rest) {
        if !decode_key(&mut req.key) {
            return Err(ParseError::new(ErrorReply::BadFormat));
        }
        req.flags.base64_key = true;
    }
    Ok(req)
}

/// memcached's base64 decoder wants padding but ignores the unused low bits of the last
/// character.
const KEY_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// Decodes the key token in place; false when it is not base64 (or decodes to nothing).
fn decode_key(key: &mut Key<'_>) -> bool {
    match KEY_BASE64.decode_slice(key.token, &mut key.decoded) {
        Ok(n) if n > 0 => {
            key.decoded_len = n as u8;
            key.binary = true;
            true
        }
        _ => false,
    }
}

/// memcached's `_meta_flag_preparse`: the first byte of each token is the flag. A repeated or
/// unknown flag stops at once; a bad value is remembered and parsing goes on, the last bad
/// value's message winning (and `F`'s keeping whatever message was there). Fills `key` and
/// `flags` in place (a request is a few hundred bytes: moving it costs) and returns the `M`
/// mode byte.
fn parse_flags<'a>(
    key: &mut Key<'a>,
    flags: &mut Flags<'a>,
    rest: &'a [u8],
) -> Result<Option<u8>, ErrorReply> {
    let mut mode = None;
    // Flags 64..=126 seen so far. A byte below 64 is never a flag, and memcached stops at the
    // first invalid flag, so it cannot be seen twice.
    let mut seen = 0u64;
    let mut failed = false;
    let mut message = ErrorReply::BadFormat;
    // `None`: fail without a message of its own, as memcached's `F`.
    let mut bad = |reply: Option<ErrorReply>| {
        failed = true;
        if let Some(reply) = reply {
            message = reply;
        }
    };
    for token in tokens(rest) {
        let flag = token[0];
        if flag >= 127 {
            return Err(ErrorReply::DuplicateFlag);
        }
        if flag >= 64 {
            let bit = 1u64 << (flag - 64);
            if seen & bit != 0 {
                return Err(ErrorReply::DuplicateFlag);
            }
            seen |= bit;
        }
        let arg = &token[1..];
        match flag {
            b'b' => {
                if !decode_key(key) {
                    bad(Some(ErrorReply::KeyDecode));
                }
            }
            b'N' | b'T' | b'R' => {
                let ttl = strtol(arg);
                if ttl.is_none() {
                    bad(Some(ErrorReply::BadToken));
                }
                match flag {
                    b'N' => flags.vivify_ttl = ttl,
                    b'T' => flags.ttl = ttl,
                    _ => flags.recache_ttl = ttl,
                }
            }
            b'c' => flags.return_cas = true,
            b'f' => flags.return_client_flags = true,
            b'h' => flags.return_hit = true,
            b'k' => flags.return_key = true,
            b'l' => flags.return_last_access = true,
            b'O' => flags.opaque = Some(arg),
            // Proxy routing hints: accepted and ignored, as memcached does.
            b'P' | b'L' => {}
            b'q' => flags.quiet = true,
            b's' => flags.return_size = true,
            b't' => flags.return_ttl = true,
            b'u' => flags.no_bump = true,
            b'v' => flags.return_value = true,
            b'x' => flags.remove_value = true,
            b'I' => flags.invalidate = true,
            b'F' => match ascii::parse_u32(arg) {
                Some(f) => flags.client_flags = f,
                None => bad(None),
            },
            b'C' => match ascii::parse_u64(arg) {
                Some(c) => flags.compare_cas = Some(c),
                None => bad(Some(ErrorReply::BadToken)),
            },
            b'E' => match ascii::parse_u64(arg) {
                Some(c) => flags.new_cas = Some(c),
                None => bad(Some(ErrorReply::BadToken)),
            },
            b'M' => match arg {
                [m] => mode = Some(*m),
                _ => bad(Some(ErrorReply::ModeLength)),
            },
            b'J' => match ascii::parse_u64(arg) {
                Some(j) => flags.initial = j,
                None => bad(Some(ErrorReply::InitialValue)),
            },
            b'D' => match ascii::parse_u64(arg) {
                Some(d) => flags.delta = d,
                None => bad(Some(ErrorReply::DeltaValue)),
            },
            _ => return Err(ErrorReply::InvalidFlag),
        }
    }
    flags.base64_key = key.binary;
    if failed {
        Err(message)
    } else {
        Ok(mode)
    }
}

/// The status code of a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// `VA <size>` + data block: mg/ma with `v` on success.
    Value,
    /// `HD`: success without value.
    Stored,
    /// `EN`: mg miss.
    Miss,
    /// `NF`: md/ma miss, ms CAS on a missing item.
    NotFound,
    /// `NS`: ms not stored (add of present, replace/append of absent), ma vivify failed.
    NotStored,
    /// `EX`: CAS mismatch.
    Exists,
}

impl Code {
    fn text(self) -> &'static [u8] {
        match self {
            Code::Value => b"VA",
            Code::Stored => b"HD",
            Code::Miss => b"EN",
            Code::NotFound => b"NF",
            Code::NotStored => b"NS",
            Code::Exists => b"EX",
        }
    }
}

/// Whether memcached sends nothing for `code` to a `q` request: mg drops `EN`; ms and md drop
/// `HD`; ma drops its success (`HD` or `VA`). Errors and other codes are always sent.
pub fn suppressed(command: Command, code: Code) -> bool {
    match command {
        Command::Get => code == Code::Miss,
        Command::Set { .. } | Command::Delete => code == Code::Stored,
        Command::Arithmetic { .. } => matches!(code, Code::Stored | Code::Value),
        Command::Debug | Command::NoOp => false,
    }
}

/// What the executor knows about the item after the command, for the return flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ItemInfo {
    pub cas: u64,
    pub client_flags: u32,
    /// Value length in bytes (`s`; for ms the stored item's).
    pub size: usize,
    /// Remaining TTL in seconds; `None` for an item that never expires (`t-1`).
    pub ttl: Option<u32>,
    /// Seconds since last access *before* this request (`l`).
    pub last_access: u32,
    /// Fetched before this request (`h`).
    pub hit_before: bool,
    /// Another client already got the win token (`Z`).
    pub win_sent_before: bool,
    /// The item is stale (`X`), after `md I` or an `ms I` with an old CAS.
    pub stale: bool,
    /// This client wins the recache (`W`).
    pub won: bool,
    /// Echo the key (mg's `k`) in base64 with ` b`. memcached sets this from the item's mark
    /// (`ITEM_KEY_BINARY`: stored with a base64 key), whatever form this request used; tern's
    /// store keeps no such mark, so its server passes whether this request's key was base64.
    pub key_binary: bool,
}

/// Appends a reply to `req` unless `q` suppresses it; returns whether anything was written.
///
/// `value` is the data block for [`Code::Value`] (item value for mg, decimal number for ma)
/// and ignored otherwise. `item` carries the facts for return flags: `None` on a miss or
/// failure, when only `O` and `k` are echoed (and ms's `c` says `c0`, as memcached).
pub fn write_reply(
    out: &mut Vec<u8>,
    req: &Request<'_>,
    code: Code,
    item: Option<&ItemInfo>,
    value: &[u8],
) -> bool {
    if req.flags.quiet && suppressed(req.command, code) {
        return false;
    }
    out.extend_from_slice(code.text());
    if code == Code::Value {
        out.push(b' ');
        push_num(out, value.len() as u64);
    }
    for token in tokens(req.flag_tokens) {
        let flag = token[0];
        match (req.command, flag, item) {
            (_, b'O', _) => {
                out.push(b' ');
                out.extend_from_slice(token);
            }
            (_, b'k', _) => {
                let base64 = match (req.command, item) {
                    (Command::Get, Some(i)) => i.key_binary,
                    _ => req.key.is_binary(),
                };
                out.extend_from_slice(b" k");
                req.key.write_echo(out, base64);
                if base64 {
                    out.extend_from_slice(b" b");
                }
            }
            (Command::Set { .. }, b'c', _) => {
                out.extend_from_slice(b" c");
                push_num(out, item.map_or(0, |i| i.cas));
            }
            // memcached 1.6.45: the stored item's size (the joined value's after an append),
            // and the data's own size when nothing was stored.
            (Command::Set { data_len, .. }, b's', _) => {
                out.extend_from_slice(b" s");
                push_num(out, item.map_or(data_len, |i| i.size) as u64);
            }
            (Command::Get | Command::Arithmetic { .. }, b'c', Some(i)) => {
                out.extend_from_slice(b" c");
                push_num(out, i.cas);
            }
            (Command::Get | Command::Arithmetic { .. }, b't', Some(i)) => {
                out.extend_from_slice(b" t");
                match i.ttl {
                    Some(t) => push_num(out, t.into()),
                    None => out.extend_from_slice(b"-1"),
                }
            }
            (Command::Get, b's', Some(i)) => {
                out.extend_from_slice(b" s");
                push_num(out, i.size as u64);
            }
            (Command::Get, b'f', Some(i)) => {
                out.extend_from_slice(b" f");
                push_num(out, i.client_flags.into());
            }
            (Command::Get, b'l', Some(i)) => {
                out.extend_from_slice(b" l");
                push_num(out, i.last_access.into());
            }
            (Command::Get, b'h', Some(i)) => {
                out.extend_from_slice(if i.hit_before { b" h1" } else { b" h0" });
            }
            _ => {}
        }
    }
    if let (Command::Get, Some(i)) = (req.command, item) {
        // memcached's order: Z, X, then W; never W together with Z.
        if i.win_sent_before {
            out.extend_from_slice(b" Z");
        }
        if i.stale {
            out.extend_from_slice(b" X");
        }
        if i.won {
            out.extend_from_slice(b" W");
        }
    }
    out.extend_from_slice(b"\r\n");
    if code == Code::Value {
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    true
}

fn push_num(out: &mut Vec<u8>, n: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(n).as_bytes());
}

/// Item metadata for `me`, memcached's `ME` line fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DebugInfo {
    /// Remaining TTL in seconds, `-1` for none.
    pub exp: i64,
    /// Seconds since last access.
    pub last_access: u64,
    pub cas: u64,
    pub fetched: bool,
    /// memcached's slab class; tern has no slab classes and its server reports 0.
    pub class: u32,
    /// Item size in bytes: memcached's counts its item header too; tern's server reports key +
    /// value bytes.
    pub size: u64,
    /// Show the key in base64 (memcached: the item was stored with a base64 key; tern's server:
    /// this request's key was base64, as its store keeps no such mark).
    pub key_binary: bool,
}

/// `ME <key> exp=.. la=.. cas=.. fetch=yes|no cls=.. size=..`; the key in base64 when
/// [`DebugInfo::key_binary`] says so (no ` b` here, as memcached). A miss is
/// [`write_reply`] with [`Code::Miss`].
pub fn write_debug(out: &mut Vec<u8>, req: &Request<'_>, info: &DebugInfo) {
    use std::io::Write as _;
    out.extend_from_slice(b"ME ");
    req.key.write_echo(out, info.key_binary);
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        " exp={} la={} cas={} fetch={} cls={} size={}\r\n",
        info.exp,
        info.last_access,
        info.cas,
        if info.fetched { "yes" } else { "no" },
        info.class,
        info.size
    );
}

/// `MN`, the reply to `mn`.
pub fn write_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"MN\r\n");
}

/// An error line.
pub fn write_error(out: &mut Vec<u8>, reply: ErrorReply) {
    out.extend_from_slice(reply.message().as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Request<'_> {
        parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line:?}: {e:?}"))
    }

    fn err(line: &str) -> ParseError {
        match parse(line.as_bytes()) {
            Ok(r) => panic!("{line:?} parsed: {r:?}"),
            Err(e) => e,
        }
    }

    fn reply(req: &Request<'_>, code: Code, item: Option<&ItemInfo>, value: &[u8]) -> String {
        let mut out = Vec::new();
        write_reply(&mut out, req, code, item, value);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn recognises_meta_lines() {
        for l in [
            "mg foo", "ms foo 2", "md foo", "ma foo", "me foo", "mn", "mg",
        ] {
            assert!(is_meta(l.as_bytes()), "{l}");
        }
        for l in ["get foo", "m", "mgx foo", "mz foo", "MG foo", ""] {
            assert!(!is_meta(l.as_bytes()), "{l}");
        }
    }

    #[test]
    fn mg_with_every_return_flag() {
        let r = ok("mg foo s v f t c k O123 q h l u");
        assert_eq!(r.command, Command::Get);
        assert_eq!(r.key.bytes(), b"foo");
        let f = r.flags;
        assert!(f.return_size && f.return_value && f.return_client_flags && f.return_ttl);
        assert!(f.return_cas && f.return_key && f.quiet && f.return_hit);
        assert!(f.return_last_access && f.no_bump);
        assert_eq!(f.opaque, Some(&b"123"[..]));
        let item = ItemInfo {
            cas: 3,
            client_flags: 5,
            size: 2,
            ttl: None,
            last_access: 7,
            hit_before: true,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&item), b"hi"),
            "VA 2 s2 f5 t-1 c3 kfoo O123 h1 l7\r\nhi\r\n"
        );
    }

    #[test]
    fn mg_without_flags_is_a_bare_hit_or_miss() {
        let r = ok("mg foo");
        assert_eq!(r.flags, Flags::default());
        assert_eq!(
            reply(&r, Code::Stored, Some(&ItemInfo::default()), b""),
            "HD\r\n"
        );
        assert_eq!(reply(&r, Code::Miss, None, b""), "EN\r\n");
    }

    #[test]
    fn mg_miss_echoes_key_and_opaque_in_request_order() {
        // memcached 1.6.18: "mg nokey k O1 v" -> "EN knokey O1".
        let r = ok("mg nokey k O1 v");
        assert_eq!(reply(&r, Code::Miss, None, b""), "EN knokey O1\r\n");
    }

    #[test]
    fn quiet_rules_per_command() {
        let item = ItemInfo::default();
        let mg = ok("mg foo q k");
        assert_eq!(reply(&mg, Code::Miss, None, b""), "", "q hides EN");
        assert_eq!(
            reply(&mg, Code::Stored, Some(&item), b""),
            "HD kfoo\r\n",
            "not hits"
        );
        let ms = ok("ms foo 2 q");
        assert_eq!(reply(&ms, Code::Stored, Some(&item), b""), "");
        assert_eq!(reply(&ms, Code::NotStored, None, b""), "NS\r\n");
        assert_eq!(reply(&ms, Code::Exists, None, b""), "EX\r\n");
        let md = ok("md foo q");
        assert_eq!(reply(&md, Code::Stored, None, b""), "");
        assert_eq!(
            reply(&md, Code::NotFound, None, b""),
            "NF\r\n",
            "1.6.18 sends NF"
        );
        let ma = ok("ma foo q v");
        assert_eq!(reply(&ma, Code::Value, Some(&item), b"5"), "");
        assert_eq!(reply(&ma, Code::NotFound, None, b""), "NF\r\n");
        assert!(!suppressed(Command::NoOp, Code::Stored));
        assert!(!suppressed(Command::Debug, Code::Miss));
    }

    #[test]
    fn vivify_win_and_stale_flags() {
        // 1.6.18 transcript: "mg foo N30 v t c" twice on a miss.
        let r = ok("mg foo N30 v t c");
        assert_eq!(r.flags.vivify_ttl, Some(30));
        let created = ItemInfo {
            cas: 3,
            ttl: Some(30),
            won: true,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&created), b""),
            "VA 0 t30 c3 W\r\n\r\n"
        );
        let again = ItemInfo {
            won: false,
            win_sent_before: true,
            ..created
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&again), b""),
            "VA 0 t30 c3 Z\r\n\r\n"
        );
        // After "md foo I": first fetch wins, later ones see Z X.
        let r = ok("mg foo v c");
        let stale = ItemInfo {
            cas: 6,
            stale: true,
            won: true,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&stale), b"hi"),
            "VA 2 c6 X W\r\nhi\r\n"
        );
        let stale_seen = ItemInfo {
            won: false,
            win_sent_before: true,
            ..stale
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&stale_seen), b"hi"),
            "VA 2 c6 Z X\r\nhi\r\n"
        );
    }

    #[test]
    fn recache_and_touch_ttls() {
        let r = ok("mg foo R30 T-1 N0");
        assert_eq!(r.flags.recache_ttl, Some(30));
        assert_eq!(r.flags.ttl, Some(-1));
        assert_eq!(r.flags.vivify_ttl, Some(0));
        assert_eq!(ok("mg foo T+5").flags.ttl, Some(5));
        // Truncated to 32 bits like memcached's safe_strtol; only a non-number is refused.
        assert_eq!(ok("mg foo T4294967301").flags.ttl, Some(5));
        assert_eq!(
            err("mg foo T99999999999999999999").reply,
            ErrorReply::BadToken
        );
        assert_eq!(ok("ms foo 0 F4294967297").flags.client_flags, 1);
        // C's strtol: leading and trailing white space inside the token is fine.
        assert_eq!(ok("mg foo T\t7\t").flags.ttl, Some(7));
        assert_eq!(err("mg foo T7x").reply, ErrorReply::BadToken);
        assert_eq!(err("mg foo T+").reply, ErrorReply::BadToken);
        assert_eq!(ok("ma foo D+3").flags.delta, 3);
        // 1.6.18 reads 2 bytes of data for "ms foo 4294967298".
        assert!(matches!(
            ok("ms foo 4294967298").command,
            Command::Set { data_len: 2, .. }
        ));
    }

    #[test]
    fn ms_modes_and_flags() {
        let r = ok("ms foo 2 T90 F1 c k O9 I C77 E88");
        assert_eq!(
            r.command,
            Command::Set {
                data_len: 2,
                mode: SetMode::Set
            }
        );
        let f = r.flags;
        assert_eq!(
            (f.ttl, f.client_flags, f.compare_cas, f.new_cas),
            (Some(90), 1, Some(77), Some(88))
        );
        assert!(f.invalidate && f.return_cas && f.return_key);
        for (m, mode) in [
            ("E", SetMode::Add),
            ("A", SetMode::Append),
            ("P", SetMode::Prepend),
            ("R", SetMode::Replace),
            ("S", SetMode::Set),
        ] {
            let line = format!("ms foo 0 M{m}");
            assert_eq!(ok(&line).command, Command::Set { data_len: 0, mode });
        }
        let r = ok("ms foo 3 MA N60");
        assert_eq!(r.flags.vivify_ttl, Some(60));
    }

    #[test]
    fn ms_reply_echoes_opaque_key_and_cas_in_order() {
        // 1.6.18: "ms foo 2 O1 k c" -> "HD O1 kfoo c23"; NS/EX say c0.
        let r = ok("ms foo 2 O1 k c");
        let item = ItemInfo {
            cas: 23,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Stored, Some(&item), b""),
            "HD O1 kfoo c23\r\n"
        );
        assert_eq!(reply(&r, Code::NotStored, None, b""), "NS O1 kfoo c0\r\n");
        assert_eq!(reply(&r, Code::Exists, None, b""), "EX O1 kfoo c0\r\n");
        // ms does not return t or f, nor W/X/Z; s (memcached 1.6.45, not 1.6.18) is the
        // stored item's size, or the data's when nothing was stored. 1.6.45: "ms s1 2 s t f k
        // c O9" -> "HD s2 ks1 c4 O9"; after it, "ms s1 2 s MA" -> "HD s4"; "ms s1 2 s C1" ->
        // "EX s2".
        let r = ok("ms foo 2 s t f");
        let item = ItemInfo {
            size: 4,
            stale: true,
            ..ItemInfo::default()
        };
        assert_eq!(reply(&r, Code::Stored, Some(&item), b""), "HD s4\r\n");
        assert_eq!(reply(&r, Code::Exists, None, b""), "EX s2\r\n");
    }

    #[test]
    fn ms_errors_swallow_the_data_block_once_its_length_is_known() {
        assert_eq!(
            err("ms foo 2 zz"),
            ParseError {
                reply: ErrorReply::InvalidFlag,
                swallow: 4
            }
        );
        assert_eq!(
            err("ms foo 2 MX"),
            ParseError {
                reply: ErrorReply::SetMode,
                swallow: 4
            }
        );
        assert_eq!(
            err("ms foo 2 MEE"),
            ParseError {
                reply: ErrorReply::ModeLength,
                swallow: 4
            }
        );
        assert_eq!(
            err("ms foo 2 Fx"),
            ParseError {
                reply: ErrorReply::BadFormat,
                swallow: 4
            }
        );
        assert_eq!(
            err("ms foo 2 C-1"),
            ParseError {
                reply: ErrorReply::BadToken,
                swallow: 4
            }
        );
        assert_eq!(
            err("ms foo 2 S2"),
            ParseError {
                reply: ErrorReply::InvalidFlag,
                swallow: 4
            }
        );
        assert_eq!(
            err("ms foo 0 b"),
            ParseError {
                reply: ErrorReply::KeyDecode,
                swallow: 2
            }
        );
        let long = format!("ms foo 2 O{}", "1".repeat(32));
        assert_eq!(
            err(&long),
            ParseError {
                reply: ErrorReply::OpaqueTooLong,
                swallow: 4
            }
        );
        // Unknown length: nothing to swallow (memcached then reads the data as a command).
        for line in ["ms foo", "ms foo abc", "ms foo -1", "ms foo 2147483647"] {
            assert_eq!(
                err(line),
                ParseError {
                    reply: ErrorReply::BadFormat,
                    swallow: 0
                },
                "{line}"
            );
        }
        let key = "k".repeat(251);
        assert_eq!(err(&format!("ms {key} 2")).swallow, 0);
    }

    #[test]
    fn error_lines_match_memcached_1_6_45() {
        use ErrorReply::*;
        let cases = [
            ("mg", BadFormat),
            ("ms", BadFormat),
            ("md", BadFormat),
            ("ma", BadFormat),
            ("me", BadFormat),
            ("mz foo", Error),
            ("mg foo v v", DuplicateFlag),
            ("mg foo T", BadToken),
            ("mg foo Tx", BadToken),
            ("mg foo zz", InvalidFlag),
            ("mg foo !", InvalidFlag),
            ("mg foo \u{80}", DuplicateFlag),
            ("mg foo b", KeyDecode),
            ("mg Zm9v= b v", KeyDecode),
            ("mg foo O123456789012345678901234567890123", OpaqueTooLong),
            (
                "mg foo a b c d e f g h i j k l m n o p q r s t u v",
                GetOptionsTooLong,
            ),
            ("md foo zz", InvalidFlag),
            ("md foo Tx", BadToken),
            ("md foo q q", DuplicateFlag),
            ("md foo b", KeyDecode),
            ("md foo F", BadFormat),
            ("ma cnt Dx", InvalidOrDuplicateFlag),
            ("ma cnt Jx", InvalidOrDuplicateFlag),
            ("ma cnt D-1", InvalidOrDuplicateFlag),
            ("ma cnt Mx", ArithMode),
            ("me foo b", BadFormat),
            ("mg foo Jx", InitialValue),
            ("mg foo Dx", DeltaValue),
            ("mg foo MLL", ModeLength),
        ];
        for (line, want) in cases {
            assert_eq!(err(line).reply, want, "{line}");
            assert_eq!(err(line).swallow, 0, "{line}");
        }
        assert_eq!(err(&format!("mg {} v", "a".repeat(251))).reply, BadFormat);
        assert!(parse(format!("mg {} v", "a".repeat(250)).as_bytes()).is_ok());
        assert_eq!(
            err("md foo a b c d e f g h i j k l m n o p q r").reply,
            OptionsTooLong
        );
    }

    #[test]
    fn last_bad_value_names_the_error_and_f_keeps_it() {
        assert_eq!(err("mg foo Jx Dx").reply, ErrorReply::DeltaValue);
        assert_eq!(err("mg foo Jx Fx").reply, ErrorReply::InitialValue);
        assert_eq!(err("mg foo Fx").reply, ErrorReply::BadFormat);
        // An unknown or repeated flag stops at once, whatever came before.
        assert_eq!(err("mg foo Jx zz").reply, ErrorReply::InvalidFlag);
    }

    #[test]
    fn flag_count_limits() {
        let seventeen = "c f h k l O1 q s t u v N1 R1 T1 P L I";
        assert!(parse(format!("mg foo {seventeen}").as_bytes()).is_ok());
        assert_eq!(
            err(&format!("mg foo {seventeen} x")).reply,
            ErrorReply::GetOptionsTooLong
        );
        let sixteen = "c f h k l O1 q s t u v N1 R1 T1 P L";
        assert!(parse(format!("ms foo 1 {sixteen}").as_bytes()).is_ok());
        assert_eq!(
            err(&format!("ms foo 1 {sixteen} I")).reply,
            ErrorReply::OptionsTooLong
        );
    }

    #[test]
    fn base64_keys_decode_for_the_store_and_echo_as_sent() {
        let r = ok("mg YmluYXJ5AA== b k v");
        assert_eq!(r.key.bytes(), b"binary\0");
        assert!(r.key.is_binary() && r.flags.base64_key);
        let binary_item = ItemInfo {
            key_binary: true,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&binary_item), b"hi"),
            "VA 2 kYmluYXJ5AA== b\r\nhi\r\n"
        );
        // The item's mark decides: a text request sees a binary item's key in base64...
        let r = ok("mg foo k");
        assert_eq!(
            reply(&r, Code::Stored, Some(&binary_item), b""),
            "HD kZm9v b\r\n"
        );
        // ...and a base64 request for an item stored with a text key sees the raw key.
        let r = ok("mg Zm9v b k");
        assert_eq!(
            reply(&r, Code::Stored, Some(&ItemInfo::default()), b""),
            "HD kfoo\r\n"
        );
        // 1.6.18: "ms Zm9v 2 b k c" -> "HD kZm9v b c5".
        let r = ok("ms Zm9v 2 b k c");
        assert_eq!(r.key.bytes(), b"foo");
        let item = ItemInfo {
            cas: 5,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Stored, Some(&item), b""),
            "HD kZm9v b c5\r\n"
        );
        let longest = "QUFB".repeat(62); // 248 bytes of base64 -> 186 bytes
        let line = format!("mg {longest} b");
        assert_eq!(ok(&line).key.bytes(), "AAA".repeat(62).as_bytes());
        assert_eq!(ok("me Zm9v b").key.bytes(), b"foo");
        // 1.6.18: "mg Zm9= b k" on a miss -> "EN kZm8= b" (trailing bits ignored, re-encoded).
        let r = ok("mg Zm9= b k");
        assert_eq!(r.key.bytes(), b"fo");
        assert_eq!(reply(&r, Code::Miss, None, b""), "EN kZm8= b\r\n");
        assert_eq!(
            err("mg Zm9vYg b").reply,
            ErrorReply::KeyDecode,
            "padding is required"
        );
    }

    #[test]
    fn md_flags_and_replies() {
        let r = ok("md foo I T30 C5 k O5 q x");
        assert_eq!(r.command, Command::Delete);
        let f = r.flags;
        assert!(f.invalidate && f.remove_value && f.quiet);
        assert_eq!((f.ttl, f.compare_cas), (Some(30), Some(5)));
        assert_eq!(reply(&r, Code::Exists, None, b""), "EX kfoo O5\r\n");
        let r = ok("md nokey O1 k");
        assert_eq!(reply(&r, Code::NotFound, None, b""), "NF O1 knokey\r\n");
    }

    #[test]
    fn ma_modes_defaults_and_replies() {
        let r = ok("ma cnt");
        assert_eq!(
            r.command,
            Command::Arithmetic {
                mode: ArithMode::Increment
            }
        );
        assert_eq!((r.flags.delta, r.flags.initial), (1, 0));
        for (m, mode) in [
            ("I", ArithMode::Increment),
            ("+", ArithMode::Increment),
            ("D", ArithMode::Decrement),
            ("-", ArithMode::Decrement),
        ] {
            let line = format!("ma cnt M{m}");
            assert_eq!(ok(&line).command, Command::Arithmetic { mode });
        }
        let r = ok("ma cnt N0 J10 D18446744073709551615 v");
        assert_eq!(
            (r.flags.vivify_ttl, r.flags.initial, r.flags.delta),
            (Some(0), 10, u64::MAX)
        );
        // 1.6.18: "ma cnt MD D100 v t c k O1" -> "VA 1 t-1 c15 kcnt O1" / "0".
        let r = ok("ma cnt MD D100 v t c k O1");
        let item = ItemInfo {
            cas: 15,
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&item), b"0"),
            "VA 1 t-1 c15 kcnt O1\r\n0\r\n"
        );
        assert_eq!(reply(&r, Code::NotFound, None, b""), "NF kcnt O1\r\n");
        let r = ok("ma cnt MI v N0 T100 t");
        let item = ItemInfo {
            ttl: Some(100),
            ..ItemInfo::default()
        };
        assert_eq!(
            reply(&r, Code::Value, Some(&item), b"2"),
            "VA 1 t100\r\n2\r\n"
        );
    }

    #[test]
    fn mn_and_me() {
        assert_eq!(ok("mn").command, Command::NoOp);
        assert_eq!(
            ok("mn foo q").command,
            Command::NoOp,
            "memcached ignores mn's arguments"
        );
        let mut out = Vec::new();
        write_noop(&mut out);
        assert_eq!(out, b"MN\r\n");
        let r = ok("me foo");
        assert_eq!(r.command, Command::Debug);
        let mut out = Vec::new();
        let info = DebugInfo {
            exp: -1,
            last_access: 0,
            cas: 1,
            fetched: true,
            class: 1,
            size: 64,
            key_binary: false,
        };
        write_debug(&mut out, &r, &info);
        assert_eq!(out, b"ME foo exp=-1 la=0 cas=1 fetch=yes cls=1 size=64\r\n");
        // 1.6.18 after "ms Zm9v 1 b": "me foo" -> "ME Zm9v exp=-1 ...".
        out.clear();
        let binary = DebugInfo {
            key_binary: true,
            ..info
        };
        write_debug(&mut out, &r, &binary);
        assert!(out.starts_with(b"ME Zm9v exp=-1 "));
        assert_eq!(reply(&r, Code::Miss, None, b""), "EN\r\n");
    }

    #[test]
    fn spaces_between_tokens_are_collapsed() {
        let r = ok("mg  foo  v ");
        assert_eq!(r.key.bytes(), b"foo");
        assert!(r.flags.return_value);
        // A tab is part of the key, as in memcached.
        assert_eq!(ok("mg foo\tv").key.bytes(), b"foo\tv");
    }

    #[test]
    fn error_lines() {
        let mut out = Vec::new();
        write_error(&mut out, ErrorReply::BadDataChunk);
        assert_eq!(out, b"CLIENT_ERROR bad data chunk\r\n");
        assert!(ErrorReply::TooLarge.message().starts_with("SERVER_ERROR"));
    }
}
