//! The text protocol's serve loop: classic commands (`tern_proto::ascii`) translated to the
//! operations layer and their replies encoded, meta commands handed to `meta.rs`. Beside it,
//! `binary.rs` does the same for binary frames; a connection or a UDP datagram drives either.

use arrayvec::ArrayVec;
use tern_admin::Command as Cmd;
use tern_proto::ascii::{self, AdminCommand, Command, Frame, Keys, StoreKind};
use tern_proto::KEY_MAX_LENGTH;
use tern_store::{Expiry, HashedKey, StoreOp, PREFETCH_MAX};

use crate::ops::{self, AdminReply, ArithFailure, Ops, Shutdown, StatsError, StatsReply};
use crate::wire::framing::{After, Progress, Replies, Resume, Step};
use crate::wire::meta;

/// Runs the complete requests at the start of `input`, at most `budget` of them; stops early
/// when `out` is backlogged.
pub fn serve(
    ops: &Ops<'_>,
    input: &[u8],
    budget: usize,
    max_line: usize,
    out: &mut impl Replies,
) -> Progress {
    let mut ahead = ReadAhead::new(input);
    let mut progress = Progress::default();
    let mut served = 0;
    while progress.consumed < input.len() {
        if out.backlogged() {
            // Requests are left: the connection comes back to them once the client reads
            // (no new input may ever wake it).
            progress.yielded = true;
            break;
        }
        if served == budget {
            ops.worker.metrics.conn_yield();
            progress.yielded = true;
            break;
        }
        if let Some((key, end)) = ahead.one_key_get_at(ops, progress.consumed, budget - served) {
            // What the parser would make of the line, found by the look-ahead already.
            served += 1;
            if answer_one::<false>(ops, key, out.buf()) {
                ahead.defer_rest(ops);
                progress.awaiting_flash = true;
                break;
            }
            progress.consumed = end;
            out.request_done();
            continue;
        }
        let rest = &input[progress.consumed..];
        let (line_len, parsed) = match ascii::parse(rest, max_line) {
            Frame::Incomplete => {
                progress.need = rest.len() + 1;
                break;
            }
            Frame::LineTooLong => {
                ops.refused();
                progress.after = After::HangUp;
                break;
            }
            Frame::Line { consumed, parsed } => (consumed, parsed),
        };
        served += 1;
        let mark = out.buf().len();
        let (step, after) = match parsed {
            Err(rejection) if rejection.hang_up => {
                ops.refused();
                progress.after = After::HangUp;
                break;
            }
            Err(rejection) => {
                ops.refused();
                if !rejection.noreply {
                    out.buf().extend_from_slice(rejection.reply);
                }
                let step = match rejection.swallow {
                    0 => Step::Done(0),
                    block => Step::Swallow(block),
                };
                (step, After::Continue)
            }
            Ok(command) => run(ops, command, &rest[line_len..], out),
        };
        if ops.flash_deferred() {
            // An item it needs is on flash and not read yet: it runs again once it has been,
            // a get from the key that waits (its values before that one kept).
            match step {
                Step::Resume {
                    first_key,
                    next_key,
                } => progress.resume = Some(Resume::in_line(rest, first_key, next_key)),
                _ => out.buf().truncate(mark),
            }
            ahead.defer_rest(ops);
            progress.awaiting_flash = true;
            break;
        }
        let mut input_used_up = false;
        match step {
            Step::Done(data) => progress.consumed += line_len + data,
            Step::Need(data) if out.hold(line_len + data) => {
                progress.need = line_len + data;
                progress.need_exact = true;
                break;
            }
            Step::Need(data) => {
                refuse_unheld(ops, rest, max_line, out.buf());
                progress.consumed += line_len;
                input_used_up = !progress.skip(data, input.len());
            }
            Step::Swallow(data) => {
                progress.consumed += line_len;
                input_used_up = !progress.skip(data, input.len());
            }
            Step::Resume {
                first_key,
                next_key,
            } => {
                progress.resume = Some(Resume::in_line(rest, first_key, next_key));
                progress.yielded = true;
                break;
            }
        }
        out.request_done();
        if after != After::Continue {
            progress.after = after;
            break;
        }
        if input_used_up {
            break;
        }
    }
    progress
}

