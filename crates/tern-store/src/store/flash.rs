//! The flash tier, as the store uses it (`mechanics/flash.rs` has the files, pages, buffers
//! and records): which items go to flash and when, how a command finds an item there, and the
//! background work (`flash_work`).
//!
//! - **Going.** An item leaves memory for flash when eviction would drop it (`evict.rs` asks
//!   `to_flash` first) or, with `ext_item_age`, once it has been idle that long
//!   (`move_idle`). It must be at least `ext_item_size` bytes, its record at most a write
//!   buffer (an item larger than a segment goes whole, from its run), and not expired; one
//!   with less than `ext_low_ttl` seconds left goes to pages of its own. Its index slot is
//!   pointed at the record; nothing else of it stays in memory. When flash has no buffer or
//!   page free, the item is evicted as before.
//! - **Finding.** A command that finds no item for its key in memory looks for a flash entry
//!   whose tag and check bits agree with the key's hash (`fetch`): it lets the shard's lock
//!   go, reads the record, takes the lock again and keeps the record only if its key is the
//!   one asked for and the index still points at it. A get answers from the record; a
//!   command that changes the item (touch, cas, add, replace, meta's marks) first brings it
//!   back into memory (`promote`), then runs as it does in memory. As memcached's extstore,
//!   incr/decr answer non-numeric and append/prepend not-stored for an item on flash. A plain
//!   `set` drops a flash entry whose tag and check bits agree with its key's without reading
//!   it, so sets never wait for flash: a different key with the same 24-bit tag and check
//!   bits (one in 2^(24 + check bits - log2 buckets) per entry probed) is dropped with it, a
//!   documented eviction.
//! - **Background.** `flash_work` writes full buffers, frees a page when none is free
//!   (evicting the oldest page's items), compacts pages while fewer than `ext_compact_under`
//!   are free (rewriting their live items, or dropping those never read with
//!   `ext_drop_unread`), and moves idle items to flash.
//!
//! A thread that does not defer (a UDP request, the background work) reads flash in place, a
//! synchronous read. A worker defers: its commands note what they need and end; the reads go
//! on the worker's own ring (`read_flash_on_this_thread`) or to the I/O threads
//! (`serve_flash_reads`), and the commands run again once their records have landed.

use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::key::Key;
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::flash::{
    bump, is_flash, AlignedBuf, Bucket, DirectRing, Flash, FlashWaker, ReadOutcome, Record,
};
use crate::mechanics::flash_config::{FlashKnobs, FlashPageInfo, FlashStats};
use crate::mechanics::item::{self, Header};
use crate::mechanics::segments::{get32, set32, Loc};
use crate::mechanics::shard::{Found, Shard, ShardGuard, Version};
use crate::mechanics::ttl::GROUPS;
use crate::mechanics::types::{CasSource, Expiry, ItemView, Marks};

/// A record on flash found to be the key's, with its index slot, under the shard's lock.
pub(crate) struct Fetched {
    pub(crate) location: u64,
    pub(crate) record: Record,
    pub(crate) hdr: Header,
}

thread_local! {
    /// Whether commands on this thread defer their flash reads (`Store::defer_flash_reads_on_this_thread`).
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
    /// The locations commands on this thread deferred reading, for `Store::ask_deferred`.
    static DEFERRED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// This worker's own ring for its deferred reads (`Store::read_flash_on_this_thread`).
    static DIRECT: RefCell<Option<DirectRing>> = const { RefCell::new(None) };
}

