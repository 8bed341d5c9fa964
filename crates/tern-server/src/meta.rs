//! memcached's meta commands (`mg ms md ma me mn`) in the ASCII stream: `tern_proto::meta` parses
//! the line and encodes replies, this module runs them against the store with the semantics of
//! memcached's protocol.txt (see `tern_proto::meta`'s module docs for each command).
//!
//! A `C` check on `md`, `ma` and `ms` is made by the store in the same locked step as the
//! change, as memcached makes it under its item lock. Where the store offers no single locked
//! step for what a flag asks (`ms I` with an older CAS; `md x`'s flags and TTL without `C`),
//! the executor reads, then acts: another worker's write can land in between.

use std::io::Write as _;

use tern_admin::{Command as Op, Outcome};
use tern_proto::ascii;
use tern_proto::meta::{
    self, ArithMode, Code, Command, DebugInfo, ErrorReply, ItemInfo, Request, SetMode,
};
use tern_store::{
    Arith, ArithError, Expiry, ItemView, Marks, Miss, Refused, StoreOp, StoreOutcome,
};

use crate::exec::{Executor, Step};

/// Runs the meta command `line` (no line ending); `after` holds the bytes that follow it.
pub fn run(exec: &Executor<'_>, line: &[u8], after: &[u8], out: &mut Vec<u8>) -> Step {
    let req = match meta::parse(line) {
        Ok(req) => req,
        Err(e) => {
            exec.record(Op::Invalid, Outcome::Error);
            meta::write_error(out, e.reply);
            return Step::Swallow(e.swallow);
        }
    };
    if req.flags.new_cas.is_some() {
        // The store assigns every CAS itself and cannot take one from the client, so tern
        // answers `E` as memcached 1.6.18 does rather than ignore it.
        let swallow = match req.command {
            Command::Set { data_len, .. } => data_len + 2,
            _ => 0,
        };
        exec.record(Op::Invalid, Outcome::Error);
        meta::write_error(out, ErrorReply::InvalidFlag);
        return Step::Swallow(swallow);
    }
    match req.command {
        Command::Set { data_len, mode } => {
            let key = req.key.bytes();
            if data_len > exec.shared.settings.max_item_size {
                exec.record(Op::Invalid, Outcome::TooLarge);
                // As for `set`: a refused overwrite must not leave the old value readable.
                exec.shared.store.delete(key);
                meta::write_error(out, ErrorReply::TooLarge);
                return Step::Swallow(data_len + 2);
            }
            match ascii::data_block(after, data_len) {
                None => return Step::Need(data_len + 2),
                Some(Err(())) => meta::write_error(out, ErrorReply::BadDataChunk),
                Some(Ok(value)) => set(exec, &req, mode, value, out),
            }
            return Step::Done(data_len + 2);
        }
        Command::Get => get(exec, &req, out),
        Command::Delete => delete(exec, &req, out),
        Command::Arithmetic { mode } => arithmetic(exec, &req, mode, out),
        Command::Debug => debug(exec, &req, out),
        Command::NoOp => {
            exec.record(Op::MetaNoop, Outcome::Hit);
            meta::write_noop(out);
        }
    }
    Step::Done(0)
}

fn expiry(exec: &Executor<'_>, ttl: i32) -> Expiry {
    Expiry::from_exptime(i64::from(ttl), exec.shared.store.clock().now())
}

fn get(exec: &Executor<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    let store = &exec.shared.store;
    let f = &req.flags;
    let key = req.key.bytes();
    let touch = f.ttl.map(|ttl| expiry(exec, ttl));
    let code = if f.return_value {
        Code::Value
    } else {
        Code::Stored
    };
    // A miss with `N` creates an empty item and this client wins its first fill; if another
    // client created it in between, theirs is read like any hit.
    let mut created = false;
    for _ in 0..2 {
        let now = store.clock().now();
        // `R` and `t` see the TTL after this request's `T`, wherever the flags stand in the
        // line (1.6.18 applies each at its position, so `R`/`t` before `T` see the old TTL).
        let read = |item: ItemView<'_>, marks: &mut Marks| {
            let recache = f.recache_ttl.is_some_and(|r| {
                item.expiry
                    .remaining(now)
                    .is_some_and(|left| i64::from(left) < i64::from(r))
            });
            let won = !item.win_sent && (created || item.stale || recache);
            if won {
                marks.win_sent = true;
            }
            let info = ItemInfo {
                cas: item.cas,
                client_flags: item.flags,
                size: item.value.len(),
                ttl: item.expiry.remaining(now),
                last_access: now.saturating_sub(item.last_access),
                hit_before: item.fetched,
                win_sent_before: item.win_sent,
                stale: item.stale,
                won,
                // The store keeps no mark of a base64 key: echo the key as this request sent it.
                key_binary: req.key.is_binary(),
            };
            meta::write_reply(out, req, code, Some(&info), item.value);
        };
        // `u`: the read leaves the item's fetched mark and access time as they were.
        let found = if f.no_bump {
            store.peek_marked(key, touch, read)
        } else {
            store.get_marked(key, touch, read)
        };
        match found {
            Ok(()) => {
                exec.record_key(Op::MetaGet, Outcome::Hit, key);
                return;
            }
            Err(miss) if created || f.vivify_ttl.is_none() => {
                let outcome = match miss {
                    Miss::Expired => Outcome::Expired,
                    Miss::Flushed => Outcome::Flushed,
                    Miss::NotFound => Outcome::Miss,
                };
                exec.record_key(Op::MetaGet, outcome, key);
                break;
            }
            Err(_) => {
                let ttl = expiry(exec, f.vivify_ttl.unwrap_or(0));
                created = matches!(
                    store.store(StoreOp::Add, key, 0, ttl, b""),
                    StoreOutcome::Stored { .. }
                );
            }
        }
    }
    meta::write_reply(out, req, Code::Miss, None, b"");
}

