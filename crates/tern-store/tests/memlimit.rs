//! The memory limit (memcached's `cache_memlimit`): lowering it evicts down to it and keeps
//! every survivor whole, writes then stay within it, raising it gives the room back (past the
//! start's heap too), and limits the store cannot honour are refused.

mod common;

use common::{set, stamped, store_with, verify};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use tern_store::{Config, Eviction, Expiry, MemoryLimitError, Store, StoreOp, StoreOutcome};

/// 64 segments of 256 KiB over 4 shards; the floor, 8 MiB (32 segments), is half of it.
const HEAP: usize = 16 << 20;

fn store(eviction: Eviction) -> Store {
    store_with(Config {
        heap_bytes: HEAP,
        shards: 4,
        eviction,
        ..Config::default()
    })
}

fn value_len(key: u32) -> usize {
    500 + (key as usize * 37) % 2000
}

/// Sets every key in `keys` to version `version`, each stored, checking after each that the
/// heap in use stays within `limit`.
fn fill(s: &Store, keys: Range<u32>, version: u32, limit: usize) {
    for key in keys {
        let outcome = set(
            s,
            &key.to_le_bytes(),
            &stamped(key, version, value_len(key)),
        );
        assert!(
            matches!(outcome, StoreOutcome::Stored { .. }),
            "{outcome:?}"
        );
        assert!(
            s.stats().heap_used <= limit as u64,
            "past {limit} at key {key}"
        );
    }
}

/// Reads every key in `keys`, checking each value found is whole and its own; returns how
/// many were found.
fn present(s: &Store, keys: Range<u32>) -> u64 {
    keys.filter(|&key| {
        s.get(&key.to_le_bytes(), |it| it.value.to_vec())
            .map(|v| verify(key, &v))
            .is_ok()
    })
    .count() as u64
}

fn shrink_evicts_down_to_the_limit_and_writes_stay_within_it_until_it_grows(eviction: Eviction) {
    let s = store(eviction);
    assert_eq!(s.memory_limit(), HEAP);
    fill(&s, 0..12_000, 0, HEAP);
    let full = s.stats();
    assert!(
        full.heap_used > (HEAP as u64) * 7 / 8,
        "{eviction:?}: {full:?}"
    );
    assert_eq!(full.limit_maxbytes, HEAP as u64);

    s.set_memory_limit(HEAP / 2).unwrap();
    let st = s.stats();
    assert_eq!(s.memory_limit(), HEAP / 2);
    assert_eq!(st.limit_maxbytes, (HEAP / 2) as u64);
    assert!(st.heap_used <= (HEAP / 2) as u64, "{eviction:?}: {st:?}");
    assert!(
        st.evictions > full.evictions,
        "{eviction:?} evicted nothing"
    );
    assert_eq!(present(&s, 0..12_000), st.curr_items, "{eviction:?}");

    // Writes go on, making room by eviction rather than growing.
    fill(&s, 12_000..16_000, 0, HEAP / 2);
    fill(&s, 0..2_000, 1, HEAP / 2);
    let limited = s.stats();
    assert_eq!(present(&s, 0..16_000), limited.curr_items, "{eviction:?}");

    s.set_memory_limit(HEAP).unwrap();
    fill(&s, 16_000..24_000, 0, HEAP);
    let grown = s.stats();
    assert!(
        grown.heap_used > (HEAP as u64) * 3 / 4,
        "{eviction:?}: {grown:?}"
    );
    assert!(
        grown.curr_items > limited.curr_items * 3 / 2,
        "{eviction:?}"
    );
    assert_eq!(present(&s, 0..24_000), grown.curr_items, "{eviction:?}");
}

#[test]
fn a_merge_store_shrinks_to_its_limit_and_grows_back() {
    shrink_evicts_down_to_the_limit_and_writes_stay_within_it_until_it_grows(Eviction::Merge);
}

#[test]
fn a_fifo_store_shrinks_to_its_limit_and_grows_back() {
    shrink_evicts_down_to_the_limit_and_writes_stay_within_it_until_it_grows(Eviction::Fifo);
}

#[test]
fn a_random_store_shrinks_to_its_limit_and_grows_back() {
    shrink_evicts_down_to_the_limit_and_writes_stay_within_it_until_it_grows(Eviction::Random);
}

#[test]
fn limits_past_the_reservation_or_below_the_floor_are_refused() {
    let s = store(Eviction::Merge);
    let segment = s.segment_size();
    // Past the heap opened at start the store grows, up to what it reserved.
    let capped = store_with(Config {
        heap_bytes: HEAP,
        max_heap_bytes: 2 * HEAP,
        shards: 4,
        ..Config::default()
    });
    assert_eq!(
        capped.set_memory_limit(2 * HEAP + segment),
        Err(MemoryLimitError::TooLarge { max: 2 * HEAP })
    );
    capped.set_memory_limit(2 * HEAP).unwrap();
    assert_eq!(capped.stats().heap_bytes, 2 * HEAP as u64);
    assert_eq!(
        s.set_memory_limit((8 << 20) - 1),
        Err(MemoryLimitError::TooSmall { min: 8 << 20 })
    );
    assert_eq!(s.memory_limit(), HEAP);
    // Rounded down to whole segments.
    s.set_memory_limit((8 << 20) + segment - 1).unwrap();
    assert_eq!(s.memory_limit(), 8 << 20);
    s.set_memory_limit(HEAP - 1).unwrap();
    assert_eq!(s.memory_limit(), HEAP - segment);
    s.set_memory_limit(HEAP).unwrap();
    assert_eq!(s.stats().limit_maxbytes, HEAP as u64);

    // Two segments per shard: 64 shards of 256 KiB segments need 32 MiB.
    let many_shards = store_with(Config {
        heap_bytes: 256 << 20,
        shards: 64,
        ..Config::default()
    });
    assert_eq!(many_shards.segment_size(), 256 << 10);
    assert_eq!(
        many_shards.set_memory_limit(16 << 20),
        Err(MemoryLimitError::TooSmall { min: 32 << 20 })
    );
    // A run for the largest item: 12 MiB of value and its header take 49 segments.
    let large_items = store_with(Config {
        heap_bytes: HEAP,
        shards: 4,
        max_item_size: 12 << 20,
        ..Config::default()
    });
    assert_eq!(
        large_items.set_memory_limit(HEAP / 2),
        Err(MemoryLimitError::TooSmall { min: 49 << 18 })
    );
    // A heap below the floor can only be given its whole size.
    let small = store_with(Config {
        heap_bytes: 4 << 20,
        ..Config::default()
    });
    assert_eq!(
        small.set_memory_limit((4 << 20) - 1),
        Err(MemoryLimitError::TooSmall { min: 4 << 20 })
    );
    assert_eq!(small.set_memory_limit(4 << 20), Ok(()));
}