/// What looking for a key on flash came to.
pub(crate) enum OnFlash<'a> {
    /// No flash entry may be the key's, nor (if the lock was let go for a read) an item in
    /// memory, under the lock held now.
    Absent(ShardGuard<'a>),
    /// The key's entry named flash that no longer holds the item (its page evicted, or the
    /// read failed): it is gone now; otherwise as `Absent`.
    Gone(ShardGuard<'a>),
    /// The entry's record has not been read, and this thread defers reads: the command
    /// must end without an effect (its caller runs it again once the read has landed).
    Deferred,
    /// The lock was let go and something changed (memory has the key now, or its entry was
    /// replaced): look again, in memory first. `gone`: a read found no item where the key's
    /// entry pointed, and the entry went.
    Changed {
        gone: bool,
    },
    Found(ShardGuard<'a>, Fetched),
}

impl Store {
    /// Defers flash reads on this thread from now on (a worker's, at its start): a command
    /// that needs a record not yet read ends at once without an effect (a get reports a miss,
    /// a change refuses), noting the read; the caller sees it with `flash_deferred`, throws the
    /// command's reply away, asks for the reads (`ask_deferred`) and runs the command again
    /// once woken, when it finds the record read. So a worker never waits for flash.
    pub fn defer_flash_reads_on_this_thread(&self) {
        if self.flash.is_some() {
            DEFERRING.set(true);
        }
    }

    /// Whether a command on this thread was deferred since the last `ask_deferred`.
    #[inline]
    pub fn flash_deferred(&self) -> bool {
        self.flash.is_some() && DEFERRED.with_borrow(|deferred| !deferred.is_empty())
    }

    /// Gives this worker thread a ring of its own for the reads its commands defer (after
    /// `defer_flash_reads_on_this_thread`): `ask_deferred` then submits them there, and the
    /// ring's eventfd, which `watch` is given to watch, turns readable as they complete (call
    /// `land_flash_reads_on_this_thread` then). `wake` is the worker's waker, for reads another
    /// worker or an I/O thread lands for it. False without a flash tier, where the kernel
    /// gives no io_uring, or when `watch` fails: reads then go through the I/O threads.
    pub fn read_flash_on_this_thread(
        &self,
        wake: FlashWaker,
        watch: impl FnOnce(RawFd) -> std::io::Result<()>,
    ) -> bool {
        let Some(ring) = self.flash.as_ref().and_then(|f| f.direct_ring(wake)) else {
            return false;
        };
        if let Err(e) = watch(ring.fd()) {
            tracing::warn!("flash tier: a worker's reads go through the I/O threads: {e}");
            return false;
        }
        DIRECT.set(Some(ring));
        true
    }

    /// Lands the reads completed on this worker's ring (its eventfd was readable); the
    /// commands waiting for them can run again (`flash_ready`).
    pub fn land_flash_reads_on_this_thread(&self) {
        let Some(flash) = &self.flash else { return };
        DIRECT.with_borrow_mut(|direct| {
            if let Some(direct) = direct {
                flash.reap(direct);
            }
        });
    }

    /// Ends this worker's own ring (`read_flash_on_this_thread`) as the worker stops: what it
    /// has in flight or waiting is read and landed first, so that another worker that asked
    /// for the same is woken.
    pub fn stop_reading_flash_on_this_thread(&self) {
        let Some(flash) = &self.flash else { return };
        if let Some(direct) = DIRECT.take() {
            flash.retire(direct);
        }
    }

    /// Starts the reads this thread's commands deferred: on its own ring when it has one,
    /// else queued for the I/O threads, `wake` called once a batch of them has landed.
    /// Returns what was asked for, for `flash_ready`.
    pub fn ask_deferred(&self, wake: &FlashWaker) -> Vec<u64> {
        let Some(flash) = &self.flash else {
            return Vec::new();
        };
        let locations = DEFERRED.take();
        DIRECT.with_borrow_mut(|direct| match direct {
            Some(direct) => flash.submit(direct, &locations),
            None => flash.ask(&locations, wake),
        });
        locations
    }

    /// Whether a command waiting for the reads `asked` (what `ask_deferred` returned) should
    /// run again now: one of them has landed, or none is waiting to be read any more.
    pub fn flash_ready(&self, asked: &[u64]) -> bool {
        self.flash.as_ref().is_none_or(|flash| flash.ready(asked))
    }

    /// Defers `key`'s read too when its item is on flash and not read yet, so that a
    /// multiget's reads are asked for together (on a thread that defers them).
    pub fn defer_if_on_flash(&self, key: &[u8]) {
        let Some(flash) = &self.flash else { return };
        if !DEFERRING.get() {
            return;
        }
        let (shard, key) = self.hash(key);
        let guard = self.lock(shard);
        if self.lookup(&guard, key).is_some() {
            return;
        }
        let hash = self.hasher.hash_one(key.bytes);
        if let Some((_, location)) = self.flash_candidate(&guard, key, hash, &[]) {
            if !flash.is_landed(location) && !flash.is_stale(location) {
                DEFERRED.with_borrow_mut(|deferred| deferred.push(location));
            }
        }
    }

    /// Reads flash for the commands that deferred, waiting up to `wait` for some to be asked
    /// for: the server runs `FlashConfig::io_threads` threads calling it in a loop.
    pub fn serve_flash_reads(&self, wait: Duration) {
        match &self.flash {
            Some(flash) => flash.serve_reads(wait),
            None => std::thread::sleep(wait),
        }
    }

    /// The flash tier's knobs, which the `extstore` command changes; `None` without one.
    pub fn flash_knobs(&self) -> Option<&FlashKnobs> {
        self.flash.as_ref().map(|f| &f.knobs)
    }

    /// The flash tier's counters and gauges; `None` without one.
    pub fn flash_stats(&self) -> Option<FlashStats> {
        let f = self.flash.as_ref()?;
        let c = &f.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
        let (mut free, mut objects_used, mut bytes_used, mut filled) = (0, 0, 0, 0);
        for (p, info) in f.pages.iter().zip(f.page_info()) {
            if info.free {
                free += 1;
            } else {
                objects_used += p.live();
                bytes_used += info.bytes_used;
                filled += p.fill.load(Relaxed);
            }
        }
        let total = self.each_shard_total(|sh| sh.counters.set_bytes);
        Some(FlashStats {
            compact_lost: load(&c.compact_lost),
            compact_rescues: load(&c.compact_rescues),
            compact_skipped: load(&c.compact_skipped),
            page_allocs: load(&c.page_allocs),
            page_evictions: load(&c.page_evictions),
            page_reclaims: load(&c.page_reclaims),
            pages_free: free,
            pages_used: f.page_count() as u64 - free,
            objects_evicted: load(&c.objects_evicted),
            objects_read: load(&c.objects_read),
            objects_written: load(&c.objects_written),
            objects_used,
            bytes_evicted: load(&c.bytes_evicted),
            bytes_written: load(&c.bytes_written),
            bytes_read: load(&c.bytes_read),
            bytes_used,
            bytes_fragmented: filled.saturating_sub(bytes_used),
            limit_maxbytes: f.page_count() as u64 * f.page_size,
            io_queue: f.queued() as u64,
            gets: load(&c.gets),
            misses: load(&c.misses),
            bad_crc: load(&c.bad_crc),
            recaches: load(&c.recaches),
            false_reads: load(&c.false_reads),
            stale_entries: f.stale_entries(),
            bytes_set: total,
        })
    }

    fn each_shard_total(&self, count: impl Fn(&Shard) -> u64) -> u64 {
        (0..self.shards.len()).map(|s| count(&self.lock(s))).sum()
    }

    /// Every flash page, in order (`stats extstore`).
    pub fn flash_pages(&self) -> Vec<FlashPageInfo> {
        self.flash.as_ref().map_or_else(Vec::new, |f| f.page_info())
    }

    /// One pass of the flash tier's background work (write full buffers, free or compact a
    /// page, move idle items to flash); returns how long its thread may sleep before the
    /// next. The server runs `FlashConfig::io_threads` threads calling it in a loop.
    pub fn flash_work(&self) -> Duration {
        let Some(flash) = &self.flash else {
            return Duration::from_secs(1);
        };
        let knobs = flash.knobs.get();
        let mut busy = false;
        loop {
            match flash.write_one() {
                Ok(true) => busy = true,
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!("flash tier: a buffer's write failed, retried later: {e}");
                    break;
                }
            }
        }
        busy |= self.empty_page(flash, Empty::Expired);
        // Short of pages: the emptiest page is compacted if one is fragmented enough and a
        // free page can take what it keeps; with none free, the oldest is evicted.
        let free = flash.pages_free();
        if free <= (knobs.compact_under as usize).max(1) {
            let drop_unread = knobs.drop_unread || free < knobs.drop_under as usize;
            let compacted = free > 0
                && self.empty_page(
                    flash,
                    Empty::Compact {
                        max_frag: knobs.max_frag,
                        drop_unread,
                    },
                );
            busy |= compacted;
            if free == 0 {
                busy |= self.evict_oldest_page(flash);
            }
        }
        if knobs.item_age != u32::MAX {
            busy |= self.move_idle(knobs.item_age) > 0;
        }
        // A buffer only partly filled stays in memory, readable, until it fills (or a clean
        // stop writes it): writing it early would leave the rest of its stretch of page unused.
        if busy {
            Duration::ZERO
        } else {
            Duration::from_micros(u64::from(knobs.max_sleep_us).min(100_000))
        }
    }

    /// Whether an item goes to flash by size and deadline (one with less than `ext_low_ttl`
    /// left goes to pages of its own): at least `ext_item_size`, and its record no larger than
    /// a write buffer, as memcached's `-I` is at most `ext_wbuf_size`.
    fn flash_wants(&self, flash: &Flash, hdr: &Header, now: UnixSecs) -> bool {
        (flash.knobs.get().item_size as usize..=self.flash_sized_to).contains(&hdr.size())
            && !hdr.is_expired_at(now)
    }

    /// Moves the item `found` (in memory, indexed) to flash when the flash tier wants it and
    /// has room: its index slot then points there, and its segment (or run, for an item
    /// larger than a segment) no longer counts it.
    pub(crate) fn to_flash(&self, sh: &mut Shard, found: Found, now: UnixSecs) -> bool {
        let Some(flash) = &self.flash else {
            return false;
        };
        let h = found.hdr;
        if !self.flash_wants(flash, &h, now) {
            return false;
        }
        let item = &self.segs.read(&sh.owner, found.loc.seg)[found.loc.off as usize..];
        let key = h.key(item);
        let value = &item[h.value_range()];
        let cas = self
            .config
            .cas_enabled
            .then(|| self.segs.cas_of(found.loc, h.cas));
        let size = item::item_size(
            key.len(),
            value.len(),
            h.flags,
            h.expiry != 0,
            cas.is_some(),
        );
        let knobs = flash.knobs.get();
        // As memcached's buckets: a short deadline first, then size.
        let bucket = if h.expiry != 0 && h.expiry.saturating_sub(now) < knobs.low_ttl {
            Bucket::LowTtl
        } else if get32(&self.segs.meta(found.loc.seg).run_len) != 1 {
            Bucket::Large
        } else {
            Bucket::Default
        };
        let Some(addr) = flash.append(bucket, size, h.expiry, |out| {
            item::write(
                out,
                key,
                h.flags,
                h.expiry,
                h.expiry != 0,
                cas,
                [value, &[]],
                h.bits & item::STATE_BITS,
                0,
            )
        }) else {
            return false;
        };
        let hash = self.hasher.hash_one(key);
        sh.index
            .set_location(found.slot, flash.location(addr, hash));
        let meta = self.segs.meta(found.loc.seg);
        set32(&meta.live, get32(&meta.live) - 1);
        let c = &mut sh.counters;
        c.bytes -= (h.key_len + h.value_len) as u64;
        c.item_bytes -= h.size() as u64;
        c.flash_sized -= u64::from(self.flash_sized(h.size()));
        true
    }

    /// Removes the flash entry at index slot `slot` (location `location`).
    pub(crate) fn unlink_flash(&self, sh: &mut Shard, slot: usize, location: u64) {
        let flash = self
            .flash
            .as_ref()
            .expect("a flash entry means a flash tier");
        sh.index.remove(slot);
        sh.counters.curr_items -= 1;
        flash.forget(location);
    }

    /// Removes from this shard's index every entry left pointing at an evicted flash page;
    /// how many. A shard's index is swept before it grows (stale entries must not cost
    /// memory), and every shard before a page's generation would wrap.
    pub(crate) fn sweep_stale(&self, sh: &mut Shard) -> usize {
        let Some(flash) = &self.flash else { return 0 };
        if flash.stale_entries() == 0 {
            return 0;
        }
        let removed = sh
            .index
            .remove_where(|location| is_flash(location) && flash.is_stale(location));
        sh.counters.curr_items -= removed as u64;
        flash.forget_stale(removed as u64);
        removed
    }

    /// Evicts the oldest full page, flash being full, without reading it back: its entries
    /// turn stale (`Flash::evict_page`). Sweeps every shard first when the page's generation
    /// would otherwise wrap onto stale entries of an earlier one.
    fn evict_oldest_page(&self, flash: &Flash) -> bool {
        let _evicting = flash.evicting.lock();
        let Some(page) = flash.take_victim(None) else {
            return false;
        };
        if flash.must_sweep_before_evicting(page) {
            for id in 0..self.shards.len() {
                self.sweep_stale(&mut self.lock(id));
            }
            flash.mark_swept();
        }
        flash.evict_page(page);
        true
    }

    /// The first flash entry in `sh` that may be `key`'s (tag and check bits agree), other
    /// than those in `skip`.
    fn flash_candidate(
        &self,
        sh: &Shard,
        key: Key,
        hash: u64,
        skip: &[u64],
    ) -> Option<(usize, u64)> {
        let flash = self.flash.as_ref()?;
        sh.index.find(key.tag, |location| {
            (flash.geometry.may_be(location, hash) && !skip.contains(&location)).then_some(location)
        })
    }

    /// With `guard` on `key`'s shard and no item for it in memory: reads the flash entry that
    /// may be the key's (the lock let go meanwhile) and keeps it if it is, still indexed.
    pub(crate) fn fetch<'a>(
        &'a self,
        guard: ShardGuard<'a>,
        shard: usize,
        key: Key,
    ) -> OnFlash<'a> {
        let Some(flash) = &self.flash else {
            return OnFlash::Absent(guard);
        };
        let hash = self.hasher.hash_one(key.bytes);
        let mut skip = Vec::new();
        let mut guard = guard;
        let mut released = false;
        let mut gone = false;
        loop {
            let Some((slot, location)) = self.flash_candidate(&guard, key, hash, &skip) else {
                // With the lock let go for a read, memory may have the key now; if not, what
                // was looked at under this lock is the answer (looking again would read the
                // same false candidates again, and again).
                if released && self.lookup(&guard, key).is_some() {
                    return OnFlash::Changed { gone };
                }
                return if gone {
                    OnFlash::Gone(guard)
                } else {
                    OnFlash::Absent(guard)
                };
            };
            if flash.is_stale(location) {
                // Its page was evicted: memcached's miss from extstore, found without a read.
                bump(&flash.counters.misses, 1);
                self.unlink_flash(&mut guard, slot, location);
                gone = true;
                continue;
            }
            let read = match flash.take_landed(location) {
                Some(read) => read,
                None if DEFERRING.get() => {
                    DEFERRED.with_borrow_mut(|deferred| deferred.push(location));
                    bump(&flash.counters.deferred, 1);
                    return OnFlash::Deferred;
                }
                None => {
                    drop(guard);
                    released = true;
                    let read = flash.read(flash.geometry.addr_of(location));
                    guard = self.lock(shard);
                    read
                }
            };
            let sh = &mut *guard;
            let slot = self.flash_slot(sh, key, location);
            let counted = match read {
                Ok(ReadOutcome::Record(record)) => Ok(record),
                Ok(ReadOutcome::Bad) => {
                    bump(&flash.counters.bad_crc, 1);
                    Err(true)
                }
                Ok(ReadOutcome::Stale) => Err(false),
                Err(e) => {
                    tracing::warn!("flash tier: a read failed, served as a miss: {e}");
                    Err(true)
                }
            };
            let record = match counted {
                Ok(record) => record,
                Err(counted) => {
                    bump(&flash.counters.misses, 1);
                    gone |= slot.is_some();
                    if let Some(slot) = slot {
                        if counted {
                            self.unlink_flash(sh, slot, location);
                        } else {
                            // The page lives again: its live count is of its new records.
                            sh.index.remove(slot);
                            sh.counters.curr_items -= 1;
                            if flash.is_stale(location) {
                                flash.forget_stale(1);
                            }
                        }
                    }
                    continue;
                }
            };
            let Some(hdr) = item::parse_checked(record.item()) else {
                bump(&flash.counters.bad_crc, 1);
                skip.push(location);
                continue;
            };
            if hdr.key(record.item()) != key.bytes {
                bump(&flash.counters.false_reads, 1);
                skip.push(location);
                continue;
            }
            if slot.is_none() {
                // Replaced or removed while the lock was let go.
                return OnFlash::Changed { gone };
            }
            return OnFlash::Found(
                guard,
                Fetched {
                    location,
                    record,
                    hdr,
                },
            );
        }
    }

    /// Drops, without reading them, the flash entries that may be `key`'s (a `set` replacing
    /// it). All of them: another key's entry with the same tag and check bits goes too (a set
    /// never waits for flash), so that the key's own never stays behind its new item, where no
    /// lookup would meet it again.
    pub(crate) fn drop_flash_candidates(&self, sh: &mut Shard, key: Key) {
        if self.flash.is_none() {
            return;
        }
        let hash = self.hasher.hash_one(key.bytes);
        while let Some((slot, location)) = self.flash_candidate(sh, key, hash, &[]) {
            self.unlink_flash(sh, slot, location);
        }
    }

    /// The slot of the flash entry at `location`, if the index still has it.
    pub(crate) fn flash_slot(&self, sh: &Shard, key: Key, location: u64) -> Option<usize> {
        sh.index
            .find(key.tag, |l| (l == location).then_some(()))
            .map(|(slot, ())| slot)
    }

    /// Brings a fetched item back into memory (its CAS and marks kept, `expiry` its new
    /// deadline when given), replacing its flash entry; false when memory has no room.
    pub(crate) fn promote(
        &self,
        sh: &mut Shard,
        key: Key,
        fetched: &Fetched,
        keep_bits: u8,
        expiry: Option<u32>,
        now: UnixSecs,
    ) -> bool {
        let h = fetched.hdr;
        let item = fetched.record.item();
        let version = Version {
            flags: h.flags,
            expiry: expiry.unwrap_or(h.expiry),
            cas: h.cas,
            keep_bits,
        };
        let size = item::item_size(
            h.key_len,
            h.value_len,
            h.flags,
            version.expiry != 0,
            h.cas.is_some(),
        );
        if sh.index.needs_room() && !self.grow_index(sh, now) {
            return false;
        }
        let value = &item[h.value_range()];
        let written = if self.fits_segment(size) {
            self.put_small(sh, key, None, version, [value, &[]], now)
                .is_some()
        } else {
            self.put_large_holding(sh, key, value, version, now)
        };
        // Making room may have moved the entry; the new item is indexed beside it.
        if written {
            if let Some(slot) = self.flash_slot(sh, key, fetched.location) {
                self.unlink_flash(sh, slot, fetched.location);
            }
        }
        written
    }

    /// A get's view of a record.
    pub(crate) fn flash_view<'a>(
        &'a self,
        hdr: &Header,
        item: &'a [u8],
        now: UnixSecs,
    ) -> ItemView<'a> {
        ItemView {
            value: &item[hdr.value_range()],
            flags: hdr.flags,
            cas: CasSource {
                segs: &self.segs,
                loc: Loc { seg: 0, off: 0 },
                kept: hdr.cas,
            },
            expiry: Expiry(hdr.expiry),
            fetched: hdr.has(item::FETCHED),
            // Flash keeps no access time: the item was read now.
            last_access: now,
            stale: hdr.has(item::STALE),
            win_sent: hdr.has(item::WIN_SENT),
        }
    }

    /// Whether this read of flash brings its item back into memory (`ext_recache_rate`).
    pub(crate) fn recache_due(&self) -> bool {
        let Some(flash) = &self.flash else {
            return false;
        };
        let rate = flash.knobs.get().recache_rate;
        rate != 0 && flash.counters.reads.fetch_add(1, Relaxed) % u64::from(rate) == 0
    }

    pub(crate) fn count_flash_get(&self) {
        if let Some(flash) = &self.flash {
            bump(&flash.counters.gets, 1);
        }
    }

    pub(crate) fn count_recache(&self) {
        if let Some(flash) = &self.flash {
            bump(&flash.counters.recaches, 1);
        }
    }

    /// Serves a read from a fetched record: the view to `read`, the item brought back into
    /// memory when `read` changed its marks.
    pub(crate) fn read_fetched<R>(
        &self,
        sh: &mut Shard,
        key: Key,
        fetched: &Fetched,
        now: UnixSecs,
        read: impl FnOnce(ItemView<'_>, &mut Marks) -> R,
    ) -> R {
        let h = fetched.hdr;
        let view = self.flash_view(&h, fetched.record.item(), now);
        let before = Marks {
            stale: view.stale,
            win_sent: view.win_sent,
        };
        let mut marks = before;
        let result = read(view, &mut marks);
        if marks != before {
            let mark = |on: bool, bit: u8| if on { bit } else { 0 };
            let bits = (h.bits & (item::FETCHED | item::REFERENCED))
                | mark(marks.stale, item::STALE)
                | mark(marks.win_sent, item::WIN_SENT);
            self.promote(sh, key, fetched, bits, None, now);
        }
        result
    }

    /// Moves items idle `age` seconds or more to flash, from every shard whose lock is free;
    /// how many went.
    fn move_idle(&self, age: u32) -> usize {
        let now = self.clock.now();
        let Some(flash) = &self.flash else { return 0 };
        let idle_since = now.saturating_sub(age);
        let mut moved = 0;
        for shard in 0..self.shards.len() {
            let Some(mut guard) = self.shards[shard].0.try_lock() else {
                continue;
            };
            let sh = &mut *guard;
            for g in 0..GROUPS {
                let mut i = 0;
                while let Some(&seg) = sh.chains[g].get(i) {
                    i += 1;
                    let meta = self.segs.meta(seg);
                    let created = get32(&meta.created);
                    if created > idle_since {
                        break;
                    }
                    if get32(&meta.live) == 0 {
                        continue;
                    }
                    let end = get32(&meta.write_off);
                    let mut off = 0;
                    while off < end {
                        let loc = Loc { seg, off };
                        let (hdr, slot) = self.indexed_item(sh, loc);
                        off += hdr.size() as u32;
                        let last_access = created + item::decode_age(hdr.access);
                        let Some(slot) = slot else { continue };
                        if last_access > idle_since || !self.flash_wants(flash, &hdr, now) {
                            continue;
                        }
                        if !self.to_flash(sh, Found { slot, loc, hdr }, now) {
                            return moved;
                        }
                        moved += 1;
                    }
                    if get32(&meta.live) == 0 && !sh.active[g].contains(seg) {
                        self.drop_segment(sh, seg);
                        self.release(sh, false);
                        i -= 1;
                    }
                }
            }
        }
        moved
    }

    /// Empties one full page as `how` says; false when no page qualifies.
    fn empty_page(&self, flash: &Flash, how: Empty) -> bool {
        let now = self.clock.now();
        let victim = match how {
            Empty::Expired => flash.take_expired(now),
            Empty::Compact { max_frag, .. } => flash.take_victim(Some(max_frag)),
        };
        let Some(page) = victim else {
            return false;
        };
        let version = flash.pages[page as usize].version.load(Relaxed) as u32;
        let fill = flash.pages[page as usize].fill.load(Relaxed);
        let chunk_len = flash.wbuf_size();
        let mut chunk = match AlignedBuf::new(chunk_len) {
            Ok(buf) => buf,
            Err(e) => {
                tracing::warn!("flash tier: no memory to read a page back: {e}");
                flash.finish_page(page);
                return false;
            }
        };
        let mut from = 0;
        while from < fill {
            if let Err(e) = flash.read_page(page, from, &mut chunk) {
                tracing::warn!("flash tier: reading page {page} back failed: {e}");
                break;
            }
            let base = page as u64 * flash.page_size + from;
            for (at, item_bytes) in crate::mechanics::flash::records_in(&chunk, version) {
                let Some(hdr) = item::parse_checked(item_bytes) else {
                    continue;
                };
                let key_bytes = hdr.key(item_bytes);
                let (shard, key) = self.hash(key_bytes);
                let hash = self.hasher.hash_one(key_bytes);
                let location = flash.location(base + at as u64, hash);
                let mut guard = self.lock(shard);
                let sh = &mut *guard;
                let Some(slot) = self.flash_slot(sh, key, location) else {
                    continue;
                };
                let drop_unread = match how {
                    Empty::Expired => {
                        self.unlink_flash(sh, slot, location);
                        sh.counters.reclaimed += 1;
                        sh.counters.expired_unfetched += u64::from(!hdr.has(item::FETCHED));
                        continue;
                    }
                    Empty::Compact { drop_unread, .. } => drop_unread,
                };
                if hdr.is_expired_at(now) || (drop_unread && !hdr.has(item::FETCHED)) {
                    self.unlink_flash(sh, slot, location);
                    bump(&flash.counters.compact_skipped, 1);
                    continue;
                }
                let rescued = flash.append(Bucket::Compact, item_bytes.len(), hdr.expiry, |out| {
                    out.copy_from_slice(item_bytes)
                });
                match rescued {
                    Some(addr) => {
                        sh.index.set_location(slot, flash.location(addr, hash));
                        flash.forget(location);
                        bump(&flash.counters.compact_rescues, 1);
                    }
                    None => {
                        self.unlink_flash(sh, slot, location);
                        bump(&flash.counters.compact_lost, 1);
                    }
                }
            }
            from += chunk_len as u64;
        }
        flash.finish_page(page);
        true
    }

    /// Forgets every flash entry of a shard being emptied (`flush_all`).
    pub(crate) fn forget_flash_entries(&self, sh: &Shard) {
        let Some(flash) = &self.flash else { return };
        sh.index
            .entries_with_tags(0..1 << crate::mechanics::index::TAG_BITS, |location| {
                if is_flash(location) {
                    flash.forget(location);
                }
            });
    }
}