fn set(exec: &Executor<'_>, req: &Request<'_>, mode: SetMode, value: &[u8], out: &mut Vec<u8>) {
    let store = &exec.shared.store;
    let f = &req.flags;
    let key = req.key.bytes();
    let mut ttl = expiry(exec, f.ttl.unwrap_or(0));
    // `I` with a CAS older than the item's: store anyway, as memcached does: the new value is
    // stale, keeps the old TTL and whether a win token was already handed out.
    let mut stale_over: Option<Marks> = None;
    let op = match (mode, f.compare_cas) {
        // With `C`, replace is a compare-and-swap like set (NF when missing).
        (SetMode::Set | SetMode::Replace, Some(want)) if !f.invalidate => StoreOp::Cas(want),
        (SetMode::Set | SetMode::Replace, Some(want)) => {
            let old = store.get(key, |item| (item.cas, item.expiry, item.win_sent));
            match old {
                Ok((cas, expiry, win_sent)) if f.invalidate && want < cas => {
                    ttl = expiry;
                    stale_over = Some(Marks {
                        stale: true,
                        win_sent,
                    });
                    StoreOp::Set
                }
                _ => StoreOp::Cas(want),
            }
        }
        (SetMode::Set, None) => StoreOp::Set,
        (SetMode::Add, _) => StoreOp::Add,
        (SetMode::Replace, None) => StoreOp::Replace,
        // A missing item is NS whatever `C` says (or created with `N`).
        (SetMode::Append, want) => StoreOp::Append(want),
        (SetMode::Prepend, want) => StoreOp::Prepend(want),
    };
    let mut outcome = store.store(op, key, f.client_flags, ttl, value);
    if outcome == StoreOutcome::NotStored && matches!(op, StoreOp::Append(_) | StoreOp::Prepend(_))
    {
        // Newer memcached: `N` on append/prepend creates the item from the data.
        if let Some(vivify) = f.vivify_ttl {
            let ttl = expiry(exec, vivify);
            outcome = store.store(StoreOp::Add, key, f.client_flags, ttl, value);
        }
    }
    exec.record_key(Op::MetaSet, crate::binary::store_outcome(outcome), key);
    let code = match outcome {
        StoreOutcome::Stored { cas } => {
            if let Some(stale) = stale_over {
                let _ = store.get_marked(key, None, |_, marks| *marks = stale);
            }
            let info = ItemInfo {
                cas,
                ..ItemInfo::default()
            };
            meta::write_reply(out, req, Code::Stored, Some(&info), b"");
            return;
        }
        StoreOutcome::NotStored => Code::NotStored,
        StoreOutcome::Exists => Code::Exists,
        StoreOutcome::NotFound => Code::NotFound,
        StoreOutcome::TooLarge => {
            meta::write_error(out, ErrorReply::TooLarge);
            return;
        }
        StoreOutcome::OutOfMemory => {
            meta::write_error(out, ErrorReply::OutOfMemory);
            return;
        }
    };
    meta::write_reply(out, req, code, None, b"");
}

