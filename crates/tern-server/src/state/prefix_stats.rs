//! `stats detail`'s per-prefix counters, shared by every worker (a leaf module).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// `stats detail`: gets, hits, sets and deletes per key prefix (the key up to the `-D`
/// delimiter; keys without one are not counted), as memcached keeps them. Off by default;
/// while off, a request pays one relaxed load of `enabled`.
pub struct PrefixStats {
    pub enabled: AtomicBool,
    delimiter: u8,
    counts: Mutex<BTreeMap<Vec<u8>, PrefixCounts>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct PrefixCounts {
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

/// What a request did to its key's prefix counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefixEvent {
    Get { hit: bool },
    Set,
    Delete,
}

impl PrefixStats {
    pub fn new(delimiter: u8, enabled: bool) -> PrefixStats {
        PrefixStats {
            enabled: AtomicBool::new(enabled),
            delimiter,
            counts: Mutex::default(),
        }
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Counts `event` for `key`'s prefix (call only when [`PrefixStats::enabled`]).
    pub fn record(&self, key: &[u8], event: PrefixEvent) {
        // A key that starts with the delimiter counts under the empty prefix, as in memcached.
        let Some(end) = key.iter().position(|&b| b == self.delimiter) else {
            return;
        };
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let c = counts.entry(key[..end].to_vec()).or_default();
        match event {
            PrefixEvent::Get { hit } => {
                c.gets += 1;
                c.hits += u64::from(hit);
            }
            PrefixEvent::Set => c.sets += 1,
            PrefixEvent::Delete => c.deletes += 1,
        }
    }

    /// memcached's dump: one `PREFIX` line per prefix, then `END`.
    pub fn dump(&self) -> Vec<u8> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (prefix, c) in counts.iter() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(prefix);
            out.extend_from_slice(
                format!(
                    " get {} hit {} set {} del {}\r\n",
                    c.gets, c.hits, c.sets, c.deletes
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"END\r\n");
        out
    }

    /// `stats reset` clears the prefix counts too, as in memcached.
    pub fn clear(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
