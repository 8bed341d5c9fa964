//! memcached's binary protocol over a connection's buffers: frames parsed in place by
//! `tern_proto::binary`, run against the same store and metrics as ASCII commands, replies
//! appended to the connection's write buffer. A connection becomes binary when its first byte
//! is 0x80 (see `Conn::serve`); from then on every wake-up comes here.
//!
//! Quiet commands need nothing special: replies collect in the write buffer and leave together
//! when the wake-up's input is used up, so a batch of `*Q` commands ended by a Noop (or any
//! non-quiet command) is answered with one write, as memcached does.

use std::io::Write as _;

use tern_admin::{Command as Op, Outcome};
use tern_proto::ascii::{self, Keys};
use tern_proto::binary::{
    self as bin, ArithMode, Command, ConcatMode, Opcode, Parsed, Request, Status, StoreMode, Then,
};
use tern_store::{Arith, ArithError, Expiry, Miss, Refused, StoreOp, StoreOutcome};

use crate::exec::{After, Executor, VERSION_REPLY};

/// How far a call to [`serve`] got through the buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the buffer used up.
    pub consumed: usize,
    /// Bytes the next frame needs (from the end of `consumed`) before it can run; 0 if none.
    pub need: usize,
    /// Bytes still to discard beyond the buffer (the rest of a skipped frame).
    pub swallow: usize,
    /// Stopped at the request budget with frames left.
    pub yielded: bool,
    pub after: After,
}

/// Runs the complete frames at the start of `buf`, at most `budget` of them.
pub fn serve(exec: &Executor<'_>, buf: &[u8], budget: usize, out: &mut Vec<u8>) -> Progress {
    let max_value = exec.shared.settings.max_item_size;
    let mut progress = Progress {
        consumed: 0,
        need: 0,
        swallow: 0,
        yielded: false,
        after: After::Continue,
    };
    let mut served = 0;
    while progress.consumed < buf.len() {
        if served == budget {
            exec.worker.metrics.conn_yield();
            progress.yielded = true;
            break;
        }
        served += 1;
        let rest = &buf[progress.consumed..];
        match bin::parse_request(rest, max_value) {
            Parsed::Incomplete(need) => {
                progress.need = need;
                break;
            }
            Parsed::Request(req, len) => {
                progress.consumed += len;
                let after = execute(exec, &req, out);
                if after != After::Continue {
                    progress.after = after;
                    break;
                }
            }
            Parsed::Reject(reject) => {
                // An invalid request, as a refused ASCII line (`Executor::reject`), a bad magic
                // byte (no reply) included: in no memcached counter but `store_too_large`, as
                // memcached 1.6.18 counts them.
                if reject.status == Some(Status::TooLarge) {
                    exec.record(Op::Invalid, Outcome::TooLarge);
                    if !reject.key.is_empty() {
                        // A failed overwrite must not leave the old value readable.
                        exec.shared.store.delete(reject.key);
                    }
                } else {
                    exec.record_refused();
                }
                if let Some(status) = reject.status {
                    bin::write_error(out, reject.opcode, reject.opaque, status);
                }
                match reject.then {
                    Then::Close => {
                        progress.after = After::CloseAfterWrite;
                        break;
                    }
                    Then::Skip(len) if len <= rest.len() => progress.consumed += len,
                    Then::Skip(len) => {
                        progress.swallow = len - rest.len();
                        progress.consumed = buf.len();
                    }
                }
            }
        }
    }
    progress
}

