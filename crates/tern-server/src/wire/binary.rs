//! memcached's binary protocol over a connection's buffers: frames parsed in place by
//! `tern_proto::binary`, run against the same store and metrics as ASCII commands, replies
//! appended to the connection's write buffer. A connection becomes binary when its first byte
//! is 0x80 (see `Conn::serve`); from then on every wake-up comes here. What each request means
//! is the operations layer's (`ops.rs`); this module only translates frames to it.
//!
//! Quiet commands need nothing special: replies collect in the write buffer and leave together
//! when the wake-up's input is used up, so a batch of `*Q` commands ended by a Noop (or any
//! non-quiet command) is answered with one write, as memcached does.

use tern_admin::Command as Cmd;
use tern_proto::binary::{
    self as bin, ArithMode, Command, ConcatMode, Opcode, Parsed, Request, Status, StoreMode, Then,
};
use tern_store::{Arith, Expiry, StoreOp, StoreOutcome};

use crate::ops::{self, ArithFailure, Ops, StatsError, StatsReply};
use crate::wire::framing::{After, Progress, Replies};

/// Runs the complete frames at the start of `input`, at most `budget` of them; stops early when
/// `out` is backlogged.
pub fn serve(ops: &Ops<'_>, input: &[u8], budget: usize, out: &mut impl Replies) -> Progress {
    let max_value = ops.shared.settings.max_item_size;
    // A frame's length is in its header: a buffer grows to it exactly.
    let mut progress = Progress {
        need_exact: true,
        ..Progress::default()
    };
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
        served += 1;
        let rest = &input[progress.consumed..];
        match bin::parse_request(rest, max_value) {
            Parsed::Incomplete(need) => {
                match bin::reject_incomplete(rest, need, Status::OutOfMemory) {
                    // A frame the connection cannot hold while it arrives
                    // (`-o read_buf_mem_limit`): memcached's answer to an item it cannot
                    // allocate, and the frame skipped.
                    Some(reject) if !out.hold(need) => {
                        ops.no_buffer_memory(command_of(reject.opcode), reject.key);
                        bin::write_error(
                            out.buf(),
                            reject.opcode,
                            reject.opaque,
                            Status::OutOfMemory,
                        );
                        out.request_done();
                        if !progress.skip(need, input.len()) {
                            break;
                        }
                    }
                    _ => {
                        progress.need = need;
                        break;
                    }
                }
            }
            Parsed::Request(req, len) => {
                let mark = out.buf().len();
                let after = execute(ops, &req, out.buf());
                if ops.flash_deferred() {
                    // Its item's record is being read: the frame runs again once it has been.
                    out.buf().truncate(mark);
                    progress.awaiting_flash = true;
                    break;
                }
                progress.consumed += len;
                out.request_done();
                if after != After::Continue {
                    progress.after = after;
                    break;
                }
            }
            Parsed::Reject(reject) => {
                // An invalid request, as a refused text line, a bad magic byte (no reply)
                // included.
                if reject.status == Some(Status::TooLarge) {
                    ops.too_large(command_of(reject.opcode), reject.key);
                } else {
                    ops.refused();
                }
                if let Some(status) = reject.status {
                    bin::write_error(out.buf(), reject.opcode, reject.opaque, status);
                }
                out.request_done();
                match reject.then {
                    Then::Close => {
                        progress.after = After::CloseAfterWrite;
                        break;
                    }
                    Then::Skip(len) => {
                        if !progress.skip(len, input.len()) {
                            break;
                        }
                    }
                }
            }
        }
    }
    progress
}

/// The command a refused storage frame was, for the too-large rule.
fn command_of(opcode: u8) -> Cmd {
    use Opcode::*;
    match Opcode::from_u8(opcode) {
        Some(Set | SetQ) => Cmd::Set,
        Some(Add | AddQ) => Cmd::Add,
        Some(Replace | ReplaceQ) => Cmd::Replace,
        Some(Append | AppendQ) => Cmd::Append,
        Some(Prepend | PrependQ) => Cmd::Prepend,
        _ => Cmd::Invalid,
    }
}

fn expiry(ops: &Ops<'_>, exptime: u32) -> Expiry {
    // The binary field is unsigned: memcached never sees a negative (already expired) time.
    ops.expiry(i64::from(exptime))
}

