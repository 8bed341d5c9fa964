//! Writes: set/add/replace/append/prepend/cas, delete, incr/decr and invalidate. Each checks
//! and changes under one shard lock, so a CAS condition and the change it guards are one step.

use super::flash::{Before, Intent};
use super::key::Key;
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::item::{self, Header, MAX_KEY};
use crate::mechanics::segments::{Loc, Run};
use crate::mechanics::shard::{Cause, Found, Shard, Version};
use crate::mechanics::types::{Arith, ArithError, Counted, Expiry, Refused, StoreOp, StoreOutcome};

/// A write's value: the request's bytes, or those joined to the item's stored value.
#[derive(Clone, Copy)]
pub(crate) enum NewValue<'a> {
    Whole(&'a [u8]),
    Append(Found, &'a [u8]),
    Prepend(Found, &'a [u8]),
}

impl<'a> NewValue<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            NewValue::Whole(value) => value.len(),
            NewValue::Append(old, value) | NewValue::Prepend(old, value) => {
                old.hdr.value_len + value.len()
            }
        }
    }

    /// The item whose value this one joins.
    pub(crate) fn joins(&self) -> Option<Found> {
        match self {
            NewValue::Whole(_) => None,
            NewValue::Append(old, _) | NewValue::Prepend(old, _) => Some(*old),
        }
    }

    /// The value in two parts, given the joined item's current value.
    pub(crate) fn parts<'b>(&self, old_value: &'b [u8]) -> [&'b [u8]; 2]
    where
        'a: 'b,
    {
        match *self {
            NewValue::Whole(value) => [value, &[]],
            NewValue::Append(_, value) => [old_value, value],
            NewValue::Prepend(_, value) => [value, old_value],
        }
    }
}

impl Store {
    pub fn store(
        &self,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        value: &[u8],
    ) -> StoreOutcome {
        self.store_as(op, key, flags, expiry, value, None)
    }

    /// `store`, the new version taking the CAS unique `cas` (meta's `E`: the client sets it)
    /// instead of a fresh one; `None` is `store`. The item carries it in its header (8 bytes,
    /// only on items written so), and keeps it until it is next changed.
    pub fn store_with_cas(
        &self,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        value: &[u8],
        cas: Option<u64>,
    ) -> StoreOutcome {
        self.store_as(op, key, flags, expiry, value, cas)
    }

