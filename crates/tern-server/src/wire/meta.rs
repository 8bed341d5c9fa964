//! memcached's meta commands (`mg ms md ma me mn`) in the text stream: `tern_proto::meta` parses
//! the line and encodes replies; this module translates each command's flags into operations
//! (`ops.rs`), with the semantics of memcached's protocol.txt (see `tern_proto::meta`'s module
//! docs for each command).
//!
//! A `C` check on `md`, `ma` and `ms` is made by the store in the same locked step as the
//! change, as memcached makes it under its item lock. Where the store offers no single locked
//! step for what a flag asks (`ms I` with an older CAS; `md x`'s flags and TTL without `C`),
//! this module reads, then acts (inside one `Ops` call): another worker's write can land in
//! between.

use std::io::Write as _;

use tern_admin::Command as Cmd;
use tern_proto::ascii;
use tern_proto::meta::{
    self, ArithMode, Code, Command, DebugInfo, ErrorReply, ItemInfo, Request, SetMode,
};
use tern_store::{Arith, Expiry, ItemView, Marks, Refused, StoreOp, StoreOutcome};

use crate::ops::{ArithFailure, Ops};
use crate::wire::framing::Step;

/// Answers the `ms` line `line`, whose value the connection cannot hold while it arrives
/// (`-o read_buf_mem_limit`), as memcached answers an item it cannot allocate: an error, sent
/// whatever `q` says.
pub fn refuse_unheld(ops: &Ops<'_>, line: &[u8], out: &mut Vec<u8>) {
    match meta::parse(line) {
        Ok(req) => ops.no_buffer_memory(Cmd::MetaSet, req.key.bytes()),
        Err(_) => unreachable!("the line parsed a moment ago"),
    }
    meta::write_error(out, ErrorReply::OutOfMemory);
}

/// Runs the meta command `line` (no line ending); `after` holds the bytes that follow it.
pub fn run(ops: &Ops<'_>, line: &[u8], after: &[u8], out: &mut Vec<u8>) -> Step {
    let req = match meta::parse(line) {
        Ok(req) => req,
        Err(e) => {
            ops.refused();
            meta::write_error(out, e.reply);
            return Step::Swallow(e.swallow);
        }
    };
    match req.command {
        Command::Set { data_len, mode } => {
            let key = req.key.bytes();
            if data_len > ops.shared.settings.max_item_size {
                ops.too_large(Cmd::MetaSet, key);
                meta::write_error(out, ErrorReply::TooLarge);
                return Step::Swallow(data_len + 2);
            }
            match ascii::data_block(after, data_len) {
                None => return Step::Need(data_len + 2),
                Some(Err(())) => {
                    ops.bad_data_chunk(Cmd::MetaSet, key);
                    meta::write_error(out, ErrorReply::BadDataChunk);
                }
                Some(Ok(value)) => set(ops, &req, mode, value, out),
            }
            return Step::Done(data_len + 2);
        }
        Command::Get => get(ops, &req, out),
        Command::Delete => delete(ops, &req, out),
        Command::Arithmetic { mode } => arithmetic(ops, &req, mode, out),
        Command::Debug => debug(ops, &req, out),
        Command::NoOp => {
            ops.admin(Cmd::MetaNoop);
            meta::write_noop(out);
        }
    }
    Step::Done(0)
}

/// A meta TTL: the same rules as a classic exptime.
fn expiry(ops: &Ops<'_>, ttl: i32) -> Expiry {
    ops.expiry(i64::from(ttl))
}

