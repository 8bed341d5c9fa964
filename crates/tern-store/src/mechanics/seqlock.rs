//! Reads without the shard lock: a sequence count per shard (a seqlock), so that a get writes
//! no cache line another thread uses.
//!
//! # The protocol
//!
//! Every holder of a shard's lock makes the shard's count odd when it takes the lock and even
//! again when it lets go (`ShardLock::lock`, `ShardGuard`): each change to the shard's
//! index, its segments' bytes and their bookkeeping is made between the two. An optimistic
//! reader ([`SeqCount::begin_read`] .. [`SeqCount::validate`]) reads the count (even, else it
//! waits for the writer), reads what it needs, copying an item's bytes into a buffer of its
//! own, and reads the count again: the same value means no lock holder ran in between, so what
//! it copied is one consistent state of the shard; any other value and the copy is thrown
//! away unread, and the read tried again (a few times, then under the lock).
//!
//! # Memory ordering
//!
//! Writer: `seq = s + 1` (relaxed), `fence(Release)`, the changes, `seq = s + 2` (release).
//! Reader: `s1 = seq` (acquire), the reads, `fence(Acquire)`, `s2 = seq` (relaxed).
//!
//! - If a reader's read saw a change made after a writer's release fence, its acquire fence
//!   synchronises with that fence, so the writer's odd store happens before the reader's
//!   second load: `s2 != s1` (the count only grows), and the copy is rejected.
//! - If `s1` came from a writer's closing store (release, acquire), everything that writer
//!   changed happens before the reader's reads: a copy taken with `s1 == s2` saw the state the
//!   last writer left, and no part of a later one.
//! - A segment that this shard frees may be reused by another shard, or by a large write
//!   holding no shard lock, while a reader still copies from it. Those writes follow the
//!   freeing shard's odd store (through the pool lock) and a release fence of their own (the
//!   new owner's odd store, or `Segments::mark_pending_run`'s fence), so the first point
//!   applies: a copy that saw them fails its check.
//!
//! `loom` checks the protocol (`tests::loom_*`: a reader never accepts half of one write and
//! half of another); `tests/optimistic_reads.rs` checks the whole store under eviction.
//!
//! # Memory a reader touches
//!
//! - Item bytes lie in the heap, one mapping for the store's life: a reader may read a
//!   segment freed, reused, or handed back to the OS (zero pages) meanwhile, never unmapped
//!   memory. Every offset it derives from what it read is checked against the heap's end
//!   before it is used, so garbage read in a race stays inside the mapping.
//! - Index tables are freed when a rebuild replaces them: the old table is handed to
//!   `crossbeam-epoch` ([`retire`]), which frees it only once every reader pinned before
//!   ([`pin`]) has let go. A table's published view (`index::TableView`: where its
//!   buckets are and how many) never changes, so its bounds are always the table's own.
//! - Those racing reads are plain loads and a `memcpy` of bytes, made through raw pointers,
//!   never through a reference: the compiler assumes nothing of what they return, and nothing
//!   read before the check is acted on beyond bounds-checked arithmetic. (The language's
//!   memory model calls such a race undefined; it is the accepted seqlock idiom, and what
//!   the values feed is checked before use.)

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU64, Ordering};

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
    use loom::sync::Arc;
    use loom::thread;

    use super::SeqCount;

    /// A value of two words that a writer stores one at a time: a reader that accepts a copy
    /// must see both words of one write.
    struct Guarded {
        seq: SeqCount,
        words: [AtomicU64; 2],
    }

    impl Guarded {
        fn write(&self, v: u64) {
            let before = self.seq.begin_write();
            self.words[0].store(v, Relaxed);
            self.words[1].store(v, Relaxed);
            self.seq.end_write(before);
        }

        fn read(&self) -> Option<[u64; 2]> {
            let start = self.seq.begin_read()?;
            let copy = [self.words[0].load(Relaxed), self.words[1].load(Relaxed)];
            self.seq.validate(start).then_some(copy)
        }
    }

    #[test]
    fn loom_a_reader_never_accepts_a_torn_value() {
        loom::model(|| {
            let g = Arc::new(Guarded {
                seq: SeqCount::new(),
                words: [AtomicU64::new(0), AtomicU64::new(0)],
            });
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
    fn loom_a_reader_sees_no_write_older_than_the_count_it_started_from() {
        loom::model(|| {
            let g = Arc::new(Guarded {
                seq: SeqCount::new(),
                words: [AtomicU64::new(0), AtomicU64::new(0)],
            });
            let writer = {
                let g = g.clone();
                thread::spawn(move || g.write(1))
            };
            // A count of 2 means the write is complete: the copy must be all of it.
            if let Some(start) = g.seq.begin_read() {
                let copy = [g.words[0].load(Relaxed), g.words[1].load(Relaxed)];
                if g.seq.validate(start) && start == 2 {
                    assert_eq!(copy, [1, 1]);
                }
            }
            writer.join().unwrap();
        });
    }
}