/// Sends `status` for `req` unless its quiet opcode hides it.
fn status_reply(out: &mut Vec<u8>, req: &Request<'_>, status: Status, cas: u64) {
    if bin::reply_suppressed(req.opcode, status) {
        return;
    }
    if status == Status::Success {
        bin::write_ok(out, req.opcode, req.opaque, cas);
    } else {
        bin::write_error(out, req.opcode as u8, req.opaque, status);
    }
}

/// The CAS a request's change is conditioned on: any nonzero request CAS, which the store
/// checks in the same locked step as the change.
fn expected_cas(req: &Request<'_>) -> Option<u64> {
    (req.cas != 0).then_some(req.cas)
}

/// Get and GetAndTouch (and their K and Q forms): the value, or a miss unless quiet.
fn get(
    ops: &Ops<'_>,
    req: &Request<'_>,
    cmd: Cmd,
    key: &[u8],
    expiry: Option<Expiry>,
    with_key: bool,
    out: &mut Vec<u8>,
) {
    let (opcode, opaque) = (req.opcode, req.opaque);
    let echo = with_key.then_some(key);
    let found = ops.get(cmd, key, expiry, out, |item, out| {
        bin::write_value(
            out,
            opcode,
            opaque,
            item.cas(),
            item.flags,
            echo,
            item.value,
        )
    });
    if found.is_err() && !bin::reply_suppressed(opcode, Status::KeyNotFound) {
        bin::write_miss(out, opcode, opaque, echo);
    }
}

fn execute(ops: &Ops<'_>, req: &Request<'_>, out: &mut Vec<u8>) -> After {
    let (opcode, opaque) = (req.opcode, req.opaque);
    match req.command {
        Command::Get { key, with_key } => get(ops, req, Cmd::Get, key, None, with_key, out),
        Command::GetAndTouch {
            key,
            exptime,
            with_key,
        } => {
            let expiry = Some(expiry(ops, exptime));
            get(ops, req, Cmd::Gat, key, expiry, with_key, out);
        }
        Command::Touch { key, exptime } => {
            // memcached's Touch reply carries the flags but not the value.
            let found = ops.get(
                Cmd::Touch,
                key,
                Some(expiry(ops, exptime)),
                out,
                |item, out| {
                    bin::write_value(out, opcode, opaque, item.cas(), item.flags, None, &[])
                },
            );
            if found.is_err() {
                bin::write_error(out, opcode as u8, opaque, Status::KeyNotFound);
            }
        }
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            value,
        } => {
            // memcached turns any of set/add/replace with a nonzero CAS into a CAS store.
            let (op, cmd) = match (mode, req.cas) {
                (_, cas) if cas != 0 => (StoreOp::Cas(cas), Cmd::Cas),
                (StoreMode::Set, _) => (StoreOp::Set, Cmd::Set),
                (StoreMode::Add, _) => (StoreOp::Add, Cmd::Add),
                (StoreMode::Replace, _) => (StoreOp::Replace, Cmd::Replace),
            };
            let outcome = ops.store_item(cmd, op, key, flags, expiry(ops, exptime), value);
            let (status, cas) = match outcome {
                StoreOutcome::Stored { cas } => (Status::Success, cas),
                StoreOutcome::NotStored => match mode {
                    StoreMode::Add => (Status::KeyExists, 0),
                    StoreMode::Replace => (Status::KeyNotFound, 0),
                    StoreMode::Set => (Status::NotStored, 0),
                },
                StoreOutcome::Exists => (Status::KeyExists, 0),
                StoreOutcome::NotFound => (Status::KeyNotFound, 0),
                StoreOutcome::TooLarge => (Status::TooLarge, 0),
                StoreOutcome::OutOfMemory => (Status::OutOfMemory, 0),
            };
            status_reply(out, req, status, cas);
        }
        Command::Concat { mode, key, value } => {
            let (op, cmd) = match mode {
                ConcatMode::Append => (StoreOp::Append(expected_cas(req)), Cmd::Append),
                ConcatMode::Prepend => (StoreOp::Prepend(expected_cas(req)), Cmd::Prepend),
            };
            // Flags and expiry are the item's; the store ignores these for append.
            let outcome = ops.store_item(cmd, op, key, 0, Expiry::NEVER, value);
            let (status, cas) = match outcome {
                StoreOutcome::Stored { cas } => (Status::Success, cas),
                StoreOutcome::Exists => (Status::KeyExists, 0),
                StoreOutcome::TooLarge => (Status::TooLarge, 0),
                StoreOutcome::OutOfMemory => (Status::OutOfMemory, 0),
                // A missing item, with or without a CAS, as memcached answers it.
                _ => (Status::NotStored, 0),
            };
            status_reply(out, req, status, cas);
        }
        Command::Delete { key } => {
            let status = match ops.delete(Cmd::Delete, key, expected_cas(req), None) {
                Ok(()) => Status::Success,
                Err(tern_store::Refused::NotFound) => Status::KeyNotFound,
                Err(tern_store::Refused::Exists) => Status::KeyExists,
            };
            status_reply(out, req, status, 0);
        }
        Command::Arithmetic {
            mode,
            key,
            delta,
            initial,
            exptime,
        } => {
            let (cmd, direction) = match mode {
                ArithMode::Increment => (Cmd::Incr, Arith::Incr),
                ArithMode::Decrement => (Cmd::Decr, Arith::Decr),
            };
            // A miss creates the item unless the expiration says not to (a request CAS or not,
            // as memcached does).
            let create = (exptime != bin::NO_CREATE).then(|| (initial, expiry(ops, exptime)));
            let counted =
                ops.arithmetic(cmd, key, direction, delta, expected_cas(req), create, None);
            let status = match counted {
                Ok((counted, _)) => {
                    if !bin::reply_suppressed(opcode, Status::Success) {
                        bin::write_counter(out, opcode, opaque, counted.cas, counted.value);
                    }
                    return After::Continue;
                }
                Err(ArithFailure::NotFound) => Status::KeyNotFound,
                Err(ArithFailure::Exists) => Status::KeyExists,
                Err(ArithFailure::NonNumeric) => Status::NonNumeric,
                Err(ArithFailure::OutOfMemory) => Status::OutOfMemory,
                Err(ArithFailure::NotStored) => Status::NotStored,
            };
            status_reply(out, req, status, 0);
        }
        Command::Quit => {
            ops.admin(Cmd::Admin);
            if opcode != Opcode::QuitQ {
                bin::write_ok(out, opcode, opaque, 0);
            }
            return After::CloseAfterWrite;
        }
        Command::Flush { delay } => {
            if ops.flush_all(i64::from(delay)) {
                status_reply(out, req, Status::Success, 0);
            } else {
                // memcached's answer when flush_all is disabled (-F).
                bin::write_error(out, opcode as u8, opaque, Status::AuthError);
            }
        }
        Command::Noop => {
            ops.admin(Cmd::Admin);
            bin::write_ok(out, opcode, opaque, 0);
        }
        Command::Version => {
            ops.admin(Cmd::Admin);
            bin::write_version(out, opaque, ops::VERSION);
        }
        Command::Stat { key } => stats(ops, key, opaque, out),
        Command::Verbosity { level } => {
            ops.verbosity(level);
            bin::write_ok(out, opcode, opaque, 0);
        }
    }
    After::Continue
}