    /// What `store` and `store_with_cas` share, inlined into both so that `store`, with no
    /// CAS given, compiles to what it was without one.
    #[inline(always)]
    fn store_as(
        &self,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        value: &[u8],
        cas: Option<u64>,
    ) -> StoreOutcome {
        if key.is_empty() || key.len() > MAX_KEY {
            return StoreOutcome::TooLarge;
        }
        // Without CAS uniques (`-C`) every CAS reads 0: a given one is not kept either.
        let new_cas = cas.filter(|_| self.config.cas_enabled);
        if op == StoreOp::Set
            && new_cas.is_none()
            && value.len() <= self.config.max_item_size
            && self.fits_segment(item::item_size(
                key.len(),
                value.len(),
                flags,
                expiry.0 != 0,
                false,
            ))
        {
            return self.set_small(key, flags, expiry.0, value);
        }
        let (shard, key) = self.hash(key);
        // A run reserved for a large item while no shard lock was held.
        let mut run: Option<Run> = None;
        loop {
            let now = self.clock.now();
            let mut guard = self.lock(shard);
            if self.flash.is_some() {
                // Growing the index may evict, and send the item this write changes to flash:
                // grown first, so that `before_write` meets it there.
                if guard.index.needs_room() && !self.grow_index(&mut guard, now) {
                    return self.fail(&mut guard, op, key, run, StoreOutcome::OutOfMemory);
                }
                let intent = match op {
                    StoreOp::Set => Intent::Overwrite,
                    StoreOp::Append(_) | StoreOp::Prepend(_) => Intent::Refuse,
                    _ => Intent::Change,
                };
                guard = match self.before_write(guard, shard, key, intent, now) {
                    Before::Go(guard) => guard,
                    Before::Again => continue,
                    Before::OnFlash => return self.give_up(run, StoreOutcome::NotStored),
                    Before::NoRoom if op == StoreOp::Add => {
                        return self.give_up(run, StoreOutcome::NotStored)
                    }
                    Before::NoRoom | Before::Deleted | Before::Exists => {
                        return self.give_up(run, StoreOutcome::OutOfMemory)
                    }
                    Before::Deferred => return self.give_up(run, StoreOutcome::NotStored),
                };
            }
            let sh = &mut *guard;
            let Some(found) = self.find_for_write(sh, key, now) else {
                return self.fail(sh, op, key, run, StoreOutcome::OutOfMemory);
            };
            let (value, flags, expiry) = match (op, found) {
                (StoreOp::Add, Some(_)) => return self.give_up(run, StoreOutcome::NotStored),
                (StoreOp::Replace | StoreOp::Append(_) | StoreOp::Prepend(_), None) => {
                    return self.give_up(run, StoreOutcome::NotStored)
                }
                (StoreOp::Cas(_), None) => return self.give_up(run, StoreOutcome::NotFound),
                (
                    StoreOp::Cas(unique)
                    | StoreOp::Append(Some(unique))
                    | StoreOp::Prepend(Some(unique)),
                    Some(f),
                ) if self.segs.cas_of(f.loc, f.hdr.cas) != unique => {
                    return self.give_up(run, StoreOutcome::Exists)
                }
                // append/prepend keep the item's flags and expiry, as memcached does.
                (StoreOp::Append(_), Some(f)) => {
                    (NewValue::Append(f, value), f.hdr.flags, f.hdr.expiry)
                }
                (StoreOp::Prepend(_), Some(f)) => {
                    (NewValue::Prepend(f, value), f.hdr.flags, f.hdr.expiry)
                }
                _ => (NewValue::Whole(value), flags, expiry.0),
            };
            let version = Version {
                flags,
                expiry,
                cas: new_cas,
                keep_bits: 0,
            };
            let value_len = value.len();
            if value_len > self.config.max_item_size {
                return self.fail(sh, op, key, run, StoreOutcome::TooLarge);
            }
            let size = item::item_size(
                key.bytes.len(),
                value_len,
                flags,
                expiry != 0,
                new_cas.is_some(),
            );
            if self.fits_segment(size) {
                let written = match value.joins() {
                    None => self.put_small(sh, key, found, version, value.parts(&[]), now),
                    Some(old) => self.rewrite(sh, key, old, version, now, |new, old_value| {
                        for part in value.parts(old_value) {
                            new.extend_from_slice(part);
                        }
                    }),
                };
                return match written {
                    Some(loc) => {
                        // Stores only: as memcached's, touch and incr rewrites do not count.
                        sh.counters.total_items += 1;
                        sh.counters.set_bytes += size as u64;
                        let cas = self.segs.cas_of(loc, new_cas);
                        self.give_up(run, StoreOutcome::Stored { cas })
                    }
                    None => self.fail(sh, op, key, run, StoreOutcome::OutOfMemory),
                };
            }
            let size = item::large_item_size(key.bytes.len(), value_len, flags);
            let len = size.div_ceil(self.segs.size());
            if let Some(reserved) = run.take() {
                if reserved.len == len {
                    let loc = self.put_large(sh, key, value, version, reserved, now);
                    sh.counters.total_items += 1;
                    sh.counters.set_bytes += size as u64;
                    let cas = self.segs.cas_of(loc, new_cas);
                    return StoreOutcome::Stored { cas };
                }
                // The size changed under a concurrent append: reserve again.
                self.free_run(reserved);
            }
            drop(guard);
            match self.alloc_run(len) {
                Some(reserved) => run = Some(reserved),
                None => {
                    let mut guard = self.lock(shard);
                    return self.fail(&mut guard, op, key, None, StoreOutcome::OutOfMemory);
                }
            }
        }
    }

