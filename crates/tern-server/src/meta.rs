//! memcached's meta commands (`mg ms md ma me mn`) in the ASCII stream: `tern_proto::meta` parses
//! the line and encodes replies, this module runs them against the store with the semantics of
//! memcached's protocol.txt (see `tern_proto::meta`'s module docs for each command).
//!
//! Where the store offers no single locked step for what a flag asks (a CAS check before delete,
//! arithmetic or append; `ms I` with an older CAS), the executor checks, then acts: another
//! worker's write can land in between, which memcached's item lock would have excluded.

use std::io::Write as _;

use tern_admin::{Command as Op, Outcome};
use tern_proto::ascii;
use tern_proto::meta::{
    self, ArithMode, Code, Command, DebugInfo, ErrorReply, ItemInfo, Request, SetMode,
};
use tern_store::{Arith, ArithError, Expiry, Marks, Miss, StoreOp, StoreOutcome};

use crate::exec::Executor;

/// What the connection does with its input after a meta command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The command ran; drop this many bytes after the line (an `ms` data block).
    Done(usize),
    /// An `ms` data block has not fully arrived: this many bytes after the line are needed.
    Need(usize),
    /// An error was answered; discard this many bytes after the line, arrived or not.
    Swallow(usize),
}

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

fn current_cas(exec: &Executor<'_>, key: &[u8]) -> Option<u64> {
    exec.shared.store.get(key, |item| item.cas).ok()
}

/// The reply code when a `C` flag rules the request out.
fn cas_check(exec: &Executor<'_>, req: &Request<'_>) -> Option<Code> {
    let want = req.flags.compare_cas?;
    match current_cas(exec, req.key.bytes()) {
        None => Some(Code::NotFound),
        Some(cas) if cas != want => Some(Code::Exists),
        Some(_) => None,
    }
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
        let found = store.get_marked(key, touch, |item, marks| {
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
        });
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
        (SetMode::Append | SetMode::Prepend, _) => {
            // A missing item is left to the store (NS, or created with `N`).
            if cas_check(exec, req) == Some(Code::Exists) {
                exec.record_key(Op::MetaSet, Outcome::Exists, key);
                meta::write_reply(out, req, Code::Exists, None, b"");
                return;
            }
            if mode == SetMode::Append {
                StoreOp::Append
            } else {
                StoreOp::Prepend
            }
        }
    };
    let mut outcome = store.store(op, key, f.client_flags, ttl, value);
    if outcome == StoreOutcome::NotStored && matches!(op, StoreOp::Append | StoreOp::Prepend) {
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
    if let Some(code) = cas_check(exec, req) {
        let outcome = if code == Code::NotFound {
            Outcome::Miss
        } else {
            Outcome::Exists
        };
        exec.record_key(Op::MetaDelete, outcome, key);
        meta::write_reply(out, req, code, None, b"");
        return;
    }
    let mut present = true;
    if f.remove_value {
        // `x`: keep the item (flags, TTL) with an empty value.
        let item = store.get(key, |item| (item.flags, item.expiry)).ok();
        present = match item {
            Some((flags, expiry)) => matches!(
                store.store(StoreOp::Replace, key, flags, expiry, b""),
                StoreOutcome::Stored { .. }
            ),
            None => false,
        };
    }
    let done = if !present {
        false
    } else if f.invalidate {
        store.invalidate(key, f.ttl.map(|ttl| expiry(exec, ttl)))
    } else if f.remove_value {
        true
    } else {
        store.delete(key)
    };
    if done {
        exec.record_key(Op::MetaDelete, Outcome::Hit, key);
        meta::write_reply(out, req, Code::Stored, None, b"");
    } else {
        exec.record_key(Op::MetaDelete, Outcome::Miss, key);
        meta::write_reply(out, req, Code::NotFound, None, b"");
    }
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
    // A missing item is vivified or NF whatever `C` says, as memcached does.
    if cas_check(exec, req) == Some(Code::Exists) {
        record(Outcome::Exists);
        meta::write_reply(out, req, Code::Exists, None, b"");
        return;
    }
    // memcached's `q` hides an arithmetic success, but not the reply for a vivified item.
    let mut shown = *req;
    let code = if f.return_value {
        Code::Value
    } else {
        Code::Stored
    };
    let mut digits = Vec::with_capacity(20);
    // Two tries: a miss with `N` creates the item, and if another client created it first the
    // arithmetic applies to theirs.
    // memcached's incr/decr keeps an item stale with its win token out; tern's store writes a
    // new version without those marks, so they are carried over here.
    let marks = store
        .get(key, |item| Marks {
            stale: item.stale,
            win_sent: item.win_sent,
        })
        .unwrap_or_default();
    for _ in 0..2 {
        // What `c`/`t` report for an item this request created, known without reading it.
        let mut created = None;
        let number = match store.incr_decr(key, op, f.delta) {
            Ok(n) => {
                record(Outcome::Hit);
                if marks != Marks::default() {
                    let _ = store.get_marked(key, None, |_, m| *m = marks);
                }
                if let Some(ttl) = f.ttl {
                    store.touch(key, expiry(exec, ttl));
                }
                n
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
                        created = Some(ItemInfo {
                            cas,
                            ttl: ttl.remaining(store.clock().now()),
                            ..ItemInfo::default()
                        });
                        f.initial
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
        // Read the item back only for `c`/`t`: the store's read marks it fetched (`h`),
        // which memcached's arithmetic does not.
        let now = store.clock().now();
        let info = if let Some(info) = created {
            info
        } else if f.return_cas || f.return_ttl {
            store
                .get(key, |item| ItemInfo {
                    cas: item.cas,
                    ttl: item.expiry.remaining(now),
                    ..ItemInfo::default()
                })
                .unwrap_or_default()
        } else {
            ItemInfo::default()
        };
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
