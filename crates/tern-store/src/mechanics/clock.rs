//! Coarse time in whole unix seconds, read on every command and ticked by the server's timer.
//!
//! memcached keeps a `current_time` updated once a second rather than calling the OS per request;
//! this is the same idea. Tests use a manual clock and move it by hand.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the unix epoch, as memcached's protocol counts absolute expiry times.
pub type UnixSecs = u32;

/// memcached's boundary: an exptime up to 30 days is relative, above it an absolute unix time.
pub const MAX_RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;

#[derive(Debug)]
pub struct Clock {
    now: AtomicU32,
    manual: bool,
}

impl Clock {
    /// A clock that follows the system time each time [`Clock::tick`] is called.
    pub fn system() -> Clock {
        Clock {
            now: AtomicU32::new(system_now()),
            manual: false,
        }
    }

    /// A clock that only moves when told to (tests, simulations).
    pub fn manual(start: UnixSecs) -> Clock {
        Clock {
            now: AtomicU32::new(start),
            manual: true,
        }
    }

    #[inline]
    pub fn now(&self) -> UnixSecs {
        self.now.load(Ordering::Relaxed)
    }

    /// Re-reads the system time (a no-op for a manual clock). Called about once a second.
    pub fn tick(&self) {
        if !self.manual {
            self.now.store(system_now(), Ordering::Relaxed);
        }
    }

    /// Moves a manual clock forward by `secs`.
    pub fn advance(&self, secs: u32) {
        self.now.fetch_add(secs, Ordering::Relaxed);
    }
}

fn system_now() -> UnixSecs {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as UnixSecs)
        .unwrap_or(0)
}