    /// A set of an item that fits an ordinary segment: `store` without the conditions, the
    /// joined values and the large-item run that the other writes need (they cost a set about
    /// 100 instructions).
    fn set_small(&self, key: &[u8], flags: u32, expiry: u32, value: &[u8]) -> StoreOutcome {
        let (shard, key) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        let sh = &mut *guard;
        let Some(found) = self.find_for_write(sh, key, now) else {
            return self.fail(sh, StoreOp::Set, key, None, StoreOutcome::OutOfMemory);
        };
        if found.is_none() && self.flash.is_some() {
            // Sets never wait for flash: an entry there that may be this key's goes unread.
            self.drop_flash_candidates(sh, key);
        }
        let version = Version {
            flags,
            expiry,
            cas: None,
            keep_bits: 0,
        };
        match self.put_small(sh, key, found, version, [value, &[]], now) {
            Some(loc) => {
                sh.counters.total_items += 1;
                sh.counters.set_bytes += (key.bytes.len() + value.len()) as u64;
                StoreOutcome::Stored {
                    cas: self.segs.place_cas(loc),
                }
            }
            None => self.fail(sh, StoreOp::Set, key, None, StoreOutcome::OutOfMemory),
        }
    }

    /// The live item a write to `key` replaces, if any, once the index has room for a new
    /// entry (grown first: growing may evict, and the item found must outlive that); `None`
    /// when no room can be made.
    #[inline(always)]
    fn find_for_write(&self, sh: &mut Shard, key: Key, now: UnixSecs) -> Option<Option<Found>> {
        if sh.index.needs_room() && !self.grow_index(sh, now) {
            return None;
        }
        Some(match self.catch_up_flush(sh, Some(key), now) {
            Ok(()) => self.live(sh, key, now).ok(),
            Err(_) => None,
        })
    }

    fn give_up(&self, run: Option<Run>, outcome: StoreOutcome) -> StoreOutcome {
        if let Some(run) = run {
            self.free_run(run);
        }
        outcome
    }

    /// Like memcached, a set that fails leaves no stale copy behind.
    fn fail(
        &self,
        sh: &mut Shard,
        op: StoreOp,
        key: Key,
        run: Option<Run>,
        outcome: StoreOutcome,
    ) -> StoreOutcome {
        if op == StoreOp::Set {
            if let Some(old) = self.lookup(sh, key) {
                self.unlink(sh, old, Cause::Gone, true);
            }
        }
        self.give_up(run, outcome)
    }

    pub fn delete(&self, key: &[u8]) -> bool {
        self.delete_checked(key, None).is_ok()
    }

    /// Deletes `key`; with `expected_cas`, only if the item's CAS is that one, checked in the
    /// same locked step (binary Delete with a CAS, meta `md C`).
    pub fn delete_checked(&self, key: &[u8], expected_cas: Option<u64>) -> Result<(), Refused> {
        let (shard, key) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        if self.flash.is_some() {
            guard = loop {
                match self.before_write(guard, shard, key, Intent::Delete(expected_cas), now) {
                    Before::Go(guard) => break guard,
                    Before::Deleted => return Ok(()),
                    Before::Exists => return Err(Refused::Exists),
                    Before::Deferred => return Err(Refused::NotFound),
                    _ => guard = self.lock(shard),
                }
            };
        }
        let sh = &mut *guard;
        let found = self.live_checked(sh, key, now, expected_cas)?;
        self.unlink(sh, found, Cause::Gone, true);
        Ok(())
    }

