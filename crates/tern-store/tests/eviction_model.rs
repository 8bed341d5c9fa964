//! Random command sequences on a heap small enough that they evict, merge and store large
//! items in runs of segments, under each eviction policy. The model knows each key's
//! latest accepted value but not whether eviction has dropped it since: a read may miss, but
//! whatever it returns must be exactly that value (never an older version, another key's
//! bytes or a torn one), and once the store has said a key is gone it stays gone until it is
//! written again. Each policy's cases must together show they reached eviction, merge and
//! runs, so the test cannot quietly stop covering them.

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use tern_store::{
    parse_u64, Arith, ArithError, Clock, Config, Eviction, Expiry, Refused, Store, StoreOp,
    StoreOutcome, UnixSecs,
};

const T0: UnixSecs = 1_700_000_000;
const SEGMENT: usize = 4 << 10;
/// 16 segments: the filling sets alone write up to three times that.
const HEAP: usize = 16 * SEGMENT;
/// Items of up to four segments; a few values are larger still, to be refused.
const MAX_ITEM: usize = 4 * SEGMENT;
const KEYS: usize = 48;

fn key(k: usize) -> Vec<u8> {
    // Every eighth key is long, so key length varies item sizes too.
    if k % 8 == 0 {
        format!("{k:0>200}").into_bytes()
    } else {
        format!("key-{k}").into_bytes()
    }
}

/// A value, made from a short description so that shrinking stays quick.
#[derive(Clone, Copy, Debug)]
enum ValueSpec {
    Bytes {
        len: usize,
        seed: u64,
    },
    /// A decimal number padded with spaces, which incr/decr accept.
    Number {
        n: u64,
        pad: usize,
    },
}

impl ValueSpec {
    fn bytes(self) -> Vec<u8> {
        match self {
            ValueSpec::Bytes { len, seed } => {
                let mut x = seed | 1;
                let mut v = Vec::with_capacity(len + 8);
                while v.len() < len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    v.extend_from_slice(&x.to_le_bytes());
                }
                v.truncate(len);
                v
            }
            ValueSpec::Number { n, pad } => {
                let mut v = n.to_string().into_bytes();
                v.resize(v.len() + pad, b' ');
                v
            }
        }
    }
}

