//! Bytes of overhead per item (everything beyond key + value: item header, index, and the
//! heap left unused in partly filled segments) for 32 B, 256 B and 4 KiB values, 10-byte
//! keys, in a 64 MB heap filled until just before the first eviction. Prints a table.
//!
//! Also prints the longest single set seen while filling: it includes the rebuild of one
//! shard's index (the only pause the index has; other shards are not held).
//!
//! `cargo bench -p tern-store --bench overhead`

use std::sync::Arc;
use std::time::{Duration, Instant};
use tern_store::{Clock, Config, Expiry, Store, StoreOp, StoreOutcome};

fn main() {
    println!("| value | items in 64 MB | header B/item | index B/item | header+index B/item | header+index, dearest point of the index's growth cycle | heap slack B/item | total B/item | longest set |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for value_len in [32usize, 256, 4096] {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        let value = vec![b'v'; value_len];
        // Fill until the first eviction; stats() walks every shard, so look every 1024 sets.
        let mut longest = Duration::ZERO;
        // The index's share swings with its growth cycle: keep the dearest point seen.
        let mut worst_index = 0f64;
        for i in 0u64.. {
            let key = format!("{i:010}");
            let start = Instant::now();
            let outcome = store.store(StoreOp::Set, key.as_bytes(), 0, Expiry::NEVER, &value);
            longest = longest.max(start.elapsed());
            assert!(matches!(outcome, StoreOutcome::Stored { .. }));
            if i % 1024 == 0 {
                let s = store.stats();
                if s.curr_items >= 10_000 {
                    worst_index = worst_index.max(s.index_bytes as f64 / s.curr_items as f64);
                }
                if s.evictions > 0 {
                    break;
                }
            }
        }
        let s = store.stats();
        let items = s.curr_items as f64;
        let header = (s.item_bytes_with_headers - s.bytes) as f64 / items;
        let index = s.index_bytes as f64 / items;
        let slack = (s.heap_used - s.item_bytes_with_headers) as f64 / items;
        println!(
            "| {value_len} B | {} | {header:.1} | {index:.1} | {:.1} | {:.1} | {slack:.1} | {:.1} | {longest:?} |",
            s.curr_items,
            header + index,
            header + worst_index,
            header + index + slack
        );
    }
}