/// How many requests one look reads ahead: memcached's default `-R`, so that a serve call
/// under the default budget looks once.
const READ_AHEAD: usize = 20;

/// A batch's read-ahead: the keys of its next gets and sets, each hashed once, with their index
/// buckets and items on their way into the cache (see `Store::prefetch_items`), so the batch's
/// cache misses overlap. The one-key get lines among them are served from it: no second parse,
/// no second hash. The serve loop looks again each time it has passed what was looked at.
struct ReadAhead<'a> {
    input: &'a [u8],
    /// Not initialised up front (an `ArrayVec`): filling a whole array cost a lone get ~170
    /// instructions.
    keys: ArrayVec<Ahead<'a>, READ_AHEAD>,
    /// The first key whose request the serve loop has not passed.
    next: usize,
    /// Where the last look stopped: the next starts there, once the serve loop gets there.
    looked_to: usize,
}

/// A key read ahead.
struct Ahead<'a> {
    key: HashedKey<'a>,
    /// Where its request starts in the input.
    start: usize,
    /// For a one-key get line, where it ends; 0 for other requests.
    get_end: usize,
}

impl<'a> ReadAhead<'a> {
    fn new(input: &'a [u8]) -> ReadAhead<'a> {
        ReadAhead {
            input,
            keys: ArrayVec::new(),
            next: 0,
            looked_to: 0,
        }
    }

    /// Looks at the requests from `at` on, at most `budget` of them (those the serve loop may
    /// still run before it yields; the next serve call looks again).
    #[inline(never)]
    fn look(&mut self, ops: &Ops<'_>, at: usize, budget: usize) {
        self.keys.clear();
        self.next = 0;
        let keys = &mut self.keys;
        let (found, stopped) = tern_proto::lookahead::upcoming(
            &self.input[at..],
            budget.min(READ_AHEAD),
            #[inline(always)]
            |up| {
                let key = ops.hash_key(up.key);
                ops.prefetch_bucket(key);
                keys.push(Ahead {
                    key,
                    start: at + up.start,
                    get_end: up.one_key_get_end.map_or(0, |end| at + end),
                });
            },
        );
        self.looked_to = at + stopped;
        // A lone request has nothing to overlap with: its item is not loaded ahead.
        if found > 1 || self.looked_to < self.input.len() {
            ops.prefetch_items(keys.iter_mut().map(|ahead| &mut ahead.key));
        }
    }

    /// Notes the flash reads of the keys looked at and not yet served, so that they go with
    /// the one a request just deferred for (pipelined gets of keys on flash read together).
    #[cold]
    fn defer_rest(&self, ops: &Ops<'_>) {
        for ahead in self.keys[self.next..].iter().filter(|a| a.get_end != 0) {
            ops.defer_if_on_flash(ahead.key.bytes());
        }
    }

    /// The key of the one-key get line at `at` in the input and where the line ends, when the
    /// look-ahead found one there (what it finds at an offset depends on the bytes from there
    /// on alone, however the serve loop came to it). Looks again first once the serve loop has
    /// passed the last look.
    #[inline(always)]
    fn one_key_get_at(
        &mut self,
        ops: &Ops<'_>,
        at: usize,
        budget: usize,
    ) -> Option<(&HashedKey<'a>, usize)> {
        loop {
            let i = self.next;
            let Some(ahead) = self.keys.get(i) else {
                if at < self.looked_to {
                    return None;
                }
                self.look(ops, at, budget);
                if self.keys.is_empty() {
                    return None;
                }
                continue;
            };
            if ahead.start < at {
                // A request the serve loop has passed (a set's key, a multi-get's).
                self.next += 1;
                continue;
            }
            if ahead.start != at || ahead.get_end == 0 {
                return None;
            }
            self.next += 1;
            let ahead = &self.keys[i];
            return Some((&ahead.key, ahead.get_end));
        }
    }
}

/// In a long multi-get, the next keys from `key` on (the serve loop's read-ahead covered the
/// first ones). Not inlined: a one-key get, the common case, should not carry it.
#[inline(never)]
fn read_ahead_keys(ops: &Ops<'_>, key: &[u8], rest: Keys<'_>) {
    let mut ahead: [&[u8]; PREFETCH_MAX] = [&[]; PREFETCH_MAX];
    let window = std::iter::once(key).chain(rest);
    let n = ahead
        .iter_mut()
        .zip(window)
        .map(|(slot, k)| *slot = k)
        .count();
    ops.prefetch(&ahead[..n]);
}

/// Runs one parsed command; `data` holds the bytes after its line.
fn run(ops: &Ops<'_>, command: Command<'_>, data: &[u8], out: &mut impl Replies) -> (Step, After) {
    let reply = |out: &mut Vec<u8>, noreply: bool, text: &[u8]| {
        if !noreply {
            out.extend_from_slice(text);
        }
    };
    match command {
        Command::Get {
            keys,
            with_cas,
            touch,
        } => return (get(ops, keys, with_cas, touch, out), After::Continue),
        Command::Store {
            kind,
            key,
            flags,
            exptime,
            bytes,
            cas_unique,
            noreply,
        } => {
            let step = store(
                ops,
                kind,
                key,
                flags,
                exptime,
                bytes,
                cas_unique,
                noreply,
                data,
                out.buf(),
            );
            return (step, After::Continue);
        }
        Command::Meta { line } => return (meta::run(ops, line, data, out.buf()), After::Continue),
        Command::Delete { key, noreply } => {
            let text = match ops.delete(Cmd::Delete, key, None, Some("delete")) {
                Ok(()) => ascii::DELETED,
                Err(_) => ascii::NOT_FOUND,
            };
            reply(out.buf(), noreply, text);
        }
        Command::Arith {
            incr,
            key,
            delta,
            noreply,
        } => {
            let (cmd, direction) = if incr {
                (Cmd::Incr, tern_store::Arith::Incr)
            } else {
                (Cmd::Decr, tern_store::Arith::Decr)
            };
            let text = match ops.arithmetic(cmd, key, direction, delta, None, None, None) {
                Ok((counted, _)) => {
                    if !noreply {
                        ascii::encode_number(out.buf(), counted.value);
                    }
                    return (Step::Done(0), After::Continue);
                }
                Err(ArithFailure::NotFound) => ascii::NOT_FOUND,
                Err(ArithFailure::Exists) => ascii::EXISTS,
                Err(ArithFailure::NonNumeric) => ascii::NON_NUMERIC,
                Err(ArithFailure::OutOfMemory) => ascii::OUT_OF_MEMORY,
                Err(ArithFailure::NotStored) => ascii::NOT_STORED,
            };
            reply(out.buf(), noreply, text);
        }
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            let touched = ops.get(
                Cmd::Touch,
                key,
                Some(ops.expiry(exptime)),
                out.buf(),
                |_, _| (),
            );
            let text = match touched {
                Ok(()) => ascii::TOUCHED,
                Err(_) => ascii::NOT_FOUND,
            };
            reply(out.buf(), noreply, text);
        }
        Command::FlushAll { delay, noreply } => {
            let text = if ops.flush_all(delay) {
                ascii::OK
            } else {
                ascii::FLUSH_DISABLED
            };
            reply(out.buf(), noreply, text);
        }
        Command::Version => {
            ops.admin(Cmd::Admin);
            out.buf().extend_from_slice(ops::VERSION_REPLY.as_bytes());
        }
        Command::Verbosity { level, noreply } => {
            ops.verbosity(level);
            reply(out.buf(), noreply, ascii::OK);
        }
        Command::Stats { args } => stats(ops, args, out.buf()),
        Command::Admin {
            command,
            args,
            noreply,
        } => {
            let words: Vec<&[u8]> = args.collect();
            let reply = match command {
                AdminCommand::LruCrawler if words.first() == Some(&&b"metadump"[..]) => {
                    if !out.buf().is_empty() {
                        ops.refused();
                        AdminReply::Status("ERROR cannot pipeline other commands before metadump")
                    } else {
                        match ops.metadump(&words[1..]) {
                            Ok(true) => return (Step::Done(0), After::Metadump),
                            Ok(false) => {
                                out.buf().extend_from_slice(ascii::END);
                                return (Step::Done(0), After::Continue);
                            }
                            Err(reply) => reply,
                        }
                    }
                }
                AdminCommand::LruCrawler => ops.lru_crawler(&words),
                AdminCommand::Slabs => ops.slabs(&words),
                AdminCommand::Lru => ops.lru(&words),
                AdminCommand::Watch if !out.buf().is_empty() => {
                    ops.refused();
                    AdminReply::Status("ERROR cannot pipeline other commands before watch")
                }
                AdminCommand::Watch => match ops.watch(&words) {
                    Ok(kinds) => {
                        out.buf().extend_from_slice(ascii::OK);
                        return (Step::Done(0), After::Watch(kinds));
                    }
                    Err(reply) => reply,
                },
                AdminCommand::RefreshCerts => ops.refresh_certs(),
                AdminCommand::CacheMemlimit => ops.cache_memlimit(&words),
                AdminCommand::Extstore => ops.extstore(&words),
            };
            if noreply {
                return (Step::Done(0), After::Continue);
            }
            let buf = out.buf();
            match reply {
                AdminReply::Ok => buf.extend_from_slice(ascii::OK),
                AdminReply::Error => buf.extend_from_slice(ascii::ERROR),
                AdminReply::Status(line) => {
                    buf.extend_from_slice(line.as_bytes());
                    buf.extend_from_slice(b"\r\n");
                }
                AdminReply::Line(line) => {
                    buf.extend_from_slice(line.as_bytes());
                    buf.extend_from_slice(b"\r\n");
                }
            }
        }
        Command::Quit => {
            ops.admin(Cmd::Admin);
            return (Step::Done(0), After::CloseAfterWrite);
        }
        Command::Shutdown { mode, noreply } => {
            let text = match ops.shutdown(mode) {
                Shutdown::Stopping => return (Step::Done(0), After::CloseNow),
                Shutdown::Disabled => ascii::SHUTDOWN_DISABLED,
                Shutdown::BadMode => ascii::BAD_SHUTDOWN,
            };
            reply(out.buf(), noreply, text);
        }
    }
    (Step::Done(0), After::Continue)
}