/// Which page `empty_page` empties, and what becomes of its items.
#[derive(Clone, Copy, PartialEq)]
enum Empty {
    /// A page whose every item has expired: they are gone (reclaimed).
    Expired,
    /// The emptiest page under `max_frag` live: its live items are written again (dropped
    /// when never read, with `drop_unread`).
    Compact { max_frag: f64, drop_unread: bool },
}

/// What a command that changes an item means to do with one on flash.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Replace it whatever it is (`set`): its entry is dropped unread.
    Overwrite,
    /// Change it (touch, cas, add, replace, invalidate): it is brought back into memory.
    Change,
    /// Delete it, if its CAS is the one given.
    Delete(Option<u64>),
    /// incr/decr, append/prepend: refused on flash, as memcached's extstore refuses them.
    Refuse,
}

/// Where a command stands after looking at flash (`Store::before_write`).
pub(crate) enum Before<'a> {
    /// Go on in memory, under this lock.
    Go(ShardGuard<'a>),
    /// Start again (the lock was let go, or the item came back into memory).
    Again,
    /// The item is on flash and the intent refuses it there.
    OnFlash,
    /// Deleted from flash.
    Deleted,
    /// A delete's CAS did not match.
    Exists,
    /// The item is on flash and memory has no room to bring it back.
    NoRoom,
    /// Its record is not read yet and this thread defers reads: end without an effect.
    Deferred,
}