    /// incr/decr as memcached does them: the value must be a decimal u64 (leading spaces allowed),
    /// incr wraps at 2^64, decr stops at 0, and a result shorter than the value is space-padded
    /// to the value's length. The result is a new version (new CAS) with the item's flags and
    /// expiry, and keeps its fetched, stale and win-token marks. With `expected_cas`, only if
    /// the item's CAS is that one, checked in the same locked step (binary Increment with a
    /// CAS, meta `ma C`). With `new_cas` the new version takes that CAS (meta's `E`).
    pub fn incr_decr(
        &self,
        key: &[u8],
        op: Arith,
        delta: u64,
        expected_cas: Option<u64>,
        new_cas: Option<u64>,
    ) -> Result<Counted, ArithError> {
        let new_cas = new_cas.filter(|_| self.config.cas_enabled);
        let (shard, key) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        if self.flash.is_some() {
            guard = loop {
                match self.before_write(guard, shard, key, Intent::Refuse, now) {
                    Before::Go(guard) => break guard,
                    // memcached's extstore: a counter on flash is not a number to it.
                    Before::OnFlash => return Err(ArithError::NonNumeric),
                    Before::Deferred => return Err(ArithError::NotFound),
                    _ => guard = self.lock(shard),
                }
            };
        }
        let sh = &mut *guard;
        let found =
            self.live_checked(sh, key, now, expected_cas)
                .map_err(|refused| match refused {
                    Refused::NotFound => ArithError::NotFound,
                    Refused::Exists => ArithError::Exists,
                })?;
        let h = found.hdr;
        let item = &self.segs.read(&sh.owner, found.loc.seg)[found.loc.off as usize..];
        let current = parse_u64(&item[h.value_range()]).ok_or(ArithError::NonNumeric)?;
        let next = match op {
            Arith::Incr => current.wrapping_add(delta),
            Arith::Decr => current.saturating_sub(delta),
        };
        let mut buf = [0u8; 20];
        let digits = decimal(next, &mut buf);
        if !self.fits_segment(h.size()) {
            // A large item keeps its run: the number is written over the value in place
            // (never longer than it, the value being far above 20 bytes), padded with spaces,
            // and it takes a new CAS.
            let item = &mut self.segs.write(&mut sh.owner, found.loc.seg)[found.loc.off as usize..];
            let value = &mut item[h.value_range()];
            value[..digits.len()].copy_from_slice(digits);
            value[digits.len()..].fill(b' ');
            return Ok(Counted {
                value: next,
                cas: self.renew_large_cas(sh, found.loc, h, new_cas),
                expiry: Expiry(h.expiry),
            });
        }
        if digits.len() > h.value_len {
            // memcached links a new item only when the number outgrows its old length.
            sh.counters.total_items += 1;
        }
        // memcached rewrites a counter in place when it can, marks and all.
        let version = Version {
            flags: h.flags,
            expiry: h.expiry,
            cas: new_cas,
            keep_bits: h.bits & item::STATE_BITS,
        };
        let written = self.rewrite(sh, key, found, version, now, |new, _| {
            new.extend_from_slice(digits);
            new.resize(h.value_len.max(digits.len()), b' ');
        });
        written
            .map(|loc| Counted {
                value: next,
                cas: self.segs.cas_of(loc, new_cas),
                expiry: Expiry(h.expiry),
            })
            .ok_or(ArithError::OutOfMemory)
    }