/// get, gets, gat, gats: each key's value as it is found, then `END`. Once the replies wait
/// backlogged it stops before its next key (`Step::Resume`), so a reply of any size streams:
/// each value is copied into the write buffer under its shard's lock, which keeps its bytes
/// valid, and no more than the backlog bound plus one value waits at a time.
fn get(
    ops: &Ops<'_>,
    keys: Keys<'_>,
    with_cas: bool,
    touch: Option<i64>,
    out: &mut impl Replies,
) -> Step {
    if let (None, Some(key)) = (touch, keys.only()) {
        return get_one(ops, key, with_cas, out.buf());
    }
    let rollback = out.buf().len();
    let mut first_key = 0;
    let expiry = touch.map(|exptime| ops.expiry(exptime));
    let cmd = match (touch.is_some(), with_cas) {
        (false, false) => Cmd::Get,
        (false, true) => Cmd::Gets,
        (true, false) => Cmd::Gat,
        (true, true) => Cmd::Gats,
    };
    let mut rest = keys;
    let mut i = 0;
    while let Some(key) = rest.next() {
        if i == 0 {
            first_key = key.as_ptr() as usize;
        } else {
            out.between_keys();
            if i % PREFETCH_MAX == 0 {
                read_ahead_keys(ops, key, rest);
            }
            if out.backlogged() {
                // Nothing of this line has left yet, so a too-long key among the rest can
                // still be answered as memcached does (the values queued dropped) before any
                // is sent; once resumed, the rest has been checked.
                let mut left = std::iter::once(key).chain(rest);
                if !left.any(|k| k.len() > KEY_MAX_LENGTH) {
                    return Step::Resume {
                        first_key,
                        next_key: key.as_ptr() as usize,
                    };
                }
            }
        }
        i += 1;
        let buf = out.buf();
        if key.len() > KEY_MAX_LENGTH {
            // memcached drops the values already queued for this line and answers the error.
            ops.refused();
            buf.truncate(rollback);
            buf.extend_from_slice(ascii::BAD_FORMAT);
            return Step::Done(0);
        }
        get_value(ops, cmd, key, expiry, with_cas, buf);
        if ops.flash_deferred() {
            // The rest of the line's reads go with this one's.
            for later in rest {
                ops.defer_if_on_flash(later);
            }
            if i == 1 {
                return Step::Done(0);
            }
            return Step::Resume {
                first_key,
                next_key: key.as_ptr() as usize,
            };
        }
    }
    out.buf().extend_from_slice(ascii::END);
    Step::Done(0)
}