fn get(ops: &Ops<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    let f = &req.flags;
    let key = req.key.bytes();
    let touch = f.ttl.map(|ttl| expiry(ops, ttl));
    let vivify = f.vivify_ttl.map(|ttl| expiry(ops, ttl));
    let now = ops.now();
    // memcached 1.6.45 applies each flag at its place in the line, so an `R` or `t` before
    // `T` sees the TTL the item had before this request's touch (read first: only for such a
    // line), one after it the new TTL.
    let (recache_first, ttl_first) = match touch {
        Some(_) => (req.flag_before(b'R', b'T'), req.flag_before(b't', b'T')),
        None => (false, false),
    };
    let old = if recache_first || ttl_first {
        ops.peek_expiry(key)
    } else {
        None
    };
    // A miss with `N` creates an empty item and this client wins its first fill; if another
    // client created it in between, theirs is read like any hit. `u` (`no_bump`) leaves the
    // item's fetched mark and access time as they were.
    let read = |item: ItemView<'_>, marks: &mut Marks, created: bool| {
        let expiry_seen = |first: bool| match old {
            Some(old) if first => old,
            _ => item.expiry,
        };
        let recache = f.recache_ttl.is_some_and(|r| {
            expiry_seen(recache_first)
                .remaining(now)
                .is_some_and(|left| i64::from(left) < i64::from(r))
        });
        let won = !item.win_sent && (created || item.stale || recache);
        if won {
            marks.win_sent = true;
        }
        let cas = item.cas();
        // `C` naming the item's CAS: the client holds this version, so no value is sent.
        let code = if f.return_value && f.compare_cas != Some(cas) {
            Code::Value
        } else {
            Code::Stored
        };
        let info = ItemInfo {
            cas,
            client_flags: item.flags,
            size: item.value.len(),
            ttl: expiry_seen(ttl_first).remaining(now),
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
    if ops
        .get_marked(Cmd::MetaGet, key, touch, f.no_bump, vivify, f.new_cas, read)
        .is_err()
    {
        meta::write_reply(out, req, Code::Miss, None, b"");
    }
}

fn set(ops: &Ops<'_>, req: &Request<'_>, mode: SetMode, value: &[u8], out: &mut Vec<u8>) {
    let f = &req.flags;
    let key = req.key.bytes();
    let ttl = expiry(ops, f.ttl.unwrap_or(0));
    let vivify = f.vivify_ttl.map(|ttl| expiry(ops, ttl));
    // memcached's `ms` takes `E0` as no `E` (its other commands give the item CAS 0).
    let new_cas = f.new_cas.filter(|&cas| cas != 0);
    let joins = matches!(mode, SetMode::Append | SetMode::Prepend);
    let mut size = value.len();
    let outcome = ops.store_with(Cmd::MetaSet, key, ttl, value, |store| {
        let mut ttl = ttl;
        // `I` with a CAS older than the item's: store anyway, as memcached does: the new value
        // is stale, keeps the old TTL and whether a win token was already handed out.
        let mut stale_over: Option<Marks> = None;
        let op = match (mode, f.compare_cas) {
            // With `C`, replace is a compare-and-swap like set (NF when missing).
            (SetMode::Set | SetMode::Replace, Some(want)) if !f.invalidate => StoreOp::Cas(want),
            (SetMode::Set | SetMode::Replace, Some(want)) => {
                let old = store.get(key, |item| (item.cas(), item.expiry, item.win_sent));
                match old {
                    Ok((cas, expiry, win_sent)) if want < cas => {
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
        let mut outcome = store.store_with_cas(op, key, f.client_flags, ttl, value, new_cas);
        let mut created = false;
        if outcome == StoreOutcome::NotStored && joins {
            // Newer memcached: `N` on append/prepend creates the item from the data.
            if let Some(vivify) = vivify {
                outcome =
                    store.store_with_cas(StoreOp::Add, key, f.client_flags, vivify, value, new_cas);
                created = true;
            }
        }
        if let (StoreOutcome::Stored { .. }, Some(stale)) = (outcome, stale_over) {
            let _ = store.get_marked(key, None, |_, marks| *marks = stale);
        }
        if let (StoreOutcome::Stored { .. }, true, false, true) =
            (outcome, joins, created, f.return_size)
        {
            // `s` after an append is the joined value's size: read back without marking the
            // item fetched (a write from another connection in between shows its own size).
            if let Ok(len) = store.peek_marked(key, None, |item, _| item.value.len()) {
                size = len;
            }
        }
        outcome
    });
    let code = match outcome {
        StoreOutcome::Stored { cas } => {
            let info = ItemInfo {
                cas,
                size,
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

fn delete(ops: &Ops<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    let f = &req.flags;
    let key = req.key.bytes();
    let want = f.compare_cas;
    let ttl = f.ttl.map(|ttl| expiry(ops, ttl));
    // memcached logs a `deleted` line for an `md` that is no `I` (`x` too: the value goes).
    let logged = (!f.invalidate).then_some("md");
    let done = ops.delete_with(Cmd::MetaDelete, key, logged, |store| {
        if f.remove_value {
            // `x`, as memcached 1.6.45 does it: the item is replaced by an empty one with the
            // request's flags (`F`, else 0) and TTL (`T`, else none), keeping its CAS unless
            // `E` gives one. The rewrite is a compare-and-swap on the CAS just read (unmarked,
            // as memcached's `md` does not fetch); another write in between is read again,
            // unless the client's own `C` named the version it meant.
            loop {
                let cas = match store.peek_marked(key, None, |item, _| item.cas()) {
                    Err(_) => return Err(Refused::NotFound),
                    Ok(cas) if want.is_some_and(|want| want != cas) => return Err(Refused::Exists),
                    Ok(cas) => cas,
                };
                let tombstone = ttl.unwrap_or(Expiry::NEVER);
                let keep = Some(f.new_cas.unwrap_or(cas));
                let op = StoreOp::Cas(cas);
                match store.store_with_cas(op, key, f.client_flags, tombstone, b"", keep) {
                    StoreOutcome::Stored { .. } if f.invalidate => {
                        return store.invalidate(key, ttl, None, f.new_cas)
                    }
                    StoreOutcome::Stored { .. } => return Ok(()),
                    StoreOutcome::Exists if want.is_none() => continue,
                    StoreOutcome::Exists => return Err(Refused::Exists),
                    _ => return Err(Refused::NotFound),
                }
            }
        } else if f.invalidate {
            store.invalidate(key, ttl, want, f.new_cas)
        } else {
            store.delete_checked(key, want)
        }
    });
    let code = match done {
        Ok(()) => Code::Stored,
        Err(Refused::NotFound) => Code::NotFound,
        Err(Refused::Exists) => Code::Exists,
    };
    meta::write_reply(out, req, code, None, b"");
}

fn arithmetic(ops: &Ops<'_>, req: &Request<'_>, mode: ArithMode, out: &mut Vec<u8>) {
    let f = &req.flags;
    let (cmd, direction) = match mode {
        ArithMode::Increment => (Cmd::MetaIncrement, Arith::Incr),
        ArithMode::Decrement => (Cmd::MetaDecrement, Arith::Decr),
    };
    let now = ops.now();
    // A miss with `N` creates the item (whatever `C` says, as memcached does).
    let create = f.vivify_ttl.map(|ttl| (f.initial, expiry(ops, ttl)));
    let new_expiry = f.ttl.map(|ttl| expiry(ops, ttl));
    let counted = ops.arithmetic_with_cas(
        cmd,
        req.key.bytes(),
        direction,
        f.delta,
        f.compare_cas,
        create,
        new_expiry,
        f.new_cas,
    );
    let (counted, created) = match counted {
        Ok(done) => done,
        Err(ArithFailure::NonNumeric) => return meta::write_error(out, ErrorReply::NonNumeric),
        Err(ArithFailure::OutOfMemory) => return meta::write_error(out, ErrorReply::OutOfMemory),
        Err(failure) => {
            let code = match failure {
                ArithFailure::Exists => Code::Exists,
                ArithFailure::NotFound => Code::NotFound,
                _ => Code::NotStored,
            };
            meta::write_reply(out, req, code, None, b"");
            return;
        }
    };
    // memcached's `q` hides an arithmetic success, but not the reply for a vivified item.
    let mut shown = *req;
    if created {
        shown.flags.quiet = false;
    }
    let code = if f.return_value {
        Code::Value
    } else {
        Code::Stored
    };
    // What `c`/`t` report comes from the store's answer: reading the item back would mark it
    // fetched (`h`), which memcached's arithmetic does not.
    let info = ItemInfo {
        cas: counted.cas,
        ttl: counted.expiry.remaining(now),
        ..ItemInfo::default()
    };
    let mut digits = Vec::with_capacity(20);
    let _ = write!(digits, "{}", counted.value);
    meta::write_reply(out, &shown, code, Some(&info), &digits);
}

fn debug(ops: &Ops<'_>, req: &Request<'_>, out: &mut Vec<u8>) {
    let key = req.key.bytes();
    let now = ops.now();
    let info = ops.get(Cmd::Admin, key, None, out, |item, _| DebugInfo {
        exp: item.expiry.remaining(now).map_or(-1, i64::from),
        last_access: u64::from(now.saturating_sub(item.last_access)),
        cas: item.cas(),
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
