//! A shard's hash index: one `u64` per item in a Robin Hood open-addressing table.
//!
//! A slot holds a 24-bit tag (the hash's top bits) and the item's 40-bit location (segment + 1,
//! byte offset). The home slot is computed from the tag alone, so growing the table never reads
//! a key: the shard's table is rebuilt 1.25x larger when 90% full, which keeps it between 72%
//! and 90% full (8.9-11.1 bytes per item). Robin Hood ordering lets a miss stop after a few
//! probes even at that load. A rebuild holds only this shard's lock, for a time proportional to
//! the shard's items (`Config::shards` spreads the index).

pub(crate) const TAG_BITS: u32 = 24;
const LOC_BITS: u32 = 40;
const LOC_MASK: u64 = (1 << LOC_BITS) - 1;
const MIN_CAPACITY: usize = 64;

pub(crate) struct Index {
    slots: Box<[u64]>,
    len: usize,
}

fn tag_of(slot: u64) -> u32 {
    (slot >> LOC_BITS) as u32
}

impl Index {
    pub(crate) fn new() -> Index {
        Index {
            slots: vec![0; MIN_CAPACITY].into_boxed_slice(),
            len: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> usize {
        self.slots.len() * 8
    }

    fn home(&self, tag: u32) -> usize {
        ((tag as u64 * self.slots.len() as u64) >> TAG_BITS) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// How far `slot`, found at `i`, sits from its home.
    fn distance(&self, i: usize, slot: u64) -> usize {
        let home = self.home(tag_of(slot));
        if i >= home {
            i - home
        } else {
            i + self.slots.len() - home
        }
    }

    /// The slot whose tag is `tag` and whose location satisfies `matches`.
    pub(crate) fn find(&self, tag: u32, mut matches: impl FnMut(u64) -> bool) -> Option<usize> {
        let mut i = self.home(tag);
        let mut dist = 0;
        loop {
            let slot = self.slots[i];
            if slot == 0 || self.distance(i, slot) < dist {
                return None;
            }
            if tag_of(slot) == tag && matches(slot & LOC_MASK) {
                return Some(i);
            }
            i = self.next(i);
            dist += 1;
        }
    }

    pub(crate) fn location(&self, i: usize) -> u64 {
        self.slots[i] & LOC_MASK
    }

    pub(crate) fn set_location(&mut self, i: usize, loc: u64) {
        self.slots[i] = (self.slots[i] & !LOC_MASK) | loc;
    }

    /// Adds an entry (the caller has removed any older one for the same key).
    pub(crate) fn insert(&mut self, tag: u32, loc: u64) {
        debug_assert!(loc != 0 && loc <= LOC_MASK && tag < 1 << TAG_BITS);
        if (self.len + 1) * 10 > self.slots.len() * 9 {
            self.grow();
        }
        self.place(((tag as u64) << LOC_BITS) | loc);
        self.len += 1;
    }

    fn place(&mut self, mut slot: u64) {
        let mut i = self.home(tag_of(slot));
        let mut dist = 0;
        loop {
            let here = self.slots[i];
            if here == 0 {
                self.slots[i] = slot;
                return;
            }
            let here_dist = self.distance(i, here);
            if here_dist < dist {
                self.slots[i] = slot;
                slot = here;
                dist = here_dist;
            }
            i = self.next(i);
            dist += 1;
        }
    }

    /// Removes slot `i`, shifting its followers back (no tombstones).
    pub(crate) fn remove(&mut self, mut i: usize) {
        loop {
            let j = self.next(i);
            let next = self.slots[j];
            if next == 0 || self.distance(j, next) == 0 {
                self.slots[i] = 0;
                break;
            }
            self.slots[i] = next;
            i = j;
        }
        self.len -= 1;
    }

    pub(crate) fn clear(&mut self) {
        *self = Index::new();
    }

    fn grow(&mut self) {
        let capacity = self.slots.len() + self.slots.len() / 4;
        let old = std::mem::replace(&mut self.slots, vec![0; capacity].into_boxed_slice());
        for slot in old.iter().copied().filter(|&s| s != 0) {
            self.place(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn matches_a_map_through_growth_and_removal() {
        let mut index = Index::new();
        let mut model = HashMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..40_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let tag = (x >> 40) as u32;
            let loc = round + 1;
            if round % 3 == 2 {
                let (&victim, &victim_tag) = model.iter().next().expect("non-empty");
                let i = index.find(victim_tag, |l| l == victim).expect("present");
                index.remove(i);
                model.remove(&victim);
            } else {
                index.insert(tag, loc);
                model.insert(loc, tag);
            }
        }
        assert_eq!(index.len(), model.len());
        for (&loc, &tag) in &model {
            let i = index.find(tag, |l| l == loc).expect("present");
            assert_eq!(index.location(i), loc);
        }
        let load = index.len() as f64 / (index.bytes() / 8) as f64;
        assert!(load > 0.5 && load <= 0.9, "load {load}");
    }
}
