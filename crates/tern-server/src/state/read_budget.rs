//! The bound on connections' grown read buffers (`-o read_buf_mem_limit`): a value that has not
//! fully arrived waits in its connection's read buffer, grown to hold it, and those bytes live
//! outside `-m`. Every worker charges a buffer's growth here before making it and gives the
//! charge back when the buffer is freed, so all of them together stay under one limit however
//! many clients upload at once. A standard 16 KiB buffer is not charged: those are bounded by
//! `-c` (one per connection with a partial request), as in memcached.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct ReadBudget {
    /// In bytes; 0: no limit (`-o read_buf_mem_limit=0`, memcached's meaning).
    limit: usize,
    charged: AtomicUsize,
}

impl ReadBudget {
    pub fn new(limit: u64) -> ReadBudget {
        ReadBudget {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            charged: AtomicUsize::new(0),
        }
    }

    /// Charges `bytes` unless that would pass the limit. Relaxed: the count is the only thing
    /// shared, and a charge that loses a race to another worker's is refused, never lost.
    pub fn try_charge(&self, bytes: usize) -> bool {
        if self.limit == 0 {
            self.charged.fetch_add(bytes, Ordering::Relaxed);
            return true;
        }
        self.charged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |charged| {
                charged
                    .checked_add(bytes)
                    .filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `bytes` charged earlier.
    pub fn release(&self, bytes: usize) {
        self.charged.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_up_to_the_limit_and_no_further() {
        let budget = ReadBudget::new(100);
        assert!(budget.try_charge(60));
        assert!(!budget.try_charge(41), "past the limit");
        assert!(budget.try_charge(40));
        budget.release(60);
        assert_eq!(budget.charged.load(Ordering::Relaxed), 40);
        assert!(budget.try_charge(60));
    }

    #[test]
    fn zero_is_no_limit() {
        let budget = ReadBudget::new(0);
        assert!(budget.try_charge(usize::MAX / 2));
        assert_eq!(budget.charged.load(Ordering::Relaxed), usize::MAX / 2);
    }
}