/// Stat: the same groups as the text protocol's `stats` (the key names the group and its
/// arguments, as the words after `stats`), one packet per statistic and an empty packet at
/// the end.
fn stats(ops: &Ops<'_>, key: &[u8], opaque: u32, out: &mut Vec<u8>) {
    let words: Vec<&[u8]> = key
        .split(|&b| b == b' ')
        .filter(|word| !word.is_empty())
        .collect();
    let status = match ops.stats(&words) {
        Ok(StatsReply::Lines(lines)) => {
            for (name, value) in lines {
                bin::write_stat(out, opaque, &name, value);
            }
            None
        }
        Ok(StatsReply::Reset | StatsReply::Done) => None,
        Ok(StatsReply::Detail(dump)) => {
            bin::write_stat(out, opaque, "detailed", String::from_utf8_lossy(&dump));
            None
        }
        // memcached's binary Stat has no cachedump.
        Ok(StatsReply::Cachedump(_)) => Some(Status::KeyNotFound),
        Err(
            StatsError::Unknown
            | StatsError::DetailUsage
            | StatsError::CachedumpUsage
            | StatsError::IllegalClass
            | StatsError::DumpingDisabled,
        ) => Some(Status::KeyNotFound),
        Err(StatsError::BadArgument) => Some(Status::InvalidArguments),
    };
    match status {
        None => bin::write_stat_end(out, opaque),
        Some(status) => bin::write_error(out, Opcode::Stat as u8, opaque, status),
    }
}
