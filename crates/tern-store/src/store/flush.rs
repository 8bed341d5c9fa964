//! `flush_all`: one global mark (deadline and generation) that each shard applies itself, on
//! its first operation once the deadline has come, so a flush never stops the world.

use std::sync::atomic::Ordering::Relaxed;

use super::key::Key;
use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::segments::get32;
use crate::mechanics::shard::{Lanes, Shard};
use crate::mechanics::ttl::GROUPS;
use crate::mechanics::types::Miss;

impl Store {
    /// Applies a `flush_all` that has come due for this shard; reports `Flushed` when `key`
    /// was among the items it removed.
    #[inline]
    pub(crate) fn catch_up_flush(
        &self,
        sh: &mut Shard,
        key: Option<Key>,
        now: UnixSecs,
    ) -> Result<(), Miss> {
        match self.flush.due(sh.flush_seq, now) {
            None => Ok(()),
            Some(seq) => self.apply_flush(sh, key.as_ref(), seq),
        }
    }

    /// `catch_up_flush` once a flush is due: once per flush and shard, so kept out of the
    /// operations that check for one.
    #[cold]
    fn apply_flush(&self, sh: &mut Shard, key: Option<&Key>, seq: u32) -> Result<(), Miss> {
        let had_key = key.is_some_and(|&key| self.lookup(sh, key).is_some());
        self.clear_shard(sh);
        self.set_flush_applied(sh, seq);
        if had_key {
            Err(Miss::Flushed)
        } else {
            Ok(())
        }
    }

    /// Records that `sh` has applied `flush_all` generation `seq`, for readers with and without
    /// its lock.
    pub(crate) fn set_flush_applied(&self, sh: &mut Shard, seq: u32) {
        sh.flush_seq = seq;
        self.shards[sh.owner.id() as usize]
            .0
            .flush_applied
            .store(seq, Relaxed);
    }

    fn clear_shard(&self, sh: &mut Shard) {
        for g in 0..GROUPS {
            while let Some(head) = sh.chains[g].pop_front() {
                let run = get32(&self.segs.meta(head).run_len);
                sh.freed.extend(head..head + run);
            }
            sh.active[g] = Lanes::NONE;
        }
        self.forget_flash_entries(sh);
        let old = sh.index.bytes();
        sh.index.clear();
        self.refresh_hint(sh);
        self.recharge_index(old, sh.index.bytes());
        sh.churn += 1;
        let c = &mut sh.counters;
        (c.curr_items, c.bytes, c.item_bytes, c.flash_sized) = (0, 0, 0, 0);
        self.release(sh, false);
    }

    /// Runs `visit` on every shard in turn, each brought up to date with any flush that has
    /// come due.
    pub(crate) fn each_shard(&self, now: UnixSecs, mut visit: impl FnMut(&mut Shard)) {
        for shard in 0..self.shards.len() {
            let mut guard = self.lock(shard);
            let _ = self.catch_up_flush(&mut guard, None, now);
            visit(&mut guard);
        }
    }

    /// `flush_all [delay]`: items stored before `now + delay` stop being served from then on.
    /// Each shard is emptied by its first operation once the deadline has come (an immediate
    /// flush empties them all now).
    pub fn flush_all(&self, delay_secs: u32) {
        let _serial = self.flush.serial.lock();
        let now = self.clock.now();
        // A flush already due must not be cancelled by the new mark.
        self.each_shard(now, |_| ());
        let seq = (self.flush.mark.load(Relaxed) as u32).wrapping_add(1);
        let at = now.saturating_add(delay_secs);
        self.flush
            .mark
            .store(((at as u64) << 32) | seq as u64, Relaxed);
        if delay_secs == 0 {
            self.each_shard(now, |_| ());
        }
    }
}
