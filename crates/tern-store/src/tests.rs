//! The store's behaviour through its public API, command by command.

use std::sync::Arc;

use crate::*;

const T0: UnixSecs = 1_700_000_000;

fn store() -> Store {
    Store::new(Config::default(), Arc::new(Clock::manual(T0))).unwrap()
}

fn get(s: &Store, key: &[u8]) -> Result<Vec<u8>, Miss> {
    s.get(key, |item| item.value.to_vec())
}

#[test]
fn set_then_get() {
    let s = store();
    assert!(matches!(
        s.store(StoreOp::Set, b"k", 5, Expiry::NEVER, b"v"),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(get(&s, b"k"), Ok(b"v".to_vec()));
    assert_eq!(s.get(b"k", |i| i.flags), Ok(5));
}

#[test]
fn a_get_that_changes_nothing_writes_nothing() {
    let s = store();
    s.store(StoreOp::Set, b"k", 3, Expiry::NEVER, b"v");
    // The first get marks the item fetched; a second in the same second has nothing to change.
    assert_eq!(get(&s, b"k"), Ok(b"v".to_vec()));
    s.segs.heap().set_read_only(true);
    let again = s.get(b"k", |item| (item.value.to_vec(), item.flags, item.fetched));
    s.segs.heap().set_read_only(false);
    assert_eq!(again, Ok((b"v".to_vec(), 3, true)));
}

#[test]
fn items_expire_with_the_clock() {
    let s = store();
    s.store(StoreOp::Set, b"k", 0, Expiry::from_exptime(2, T0), b"v");
    s.clock().advance(1);
    assert!(get(&s, b"k").is_ok());
    s.clock().advance(1);
    assert_eq!(get(&s, b"k"), Err(Miss::Expired));
}

#[test]
fn total_items_counts_stores_and_outgrown_counters_only() {
    let s = store();
    s.store(StoreOp::Set, b"a", 0, Expiry::NEVER, b"aa");
    s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"5");
    s.store(StoreOp::Add, b"a", 0, Expiry::NEVER, b"x");
    let _ = s.incr_decr(b"n", Arith::Incr, 2, None, None);
    let _ = s.incr_decr(b"n", Arith::Decr, 1, None, None);
    assert!(s.touch(b"a", Expiry(s.clock().now() + 100)));
    assert_eq!(s.stats().total_items, 2);
    // 6 -> 106 no longer fits where 6 was: memcached links a new item and counts it.
    let _ = s.incr_decr(b"n", Arith::Incr, 100, None, None);
    assert_eq!(s.stats().total_items, 3);
}

#[test]
fn incr_decr_follow_memcached() {
    let s = store();
    s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"100");
    let value = |r: Result<Counted, ArithError>| r.map(|c| c.value);
    assert_eq!(value(s.incr_decr(b"n", Arith::Decr, 1, None, None)), Ok(99));
    assert_eq!(get(&s, b"n"), Ok(b"99 ".to_vec()));
    assert_eq!(
        value(s.incr_decr(b"n", Arith::Decr, 1000, None, None)),
        Ok(0)
    );
    s.store(
        StoreOp::Set,
        b"n",
        0,
        Expiry::NEVER,
        b"18446744073709551615",
    );
    assert_eq!(value(s.incr_decr(b"n", Arith::Incr, 2, None, None)), Ok(1));
    s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b" 12");
    assert_eq!(value(s.incr_decr(b"n", Arith::Incr, 1, None, None)), Ok(13));
    s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"abc");
    assert_eq!(
        s.incr_decr(b"n", Arith::Incr, 1, None, None),
        Err(ArithError::NonNumeric)
    );
    assert_eq!(
        s.incr_decr(b"missing", Arith::Incr, 1, None, None),
        Err(ArithError::NotFound)
    );
}

