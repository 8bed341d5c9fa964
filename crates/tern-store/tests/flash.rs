//! The flash tier through the store's API: items evicted from memory stay readable from flash,
//! every command treats them as memcached's extstore does, and the background work writes,
//! evicts and compacts pages.

mod common;

use common::{set, stamped, store_with, verify, T0};
use tern_store::{
    Arith, ArithError, Config, Expiry, FlashConfig, FlashFile, FlashSettings, Miss, Refused, Store,
    StoreOp, StoreOutcome, DEFAULT_READ_DEPTH,
};

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("tern-store-flash-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A 4 MiB heap in front of `flash_mib` of flash in 1 MiB pages.
fn flash_config(dir: &Dir, flash_mib: u64, knobs: FlashSettings) -> Config {
    Config {
        heap_bytes: 4 << 20,
        shards: 4,
        flash: Some(FlashConfig {
            files: vec![FlashFile {
                path: dir.0.join("flash"),
                bytes: flash_mib << 20,
            }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            io_threads: 1,
            read_depth: DEFAULT_READ_DEPTH,
            knobs,
        }),
        ..Config::default()
    }
}

fn flash_store(dir: &Dir, flash_mib: u64, knobs: FlashSettings) -> Store {
    store_with(flash_config(dir, flash_mib, knobs))
}

fn knobs() -> FlashSettings {
    FlashSettings {
        item_size: 64,
        ..FlashSettings::default()
    }
}

/// Runs the background work until it has nothing left to do.
fn settle(s: &Store) {
    for _ in 0..10_000 {
        if !s.flash_work().is_zero() {
            return;
        }
    }
    panic!("the flash tier never settled");
}

fn get(s: &Store, key: &[u8]) -> Option<Vec<u8>> {
    s.get(key, |item| item.value.to_vec()).ok()
}

fn key(n: u32) -> Vec<u8> {
    format!("key:{n}").into_bytes()
}

/// Sets `count` 1 KiB items (several times the heap), letting the background work run now
/// and then as its threads would.
fn fill(s: &Store, count: u32) {
    fill_keys(s, 0..count);
}

/// [`fill`] for the keys `keys`.
fn fill_keys(s: &Store, keys: std::ops::Range<u32>) {
    for n in keys {
        assert!(matches!(
            set(s, &key(n), &stamped(n, 0, 1000)),
            StoreOutcome::Stored { .. }
        ));
        if n % 64 == 0 {
            settle(s);
        }
    }
    settle(s);
}

#[test]
fn items_evicted_from_memory_are_read_from_flash() {
    let dir = Dir::new("read");
    let s = flash_store(&dir, 32, knobs());
    fill(&s, 16_000);
    let flash = s.flash_stats().unwrap();
    assert!(flash.objects_written > 10_000, "{flash:?}");
    for n in 0..16_000 {
        let value = get(&s, &key(n)).unwrap_or_else(|| panic!("key {n} lost"));
        verify(n, &value);
    }
    let after = s.flash_stats().unwrap();
    assert!(after.gets > 10_000 && after.bad_crc == 0, "{after:?}");
    assert_eq!(s.stats().curr_items, 16_000);
    assert_eq!(s.stats().evictions, 0);
}

#[test]
fn commands_treat_items_on_flash_as_memcached_extstore_does() {
    let dir = Dir::new("commands");
    let s = flash_store(&dir, 32, knobs());
    fill(&s, 12_000);
    // The first keys went to flash first.
    let cas = s.get(&key(1)[..], |item| item.cas()).unwrap();
    assert_ne!(cas, 0);
    // gets keeps the CAS it had in memory: a cas with it replaces the item.
    let replaced = s.store_with_cas(StoreOp::Cas(cas), &key(1), 0, Expiry::NEVER, b"new", None);
    assert!(
        matches!(replaced, StoreOutcome::Stored { .. }),
        "{replaced:?}"
    );
    assert_eq!(get(&s, &key(1)).unwrap(), b"new");
    // incr/decr, append and prepend refuse an item on flash, as memcached's extstore does.
    assert_eq!(
        s.incr_decr(&key(2), Arith::Incr, 1, None, None),
        Err(ArithError::NonNumeric)
    );
    assert_eq!(
        s.store(StoreOp::Append(None), &key(2), 0, Expiry::NEVER, b"x"),
        StoreOutcome::NotStored
    );
    verify(2, &get(&s, &key(2)).unwrap());
    // add refuses, replace replaces, delete deletes, set overwrites.
    assert_eq!(
        s.store(StoreOp::Add, &key(3), 0, Expiry::NEVER, b"x"),
        StoreOutcome::NotStored
    );
    verify(3, &get(&s, &key(3)).unwrap());
    assert!(matches!(
        s.store(StoreOp::Replace, &key(4), 0, Expiry::NEVER, b"r"),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(get(&s, &key(4)).unwrap(), b"r");
    assert!(s.delete(&key(5)));
    assert_eq!(get(&s, &key(5)), None);
    assert!(!s.delete(&key(5)));
    assert_eq!(s.delete_checked(&key(6), Some(1)), Err(Refused::Exists));
    assert!(matches!(
        set(&s, &key(7), b"seven"),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(get(&s, &key(7)).unwrap(), b"seven");
    // touch brings the item back with its new deadline.
    assert!(s.touch(&key(8), Expiry::from_exptime(100, T0)));
    let expiry = s.get(&key(8)[..], |item| item.expiry).unwrap();
    assert_eq!(expiry, Expiry::from_exptime(100, T0));
    verify(8, &get(&s, &key(8)).unwrap());
    // Meta's marks: invalidating keeps the value, marked stale.
    s.invalidate(&key(9), None, None, None).unwrap();
    assert!(s.get(&key(9)[..], |item| item.stale).unwrap());
    // A miss stays a miss.
    assert_eq!(s.get(b"never stored", |_| ()), Err(Miss::NotFound));
    let stats = s.flash_stats().unwrap();
    assert_eq!(stats.bad_crc, 0);
    // flush_all forgets what flash holds.
    s.flush_all(0);
    assert_eq!(get(&s, &key(100)), None);
    assert_eq!(s.flash_stats().unwrap().objects_used, 0);
}

#[test]
fn a_full_flash_evicts_its_oldest_page() {
    let dir = Dir::new("evict");
    let s = flash_store(&dir, 8, knobs());
    fill(&s, 30_000);
    let stats = s.flash_stats().unwrap();
    assert!(
        stats.page_evictions > 0 && stats.objects_evicted > 0,
        "{stats:?}"
    );
    // The newest keys are all there, every value read is its own.
    for n in 0..30_000 {
        if let Some(value) = get(&s, &key(n)) {
            verify(n, &value);
        } else {
            assert!(n < 25_000, "recent key {n} lost");
        }
    }
}

fn no_recache() -> FlashSettings {
    FlashSettings {
        recache_rate: 0,
        ..knobs()
    }
}

/// Goes on from key `from` in steps of 500 until the flash tier holds stale entries (left by
/// an evicted page, until a lookup or a sweep removes them; a shard's sweep before its index
/// grows may take them all at any step); the keys set.
fn fill_until_stale(s: &Store, from: u32) -> u32 {
    let mut next = from;
    for _ in 0..200 {
        fill_keys(s, next..next + 500);
        next += 500;
        if s.flash_stats().unwrap().stale_entries > 0 {
            return next;
        }
    }
    panic!("no stale entry after {next} keys");
}

/// Gets every key below `count`, checking each value found; how many were found.
fn found_of(s: &Store, count: u32) -> u64 {
    let mut found = 0;
    for n in 0..count {
        if let Some(value) = get(s, &key(n)) {
            verify(n, &value);
            found += 1;
        }
    }
    found
}

#[test]
fn a_get_of_an_item_whose_page_was_evicted_is_a_miss_from_flash_without_a_read() {
    let dir = Dir::new("stale");
    let s = flash_store(&dir, 8, no_recache());
    fill(&s, 30_000);
    let keys = fill_until_stale(&s, 30_000);
    let before = s.flash_stats().unwrap();
    // The entries evicted pages left are not items; a get of one finds it gone from flash.
    let curr_items = s.stats().curr_items;
    let (mut found, mut gone) = (0, 0);
    for n in 0..keys {
        match s.get(&key(n)[..], |item| item.value.to_vec()) {
            Ok(value) => {
                verify(n, &value);
                found += 1;
            }
            Err(Miss::GoneFromFlash) => gone += 1,
            Err(_) => {}
        }
    }
    assert_eq!(found, curr_items);
    let after = s.flash_stats().unwrap();
    assert_eq!(gone, before.stale_entries - after.stale_entries);
    // Each stale entry a get met was a read from flash and a miss from flash, as memcached
    // counts a header whose page went, yet cost no read.
    let met = before.stale_entries - after.stale_entries;
    assert!(met > 0, "{after:?}");
    assert_eq!(after.misses - before.misses, met);
    let served = (after.gets - before.gets) - met;
    assert_eq!(
        after.objects_read - before.objects_read,
        served + (after.false_reads - before.false_reads)
    );
    assert_eq!(s.stats().curr_items, curr_items);
}

#[test]
fn entries_of_evicted_pages_are_swept_before_they_pile_up() {
    let dir = Dir::new("sweep");
    // Four 1 MiB pages of about 1,000 records each, evicted about 20 times each.
    let s = flash_store(&dir, 4, no_recache());
    fill(&s, 90_000);
    let stats = s.flash_stats().unwrap();
    assert!(stats.page_evictions >= 4 * 16, "{stats:?}");
    // Without sweeps every record evicted would still have its entry (about 80,000); with
    // them, at most one lap's: each page's 1,000 or so.
    assert!(stats.stale_entries <= 4 * 1_100, "{stats:?}");
    let curr_items = s.stats().curr_items;
    assert_eq!(found_of(&s, 90_000), curr_items);
    assert_eq!(s.flash_stats().unwrap().bad_crc, 0);
}

#[test]
fn compaction_rewrites_live_items_of_fragmented_pages() {
    let dir = Dir::new("compact");
    let s = flash_store(
        &dir,
        16,
        FlashSettings {
            compact_under: 12,
            max_frag: 0.9,
            ..knobs()
        },
    );
    fill(&s, 10_000);
    assert_eq!(s.flash_stats().unwrap().page_evictions, 0);
    for n in (0..10_000).filter(|n| n % 2 == 0) {
        s.delete(&key(n));
    }
    for _ in 0..100 {
        settle(&s);
    }
    let stats = s.flash_stats().unwrap();
    assert!(
        stats.compact_rescues > 0 && stats.page_evictions == 0,
        "{stats:?}"
    );
    for n in (0..10_000).filter(|n| n % 2 == 1) {
        verify(
            n,
            &get(&s, &key(n)).unwrap_or_else(|| panic!("key {n} lost")),
        );
    }
}

#[test]
fn idle_items_go_to_flash_before_memory_runs_out() {
    let dir = Dir::new("idle");
    let s = flash_store(
        &dir,
        16,
        FlashSettings {
            item_age: 0,
            ..knobs()
        },
    );
    for n in 0..100 {
        set(&s, &key(n), &stamped(n, 0, 1000));
    }
    set(&s, b"small", b"stays in memory");
    settle(&s);
    assert_eq!(s.flash_stats().unwrap().objects_written, 100);
    for n in 0..100 {
        verify(n, &get(&s, &key(n)).unwrap());
    }
    assert_eq!(get(&s, b"small").unwrap(), b"stays in memory");
}

/// One command on one of `keys` keys, both drawn from `x` (xorshift): 6 in 16 a set of a
/// value of 600-1,500 bytes stamped with `i`, then a delete, a touch, or (8 in 16) a get whose
/// value must be its key's.
fn random_command(s: &Store, x: &mut u64, i: u32, keys: u32) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    let n = (*x % u64::from(keys)) as u32;
    let k = key(n);
    match *x >> 60 {
        0..=5 => {
            set(s, &k, &stamped(n, i, 600 + (*x >> 40) as usize % 900));
        }
        6 => {
            s.delete(&k);
        }
        7 => {
            s.touch(&k, Expiry::NEVER);
        }
        _ => {
            if let Some(value) = get(s, &k) {
                verify(n, &value);
            }
        }
    }
}

/// Three threads set, delete, touch and get `keys` keys at random while a fourth runs the
/// background work, in front of `flash_mib` of flash; every value read must be its key's.
/// Returns the store, settled.
fn stress(name: &str, flash_mib: u64, keys: u32) -> (Dir, Store) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = Dir::new(name);
    let s = flash_store(
        &dir,
        flash_mib,
        FlashSettings {
            compact_under: 4,
            recache_rate: 50,
            item_age: 1,
            ..knobs()
        },
    );
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if s.flash_work().is_zero() {
                    continue;
                }
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..3u32)
            .map(|t| {
                let s = &s;
                scope.spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(t);
                    for i in 0..60_000u32 {
                        random_command(s, &mut x, i, keys);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    settle(&s);
    let stats = s.flash_stats().unwrap();
    assert!(
        stats.objects_written > 1_000 && stats.gets > 100,
        "{stats:?}"
    );
    assert_eq!(stats.bad_crc, 0);
    (dir, s)
}

#[test]
fn concurrent_commands_and_background_work_never_serve_a_wrong_value() {
    let (_dir, s) = stress("stress", 12, 12_000);
    for n in 0..12_000 {
        if let Some(value) = get(&s, &key(n)) {
            verify(n, &value);
        }
    }
}

#[test]
fn concurrent_commands_while_pages_are_evicted_again_and_again_never_serve_a_wrong_value() {
    // Four 1 MiB pages under 30,000 keys: each page evicted many times, so the index is swept
    // of stale entries while the commands run, and lookups meet stale entries too.
    let (_dir, s) = stress("stress-evicted", 4, 30_000);
    let stats = s.flash_stats().unwrap();
    assert!(stats.page_evictions >= 4 * 4, "{stats:?}");
    // Every item counted is found: no entry stays where no lookup meets it. Reads from here
    // on bring nothing back into memory, so they move no item.
    let knobs = s.flash_knobs().unwrap();
    knobs.set(&FlashSettings {
        recache_rate: 0,
        ..knobs.get()
    });
    let curr_items = s.stats().curr_items;
    assert_eq!(found_of(&s, 30_000), curr_items);
}

#[test]
fn an_item_sent_to_flash_while_its_new_version_is_written_leaves_no_entry_behind() {
    // A set that must make room may send the item it replaces to flash (its segment evicted):
    // the entry there went on pointing at the old version, behind the new one in memory, and
    // counted in curr_items (4 of 4 runs of this failed before that entry was dropped).
    let dir = Dir::new("replaced-to-flash");
    let s = flash_store(&dir, 4, no_recache());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..180_000u32 {
        random_command(&s, &mut x, i, 30_000);
        if i % 64 == 0 {
            settle(&s);
        }
        if i % 5_000 == 0 {
            let curr_items = s.stats().curr_items;
            assert_eq!(found_of(&s, 30_000), curr_items, "after {i} commands");
        }
    }
}

#[test]
fn a_thread_that_defers_reads_never_waits_for_flash() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = Dir::new("defer");
    let s = flash_store(&dir, 32, knobs());
    fill(&s, 12_000);
    let on_flash: Vec<u32> = (0..20).collect();
    let woken = Arc::new(AtomicUsize::new(0));
    let wake: tern_store::FlashWaker = {
        let woken = woken.clone();
        Arc::new(move || {
            woken.fetch_add(1, Ordering::SeqCst);
        })
    };
    // The first key's get ends at once, a miss in form, with its read noted; the other keys
    // of the "multiget" note theirs, and one ask queues them all.
    s.defer_flash_reads_on_this_thread();
    let first = s.get(&key(0)[..], |item| item.value.to_vec());
    assert_eq!(first, Err(Miss::NotFound));
    assert!(s.flash_deferred());
    for &n in &on_flash[1..] {
        s.defer_if_on_flash(&key(n));
    }
    let read_before = s.flash_stats().unwrap().objects_read;
    s.ask_deferred(&wake);
    assert!(!s.flash_deferred());
    assert_eq!(
        s.flash_stats().unwrap().objects_read,
        read_before,
        "nothing read yet"
    );
    // An I/O thread reads them all in one batch, waking the asker once for it.
    while woken.load(Ordering::SeqCst) == 0 {
        s.serve_flash_reads(std::time::Duration::from_millis(10));
    }
    assert_eq!(woken.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.flash_stats().unwrap().objects_read,
        read_before + on_flash.len() as u64
    );
    // The second run finds every record read: no deferral, the right values.
    for &n in &on_flash {
        let value = s.get(&key(n)[..], |item| item.value.to_vec());
        verify(n, &value.unwrap());
    }
    assert!(!s.flash_deferred());
    // A change defers the same way, and takes effect only on its second run.
    assert!(!s.delete(&key(30)));
    assert!(s.flash_deferred());
    s.ask_deferred(&wake);
    s.serve_flash_reads(std::time::Duration::from_millis(10));
    assert!(s.delete(&key(30)));
    assert_eq!(get(&s, &key(30)), None);
}

fn open(dir: &Dir, saved: Option<&[u8]>) -> (Store, tern_store::Opened) {
    Store::open_file(
        flash_config(dir, 32, knobs()),
        std::sync::Arc::new(tern_store::Clock::manual(T0)),
        &dir.0.join("memory"),
        saved,
    )
    .unwrap()
}

#[test]
fn a_warm_restart_keeps_the_items_on_flash() {
    let dir = Dir::new("restart");
    let (s, _) = open(&dir, None);
    fill(&s, 12_000);
    let cas_before = s.get(&key(3)[..], |item| item.cas()).unwrap();
    let on_flash = s.flash_stats().unwrap().objects_used;
    assert!(on_flash > 5_000);
    s.sync_file().unwrap();
    let meta = s.snapshot_meta();
    // The files are free for the next process as soon as the state is saved (a hand-over's
    // successor opens them before this process has gone).
    let (next, opened) = open(&dir, Some(&meta));
    let tern_store::Opened::Restored(restored) = opened else {
        panic!("not restored: {opened:?}");
    };
    drop(s);
    assert_eq!(restored.items, 12_000);
    assert_eq!(next.flash_stats().unwrap().objects_used, on_flash);
    for n in 0..12_000 {
        verify(
            n,
            &get(&next, &key(n)).unwrap_or_else(|| panic!("key {n} lost")),
        );
    }
    assert_eq!(
        next.get(&key(3)[..], |item| item.cas()).unwrap(),
        cas_before
    );
    // New items go to flash after the restart too, beside the old ones.
    for n in 12_000..20_000 {
        set(&next, &key(n), &stamped(n, 1, 1000));
        if n % 64 == 0 {
            settle(&next);
        }
    }
    settle(&next);
    for n in (0..20_000).step_by(7) {
        if let Some(value) = get(&next, &key(n)) {
            verify(n, &value);
        }
    }
    assert_eq!(next.flash_stats().unwrap().bad_crc, 0);
}

#[test]
fn a_warm_restart_leaves_the_entries_of_evicted_pages_behind() {
    let dir = Dir::new("restart-stale");
    let (s, _) = open(&dir, None);
    fill(&s, 45_000);
    let keys = fill_until_stale(&s, 45_000);
    let curr_items = s.stats().curr_items;
    s.sync_file().unwrap();
    let meta = s.snapshot_meta();
    let (next, opened) = open(&dir, Some(&meta));
    let tern_store::Opened::Restored(restored) = opened else {
        panic!("not restored: {opened:?}");
    };
    drop(s);
    assert_eq!(restored.items, curr_items);
    assert_eq!(next.flash_stats().unwrap().stale_entries, 0);
    assert_eq!(found_of(&next, keys), curr_items);
    let stats = next.flash_stats().unwrap();
    assert_eq!((stats.misses, stats.bad_crc), (0, 0), "{stats:?}");
}

#[test]
fn without_a_clean_stop_the_flash_tier_starts_empty() {
    let dir = Dir::new("crash");
    let (s, _) = open(&dir, None);
    fill(&s, 12_000);
    // kill -9: nothing saved; the process's files close as it dies.
    drop(s);
    let (next, opened) = open(&dir, None);
    assert!(matches!(opened, tern_store::Opened::Empty(_)));
    for n in 0..12_000 {
        assert_eq!(
            get(&next, &key(n)),
            None,
            "key {n} came back without a save"
        );
    }
    fill(&next, 12_000);
    for n in 0..12_000 {
        verify(n, &get(&next, &key(n)).unwrap());
    }
}

#[test]
fn a_second_server_cannot_use_the_same_flash_file() {
    let dir = Dir::new("second");
    let _first = flash_store(&dir, 8, knobs());
    let second = Store::new(
        flash_config(&dir, 8, knobs()),
        std::sync::Arc::new(tern_store::Clock::manual(T0)),
    );
    assert!(matches!(second, Err(tern_store::StoreError::Flash(_))));
}

#[test]
fn items_about_to_expire_share_pages_that_go_whole_once_they_have() {
    let dir = Dir::new("lowttl");
    let s = flash_store(
        &dir,
        32,
        FlashSettings {
            low_ttl: 60,
            ..knobs()
        },
    );
    for n in 0..12_000u32 {
        // Every other item lives 30 s (under ext_low_ttl), the rest forever.
        let expiry = if n % 2 == 0 {
            Expiry::from_exptime(30, T0)
        } else {
            Expiry::NEVER
        };
        s.store(StoreOp::Set, &key(n), 0, expiry, &stamped(n, 0, 1000));
        if n % 64 == 0 {
            settle(&s);
        }
    }
    settle(&s);
    let buckets: Vec<u32> = s
        .flash_pages()
        .iter()
        .filter(|p| !p.free)
        .map(|p| p.bucket)
        .collect();
    assert!(buckets.contains(&3) && buckets.contains(&0), "{buckets:?}");
    let before = s.flash_stats().unwrap();
    s.clock().advance(31);
    settle(&s);
    let after = s.flash_stats().unwrap();
    assert!(
        after.page_reclaims >= before.page_reclaims + 2,
        "{before:?} {after:?}"
    );
    assert_eq!(after.page_evictions, 0);
    assert!(s.stats().reclaimed > 0);
    for n in (1..12_000).step_by(2) {
        verify(
            n,
            &get(&s, &key(n)).unwrap_or_else(|| panic!("key {n} lost")),
        );
    }
}

/// A size between a segment (64 KiB with `flash_config`'s heap) and half a write buffer
/// (256 KiB, two records to a buffer): an item in a run of two segments, whose record takes
/// many blocks.
fn large_len(n: u32) -> usize {
    70_000 + (n as usize * 7_919) % 55_000
}

/// Sets `keys` with values of `large_len`, letting the background work run after each.
fn fill_large(s: &Store, keys: std::ops::Range<u32>) {
    for n in keys {
        assert!(matches!(
            set(s, &key(n), &stamped(n, 0, large_len(n))),
            StoreOutcome::Stored { .. }
        ));
        settle(s);
    }
}

#[test]
fn items_larger_than_a_segment_go_to_flash_whole_and_read_back() {
    let dir = Dir::new("large");
    let s = flash_store(
        &dir,
        64,
        FlashSettings {
            recache_rate: 0,
            ..knobs()
        },
    );
    // One in memory: the tier would take it by size (`stats items`' class 3).
    set(&s, &key(0), &stamped(0, 0, large_len(0)));
    assert_eq!(s.stats().items_flash_sized, 1);
    // Ten times the 4 MiB heap.
    fill_large(&s, 1..250);
    let stats = s.flash_stats().unwrap();
    assert!(stats.objects_written > 150, "{stats:?}");
    // memcached's bucket for chunked items (2) holds them.
    assert!(
        s.flash_pages().iter().any(|p| !p.free && p.bucket == 2),
        "{:?}",
        s.flash_pages()
    );
    assert_eq!(s.stats().curr_items, 250);
    assert_eq!(s.stats().evictions, 0);
    for n in 0..250 {
        let value = get(&s, &key(n)).unwrap_or_else(|| panic!("key {n} lost"));
        assert_eq!(value.len(), large_len(n));
        verify(n, &value);
    }
    let after = s.flash_stats().unwrap();
    assert!(after.gets > 150 && after.bad_crc == 0, "{after:?}");
    // Read back whole: every byte of every record counted.
    assert!(
        after.bytes_read - stats.bytes_read > 150 * 70_000,
        "{after:?}"
    );
    // Page read-back (compaction, eviction) finds the records too: a full flash evicts its
    // oldest pages, and the newest items are all there.
    fill_large(&s, 250..800);
    let stats = s.flash_stats().unwrap();
    assert!(
        stats.page_evictions > 0 && stats.objects_evicted > 0,
        "{stats:?}"
    );
    for n in 700..800 {
        verify(
            n,
            &get(&s, &key(n)).unwrap_or_else(|| panic!("key {n} lost")),
        );
    }
    assert_eq!(s.flash_stats().unwrap().bad_crc, 0);
}

#[test]
fn an_item_larger_than_a_write_buffer_stays_in_memory() {
    let dir = Dir::new("huge");
    let s = flash_store(&dir, 32, knobs());
    // A record holds at most a write buffer (256 KiB here), as memcached's -I is at most
    // ext_wbuf_size.
    set(&s, b"huge", &stamped(7, 0, 300_000));
    assert_eq!(s.stats().items_flash_sized, 0);
    fill_large(&s, 0..40);
    assert_eq!(get(&s, b"huge"), None, "evicted, not written to flash");
    assert_eq!(s.stats().evictions, 1);
}

#[test]
fn large_items_on_flash_come_back_into_memory_with_their_cas_and_marks() {
    let dir = Dir::new("large-back");
    let s = flash_store(
        &dir,
        32,
        FlashSettings {
            recache_rate: 0,
            ..knobs()
        },
    );
    fill_large(&s, 0..100);
    let gets = |s: &Store| s.flash_stats().unwrap().gets;
    let cas = s.get(&key(1)[..], |item| item.cas()).unwrap();
    // touch brings the item back into a run of its own (making room sends others to flash),
    // with its new deadline and its CAS: read from memory from then on.
    assert!(s.touch(&key(1), Expiry::from_exptime(100, T0)));
    let before = gets(&s);
    let (expiry, again) = s
        .get(&key(1)[..], |item| (item.expiry, item.cas()))
        .unwrap();
    assert_eq!((expiry, again), (Expiry::from_exptime(100, T0), cas));
    assert_eq!(gets(&s), before);
    verify(1, &get(&s, &key(1)).unwrap());
    // Meta's marks: invalidating brings it back marked stale.
    s.invalidate(&key(2), None, None, None).unwrap();
    assert!(s.get(&key(2)[..], |item| item.stale).unwrap());
    verify(2, &get(&s, &key(2)).unwrap());
    // A cas with the CAS it had on flash replaces it; replace and delete work as on small
    // items.
    let cas = s.get(&key(3)[..], |item| item.cas()).unwrap();
    let value = stamped(3, 1, large_len(3));
    assert!(matches!(
        s.store_with_cas(StoreOp::Cas(cas), &key(3), 0, Expiry::NEVER, &value, None),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(get(&s, &key(3)).unwrap(), value);
    assert!(s.delete(&key(4)));
    assert_eq!(get(&s, &key(4)), None);
    // With every read recached, a get from flash brings the item back into memory.
    let knobs = s.flash_knobs().unwrap();
    knobs.set(&FlashSettings {
        recache_rate: 1,
        ..knobs.get()
    });
    let recaches = s.flash_stats().unwrap().recaches;
    verify(5, &get(&s, &key(5)).unwrap());
    let stats = s.flash_stats().unwrap();
    assert_eq!(stats.recaches, recaches + 1, "{stats:?}");
    verify(5, &get(&s, &key(5)).unwrap());
    assert_eq!(gets(&s), stats.gets, "read from memory now");
    assert_eq!(s.flash_stats().unwrap().bad_crc, 0);
}

#[test]
fn records_read_for_later_make_room_for_a_new_batch_but_never_drop_it() {
    use std::sync::Arc;
    let dir = Dir::new("large-defer");
    let s = flash_store(
        &dir,
        64,
        FlashSettings {
            recache_rate: 0,
            ..knobs()
        },
    );
    fill_large(&s, 0..260);
    s.defer_flash_reads_on_this_thread();
    let wake: tern_store::FlashWaker = Arc::new(|| ());
    // Reads asked for as one multiget of `keys` asks for them (the oldest keys: on flash),
    // and served.
    let land = |keys: &[u32]| {
        assert_eq!(
            s.get(&key(keys[0])[..], |item| item.value.to_vec()),
            Err(Miss::NotFound)
        );
        for &n in &keys[1..] {
            s.defer_if_on_flash(&key(n));
        }
        let asked = s.ask_deferred(&wake);
        assert_eq!(asked.len(), keys.len(), "every one on flash");
        while !s.flash_ready(&asked) {
            s.serve_flash_reads(std::time::Duration::from_millis(10));
        }
    };
    let first: Vec<u32> = (0..5).collect();
    land(&first);
    // More than the 16 MiB that records read and not yet taken may hold.
    let second: Vec<u32> = (5..200).collect();
    let bytes: usize = second.iter().map(|&n| large_len(n)).sum();
    assert!(bytes > 16 << 20, "{bytes} bytes");
    land(&second);
    // The whole second batch landed: each get finds its record.
    for &n in &second {
        let value = s.get(&key(n)[..], |item| item.value.to_vec());
        assert!(
            !s.flash_deferred(),
            "key {n} was dropped before it was taken"
        );
        verify(n, &value.unwrap());
    }
    // The first batch's records, never taken (a client gone), made room for it.
    assert_eq!(
        s.get(&key(0)[..], |item| item.value.to_vec()),
        Err(Miss::NotFound)
    );
    assert!(s.flash_deferred(), "read again");
}
