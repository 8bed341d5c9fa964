//! Reads without the shard lock: a sequence count per shard (a seqlock), so that a get writes
//! no cache line another thread uses.
//!
//! # The protocol
//!
//! Every holder of a shard's lock makes the shard's count odd when it takes the lock and even
//! again when it lets go (`ShardLock::lock`, `ShardGuard`): each change to the shard's
//! index, its segments' bytes and their bookkeeping is made between the two. A get
//! (`store/read.rs`) reads the count ([`SeqCount::begin_read`]: even, else it tries again),
//! probes the live index table, hands the item's bytes in place to the caller's reader (which
//! copies the value into its reply), and reads the count again ([`SeqCount::validate`]): the
//! same value means no lock holder ran in between, so what the reader saw is one state of the
//! shard; any other value and what the reader wrote is cut off its output (`Sink::undo`), its
//! result dropped, and the get tried again (four times, then under the lock). Readers are
//! `Fn`: besides that output, they can only return a value.
//!
//! A get that must write (an item's first read marks it fetched; an access time a minute old
//! is renewed) takes the lock after its read: if the count its `begin_write` found is the one
//! the read started from (`ShardGuard::unchanged_since`), no writer
//! ran in between, so what it read is the shard as it is, and the lock keeps it so; otherwise
//! it looks the key up again under the lock.
//!
//! # Memory ordering
//!
//! Writer: `seq = s + 1` (relaxed), `fence(Release)`, the changes, `seq = s + 2` (release).
//! Reader: `s1 = seq` (acquire), the reads, `fence(Acquire)`, `s2 = seq` (relaxed). On x86 each
//! is a plain `mov`; the fences only stop the compiler.
//!
//! - If a reader's read saw a change made after a writer's release fence, its acquire fence
//!   synchronises with that fence, so the writer's odd store happens before the reader's
//!   second load: `s2 != s1` (the count only grows), and the read is rejected.
//! - If `s1` came from a writer's closing store (release, acquire), everything that writer
//!   changed happens before the reader's reads: a read with `s1 == s2` saw the state the last
//!   writer left, and no part of a later one. That includes where the table is
//!   (`ShardLock::hint`, stored relaxed inside the writer's odd section, loaded relaxed after `s1`).
//! - An upgrade: the lock's acquire orders everything before the last unlock before the
//!   upgrader; `before == s1` means that unlock was the one `s1` came from.
//! - A segment that this shard frees may be reused by another shard, or by a large write
//!   holding no shard lock, while a reader still reads it. Those writes follow the freeing
//!   shard's odd store (through the pool lock) and a release fence of their own after the pool
//!   gave them the segment ([`reuse_fence`], in `Segments::assign` and
//!   `Segments::mark_pending_run`), so the first point applies. The fence must come after the
//!   pool's lock: the new owner's own odd store came before it and orders nothing of the
//!   freeing writer's (`tests::loom_a_reused_segment_is_never_accepted` fails without it).
//!
//! The reader's loads of index slots, overflow counts and item bytes are plain loads through
//! raw pointers (the bucket's tags compared in SSE registers, each slot read once), racing the
//! writer's plain stores. The language's memory model calls such a race undefined; it is the
//! seqlock idiom, and nothing read is acted on before the check beyond bounds-checked
//! arithmetic and the reader's copy. The reader is shown `&[u8]` into bytes that may change
//! under it: it must read each byte once and must not panic on any value (the server's
//! encoders copy the value and format numbers).
//!
//! `loom` checks the protocol (`tests::loom_*`: a reader never accepts half of one write and
//! half of another; an upgrade with an unchanged count holds the current state; a reader never
//! accepts a segment another shard took from the pool and wrote);
//! `tests/optimistic_reads.rs` checks the whole store under eviction, and fails when the check
//! or the undo is broken.
//!
//! # Memory a reader touches
//!
//! - Item bytes lie in the heap, one mapping for the store's life: a reader may read a segment
//!   freed, reused, or handed back to the OS (zero pages) meanwhile, never unmapped memory.
//!   A location must name a segment and an offset inside it, the header and key must lie in
//!   the rest of that segment (`item::has_key`), and so must the whole item (a larger one is
//!   read under the lock): no read leaves the mapping, and a reader is never shown a value
//!   longer than a segment, whatever it read.
//! - Index tables lie in two address ranges per shard, reserved for the store's life
//!   (`index::Regions`): a rebuild writes the one not in use, switches, and gives the old
//!   one's pages back (`madvise(MADV_DONTNEED)`); no table has more buckets than a range
//!   holds, so any table address and bucket count a reader loads, even from two different
//!   tables, stays inside mapped memory: a late reader reads the old table, zeros or a newer
//!   table, and its check rejects it. No epoch, no pin: a get costs no write to shared memory.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A writer about to write a segment the pool just gave it, which a reader of the shard that
/// freed it may still be reading: orders the freeing writer's odd count (seen through the pool
/// lock) before the new bytes (see the module's argument).
#[inline]
pub(crate) fn reuse_fence() {
    fence(Ordering::Release);
}