fn value() -> impl Strategy<Value = ValueSpec> {
    let bytes = |lens: std::ops::Range<usize>| {
        (lens, any::<u64>()).prop_map(|(len, seed)| ValueSpec::Bytes { len, seed })
    };
    prop_oneof![
        8 => bytes(0..16),
        8 => bytes(16..300),
        8 => bytes(300..3000),
        // From just under a segment to past the largest item.
        1 => bytes(SEGMENT - 300..MAX_ITEM + 2000),
        2 => (any::<u64>(), prop_oneof![0usize..4, Just(SEGMENT + 100)])
            .prop_map(|(n, pad)| ValueSpec::Number { n, pad }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// cas with the unique a get just returned.
    CasFresh,
    /// cas with a unique one off from it.
    CasStale,
}

#[derive(Clone, Debug)]
enum Op {
    Store(Kind, usize, u32, i64, ValueSpec),
    Get(usize),
    Gat(usize, i64),
    Touch(usize, i64),
    Delete(usize),
    Arith(usize, Arith, u64),
    Invalidate(usize),
    Flush(u32),
    Advance(u32),
    Reclaim,
}

/// Sets of mid-sized values that never expire: a case starts with up to a few heaps' worth, so
/// the commands after them find the heap full and make room by eviction, merge included (a
/// merge needs two or more ordinary segments at the old end of a TTL group).
fn filling() -> impl Strategy<Value = Vec<Op>> {
    let set = (0..KEYS, 500usize..2000, any::<u64>())
        .prop_map(|(k, len, seed)| Op::Store(Kind::Set, k, 0, 0, ValueSpec::Bytes { len, seed }));
    proptest::collection::vec(set, 0..150)
}

fn exptime() -> impl Strategy<Value = i64> {
    prop_oneof![6 => Just(0i64), 2 => 1i64..5, 1 => Just(-1)]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS;
    let kind = prop_oneof![
        4 => Just(Kind::Set),
        1 => Just(Kind::Add),
        1 => Just(Kind::Replace),
        1 => Just(Kind::Append),
        1 => Just(Kind::Prepend),
        1 => Just(Kind::CasFresh),
        1 => Just(Kind::CasStale),
    ];
    prop_oneof![
        40 => (kind, k.clone(), prop_oneof![Just(0u32), any::<u32>()], exptime(), value())
            .prop_map(|(kind, k, flags, exptime, v)| Op::Store(kind, k, flags, exptime, v)),
        30 => k.clone().prop_map(Op::Get),
        3 => (k.clone(), exptime()).prop_map(|(k, e)| Op::Gat(k, e)),
        3 => (k.clone(), exptime()).prop_map(|(k, e)| Op::Touch(k, e)),
        3 => k.clone().prop_map(Op::Delete),
        5 => (k.clone(), prop_oneof![Just(Arith::Incr), Just(Arith::Decr)], 0u64..1000)
            .prop_map(|(k, a, d)| Op::Arith(k, a, d)),
        3 => k.clone().prop_map(Op::Invalidate),
        1 => (0u32..3).prop_map(Op::Flush),
        3 => (0u32..3).prop_map(Op::Advance),
        2 => Just(Op::Reclaim),
    ]
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    expiry: Expiry,
}

/// Per key, the latest accepted version: the store holds exactly it, or nothing.
#[derive(Default)]
struct Model {
    items: HashMap<usize, Entry>,
    /// A delayed `flush_all` not yet due.
    flush_at: Option<UnixSecs>,
}

impl Model {
    /// Applies a delayed flush that has come due.
    fn catch_up(&mut self, now: UnixSecs) {
        if self.flush_at.is_some_and(|at| at <= now) {
            self.items.clear();
            self.flush_at = None;
        }
    }

    /// The key's version that may still be stored, after expiry and any flush come due.
    fn current(&mut self, k: usize, now: UnixSecs) -> Option<Entry> {
        self.catch_up(now);
        if self.items.get(&k)?.expiry.is_expired_at(now) {
            self.items.remove(&k);
        }
        self.items.get(&k).cloned()
    }
}

/// The number incr/decr read from a value: the store's own parser, memcached's safe_strtoull
/// (C white space, a sign, a NUL ending the number), whose rules the differential test holds
/// against memcached; this test is about what eviction keeps, not about parsing.
fn model_number(value: &[u8]) -> Option<u64> {
    parse_u64(value)
}

/// Whether an item of `value_len` for key `k` may be too large for an ordinary segment (the
/// header is up to 23 bytes, and 16 more are kept free for growth). A large write drops its
/// shard's lock while it empties a window of the heap for its run, which may evict the very
/// item it was to replace.
fn may_take_a_run(k: usize, value_len: usize) -> bool {
    value_len + key(k).len() + 23 + 16 > SEGMENT
}

/// What one policy's cases reached, summed.
#[derive(Clone, Copy, Debug, Default)]
struct Reached {
    evictions: u64,
    merges: u64,
    /// Values larger than a segment that were stored (each in a run).
    large_stored: u64,
    out_of_memory: u64,
}

impl Reached {
    fn add(&mut self, other: Reached) {
        self.evictions += other.evictions;
        self.merges += other.merges;
        self.large_stored += other.large_stored;
        self.out_of_memory += other.out_of_memory;
    }
}

struct Case {
    store: Store,
    clock: Arc<Clock>,
    model: Model,
    policy: Eviction,
    reached: Reached,
}

impl Case {
    /// Whether running out of memory is an acceptable answer for an item of `value_len`:
    /// with eviction off, or for a large item.
    fn may_run_out(&self, k: usize, value_len: usize) -> bool {
        self.policy == Eviction::None || may_take_a_run(k, value_len)
    }

    /// A get, checked against the model; returns the CAS it saw.
    fn get(&mut self, k: usize) -> Option<u64> {
        let now = self.clock.now();
        let got = self.store.get(&key(k), |it| {
            (
                Entry {
                    value: it.value.to_vec(),
                    flags: it.flags,
                    expiry: it.expiry,
                },
                it.cas(),
            )
        });
        let want = self.model.current(k, now);
        match got {
            Ok((entry, cas)) => {
                assert_eq!(
                    Some(&entry),
                    want.as_ref(),
                    "get {k} returned a version never stored last"
                );
                Some(cas)
            }
            Err(_) => {
                self.model.items.remove(&k);
                None
            }
        }
    }

    fn store_op(&mut self, kind: Kind, k: usize, flags: u32, exptime: i64, spec: ValueSpec) {
        let cas_seen = match kind {
            Kind::CasFresh | Kind::CasStale => self.get(k),
            _ => None,
        };
        let now = self.clock.now();
        let value = spec.bytes();
        let expiry = Expiry::from_exptime(exptime, now);
        let current = self.model.current(k, now);
        let op = match kind {
            Kind::Set => StoreOp::Set,
            Kind::Add => StoreOp::Add,
            Kind::Replace => StoreOp::Replace,
            Kind::Append => StoreOp::Append(None),
            Kind::Prepend => StoreOp::Prepend(None),
            Kind::CasFresh => StoreOp::Cas(cas_seen.unwrap_or(12345)),
            Kind::CasStale => StoreOp::Cas(cas_seen.map_or(12345, |cas| cas + 1)),
        };
        let outcome = self.store.store(op, &key(k), flags, expiry, &value);
        let new = match (kind, &current) {
            (Kind::Append, Some(old)) => Entry {
                value: [&old.value[..], &value].concat(),
                ..old.clone()
            },
            (Kind::Prepend, Some(old)) => Entry {
                value: [&value[..], &old.value].concat(),
                ..old.clone()
            },
            _ => Entry {
                value: value.clone(),
                flags,
                expiry,
            },
        };
        let context = format!("{kind:?} {k} ({} bytes): {outcome:?}", new.value.len());
        // Whether the command may get as far as writing, as far as the model knows.
        let may_write = match kind {
            Kind::Set | Kind::Add => true,
            Kind::Replace | Kind::Append | Kind::Prepend => current.is_some(),
            Kind::CasFresh => cas_seen.is_some(),
            Kind::CasStale => false,
        };
        match outcome {
            StoreOutcome::Stored { .. } => {
                assert!(may_write && new.value.len() <= MAX_ITEM, "{context}");
                if new.value.len() > SEGMENT {
                    self.reached.large_stored += 1;
                }
                self.model.items.insert(k, new);
            }
            StoreOutcome::NotStored => match kind {
                Kind::Add => assert!(current.is_some(), "{context}"),
                Kind::Replace | Kind::Append | Kind::Prepend => {
                    self.model.items.remove(&k);
                }
                _ => panic!("{context}"),
            },
            StoreOutcome::Exists => {
                assert!(kind == Kind::CasStale && cas_seen.is_some(), "{context}")
            }
            StoreOutcome::NotFound => {
                let evicted_for_its_run =
                    kind == Kind::CasFresh && may_take_a_run(k, new.value.len());
                assert!(
                    matches!(kind, Kind::CasFresh | Kind::CasStale)
                        && (cas_seen.is_none() || evicted_for_its_run),
                    "{context}"
                );
                self.model.items.remove(&k);
            }
            StoreOutcome::TooLarge => {
                assert!(may_write && new.value.len() > MAX_ITEM, "{context}");
                if kind == Kind::Set {
                    // A failed set leaves no stale copy behind.
                    self.model.items.remove(&k);
                }
            }
            StoreOutcome::OutOfMemory => {
                assert!(
                    may_write && self.may_run_out(k, new.value.len()),
                    "{context}"
                );
                self.reached.out_of_memory += 1;
                if kind == Kind::Set {
                    self.model.items.remove(&k);
                }
            }
        }
    }

    fn apply(&mut self, op: Op) {
        let now = self.clock.now();
        match op {
            Op::Store(kind, k, flags, exptime, spec) => {
                self.store_op(kind, k, flags, exptime, spec)
            }
            Op::Get(k) => {
                self.get(k);
            }
            Op::Gat(k, exptime) | Op::Touch(k, exptime) => {
                let expiry = Expiry::from_exptime(exptime, now);
                let want = self.model.current(k, now);
                let got = match op {
                    Op::Gat(..) => self
                        .store
                        .get_and_touch(&key(k), expiry, |it| it.value.to_vec())
                        .ok(),
                    _ => self.store.touch(&key(k), expiry).then(Vec::new),
                };
                if let Some(value) = got {
                    let want = want.unwrap_or_else(|| panic!("touch {k}: model has none"));
                    if let Op::Gat(..) = op {
                        assert_eq!(value, want.value, "gat {k}");
                    }
                    self.model.items.insert(k, Entry { expiry, ..want });
                }
                // A miss may be a touch that could not move the item (eviction off and the
                // heap full): it may still be there, unchanged, so the model keeps it.
            }
            Op::Delete(k) => {
                let deleted = self.store.delete(&key(k));
                let present = self.model.current(k, now).is_some();
                assert!(present || !deleted, "delete {k} found a key the model lost");
                self.model.items.remove(&k);
            }
            Op::Arith(k, arith, delta) => {
                let got = self.store.incr_decr(&key(k), arith, delta, None, None);
                let current = self.model.current(k, now);
                match got {
                    Ok(counted) => {
                        let old = current.unwrap_or_else(|| panic!("incr {k}: model has none"));
                        let n = model_number(&old.value).expect("incr of a number");
                        let next = match arith {
                            Arith::Incr => n.wrapping_add(delta),
                            Arith::Decr => n.saturating_sub(delta),
                        };
                        assert_eq!((counted.value, counted.expiry), (next, old.expiry));
                        let mut value = next.to_string().into_bytes();
                        value.resize(value.len().max(old.value.len()), b' ');
                        self.model.items.insert(k, Entry { value, ..old });
                    }
                    Err(ArithError::NotFound) => {
                        self.model.items.remove(&k);
                    }
                    Err(ArithError::NonNumeric) => {
                        let old = current.expect("a non-numeric value that is there");
                        assert_eq!(model_number(&old.value), None);
                    }
                    Err(ArithError::OutOfMemory) => assert_eq!(self.policy, Eviction::None),
                    Err(ArithError::Exists) => panic!("incr {k} without a CAS: EXISTS"),
                }
            }
            Op::Invalidate(k) => {
                let got = self.store.invalidate(&key(k), None, None, None);
                let present = self.model.current(k, now).is_some();
                match got {
                    Ok(()) => assert!(present, "invalidate {k} found a key the model lost"),
                    // As for touch: maybe gone, maybe unable to move.
                    Err(Refused::NotFound) => {}
                    Err(Refused::Exists) => panic!("invalidate {k} without a CAS: EXISTS"),
                }
            }
            Op::Flush(delay) => {
                self.store.flush_all(delay);
                self.model.catch_up(now);
                if delay == 0 {
                    self.model.items.clear();
                    self.model.flush_at = None;
                } else {
                    self.model.flush_at = Some(now + delay);
                }
            }
            Op::Advance(secs) => self.clock.advance(secs),
            Op::Reclaim => self.store.reclaim_expired(),
        }
    }

    /// Reads every key (checking it), then the store's gauges must match what was found.
    fn finish(&mut self) {
        for k in 0..KEYS {
            self.get(k);
        }
        let stats = self.store.stats();
        let bytes: usize = self
            .model
            .items
            .iter()
            .map(|(&k, e)| key(k).len() + e.value.len())
            .sum();
        assert_eq!(
            (stats.curr_items, stats.bytes),
            (self.model.items.len() as u64, bytes as u64),
            "items the reads did not find, or found without counting"
        );
        assert!(stats.heap_used <= HEAP as u64);
        self.reached.evictions += stats.evictions;
        self.reached.merges += stats.merges;
    }
}

fn run_policy(policy: Eviction, cases: u32) -> Reached {
    let reached = Cell::new(Reached::default());
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let strategy = (
        prop_oneof![Just(1usize), Just(2), Just(4)],
        filling(),
        proptest::collection::vec(op(), 1..400),
    );
    let result = runner.run(&strategy, |(shards, fill, ops)| {
        let clock = Arc::new(Clock::manual(T0));
        let config = Config {
            heap_bytes: HEAP,
            segment_size: SEGMENT,
            max_item_size: MAX_ITEM,
            shards,
            eviction: policy,
            ..Config::default()
        };
        let mut case = Case {
            store: Store::new(config, clock.clone()).unwrap(),
            clock,
            model: Model::default(),
            policy,
            reached: Reached::default(),
        };
        for op in fill.into_iter().chain(ops) {
            case.apply(op);
        }
        case.finish();
        let mut total = reached.get();
        total.add(case.reached);
        reached.set(total);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{policy:?}: {e}");
    }
    reached.get()
}

const CASES: u32 = 32;

#[test]
fn merge_reads_only_values_stored_last_while_evicting_merging_and_using_runs() {
    let reached = run_policy(Eviction::Merge, CASES);
    eprintln!("{reached:?}");
    assert!(reached.evictions > 0 && reached.merges > 0 && reached.large_stored > 0);
}

#[test]
fn fifo_reads_only_values_stored_last_while_evicting_and_using_runs() {
    let reached = run_policy(Eviction::Fifo, CASES);
    eprintln!("{reached:?}");
    assert!(reached.evictions > 0 && reached.large_stored > 0);
    assert_eq!(reached.merges, 0);
}

#[test]
fn random_reads_only_values_stored_last_while_evicting_and_using_runs() {
    let reached = run_policy(Eviction::Random, CASES);
    eprintln!("{reached:?}");
    assert!(reached.evictions > 0 && reached.large_stored > 0);
    assert_eq!(reached.merges, 0);
}

#[test]
fn no_eviction_reads_only_values_stored_last_and_runs_out_of_memory_instead() {
    let reached = run_policy(Eviction::None, CASES);
    eprintln!("{reached:?}");
    assert!(reached.out_of_memory > 0 && reached.large_stored > 0);
    assert_eq!((reached.evictions, reached.merges), (0, 0));
}