fn delete(exec: &Executor<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    let store = &exec.shared.store;
    let f = &req.flags;
    let key = req.key.bytes();
    let want = f.compare_cas;
    let ttl = f.ttl.map(|ttl| expiry(exec, ttl));
    let done = if f.remove_value {
        // `x`: keep the item (flags, TTL) with an empty value. With `C`, the rewrite is a
        // compare-and-swap on the version whose flags and TTL were read.
        match store.get(key, |item| (item.flags, item.expiry, item.cas)) {
            Err(_) => Err(Refused::NotFound),
            Ok((_, _, cas)) if want.is_some_and(|want| want != cas) => Err(Refused::Exists),
            Ok((flags, expiry, cas)) => {
                let op = if want.is_some() {
                    StoreOp::Cas(cas)
                } else {
                    StoreOp::Replace
                };
                match store.store(op, key, flags, expiry, b"") {
                    StoreOutcome::Stored { .. } if f.invalidate => store.invalidate(key, ttl, None),
                    StoreOutcome::Stored { .. } => Ok(()),
                    StoreOutcome::Exists => Err(Refused::Exists),
                    _ => Err(Refused::NotFound),
                }
            }
        }
    } else if f.invalidate {
        store.invalidate(key, ttl, want)
    } else {
        store.delete_checked(key, want)
    };
    let (outcome, code) = match done {
        Ok(()) => (Outcome::Hit, Code::Stored),
        Err(Refused::NotFound) => (Outcome::Miss, Code::NotFound),
        Err(Refused::Exists) => (Outcome::Exists, Code::Exists),
    };
    exec.record_key(Op::MetaDelete, outcome, key);
    meta::write_reply(out, req, code, None, b"");
}

fn arithmetic(exec: &Executor<'_>, req: &Request<'_>, mode: ArithMode, out: &mut Vec<u8>) {
    let store = &exec.shared.store;
    let f = &req.flags;
    let key = req.key.bytes();
    let op = match mode {
        ArithMode::Increment => Arith::Incr,
        ArithMode::Decrement => Arith::Decr,
    };
    let record = |outcome| exec.record_key(Op::MetaArithmetic, outcome, key);
    // memcached's `q` hides an arithmetic success, but not the reply for a vivified item.
    let mut shown = *req;
    let code = if f.return_value {
        Code::Value
    } else {
        Code::Stored
    };
    let mut digits = Vec::with_capacity(20);
    // Two tries: a miss with `N` creates the item (whatever `C` says, as memcached does), and
    // if another client created it first the arithmetic applies to theirs.
    for _ in 0..2 {
        let now = store.clock().now();
        // What `c`/`t` report, from the store's answer: reading the item back would mark it
        // fetched (`h`), which memcached's arithmetic does not.
        let (number, info) = match store.incr_decr(key, op, f.delta, f.compare_cas) {
            Ok(counted) => {
                record(Outcome::Hit);
                let mut ttl = counted.expiry;
                if let Some(new) = f.ttl {
                    ttl = expiry(exec, new);
                    // A touch keeps the CAS, so `counted.cas` still names this version.
                    store.touch(key, ttl);
                }
                let info = ItemInfo {
                    cas: counted.cas,
                    ttl: ttl.remaining(now),
                    ..ItemInfo::default()
                };
                (counted.value, info)
            }
            Err(ArithError::Exists) => {
                record(Outcome::Exists);
                meta::write_reply(out, req, Code::Exists, None, b"");
                return;
            }
            Err(ArithError::NonNumeric) => {
                record(Outcome::Error);
                meta::write_error(out, ErrorReply::NonNumeric);
                return;
            }
            Err(ArithError::OutOfMemory) => {
                record(Outcome::NoMemory);
                meta::write_error(out, ErrorReply::OutOfMemory);
                return;
            }
            Err(ArithError::NotFound) => {
                record(Outcome::Miss);
                let Some(vivify) = f.vivify_ttl else {
                    meta::write_reply(out, req, Code::NotFound, None, b"");
                    return;
                };
                digits.clear();
                let _ = write!(digits, "{}", f.initial);
                let ttl = expiry(exec, vivify);
                match store.store(StoreOp::Add, key, 0, ttl, &digits) {
                    StoreOutcome::Stored { cas } => {
                        shown.flags.quiet = false;
                        let info = ItemInfo {
                            cas,
                            ttl: ttl.remaining(now),
                            ..ItemInfo::default()
                        };
                        (f.initial, info)
                    }
                    StoreOutcome::NotStored => continue,
                    _ => {
                        meta::write_reply(out, req, Code::NotStored, None, b"");
                        return;
                    }
                }
            }
        };
        digits.clear();
        let _ = write!(digits, "{number}");
        meta::write_reply(out, &shown, code, Some(&info), &digits);
        return;
    }
    meta::write_reply(out, req, Code::NotStored, None, b"");
}

fn debug(exec: &Executor<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    exec.record(Op::Admin, Outcome::Hit);
    let store = &exec.shared.store;
    let key = req.key.bytes();
    let now = store.clock().now();
    let info = store.get(key, |item| DebugInfo {
        exp: item.expiry.remaining(now).map_or(-1, i64::from),
        last_access: u64::from(now.saturating_sub(item.last_access)),
        cas: item.cas,
        fetched: item.fetched,
        class: 0,
        size: (key.len() + item.value.len()) as u64,
        key_binary: req.key.is_binary(),
    });
    match info {
        Ok(info) => meta::write_debug(out, req, &info),
        Err(_) => {
            meta::write_reply(out, req, Code::Miss, None, b"");
        }
    }
}
