//! The `flush_all` mark: one deadline and generation for the whole store, which each shard
//! compares with the generation it has applied (`Shard::flush_seq`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use super::clock::UnixSecs;

pub(crate) struct Flush {
    /// The latest `flush_all`: deadline (high 32 bits) and generation (low 32 bits).
    pub(crate) mark: AtomicU64,
    /// Serialises `flush_all`s, so a new mark never overtakes the catch-up of an older one.
    pub(crate) serial: Mutex<()>,
}

impl Flush {
    pub(crate) fn new() -> Flush {
        Flush {
            mark: AtomicU64::new(0),
            serial: Mutex::new(()),
        }
    }

    /// The latest `flush_all` mark, saved across a restart (`persist`).
    pub(crate) fn mark(&self) -> u64 {
        self.mark.load(Relaxed)
    }

    pub(crate) fn restore_mark(&self, mark: u64) {
        self.mark.store(mark, Relaxed);
    }

    /// The generation a shard that has applied `applied` must apply at `now`, if any.
    #[inline]
    pub(crate) fn due(&self, applied: u32, now: UnixSecs) -> Option<u32> {
        let mark = self.mark.load(Relaxed);
        let (at, seq) = ((mark >> 32) as u32, mark as u32);
        // One test while no flush is pending (this shard applied the latest).
        if seq == applied {
            return None;
        }
        (at <= now).then_some(seq)
    }
}