/// A shard's sequence count: odd while a lock holder may be changing the shard.
pub(crate) struct SeqCount(AtomicU64);

impl SeqCount {
    pub(crate) fn new() -> SeqCount {
        SeqCount(AtomicU64::new(0))
    }

    /// A writer, holding the lock (so the only one), starts changing the shard; returns the
    /// count it found, which [`SeqCount::end_write`] and [`SeqCount::unchanged_since`] take.
    #[inline]
    pub(crate) fn begin_write(&self) -> u64 {
        let s = self.0.load(Ordering::Relaxed);
        self.0.store(s + 1, Ordering::Relaxed);
        // Orders the odd count before every change that follows (see the module's argument).
        fence(Ordering::Release);
        s
    }

    /// The writer whose `begin_write` found `before` is done: what it changed is published
    /// with the even count.
    #[inline]
    pub(crate) fn end_write(&self, before: u64) {
        self.0.store(before + 2, Ordering::Release);
    }

    /// The count a read starts from, or `None` while a writer is at work.
    #[inline]
    pub(crate) fn begin_read(&self) -> Option<u64> {
        let s = self.0.load(Ordering::Acquire);
        (s & 1 == 0).then_some(s)
    }

    /// Whether no writer ran since `begin_read` gave `start`: the reads in between saw one
    /// state of the shard.
    #[inline]
    pub(crate) fn validate(&self, start: u64) -> bool {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) == start
    }
}

#[cfg(all(test, loom))]
mod tests {
    use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    use super::{reuse_fence, SeqCount};

    /// A value of two words that a writer stores one at a time: a reader that accepts a copy
    /// must see both words of one write.
    struct Guarded {
        seq: SeqCount,
        words: [AtomicU64; 2],
    }

    impl Guarded {
        fn new() -> Guarded {
            Guarded {
                seq: SeqCount::new(),
                words: [AtomicU64::new(0), AtomicU64::new(0)],
            }
        }

        /// Both words, unchecked.
        fn words(&self) -> [u64; 2] {
            [self.words[0].load(Relaxed), self.words[1].load(Relaxed)]
        }

        fn write(&self, v: u64) {
            let before = self.seq.begin_write();
            self.words[0].store(v, Relaxed);
            self.words[1].store(v, Relaxed);
            self.seq.end_write(before);
        }

        fn read(&self) -> Option<[u64; 2]> {
            let start = self.seq.begin_read()?;
            let copy = self.words();
            self.seq.validate(start).then_some(copy)
        }
    }

    #[test]
    fn loom_a_reader_never_accepts_a_torn_value() {
        loom::model(|| {
            let g = Arc::new(Guarded::new());
            let writer = {
                let g = g.clone();
                // Two writes, as a lock would serialise them (one thread).
                thread::spawn(move || {
                    g.write(1);
                    g.write(2);
                })
            };
            if let Some([a, b]) = g.read() {
                assert_eq!(a, b, "a torn value was accepted");
            }
            writer.join().unwrap();
            assert_eq!(g.read(), Some([2, 2]));
        });
    }