#[test]
fn cas_add_replace_append() {
    let s = store();
    assert_eq!(
        s.store(StoreOp::Replace, b"k", 0, Expiry::NEVER, b"x"),
        StoreOutcome::NotStored
    );
    let StoreOutcome::Stored { cas } = s.store(StoreOp::Add, b"k", 0, Expiry::NEVER, b"a") else {
        panic!("add failed")
    };
    assert_eq!(
        s.store(StoreOp::Add, b"k", 0, Expiry::NEVER, b"b"),
        StoreOutcome::NotStored
    );
    assert_eq!(
        s.store(StoreOp::Cas(cas + 100), b"k", 0, Expiry::NEVER, b"c"),
        StoreOutcome::Exists
    );
    assert!(matches!(
        s.store(StoreOp::Cas(cas), b"k", 0, Expiry::NEVER, b"c"),
        StoreOutcome::Stored { .. }
    ));
    s.store(StoreOp::Append(None), b"k", 9, Expiry::NEVER, b"d");
    s.store(StoreOp::Prepend(None), b"k", 9, Expiry::NEVER, b"b");
    assert_eq!(get(&s, b"k"), Ok(b"bcd".to_vec()));
    assert_eq!(s.get(b"k", |i| i.flags), Ok(0));
}

#[test]
fn cas_conditioned_ops_check_in_the_same_step() {
    let s = store();
    let set = |value: &[u8]| match s.store(StoreOp::Set, b"k", 0, Expiry::NEVER, value) {
        StoreOutcome::Stored { cas } => cas,
        other => panic!("set: {other:?}"),
    };
    let cas = set(b"1");
    let stale = cas + 1;
    // Mismatch: nothing changes.
    assert_eq!(s.delete_checked(b"k", Some(stale)), Err(Refused::Exists));
    assert_eq!(
        s.incr_decr(b"k", Arith::Incr, 1, Some(stale), None),
        Err(ArithError::Exists)
    );
    for op in [StoreOp::Append(Some(stale)), StoreOp::Prepend(Some(stale))] {
        assert_eq!(
            s.store(op, b"k", 0, Expiry::NEVER, b"0"),
            StoreOutcome::Exists
        );
    }
    assert_eq!(
        s.invalidate(b"k", None, Some(stale), None),
        Err(Refused::Exists)
    );
    assert_eq!(
        s.get(b"k", |i| (i.value.to_vec(), i.cas(), i.stale)),
        Ok((b"1".to_vec(), cas, false))
    );
    // Match: each op runs and hands out the CAS the next one must name.
    let counted = s.incr_decr(b"k", Arith::Incr, 1, Some(cas), None).unwrap();
    assert_eq!(counted.value, 2);
    assert_eq!(
        s.get(b"k", |i| (i.cas(), i.expiry)),
        Ok((counted.cas, counted.expiry))
    );
    let StoreOutcome::Stored { cas } = s.store(
        StoreOp::Append(Some(counted.cas)),
        b"k",
        0,
        Expiry::NEVER,
        b"0",
    ) else {
        panic!("append with the current CAS")
    };
    let StoreOutcome::Stored { cas } =
        s.store(StoreOp::Prepend(Some(cas)), b"k", 0, Expiry::NEVER, b"1")
    else {
        panic!("prepend with the current CAS")
    };
    assert_eq!(get(&s, b"k"), Ok(b"120".to_vec()));
    assert_eq!(s.invalidate(b"k", None, Some(cas), None), Ok(()));
    // memcached's `md I` gives the item a new CAS: the one read before no longer matches.
    assert_eq!(s.delete_checked(b"k", Some(cas)), Err(Refused::Exists));
    let (stale, new_cas) = s.get(b"k", |i| (i.stale, i.cas())).unwrap();
    assert!(stale && new_cas != cas);
    let cas = new_cas;
    assert_eq!(s.delete_checked(b"k", Some(cas)), Ok(()));
    // Missing: NotFound (append/prepend: NotStored, as memcached answers).
    assert_eq!(s.delete_checked(b"k", Some(cas)), Err(Refused::NotFound));
    assert_eq!(
        s.incr_decr(b"k", Arith::Incr, 1, Some(cas), None),
        Err(ArithError::NotFound)
    );
    assert_eq!(
        s.invalidate(b"k", None, Some(cas), None),
        Err(Refused::NotFound)
    );
    assert_eq!(
        s.store(StoreOp::Append(Some(cas)), b"k", 0, Expiry::NEVER, b"0"),
        StoreOutcome::NotStored
    );
}

