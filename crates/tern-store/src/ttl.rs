//! TTL groups: each shard chains its segments by how long their items live (never, then one
//! group per power of two of seconds), so items that expire together sit together and a
//! segment whose latest deadline has passed is freed whole, without reading its items.

use std::sync::atomic::Ordering::Relaxed;

use crate::segments::{get32, set32, SegMeta, NO_SEGMENT};
use crate::shard::Shard;
use crate::store::Store;
use crate::UnixSecs;

/// TTL groups per shard: 0 for items that never expire, then one per power of two of seconds.
pub(crate) const GROUPS: usize = 33;
/// Largest value of `never` in a segment's `max_expiry`: some item there never expires.
const NEVER_EXPIRES: u32 = u32::MAX;

/// The TTL group of an item expiring at `expiry` (0 = never), written at `now`.
pub(crate) fn group_of(expiry: u32, now: UnixSecs) -> usize {
    if expiry == 0 {
        return 0;
    }
    let ttl = expiry.saturating_sub(now).max(1);
    1 + (31 - ttl.leading_zeros()) as usize
}

/// An expiry ordered by how late it is: never comes last.
pub(crate) fn expiry_rank(expiry: u32) -> u32 {
    if expiry == 0 {
        NEVER_EXPIRES
    } else {
        expiry
    }
}

/// Makes the segment's latest deadline cover an item expiring at `expiry`.
pub(crate) fn raise_max_expiry(meta: &SegMeta, expiry: u32) {
    set32(
        &meta.max_expiry,
        get32(&meta.max_expiry).max(expiry_rank(expiry)),
    );
}

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
        if sh.active[g] == head {
            sh.active[g] = NO_SEGMENT;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_powers_of_two_of_seconds_left() {
        let now = 1_000;
        let groups: Vec<usize> = [
            0,
            now - 5,
            now,
            now + 1,
            now + 2,
            now + 3,
            now + 4,
            now + 1024,
        ]
        .iter()
        .map(|&expiry| group_of(expiry, now))
        .collect();
        assert_eq!(groups, [0, 1, 1, 1, 2, 2, 3, 11]);
        assert_eq!(group_of(u32::MAX, 0), GROUPS - 1);
    }
}