    /// `md <key> I`: marks the item stale (clearing its win token, so the next reader wins the
    /// recache), gives it a new CAS as memcached does (so a writer holding the old one cannot
    /// overwrite the invalidation unnoticed) and, when given, a new expiry. With
    /// `expected_cas`, only if the item's CAS is that one, checked in the same locked step
    /// (`md I C`). With `new_cas` the item takes that CAS instead (meta's `E`). Not a read: the
    /// fetched mark stays as it was, as memcached's `md` leaves it.
    pub fn invalidate(
        &self,
        key: &[u8],
        expiry: Option<Expiry>,
        expected_cas: Option<u64>,
        new_cas: Option<u64>,
    ) -> Result<(), Refused> {
        let new_cas = new_cas.filter(|_| self.config.cas_enabled);
        let (shard, key) = self.hash(key);
        let now = self.clock.now();
        let mut guard = self.lock(shard);
        if self.flash.is_some() {
            guard = loop {
                match self.before_write(guard, shard, key, Intent::Change, now) {
                    Before::Go(guard) => break guard,
                    Before::NoRoom | Before::Deferred => return Err(Refused::NotFound),
                    _ => guard = self.lock(shard),
                }
            };
        }
        let sh = &mut *guard;
        let found = self.live_checked(sh, key, now, expected_cas)?;
        let h = found.hdr;
        let deadline = expiry.map_or(h.expiry, |e| e.0);
        let moved_size = item::item_size(
            h.key_len,
            h.value_len,
            h.flags,
            deadline != 0,
            new_cas.is_some(),
        );
        if self.fits_segment(h.size()) && self.fits_segment(moved_size) {
            // The CAS is the item's place: a new place gives the new CAS.
            let version = Version {
                flags: h.flags,
                expiry: deadline,
                cas: new_cas,
                keep_bits: (h.bits & (item::FETCHED | item::REFERENCED)) | item::STALE,
            };
            let written = self.rewrite(sh, key, found, version, now, Vec::extend_from_slice);
            // With eviction off and the heap full the item cannot move: answered as a miss,
            // as a touch that must move is.
            return written.map(|_| ()).ok_or(Refused::NotFound);
        }
        // A large item stays in its run and takes a new CAS there (as for incr). A small item
        // within 16 bytes of the large-item size that would gain a deadline or a CAS field
        // cannot move; it is touched and marked where it is and keeps its CAS (a given one
        // too: `md I E` on such an item is the one write that does not take its `E`).
        let (loc, h) = match expiry {
            Some(expiry) => self
                .set_expiry(sh, found.slot, found.loc, key, expiry.0, now)
                .map_err(|_| Refused::NotFound)?,
            None => (found.loc, h),
        };
        let item = &mut self.segs.write(&mut sh.owner, loc.seg)[loc.off as usize..];
        item::set_bits(item, item::STALE, item::WIN_SENT);
        if !self.fits_segment(h.size()) {
            self.renew_large_cas(sh, loc, h, new_cas);
        }
        Ok(())
    }

    /// A large item changed in place takes a new CAS: `new_cas`, else a fresh unique (its run's
    /// epoch moves), written to the CAS field every large item carries. Returns the CAS.
    fn renew_large_cas(&self, sh: &mut Shard, loc: Loc, h: Header, new_cas: Option<u64>) -> u64 {
        self.segs.renew_epoch(loc.seg);
        let cas = new_cas.unwrap_or_else(|| self.segs.place_cas(loc));
        if let Some(at) = h.cas_at() {
            let field = loc.off as usize + at;
            self.segs.write(&mut sh.owner, loc.seg)[field..field + 8]
                .copy_from_slice(&cas.to_le_bytes());
        }
        self.segs.cas_of(loc, Some(cas))
    }
}

/// `n` in decimal, at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[start..]
}

/// memcached's `safe_strtoull` on an item's value: C white space, an optional sign, decimal
/// digits, then C white space, a NUL (where C's string ends) or the end of the value (memcached's
/// `\r\n`); no overflow. strtoull negates a "-N", and the result is refused only when it is
/// 2^63 or more, so "-0" is 0 (newer memcached looks for the sign within the number only;
/// 1.6.18 also reads past the value, see the differential test).
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    let is_c_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let rest = &value[value.iter().take_while(|&&b| is_c_space(b)).count()..];
    let (negative, rest) = match rest.split_first() {
        Some((b'-', unsigned)) => (true, unsigned),
        Some((b'+', unsigned)) => (false, unsigned),
        _ => (false, rest),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    if let Some(&after) = rest.get(digits) {
        if after != 0 && !is_c_space(after) {
            return None;
        }
    }
    let magnitude: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    if !negative {
        return Some(magnitude);
    }
    let number = magnitude.wrapping_neg();
    (number <= i64::MAX as u64).then_some(number)
}
