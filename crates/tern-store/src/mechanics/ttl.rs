//! TTL groups: each shard chains its segments by how long their items live (never, then one
//! group per power of two of seconds), so items that expire together sit together and a
//! segment whose latest deadline has passed is freed whole, without reading its items. The
//! chains themselves are the shard's (`Shard::chains`); the steps on them are in `store/ttl.rs`.

use super::clock::UnixSecs;
use super::segments::{get32, set32, SegMeta};

/// TTL groups per shard: 0 for items that never expire, then one per power of two of seconds.
pub(crate) const GROUPS: usize = 33;
/// Largest value of `never` in a segment's `max_expiry`: some item there never expires.
pub(crate) const NEVER_EXPIRES: u32 = u32::MAX;

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