fn expiry(exec: &Executor<'_>, exptime: u32) -> Expiry {
    // The binary field is unsigned: memcached never sees a negative (already expired) time.
    Expiry::from_exptime(i64::from(exptime), exec.shared.store.clock().now())
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

fn execute(exec: &Executor<'_>, req: &Request<'_>, out: &mut Vec<u8>) -> After {
    let store = &exec.shared.store;
    let (opcode, opaque) = (req.opcode, req.opaque);
    match req.command {
        Command::Get { key, with_key } => {
            let echo = with_key.then_some(key);
            let found = store.get(key, |item| {
                bin::write_value(out, opcode, opaque, item.cas, item.flags, echo, item.value)
            });
            exec.record_key(Op::Get, lookup_outcome(found), key);
            if found.is_err() && !bin::reply_suppressed(opcode, Status::KeyNotFound) {
                bin::write_miss(out, opcode, opaque, echo);
            }
        }
        Command::GetAndTouch {
            key,
            exptime,
            with_key,
        } => {
            let echo = with_key.then_some(key);
            let found = store.get_and_touch(key, expiry(exec, exptime), |item| {
                bin::write_value(out, opcode, opaque, item.cas, item.flags, echo, item.value)
            });
            exec.record_key(Op::Gat, lookup_outcome(found), key);
            if found.is_err() && !bin::reply_suppressed(opcode, Status::KeyNotFound) {
                bin::write_miss(out, opcode, opaque, echo);
            }
        }
        Command::Touch { key, exptime } => {
            // memcached's Touch reply carries the flags but not the value.
            let found = store.get_and_touch(key, expiry(exec, exptime), |item| {
                bin::write_value(out, opcode, opaque, item.cas, item.flags, None, &[])
            });
            let outcome = if found.is_ok() {
                Outcome::Hit
            } else {
                bin::write_error(out, opcode as u8, opaque, Status::KeyNotFound);
                Outcome::Miss
            };
            exec.record_key(Op::Touch, outcome, key);
        }
        Command::Store {
            mode,
            key,
            flags,
            exptime,
            value,
        } => {
            // memcached turns any of set/add/replace with a nonzero CAS into a CAS store.
            let op = match (mode, req.cas) {
                (_, cas) if cas != 0 => StoreOp::Cas(cas),
                (StoreMode::Set, _) => StoreOp::Set,
                (StoreMode::Add, _) => StoreOp::Add,
                (StoreMode::Replace, _) => StoreOp::Replace,
            };
            let outcome = store.store(op, key, flags, expiry(exec, exptime), value);
            let metric = match (op, mode) {
                (StoreOp::Cas(_), _) => Op::Cas,
                (_, StoreMode::Set) => Op::Set,
                (_, StoreMode::Add) => Op::Add,
                (_, StoreMode::Replace) => Op::Replace,
            };
            exec.record_key(metric, store_outcome(outcome), key);
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
            let metric = match mode {
                ConcatMode::Append => Op::Append,
                ConcatMode::Prepend => Op::Prepend,
            };
            let op = match mode {
                ConcatMode::Append => StoreOp::Append(expected_cas(req)),
                ConcatMode::Prepend => StoreOp::Prepend(expected_cas(req)),
            };
            // Flags and expiry are the item's; the store ignores these for append.
            let outcome = store.store(op, key, 0, Expiry::NEVER, value);
            exec.record_key(metric, store_outcome(outcome), key);
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
            let (status, outcome) = match store.delete_checked(key, expected_cas(req)) {
                Ok(()) => (Status::Success, Outcome::Hit),
                Err(Refused::NotFound) => (Status::KeyNotFound, Outcome::Miss),
                Err(Refused::Exists) => (Status::KeyExists, Outcome::Exists),
            };
            exec.record_key(Op::Delete, outcome, key);
            status_reply(out, req, status, 0);
        }
        Command::Arithmetic {
            mode,
            key,
            delta,
            initial,
            exptime,
        } => arithmetic(exec, req, mode, key, delta, initial, exptime, out),
        Command::Quit => {
            if opcode != Opcode::QuitQ {
                bin::write_ok(out, opcode, opaque, 0);
            }
            return After::CloseAfterWrite;
        }
        Command::Flush { delay } => {
            if exec.shared.settings.disable_flush_all {
                exec.record(Op::Flush, Outcome::Error);
                // memcached's answer when flush_all is disabled (-F).
                bin::write_error(out, opcode as u8, opaque, Status::AuthError);
            } else {
                exec.record(Op::Flush, Outcome::Hit);
                store.flush_all(exec.flush_delay(i64::from(delay)));
                status_reply(out, req, Status::Success, 0);
            }
        }
        Command::Noop => bin::write_ok(out, opcode, opaque, 0),
        Command::Version => {
            let version = VERSION_REPLY
                .trim_start_matches("VERSION ")
                .trim_end_matches("\r\n");
            bin::write_version(out, opaque, version);
        }
        Command::Stat { key } => stats(exec, key, opaque, out),
        Command::Verbosity { level } => {
            exec.execute(
                ascii::Command::Verbosity {
                    level,
                    noreply: true,
                },
                out,
            );
            bin::write_ok(out, opcode, opaque, 0);
        }
    }
    After::Continue
}

fn lookup_outcome(found: Result<(), Miss>) -> Outcome {
    match found {
        Ok(()) => Outcome::Hit,
        Err(Miss::NotFound) => Outcome::Miss,
        Err(Miss::Expired) => Outcome::Expired,
        Err(Miss::Flushed) => Outcome::Flushed,
    }
}

pub(crate) fn store_outcome(outcome: StoreOutcome) -> Outcome {
    match outcome {
        StoreOutcome::Stored { .. } => Outcome::Stored,
        StoreOutcome::NotStored => Outcome::NotStored,
        StoreOutcome::Exists => Outcome::Exists,
        StoreOutcome::NotFound => Outcome::NotFound,
        StoreOutcome::TooLarge => Outcome::TooLarge,
        StoreOutcome::OutOfMemory => Outcome::NoMemory,
    }
}

#[allow(clippy::too_many_arguments)]
fn arithmetic(
    exec: &Executor<'_>,
    req: &Request<'_>,
    mode: ArithMode,
    key: &[u8],
    delta: u64,
    initial: u64,
    exptime: u32,
    out: &mut Vec<u8>,
) {
    let store = &exec.shared.store;
    let (op, metric) = match mode {
        ArithMode::Increment => (Arith::Incr, Op::Incr),
        ArithMode::Decrement => (Arith::Decr, Op::Decr),
    };
    // Two tries: a miss creates the item with Add (a request CAS or not, as memcached does),
    // and if another client created it first the arithmetic applies to theirs.
    for _ in 0..2 {
        let status = match store.incr_decr(key, op, delta, expected_cas(req)) {
            Ok(counted) => {
                exec.record_key(metric, Outcome::Hit, key);
                if !bin::reply_suppressed(req.opcode, Status::Success) {
                    bin::write_counter(out, req.opcode, req.opaque, counted.cas, counted.value);
                }
                return;
            }
            Err(ArithError::Exists) => {
                exec.record_key(metric, Outcome::Exists, key);
                Status::KeyExists
            }
            Err(ArithError::NonNumeric) => {
                exec.record_key(metric, Outcome::Error, key);
                Status::NonNumeric
            }
            Err(ArithError::OutOfMemory) => {
                exec.record_key(metric, Outcome::NoMemory, key);
                Status::OutOfMemory
            }
            Err(ArithError::NotFound) if exptime == bin::NO_CREATE => {
                exec.record_key(metric, Outcome::Miss, key);
                Status::KeyNotFound
            }
            Err(ArithError::NotFound) => {
                exec.record_key(metric, Outcome::Miss, key);
                let mut text = Vec::with_capacity(20);
                let _ = write!(text, "{initial}");
                match store.store(StoreOp::Add, key, 0, expiry(exec, exptime), &text) {
                    StoreOutcome::Stored { cas } => {
                        if !bin::reply_suppressed(req.opcode, Status::Success) {
                            bin::write_counter(out, req.opcode, req.opaque, cas, initial);
                        }
                        return;
                    }
                    StoreOutcome::NotStored => continue,
                    StoreOutcome::OutOfMemory => Status::OutOfMemory,
                    _ => Status::NotStored,
                }
            }
        };
        status_reply(out, req, status, 0);
        return;
    }
    status_reply(out, req, Status::NotStored, 0);
}

/// Stat: the same groups as the ASCII `stats`, one packet per statistic and an empty packet at
/// the end. The ASCII text is produced first and re-framed, so both protocols always report the
/// same statistics (a Stat request is rare; the scratch buffer does not matter).
fn stats(exec: &Executor<'_>, key: &[u8], opaque: u32, out: &mut Vec<u8>) {
    let mut text = Vec::new();
    exec.execute(
        ascii::Command::Stats {
            args: Keys::new(key),
        },
        &mut text,
    );
    if text == ascii::ERROR {
        bin::write_error(out, Opcode::Stat as u8, opaque, Status::KeyNotFound);
        return;
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(stat) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let split = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
        let name = String::from_utf8_lossy(&stat[..split]);
        let value = String::from_utf8_lossy(stat.get(split + 1..).unwrap_or(&[]));
        bin::write_stat(out, opaque, &name, value);
    }
    bin::write_stat_end(out, opaque);
}
