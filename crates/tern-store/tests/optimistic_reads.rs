//! Gets read without the shard lock (see `mechanics/seqlock.rs`): with writers replacing the
//! same hot keys, eviction freeing and reusing their segments, and the index being rebuilt,
//! every value a get hands over must be one stored for that key, whole, and what a reader wrote
//! while reading a state that changed under it must be undone. (With the check of the sequence
//! count made to always pass, these tests fail within a run: torn values reach the reader.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;

use tern_store::{Clock, Config, Eviction, Expiry, Store, StoreOp};

/// Keys read most (every reader's), among `KEYS` that writers cycle through so the small heap
/// keeps evicting.
const HOT: u32 = 8;
const KEYS: u32 = 4_000;
const WRITERS: u32 = 2;
const READERS: u32 = 2;
/// Operations per writer; readers read until the writers are done.
const WRITES: u32 = 60_000;

/// Bytes a reader's output holds before each get.
const PREFIX: &[u8] = b"VALUE ";

fn key(k: u32) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// A value that names its key and version, of a length that varies with both, closed by a
/// checksum of everything before it: a copy torn between two versions, or taken from a reused
/// segment, fails `check`.
fn value(k: u32, version: u32) -> Vec<u8> {
    let len = 16 + (k as usize * 31 + version as usize * 7) % 400;
    let mut v = Vec::with_capacity(len + 8);
    v.extend_from_slice(&k.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend((0..len).map(|i| (k as usize + version as usize * 13 + i) as u8));
    let sum = checksum(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Panics unless `v` is a value `value(k, _)` made; returns its version.
fn check(k: u32, v: &[u8]) -> u32 {
    assert!(v.len() >= 16 + 16, "key {k}: a value of {} bytes", v.len());
    let (body, sum) = v.split_at(v.len() - 8);
    assert_eq!(
        u64::from_le_bytes(sum.try_into().unwrap()),
        checksum(body),
        "key {k}: a torn value"
    );
    let stored_for = u32::from_le_bytes(body[..4].try_into().unwrap());
    assert_eq!(
        stored_for, k,
        "key {k} answered with key {stored_for}'s value"
    );
    let version = u32::from_le_bytes(body[4..8].try_into().unwrap());
    assert_eq!(v, value(k, version), "key {k}: not a value stored");
    version
}

fn store(eviction: Eviction) -> Store {
    Store::new(
        Config {
            heap_bytes: 256 << 10,
            segment_size: 8 << 10,
            shards: 2,
            // Each writer appends to its own segments (two lanes a shard).
            writers: WRITERS as usize,
            eviction,
            ..Config::default()
        },
        std::sync::Arc::new(Clock::manual(1_000)),
    )
    .expect("a store")
}

/// Writers store new versions of hot and cold keys (a hot one every 16th write, so a hot
/// version is read many times: a first read takes the lock, to mark the item fetched; the cold
/// keys keep eviction reusing segments that readers may still be copying from), some with a
/// deadline (another TTL group's segments), some deleted; readers read the hot keys (and
/// now and then a cold one) and check every value they get.
fn hammer(eviction: Eviction) {
    let s = store(eviction);
    let done = AtomicBool::new(false);
    let start = Barrier::new((WRITERS + READERS) as usize);
    let reads = thread::scope(|scope| {
        for w in 0..WRITERS {
            let (s, done, start) = (&s, &done, &start);
            scope.spawn(move || {
                start.wait();
                let mut x = 0x9e37_79b9u32 ^ (w + 1);
                for version in 0..WRITES {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let k = if version % 16 == 0 {
                        x % HOT
                    } else {
                        HOT + x % (KEYS - HOT)
                    };
                    let expiry = if x % 5 == 0 {
                        Expiry::from_exptime(1_000_000, 1_000)
                    } else {
                        Expiry::NEVER
                    };
                    s.store(StoreOp::Set, &key(k), 0, expiry, &value(k, version));
                    if version % 512 == 0 {
                        s.delete(&key(x % HOT));
                        // A new second: the next read of an item records its access time.
                        s.clock().advance(1);
                    }
                }
                done.store(true, Ordering::Relaxed);
            });
        }
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let (s, done, start) = (&s, &done, &start);
                scope.spawn(move || {
                    start.wait();
                    let (mut hits, mut i) = (0u64, r);
                    // What a server has written before the reply, which a read that is undone
                    // must leave as it was.
                    let mut out = Vec::new();
                    // Each reader goes on until both writers are done (bounded: they are).
                    while !done.load(Ordering::Relaxed) || i < 1_000 {
                        i += 1;
                        // Every other read a cold key: most are in segments being evicted and
                        // reused while the read is in them.
                        let k = if i % 2 == 0 { i % KEYS } else { i % HOT };
                        out.clear();
                        out.extend_from_slice(PREFIX);
                        // The reader runs on whatever it is shown; only what the store hands
                        // back is checked.
                        let found = if i % 2 == 0 {
                            s.get_into(&key(k), &mut out, |item, out| {
                                out.extend_from_slice(item.value)
                            })
                        } else {
                            s.get(&key(k), |item| item.value.to_vec())
                                .map(|v| out.extend_from_slice(&v))
                        };
                        assert_eq!(&out[..PREFIX.len()], PREFIX, "key {k}: the output before");
                        match found {
                            Ok(()) => {
                                check(k, &out[PREFIX.len()..]);
                                hits += 1;
                            }
                            Err(_) => assert_eq!(out, PREFIX, "key {k}: a miss wrote"),
                        }
                    }
                    hits
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>()
    });
    assert!(reads > 0, "no read found a value");
    let st = s.stats();
    if eviction != Eviction::None {
        assert!(st.evictions > 0, "{eviction:?}: nothing was evicted");
    }
}

#[test]
fn optimistic_gets_see_only_stored_values_under_merge_eviction() {
    hammer(Eviction::Merge);
}

#[test]
fn optimistic_gets_see_only_stored_values_under_fifo_eviction() {
    hammer(Eviction::Fifo);
}

#[test]
fn optimistic_gets_see_only_stored_values_under_random_eviction() {
    hammer(Eviction::Random);
}