impl Store {
    /// Before a change to `key` (lock held): if it has no item in memory but one on flash,
    /// handles that by `intent`. Only with a flash tier: kept out of the commands' code.
    #[cold]
    #[inline(never)]
    pub(crate) fn before_write<'a>(
        &'a self,
        mut guard: ShardGuard<'a>,
        shard: usize,
        key: Key,
        intent: Intent,
        now: UnixSecs,
    ) -> Before<'a> {
        if self.catch_up_flush(&mut guard, Some(key), now).is_err()
            || self.lookup(&guard, key).is_some()
        {
            return Before::Go(guard);
        }
        if intent == Intent::Overwrite {
            self.drop_flash_candidates(&mut guard, key);
            return Before::Go(guard);
        }
        let (mut guard, fetched) = match self.fetch(guard, shard, key) {
            OnFlash::Absent(guard) | OnFlash::Gone(guard) => return Before::Go(guard),
            OnFlash::Changed { .. } => return Before::Again,
            OnFlash::Deferred => return Before::Deferred,
            OnFlash::Found(guard, fetched) => (guard, fetched),
        };
        let sh = &mut *guard;
        let h = fetched.hdr;
        if h.is_expired_at(now) {
            let slot = self
                .flash_slot(sh, key, fetched.location)
                .expect("found under this lock");
            self.unlink_flash(sh, slot, fetched.location);
            return Before::Go(guard);
        }
        match intent {
            Intent::Overwrite => unreachable!("handled above"),
            Intent::Refuse => Before::OnFlash,
            Intent::Delete(expected) => {
                let cas = self.segs.cas_of(Loc { seg: 0, off: 0 }, h.cas);
                if expected.is_some_and(|e| e != cas) {
                    return Before::Exists;
                }
                let slot = self
                    .flash_slot(sh, key, fetched.location)
                    .expect("found under this lock");
                self.unlink_flash(sh, slot, fetched.location);
                Before::Deleted
            }
            Intent::Change => {
                if self.promote(sh, key, &fetched, h.bits & item::STATE_BITS, None, now) {
                    Before::Again
                } else {
                    Before::NoRoom
                }
            }
        }
    }
}