    #[test]
    fn loom_a_read_upgraded_to_the_lock_with_its_count_unchanged_is_current() {
        loom::model(|| {
            let g = Arc::new((Guarded::new(), Mutex::new(())));
            let writer = {
                let g = g.clone();
                thread::spawn(move || {
                    let _locked = g.1.lock().unwrap();
                    g.0.write(1);
                })
            };
            if let Some(start) = g.0.seq.begin_read() {
                let copy = g.0.words();
                let _locked = g.1.lock().unwrap();
                let before = g.0.seq.begin_write();
                // `ShardGuard::unchanged_since`: what was read is what the lock now guards.
                if before == start {
                    let now = g.0.words();
                    assert_eq!(copy, now, "an upgrade kept a stale read");
                }
                g.0.seq.end_write(before);
            }
            writer.join().unwrap();
        });
    }

    #[test]
    fn loom_a_reader_sees_no_write_older_than_the_count_it_started_from() {
        loom::model(|| {
            let g = Arc::new(Guarded::new());
            let writer = {
                let g = g.clone();
                thread::spawn(move || g.write(1))
            };
            // A count of 2 means the write is complete: the copy must be all of it.
            if let Some(start) = g.seq.begin_read() {
                let copy = g.words();
                if g.seq.validate(start) && start == 2 {
                    assert_eq!(copy, [1, 1]);
                }
            }
            writer.join().unwrap();
        });
    }

    /// A shard frees the segment a reader is reading (its item moved), and another shard takes
    /// it from the pool and writes it: the reader must never accept the new bytes. Place 0 is
    /// the old segment (1, 1), place 1 where the item moves (2, 2), 9s the reuser's writes.
    #[test]
    fn loom_a_reused_segment_is_never_accepted() {
        struct Heap {
            shard: (Mutex<()>, SeqCount),
            other: (Mutex<()>, SeqCount),
            slot: AtomicU64,
            places: [[AtomicU64; 2]; 2],
            pool: Mutex<Vec<usize>>,
        }
        loom::model(|| {
            let h = Arc::new(Heap {
                shard: (Mutex::new(()), SeqCount::new()),
                other: (Mutex::new(()), SeqCount::new()),
                slot: AtomicU64::new(0),
                places: [
                    [AtomicU64::new(1), AtomicU64::new(1)],
                    [AtomicU64::new(0), AtomicU64::new(0)],
                ],
                pool: Mutex::new(Vec::new()),
            });
            let mover = {
                let h = h.clone();
                thread::spawn(move || {
                    let _locked = h.shard.0.lock().unwrap();
                    let before = h.shard.1.begin_write();
                    h.places[1][0].store(2, Relaxed);
                    h.places[1][1].store(2, Relaxed);
                    h.slot.store(1, Relaxed);
                    // Place 0 holds no live item now: back to the pool.
                    h.pool.lock().unwrap().push(0);
                    h.shard.1.end_write(before);
                })
            };
            let reuser = {
                let h = h.clone();
                thread::spawn(move || {
                    let _locked = h.other.0.lock().unwrap();
                    let before = h.other.1.begin_write();
                    let taken = h.pool.lock().unwrap().pop();
                    if let Some(place) = taken {
                        // `Segments::assign`.
                        reuse_fence();
                        h.places[place][0].store(9, Relaxed);
                        h.places[place][1].store(9, Relaxed);
                    }
                    h.other.1.end_write(before);
                })
            };
            if let Some(start) = h.shard.1.begin_read() {
                let place = h.slot.load(Relaxed) as usize;
                let copy = [
                    h.places[place][0].load(Relaxed),
                    h.places[place][1].load(Relaxed),
                ];
                if h.shard.1.validate(start) {
                    assert!(copy == [1, 1] || copy == [2, 2], "accepted {copy:?}");
                }
            }
            mover.join().unwrap();
            reuser.join().unwrap();
        });
    }
}
