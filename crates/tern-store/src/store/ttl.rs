//! The steps on a shard's TTL chains (see `mechanics/ttl.rs`): open a segment at a group's
//! young end, drop one, find the oldest, and free segments whose items have all expired.

use std::sync::atomic::Ordering::Relaxed;

use super::Store;
use crate::mechanics::clock::UnixSecs;
use crate::mechanics::segments::get32;
use crate::mechanics::shard::Shard;
use crate::mechanics::ttl::{GROUPS, NEVER_EXPIRES};

impl Store {
    /// Puts segment (or run) `head`, owned by this shard, at the young end of TTL group `g`
    /// with `written` bytes already reserved in it.
    pub(crate) fn open_segment(
        &self,
        sh: &mut Shard,
        head: u32,
        written: usize,
        g: usize,
        now: UnixSecs,
    ) {
        self.segs.open(head, written, g, now);
        sh.chains[g].push_back(head);
        self.publish_oldest(sh);
    }

    /// Takes a segment (or run) out of its chain; its segments go to `sh.freed`.
    pub(crate) fn drop_segment(&self, sh: &mut Shard, head: u32) {
        let meta = self.segs.meta(head);
        let g = get32(&meta.group) as usize;
        if let Some(pos) = sh.chains[g].iter().position(|&s| s == head) {
            sh.chains[g].remove(pos);
        }
        sh.active[g].forget(head);
        let run = get32(&meta.run_len);
        sh.freed.extend(head..head + run);
    }

    /// The TTL group whose oldest segment is the oldest in this shard.
    pub(crate) fn oldest_group(&self, sh: &Shard) -> Option<usize> {
        (0..GROUPS)
            .filter(|&g| !sh.chains[g].is_empty())
            .min_by_key(|&g| self.segs.meta(sh.chains[g][0]).order.load(Relaxed))
    }

    /// Frees this shard's segments whose every item has expired; returns how many.
    pub(crate) fn reclaim_shard(&self, sh: &mut Shard, now: UnixSecs) -> usize {
        let mut reclaimed = 0;
        for g in 0..GROUPS {
            let mut i = 0;
            while i < sh.chains[g].len() {
                let seg = sh.chains[g][i];
                let max = get32(&self.segs.meta(seg).max_expiry);
                if max != 0 && max != NEVER_EXPIRES && max <= now {
                    self.evict_segment(sh, seg, now);
                    sh.counters.reclaimed_segments += 1;
                    reclaimed += 1;
                } else {
                    i += 1;
                }
            }
        }
        reclaimed
    }

    /// Takes back the memory of expired items without waiting for them to be read: every
    /// segment whose items have all expired is freed whole (`reclaimed_segments`). The server
    /// calls this from its clock thread every few seconds (tern-server: every 10 s).
    pub fn reclaim_expired(&self) {
        let now = self.clock.now();
        self.each_shard(now, |sh| {
            self.reclaim_shard(sh, now);
            self.release(sh, false);
        });
    }
}