/// [`get`] of one key without a touch, the commonest request, without a multi-get's loop.
#[inline(always)]
fn get_one(ops: &Ops<'_>, key: &[u8], with_cas: bool, buf: &mut Vec<u8>) -> Step {
    if key.len() > KEY_MAX_LENGTH {
        ops.refused();
        buf.extend_from_slice(ascii::BAD_FORMAT);
        return Step::Done(0);
    }
    let key = &ops.hash_key(key);
    // A deferral is seen by the serve loop (`Ops::flash_deferred`), as any request's.
    if with_cas {
        answer_one::<true>(ops, key, buf);
    } else {
        answer_one::<false>(ops, key, buf);
    }
    Step::Done(0)
}

/// The reply to a get (or with `WITH_CAS` a gets) of `key` alone, `VALUE` and `END` written in
/// one step. Its own copies of the lookup, apart from [`get_value`]'s: the commonest request
/// passes fewer arguments, tests nothing about cas, and writes its reply at once.
/// True when the get was deferred for a flash read instead (nothing written).
#[inline(never)]
fn answer_one<const WITH_CAS: bool>(ops: &Ops<'_>, key: &HashedKey<'_>, buf: &mut Vec<u8>) -> bool {
    let cmd = if WITH_CAS { Cmd::Gets } else { Cmd::Get };
    let found = ops.get(cmd, *key, None, buf, |item, buf| {
        ascii::encode_only_value(
            buf,
            key.bytes(),
            item.flags,
            item.value,
            WITH_CAS.then(|| item.cas()),
        )
    });
    // Only a miss can be a deferral: a hit asks nothing more.
    if found.is_err() {
        if ops.flash_deferred() {
            return true;
        }
        buf.extend_from_slice(ascii::END);
    }
    false
}