#[test]
fn without_eviction_a_shrink_frees_expired_items_only_and_then_writes_run_out() {
    let s = store(Eviction::None);
    // A quarter expires in 10 s, in segments of its own TTL group; the rest never.
    let expiry = |key: u32| {
        if key % 4 == 0 {
            Expiry::from_exptime(10, s.clock().now())
        } else {
            Expiry::NEVER
        }
    };
    for key in 0..9_000u32 {
        let value = stamped(key, 0, value_len(key));
        let outcome = s.store(StoreOp::Set, &key.to_le_bytes(), 0, expiry(key), &value);
        assert!(
            matches!(outcome, StoreOutcome::Stored { .. }),
            "{outcome:?}"
        );
    }
    assert!(s.stats().heap_used > (HEAP as u64) * 3 / 4);
    s.clock().advance(11);

    // Only the expired quarter can go: the limit is set, and more stays in use.
    s.set_memory_limit(HEAP / 2).unwrap();
    let st = s.stats();
    assert_eq!(s.memory_limit(), HEAP / 2);
    assert_eq!(st.evictions, 0);
    assert_eq!(st.reclaimed, 2_250);
    assert!(st.heap_used > (HEAP / 2) as u64, "{st:?}");
    assert_eq!(present(&s, 0..9_000), 6_750);

    // Writes fill what the shards hold open, then answer out of memory; nothing is lost.
    let outcomes: Vec<_> = (9_000..10_000u32)
        .map(|key| set(&s, &key.to_le_bytes(), &stamped(key, 0, value_len(key))))
        .collect();
    assert!(outcomes.contains(&StoreOutcome::OutOfMemory));
    assert!(s.stats().heap_used <= st.heap_used);
    assert_eq!(s.stats().evictions, 0);
    assert_eq!(present(&s, 0..9_000), 6_750);

    // Once deletes bring use under the limit, writes are stored again.
    for key in (0..9_000u32).filter(|key| key % 4 != 0) {
        s.delete(&key.to_le_bytes());
    }
    assert!(s.stats().heap_used <= (HEAP / 2) as u64);
    fill(&s, 10_000..13_000, 0, HEAP / 2);
}

#[test]
fn large_items_take_their_runs_within_the_limit() {
    let s = store_with(Config {
        heap_bytes: HEAP,
        shards: 4,
        max_item_size: 2 << 20,
        ..Config::default()
    });
    // Every third a run of 2 to 8 segments.
    let len = |key: u32| match key % 3 {
        0 => 300_000 + (key as usize * 7919) % 1_700_000,
        _ => value_len(key),
    };
    let write = |keys: Range<u32>, limit: usize| {
        for key in keys {
            let outcome = set(&s, &key.to_le_bytes(), &stamped(key, 0, len(key)));
            assert!(
                matches!(outcome, StoreOutcome::Stored { .. }),
                "{outcome:?}"
            );
            assert!(
                s.stats().heap_used <= limit as u64,
                "past {limit} at key {key}"
            );
        }
    };
    write(0..60, HEAP);
    assert!(s.stats().heap_used > (HEAP as u64) * 3 / 4);
    s.set_memory_limit(HEAP / 2).unwrap();
    assert!(s.stats().heap_used <= (HEAP / 2) as u64);
    write(60..160, HEAP / 2);
    let st = s.stats();
    assert_eq!(present(&s, 0..160), st.curr_items);
    assert!(st.curr_items > 0);
}

#[test]
fn the_limit_moves_under_concurrent_writes_and_reads_without_a_torn_value() {
    let s = Arc::new(store(Eviction::Merge));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let (s, stop) = (s.clone(), stop.clone());
            thread::spawn(move || {
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ ((t + 1) * 0x9e37_79b9);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = (x % 20_000) as u32;
                    if x >> 62 == 0 {
                        let len = if x % 64 == 0 { 400_000 } else { value_len(key) };
                        set(&s, &key.to_le_bytes(), &stamped(key, n, len));
                    } else {
                        let _ = s
                            .get(&key.to_le_bytes(), |it| it.value.to_vec())
                            .map(|v| verify(key, &v));
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for round in 0..30 {
        let limit = if round % 2 == 0 { 8 << 20 } else { HEAP };
        s.set_memory_limit(limit).unwrap();
        assert_eq!(s.memory_limit(), limit);
        thread::sleep(std::time::Duration::from_millis(10));
    }
    s.set_memory_limit(8 << 20).unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let st = s.stats();
    assert!(st.heap_used <= 8 << 20, "{st:?}");
    assert_eq!(present(&s, 0..20_000), st.curr_items);
}