fn stored_cas(outcome: StoreOutcome) -> u64 {
    match outcome {
        StoreOutcome::Stored { cas } => cas,
        other => panic!("not stored: {other:?}"),
    }
}

#[test]
fn a_client_given_cas_is_kept_until_the_item_next_changes() {
    let s = store();
    let cas_of = |key: &[u8]| s.get(key, |i| i.cas()).unwrap();
    let with = |op, value: &[u8], cas| {
        stored_cas(s.store_with_cas(op, b"k", 0, Expiry::NEVER, value, cas))
    };
    assert_eq!(with(StoreOp::Set, b"1", Some(973)), 973);
    assert_eq!(cas_of(b"k"), 973);
    // A compare-and-swap names the given CAS and gives another.
    assert_eq!(with(StoreOp::Cas(973), b"2", Some(4000)), 4000);
    // A touch that moves the item (it gains an expiry field) keeps it.
    assert!(s.touch(b"k", Expiry::from_exptime(100, T0)));
    assert_eq!(cas_of(b"k"), 4000);
    assert_eq!(with(StoreOp::Append(Some(4000)), b"3", Some(5)), 5);
    let fresh = with(StoreOp::Append(None), b"4", None);
    assert_ne!(fresh, 5);
    assert_eq!(get(&s, b"k"), Ok(b"234".to_vec()));
    let counted = s
        .incr_decr(b"k", Arith::Incr, 1, Some(fresh), Some(77))
        .unwrap();
    assert_eq!((counted.value, counted.cas, cas_of(b"k")), (235, 77, 77));
    let counted = s.incr_decr(b"k", Arith::Incr, 1, None, None).unwrap();
    assert!(counted.cas != 77 && counted.cas == cas_of(b"k"));
    assert_eq!(s.invalidate(b"k", None, None, Some(88)), Ok(()));
    assert_eq!(s.get(b"k", |i| (i.cas(), i.stale)), Ok((88, true)));
    // 0 is a CAS like any other.
    assert_eq!(with(StoreOp::Set, b"1", Some(0)), 0);
    assert_eq!(cas_of(b"k"), 0);
    // A plain set takes a fresh one again.
    let plain = stored_cas(s.store(StoreOp::Set, b"k", 0, Expiry::NEVER, b"1"));
    assert!(plain != 0 && plain == cas_of(b"k"));
    // Without CAS uniques (`-C`) every CAS is 0, a given one too.
    let no_cas = Store::new(
        Config {
            cas_enabled: false,
            ..Config::default()
        },
        Arc::new(Clock::manual(T0)),
    )
    .unwrap();
    let outcome = no_cas.store_with_cas(StoreOp::Set, b"k", 0, Expiry::NEVER, b"1", Some(9));
    assert_eq!(stored_cas(outcome), 0);
    assert_eq!(no_cas.get(b"k", |i| i.cas()), Ok(0));
}