/// One key of a retrieval: its `VALUE` reply into `buf` when it is found.
#[inline(never)]
fn get_value(
    ops: &Ops<'_>,
    cmd: Cmd,
    key: &[u8],
    expiry: Option<Expiry>,
    with_cas: bool,
    buf: &mut Vec<u8>,
) {
    let _ = ops.get(cmd, key, expiry, buf, |item, buf| {
        ascii::encode_value(
            buf,
            key,
            item.flags,
            item.value,
            with_cas.then(|| item.cas()),
        )
    });
}

/// The command a storage line is, as recorded.
fn store_command(kind: StoreKind) -> Cmd {
    match kind {
        StoreKind::Set => Cmd::Set,
        StoreKind::Add => Cmd::Add,
        StoreKind::Replace => Cmd::Replace,
        StoreKind::Append => Cmd::Append,
        StoreKind::Prepend => Cmd::Prepend,
        StoreKind::Cas => Cmd::Cas,
    }
}

/// A storage command; `data` holds the bytes after its line. A value larger than `-I` is refused
/// at once and its data block skipped, arrived or not (memcached's swallow); any other runs once
/// its whole data block is in.
#[allow(clippy::too_many_arguments)]
fn store(
    ops: &Ops<'_>,
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: i64,
    bytes: usize,
    cas_unique: u64,
    noreply: bool,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Step {
    let cmd = store_command(kind);
    let reply = |out: &mut Vec<u8>, text: &[u8]| {
        if !noreply {
            out.extend_from_slice(text);
        }
    };
    // The parser bounds `bytes` below i32::MAX - 2.
    let block = bytes + 2;
    if bytes > ops.shared.settings.max_item_size {
        ops.too_large(cmd, key);
        reply(out, ascii::TOO_LARGE);
        return Step::Swallow(block);
    }
    let value = match ascii::data_block(data, bytes) {
        None => return Step::Need(block),
        Some(Err(())) => {
            ops.bad_data_chunk(cmd, key);
            reply(out, ascii::BAD_DATA_CHUNK);
            return Step::Done(block);
        }
        Some(Ok(value)) => value,
    };
    let op = match kind {
        StoreKind::Set => StoreOp::Set,
        StoreKind::Add => StoreOp::Add,
        StoreKind::Replace => StoreOp::Replace,
        StoreKind::Append => StoreOp::Append(None),
        StoreKind::Prepend => StoreOp::Prepend(None),
        StoreKind::Cas => StoreOp::Cas(cas_unique),
    };
    let expiry = ops.expiry(exptime);
    let text = match ops.store_item(cmd, op, key, flags, expiry, value) {
        tern_store::StoreOutcome::Stored { .. } => ascii::STORED,
        tern_store::StoreOutcome::NotStored => ascii::NOT_STORED,
        tern_store::StoreOutcome::Exists => ascii::EXISTS,
        tern_store::StoreOutcome::NotFound => ascii::NOT_FOUND,
        tern_store::StoreOutcome::TooLarge => ascii::TOO_LARGE,
        tern_store::StoreOutcome::OutOfMemory => ascii::OUT_OF_MEMORY_STORING,
    };
    reply(out, text);
    Step::Done(block)
}

/// Answers the storage command at the start of `rest`, whose value the connection cannot hold
/// while it arrives (`-o read_buf_mem_limit`), as memcached answers one it cannot allocate; the
/// caller swallows the value. The line is parsed again: this path is rare, and keeping the
/// parsed command for it would cost every request a copy.
#[cold]
fn refuse_unheld(ops: &Ops<'_>, rest: &[u8], max_line: usize, out: &mut Vec<u8>) {
    let Frame::Line {
        parsed: Ok(command),
        ..
    } = ascii::parse(rest, max_line)
    else {
        unreachable!("the line parsed a moment ago");
    };
    match command {
        Command::Store {
            kind, key, noreply, ..
        } => {
            ops.no_buffer_memory(store_command(kind), key);
            if !noreply {
                out.extend_from_slice(ascii::OUT_OF_MEMORY_STORING);
            }
        }
        Command::Meta { line } => meta::refuse_unheld(ops, line, out),
        _ => unreachable!("only storage commands wait for a data block"),
    }
}

/// The `stats` family, rendered as `STAT` lines.
fn stats(ops: &Ops<'_>, args: Keys<'_>, out: &mut Vec<u8>) {
    let words: Vec<&[u8]> = args.collect();
    match ops.stats(&words) {
        Ok(StatsReply::Lines(lines)) => {
            out.extend_from_slice(&tern_admin::stats_text::render_stat_lines(lines))
        }
        Ok(StatsReply::Reset) => out.extend_from_slice(ascii::RESET),
        Ok(StatsReply::Done) => out.extend_from_slice(ascii::OK),
        Ok(StatsReply::Detail(dump) | StatsReply::Cachedump(dump)) => out.extend_from_slice(&dump),
        Err(StatsError::Unknown) => out.extend_from_slice(ascii::ERROR),
        Err(StatsError::BadArgument) => out.extend_from_slice(ascii::BAD_FORMAT),
        Err(StatsError::DetailUsage) => {
            out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n")
        }
        Err(StatsError::CachedumpUsage) => {
            out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n")
        }
        Err(StatsError::IllegalClass) => out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n"),
        Err(StatsError::DumpingDisabled) => {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n")
        }
    }
}
