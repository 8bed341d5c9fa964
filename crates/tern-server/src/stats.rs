//! Counters for `stats`. Each worker owns one [`WorkerCounters`] on its own cache line and is the
//! only thread that writes it (a plain load + store, no atomic read-modify-write, no shared line
//! written per request); `stats` sums every worker's counters when it is read. `stats reset`
//! records the current sums as a baseline instead of writing into other workers' counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter written by one thread only and read by any.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn add(&self, n: u64) {
        // Single writer: load + store cannot lose an update.
        let v = self.0.load(Ordering::Relaxed);
        self.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }

    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One worker's counters, named as memcached's `stats` names them.
        #[derive(Default, Debug)]
        #[repr(align(64))]
        pub struct WorkerCounters {
            $(pub $name: Counter,)*
        }

        /// Counters summed over workers (or a baseline for `stats reset`).
        #[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Totals {
            $(pub $name: u64,)*
        }

        impl WorkerCounters {
            pub fn add_to(&self, totals: &mut Totals) {
                $(totals.$name += self.$name.get();)*
            }
        }

        impl Totals {
            /// `self - baseline`, per counter.
            pub fn since(&self, baseline: &Totals) -> Totals {
                Totals { $($name: self.$name.wrapping_sub(baseline.$name),)* }
            }
        }
    };
}

counters!(
    total_connections,
    rejected_connections,
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    bytes_read,
    bytes_written,
    conn_yields,
);

/// Seconds and microseconds of CPU time (user, system) of this process.
pub fn rusage() -> ((i64, i64), (i64, i64)) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    (
        (usage.ru_utime.tv_sec, usage.ru_utime.tv_usec),
        (usage.ru_stime.tv_sec, usage.ru_stime.tv_usec),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_and_reset_by_baseline() {
        let a = WorkerCounters::default();
        let b = WorkerCounters::default();
        a.cmd_get.add(3);
        b.cmd_get.incr();
        b.bytes_read.add(10);
        let mut totals = Totals::default();
        a.add_to(&mut totals);
        b.add_to(&mut totals);
        assert_eq!((totals.cmd_get, totals.bytes_read), (4, 10));
        a.cmd_get.incr();
        let mut later = Totals::default();
        a.add_to(&mut later);
        b.add_to(&mut later);
        assert_eq!(later.since(&totals).cmd_get, 1);
        assert_eq!(std::mem::align_of::<WorkerCounters>(), 64);
    }

    #[test]
    fn rusage_reads_this_process() {
        let ((user_s, user_us), _) = rusage();
        assert!(user_s >= 0 && (0..1_000_000).contains(&user_us));
    }
}