#[test]
fn large_items_take_a_given_cas_in_place_too() {
    let s = Store::new(
        Config {
            segment_size: 4096,
            max_item_size: 64 << 10,
            ..Config::default()
        },
        Arc::new(Clock::manual(T0)),
    )
    .unwrap();
    let cas_of = |key: &[u8]| s.get(key, |i| i.cas()).unwrap();
    // A counter padded past a segment's size: incr and invalidate change it where it is.
    let mut big = b"5".to_vec();
    big.resize(10_000, b' ');
    let set = s.store_with_cas(StoreOp::Set, b"n", 0, Expiry::NEVER, &big, Some(9));
    assert_eq!((stored_cas(set), cas_of(b"n")), (9, 9));
    let counted = s
        .incr_decr(b"n", Arith::Incr, 1, Some(9), Some(10))
        .unwrap();
    assert_eq!((counted.value, counted.cas, cas_of(b"n")), (6, 10, 10));
    let counted = s.incr_decr(b"n", Arith::Incr, 1, None, None).unwrap();
    assert!(counted.cas != 10 && counted.cas == cas_of(b"n"));
    assert_eq!(
        s.invalidate(b"n", None, Some(counted.cas), Some(11)),
        Ok(())
    );
    assert_eq!(cas_of(b"n"), 11);
    assert_eq!(s.invalidate(b"n", None, None, None), Ok(()));
    let fresh = cas_of(b"n");
    assert!(fresh != 11 && fresh != counted.cas);
    // Written without one, a large item's CAS is its place's, and changes with each write.
    let plain = stored_cas(s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, &big));
    assert_eq!(cas_of(b"n"), plain);
    assert!(s.touch(b"n", Expiry::from_exptime(100, T0)));
    assert_eq!(cas_of(b"n"), plain);
    assert_eq!(get(&s, b"n"), Ok(big));
}

#[test]
fn flush_now_and_later() {
    let s = store();
    s.store(StoreOp::Set, b"a", 0, Expiry::NEVER, b"1");
    s.flush_all(0);
    assert!(get(&s, b"a").is_err());
    s.clock().advance(1);
    s.store(StoreOp::Set, b"a", 0, Expiry::NEVER, b"1");
    s.flush_all(5);
    s.clock().advance(4);
    assert!(get(&s, b"a").is_ok());
    s.clock().advance(1);
    assert_eq!(get(&s, b"a"), Err(Miss::Flushed));
}

#[test]
fn heap_limit_evicts_or_refuses() {
    let config = Config {
        heap_bytes: 64 * 1024,
        shards: 1,
        ..Config::default()
    };
    let s = Store::new(config.clone(), Arc::new(Clock::manual(T0))).unwrap();
    for i in 0..1000u32 {
        s.store(StoreOp::Set, &i.to_be_bytes(), 0, Expiry::NEVER, &[7; 100]);
    }
    assert!(s.stats().evictions > 0);
    let no_evict = Store::new(
        Config {
            eviction: Eviction::None,
            ..config
        },
        Arc::new(Clock::manual(T0)),
    )
    .unwrap();
    let outcomes: Vec<_> = (0..1000u32)
        .map(|i| no_evict.store(StoreOp::Set, &i.to_be_bytes(), 0, Expiry::NEVER, &[7; 100]))
        .collect();
    assert!(outcomes.contains(&StoreOutcome::OutOfMemory));
}

#[test]
fn a_dump_lists_every_live_item_once() {
    let s = store();
    let big = vec![b'v'; 600_000];
    for i in 0..3_000u32 {
        let key = format!("key:{i}");
        let value: &[u8] = if i % 1000 == 7 { &big } else { b"value" };
        let expiry = if i % 10 == 3 {
            Expiry::from_exptime(-1, T0)
        } else {
            Expiry::from_exptime(100, T0)
        };
        s.store(StoreOp::Set, key.as_bytes(), i, expiry, value);
    }
    s.delete(b"key:0");
    let mut seen = std::collections::BTreeMap::new();
    let mut cursor = Some(DumpCursor::default());
    let mut steps = 0;
    while let Some(from) = cursor {
        cursor = s.dump(from, 64, |item| {
            let key = String::from_utf8(item.key.to_vec()).unwrap();
            assert_eq!(item.expiry, Expiry::from_exptime(100, T0));
            assert!(
                seen.insert(key, (item.flags, item.value_len)).is_none(),
                "listed twice"
            );
        });
        steps += 1;
    }
    let live: std::collections::BTreeMap<String, (u32, usize)> = (1..3_000u32)
        .filter(|i| i % 10 != 3)
        .map(|i| {
            let len = if i % 1000 == 7 { big.len() } else { 5 };
            (format!("key:{i}"), (i, len))
        })
        .collect();
    assert_eq!(seen, live);
    assert!(steps > 16, "the walk went in small steps ({steps})");
}

#[test]
fn the_eviction_observer_hears_of_every_evicted_item() {
    let s = Store::new(
        Config {
            heap_bytes: 4 << 20,
            segment_size: 64 << 10,
            shards: 2,
            ..Config::default()
        },
        Arc::new(Clock::manual(T0)),
    )
    .unwrap();
    let evicted = Arc::new(std::sync::Mutex::new(Vec::new()));
    let heard = evicted.clone();
    assert!(s.observe_evictions(Box::new(move |item| {
        assert!(!item.fetched && item.expiry == Expiry::NEVER);
        heard.lock().unwrap().push(item.key.to_vec());
    })));
    assert!(!s.observe_evictions(Box::new(|_| {})), "one observer");
    for i in 0..20_000u32 {
        s.store(
            StoreOp::Set,
            format!("k{i}").as_bytes(),
            0,
            Expiry::NEVER,
            &[b'v'; 300],
        );
    }
    let evicted = evicted.lock().unwrap();
    assert_eq!(evicted.len() as u64, s.stats().evictions);
    assert!(!evicted.is_empty());
    for key in evicted.iter() {
        assert_eq!(
            get(&s, key),
            Err(Miss::NotFound),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

/// Two keys a flash entry cannot tell apart (the same shard, tag and check bits): a set of
/// one drops both entries unread, so its own old entry never stays behind its new item (where
/// no lookup would meet it until the new item went to flash too, and then the older value
/// could be found first); a get of the other, absent, reads the one's record once and misses.
#[test]
fn a_set_drops_every_flash_entry_that_may_be_its_key() {
    let dir = std::env::temp_dir().join(format!("tern-store-alike-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config {
        heap_bytes: 4 << 20,
        shards: 4,
        flash: Some(FlashConfig::for_tests(dir.join("flash"), 32 << 20)),
        ..Config::default()
    };
    let s = Store::new(config, Arc::new(Clock::manual(T0))).unwrap();
    let geometry = s.flash.as_ref().unwrap().geometry;
    let mut seen = std::collections::HashMap::new();
    let (a, b) = (0u64..)
        .find_map(|n| {
            let k = format!("alike:{n}").into_bytes();
            let (shard, key) = s.hash(&k);
            let looks = (shard, key.tag, geometry.check_of(s.hasher.hash_one(&k)));
            seen.insert(looks, k.clone()).map(|other| (other, k))
        })
        .unwrap();
    let value = |tag: u8| vec![tag; 1000];
    let settle = |s: &Store| while s.flash_work().is_zero() {};
    let fill = |s: &Store, from: u32| {
        for n in from..from + 12_000 {
            s.store(
                StoreOp::Set,
                format!("fill:{n}").as_bytes(),
                0,
                Expiry::NEVER,
                &value(7),
            );
            if n % 64 == 0 {
                settle(s);
            }
        }
        settle(s);
    };
    s.store(StoreOp::Set, &a, 0, Expiry::NEVER, &value(1));
    s.store(StoreOp::Set, &b, 0, Expiry::NEVER, &value(2));
    // Both go to flash, the oldest items of a full heap.
    fill(&s, 0);
    let from_flash = s.flash_stats().unwrap().gets;
    assert_eq!(get(&s, &a), Ok(value(1)));
    assert_eq!(get(&s, &b), Ok(value(2)));
    // Each read from flash (one of them after a false read of the other's record).
    assert_eq!(s.flash_stats().unwrap().gets, from_flash + 2);
    // A set of b drops a's entry too: a documented eviction, as rare as a false read.
    s.store(StoreOp::Set, &b, 0, Expiry::NEVER, &value(3));
    assert_eq!(get(&s, &a), Err(Miss::NotFound));
    // b's new item goes to flash in turn, and is the one found.
    fill(&s, 12_000);
    assert_eq!(get(&s, &b), Ok(value(3)));
    // A get of a reads b's record (a false read), then answers a miss: once, not again and
    // again (a read lets the lock go, and reading the same false candidates again found them
    // false again, until the stack ran out).
    let false_reads = s.flash_stats().unwrap().false_reads;
    assert_eq!(get(&s, &a), Err(Miss::NotFound));
    assert_eq!(s.flash_stats().unwrap().false_reads, false_reads + 1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The segment `key`'s item is in.
fn segment_of(s: &Store, key: &[u8]) -> u32 {
    let (shard, key) = s.hash(key);
    let guard = s.lock(shard);
    s.lookup(&guard, key).expect("stored").loc.seg
}

/// One shard of 32 segments, written by two threads: two lanes.
fn two_lane_store(eviction: Eviction) -> Store {
    Store::new(
        Config {
            heap_bytes: 128 << 10,
            segment_size: 4 << 10,
            shards: 1,
            writers: 2,
            eviction,
            ..Config::default()
        },
        Arc::new(Clock::manual(T0)),
    )
    .unwrap()
}

#[test]
fn each_writer_thread_appends_to_a_segment_of_its_own() {
    let s = two_lane_store(Eviction::default());
    let set = |key: &[u8]| {
        let outcome = s.store(StoreOp::Set, key, 0, Expiry::NEVER, b"v");
        assert!(matches!(outcome, StoreOutcome::Stored { .. }));
    };
    // Two threads, each writing twice, taking turns.
    let (to_second, from_first) = std::sync::mpsc::channel();
    let (to_first, from_second) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            set(b"first:1");
            to_second.send(()).unwrap();
            from_second.recv().unwrap();
            set(b"first:2");
            to_second.send(()).unwrap();
        });
        scope.spawn(move || {
            from_first.recv().unwrap();
            set(b"second:1");
            to_first.send(()).unwrap();
            from_first.recv().unwrap();
            set(b"second:2");
        });
    });
    let first = segment_of(&s, b"first:1");
    let second = segment_of(&s, b"second:1");
    assert_ne!(first, second);
    assert_eq!(segment_of(&s, b"first:2"), first);
    assert_eq!(segment_of(&s, b"second:2"), second);
    // A flush lets go of both.
    s.flush_all(0);
    assert_eq!(s.lock(0).active[0], crate::mechanics::shard::Lanes::NONE);
    set(b"after");
    assert_eq!(get(&s, b"after").unwrap(), b"v");
}

#[test]
fn a_lane_that_stops_writing_has_its_segment_evicted_and_opens_another() {
    for eviction in [Eviction::Merge, Eviction::Fifo, Eviction::Random] {
        let s = two_lane_store(eviction);
        let set = |key: &[u8]| {
            let outcome = s.store(StoreOp::Set, key, 0, Expiry::NEVER, &[b'v'; 100]);
            assert!(
                matches!(outcome, StoreOutcome::Stored { .. }),
                "{outcome:?}"
            );
        };
        // This thread takes the first lane and writes once; another writes the heap over
        // many times on the second, so the first lane's segment becomes the oldest.
        set(b"idle lane");
        let idle = segment_of(&s, b"idle lane");
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..20_000 {
                    set(format!("busy:{i}").as_bytes());
                }
            });
        });
        assert!(s.stats().evictions > 0, "{eviction:?}");
        assert!(
            !s.lock(0).active[0].contains(idle),
            "{eviction:?}: the idle lane's segment was never evicted"
        );
        set(b"idle lane again");
        assert_eq!(get(&s, b"idle lane again").unwrap(), [b'v'; 100]);
        assert_eq!(get(&s, b"busy:19999").unwrap(), [b'v'; 100]);
    }
}
