//! Random command sequences against a plain HashMap + TTL model, with a manual clock.
//! memcached's behaviour is the reference the model encodes.

use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;
use tern_store::{
    Arith, ArithError, Clock, Config, Expiry, Miss, Refused, Store, StoreOp, StoreOutcome, UnixSecs,
};

const T0: UnixSecs = 1_700_000_000;
const MAX_ITEM: usize = 64;
const KEYS: [&[u8]; 5] = [b"a", b"bb", b"key-3", b"k4", b"counter"];

#[derive(Clone, Debug)]
enum Op {
    Store(StoreKind, usize, u32, i64, Vec<u8>),
    Get(usize),
    Gat(usize, i64),
    Touch(usize, i64),
    Delete(usize, Cond),
    Arith(usize, Arith, u64, Cond),
    Flush(u32),
    Advance(u32),
    Reclaim,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum StoreKind {
    Set,
    Add,
    Replace,
    Append(Cond),
    Prepend(Cond),
    CasFresh,
    CasStale,
}

/// A CAS condition on delete, incr/decr, append and prepend: none, the item's current CAS,
/// or a stale one.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cond {
    No,
    Fresh,
    Stale,
}

impl Cond {
    fn expected_cas(self, current: Option<&Entry>) -> Option<u64> {
        match self {
            Cond::No => None,
            Cond::Fresh => Some(current.map_or(12345, |e| e.cas)),
            Cond::Stale => Some(current.map_or(1, |e| e.cas - 1)),
        }
    }
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![Just(Cond::No), Just(Cond::Fresh), Just(Cond::Stale)]
}

#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    expiry: Expiry,
    cas: u64,
    stored_at: UnixSecs,
}

#[derive(Default)]
struct Model {
    items: HashMap<usize, Entry>,
    /// Pending delayed flush: items stored before it stop being served once it comes.
    flush_at: Option<UnixSecs>,
}

impl Model {
    fn apply_flush(&mut self, now: UnixSecs) {
        if let Some(at) = self.flush_at {
            if at <= now {
                self.items.retain(|_, e| e.stored_at >= at);
                self.flush_at = None;
            }
        }
    }

    fn live(&mut self, key: usize, now: UnixSecs) -> Option<&mut Entry> {
        self.apply_flush(now);
        if self.items.get(&key)?.expiry.is_expired_at(now) {
            self.items.remove(&key);
            return None;
        }
        self.items.get_mut(&key)
    }
}

/// memcached's safe_strtoull, written independently of the store's: C white space (space, \t,
/// \n, \v, \f, \r), an optional sign, digits, then the end, C white space or a NUL; no
/// overflow; a negative number counts only when it negates to below 2^63 ("-0").
fn model_number(value: &[u8]) -> Option<u64> {
    let space = |b: u8| b == b' ' || (9..=13).contains(&b);
    let mut i = 0;
    while i < value.len() && space(value[i]) {
        i += 1;
    }
    let negative = value.get(i) == Some(&b'-');
    if matches!(value.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let start = i;
    let mut n: u128 = 0;
    while i < value.len() && value[i].is_ascii_digit() {
        n = n * 10 + (value[i] - b'0') as u128;
        if n > u64::MAX as u128 {
            return None;
        }
        i += 1;
    }
    if i == start || (i < value.len() && value[i] != 0 && !space(value[i])) {
        return None;
    }
    let n = n as u64;
    if !negative {
        return Some(n);
    }
    let negated = n.wrapping_neg();
    (negated <= i64::MAX as u64).then_some(negated)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..20),
        proptest::collection::vec(Just(b'x'), 50..70),
        Just(b" 12".to_vec()),
        Just(b"18446744073709551615".to_vec()),
        Just(b"99999999999999999999".to_vec()),
        Just(b"100".to_vec()),
        Just(b"7 ".to_vec()),
        Just(b"abc".to_vec()),
        Just(b"-5".to_vec()),
    ]
}

fn exptime() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), Just(-1), 1i64..5, Just(T0 as i64 + 3)]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let kind = prop_oneof![
        Just(StoreKind::Set),
        Just(StoreKind::Add),
        Just(StoreKind::Replace),
        cond().prop_map(StoreKind::Append),
        cond().prop_map(StoreKind::Prepend),
        Just(StoreKind::CasFresh),
        Just(StoreKind::CasStale),
    ];
    prop_oneof![
        4 => (kind, key.clone(), prop_oneof![Just(0u32), any::<u32>()], exptime(), value())
            .prop_map(|(k, key, f, e, v)| Op::Store(k, key, f, e, v)),
        4 => key.clone().prop_map(Op::Get),
        1 => (key.clone(), exptime()).prop_map(|(k, e)| Op::Gat(k, e)),
        1 => (key.clone(), exptime()).prop_map(|(k, e)| Op::Touch(k, e)),
        1 => (key.clone(), cond()).prop_map(|(k, c)| Op::Delete(k, c)),
        2 => (key.clone(), prop_oneof![Just(Arith::Incr), Just(Arith::Decr)],
              prop_oneof![0u64..1000, Just(u64::MAX)], cond())
            .prop_map(|(k, a, d, c)| Op::Arith(k, a, d, c)),
        1 => prop_oneof![Just(0u32), 1u32..4].prop_map(Op::Flush),
        2 => (0u32..3).prop_map(Op::Advance),
        1 => Just(Op::Reclaim),
    ]
}

fn check(ops: Vec<Op>, shards: usize) {
    let clock = Arc::new(Clock::manual(T0));
    let config = Config {
        heap_bytes: 1 << 20,
        max_item_size: MAX_ITEM,
        shards,
        ..Config::default()
    };
    let store = Store::new(config, clock.clone()).unwrap();
    let mut model = Model::default();
    // Every CAS the store handed out per key, to check uniqueness across versions.
    let mut seen_cas: HashMap<usize, Vec<u64>> = HashMap::new();
    for op in ops {
        let now = clock.now();
        match op {
            Op::Store(kind, k, flags, exptime, value) => {
                let expiry = Expiry::from_exptime(exptime, now);
                let current = model.live(k, now).cloned();
                let (op, expected) = match kind {
                    StoreKind::Set => (StoreOp::Set, true),
                    StoreKind::Add => (StoreOp::Add, current.is_none()),
                    StoreKind::Replace => (StoreOp::Replace, current.is_some()),
                    StoreKind::Append(c) => (
                        StoreOp::Append(c.expected_cas(current.as_ref())),
                        current.is_some() && c != Cond::Stale,
                    ),
                    StoreKind::Prepend(c) => (
                        StoreOp::Prepend(c.expected_cas(current.as_ref())),
                        current.is_some() && c != Cond::Stale,
                    ),
                    StoreKind::CasFresh => (
                        StoreOp::Cas(current.as_ref().map_or(12345, |e| e.cas)),
                        current.is_some(),
                    ),
                    StoreKind::CasStale => (
                        StoreOp::Cas(current.as_ref().map_or(1, |e| e.cas - 1)),
                        false,
                    ),
                };
                let outcome = store.store(op, KEYS[k], flags, expiry, &value);
                let (new_value, new_flags, new_expiry) = match (kind, &current) {
                    (StoreKind::Append(_), Some(e)) => {
                        ([&e.value[..], &value].concat(), e.flags, e.expiry)
                    }
                    (StoreKind::Prepend(_), Some(e)) => {
                        ([&value[..], &e.value].concat(), e.flags, e.expiry)
                    }
                    _ => (value.clone(), flags, expiry),
                };
                if !expected {
                    let want = match kind {
                        StoreKind::CasFresh | StoreKind::CasStale if current.is_none() => {
                            StoreOutcome::NotFound
                        }
                        StoreKind::CasFresh | StoreKind::CasStale => StoreOutcome::Exists,
                        StoreKind::Append(Cond::Stale) | StoreKind::Prepend(Cond::Stale)
                            if current.is_some() =>
                        {
                            StoreOutcome::Exists
                        }
                        _ => StoreOutcome::NotStored,
                    };
                    assert_eq!(outcome, want, "{kind:?} {k}");
                } else if new_value.len() > MAX_ITEM {
                    assert_eq!(outcome, StoreOutcome::TooLarge);
                    if kind == StoreKind::Set {
                        model.items.remove(&k);
                    }
                } else {
                    let StoreOutcome::Stored { cas } = outcome else {
                        panic!("{kind:?} on {k}: {outcome:?}")
                    };
                    let history = seen_cas.entry(k).or_default();
                    assert!(!history.contains(&cas), "CAS {cas} reused for key {k}");
                    history.push(cas);
                    model.items.insert(
                        k,
                        Entry {
                            value: new_value,
                            flags: new_flags,
                            expiry: new_expiry,
                            cas,
                            stored_at: now,
                        },
                    );
                }
            }
            Op::Get(k) => {
                let got = store.get(KEYS[k], |i| (i.value.to_vec(), i.flags, i.cas(), i.expiry));
                match model.live(k, now) {
                    Some(e) => {
                        assert_eq!(
                            got,
                            Ok((e.value.clone(), e.flags, e.cas, e.expiry)),
                            "get {k}"
                        )
                    }
                    None => assert!(got.is_err(), "get {k}: model has none, store {got:?}"),
                }
            }
            Op::Gat(k, exptime) | Op::Touch(k, exptime) => {
                let expiry = Expiry::from_exptime(exptime, now);
                let got = if let Op::Gat(..) = op {
                    store
                        .get_and_touch(KEYS[k], expiry, |i| (i.value.to_vec(), i.expiry))
                        .ok()
                } else {
                    store.touch(KEYS[k], expiry).then(|| (Vec::new(), expiry))
                };
                match model.live(k, now) {
                    Some(e) => {
                        let (value, seen_expiry) = got.expect("touch of a live item");
                        if let Op::Gat(..) = op {
                            assert_eq!(value, e.value);
                        }
                        assert_eq!(seen_expiry, expiry);
                        e.expiry = expiry;
                        // A touch keeps the CAS unique, even when it has to rewrite the item.
                        if !expiry.is_expired_at(now) {
                            assert_eq!(store.get(KEYS[k], |i| i.cas()), Ok(e.cas));
                        }
                    }
                    None => assert!(got.is_none(), "touch {k} of a missing item"),
                }
            }
            Op::Delete(k, Cond::No) => {
                let deleted = store.delete(KEYS[k]);
                assert_eq!(deleted, model.live(k, now).is_some());
                model.items.remove(&k);
            }
            Op::Delete(k, cond) => {
                let current = model.live(k, now).cloned();
                let got = store.delete_checked(KEYS[k], cond.expected_cas(current.as_ref()));
                let want = match (&current, cond) {
                    (None, _) => Err(Refused::NotFound),
                    (Some(_), Cond::Stale) => Err(Refused::Exists),
                    (Some(_), _) => Ok(()),
                };
                assert_eq!(got, want, "delete {k} {cond:?}");
                if want.is_ok() {
                    model.items.remove(&k);
                }
            }
            Op::Arith(k, arith, delta, cond) => {
                let current = model.live(k, now).cloned();
                let got = store.incr_decr(
                    KEYS[k],
                    arith,
                    delta,
                    cond.expected_cas(current.as_ref()),
                    None,
                );
                match model.live(k, now) {
                    None => assert_eq!(got, Err(ArithError::NotFound)),
                    // The CAS is checked before the value is parsed, as memcached does.
                    Some(_) if cond == Cond::Stale => assert_eq!(got, Err(ArithError::Exists)),
                    Some(e) => match model_number(&e.value) {
                        None => assert_eq!(got, Err(ArithError::NonNumeric), "{:?}", e.value),
                        Some(n) => {
                            let next = match arith {
                                Arith::Incr => n.wrapping_add(delta),
                                Arith::Decr => n.saturating_sub(delta),
                            };
                            let counted = got.expect("incr of a number");
                            assert_eq!(counted.value, next);
                            assert_eq!(counted.expiry, e.expiry);
                            let mut digits = next.to_string().into_bytes();
                            if digits.len() < e.value.len() {
                                digits.resize(e.value.len(), b' ');
                            }
                            e.value = digits;
                            let cas = store.get(KEYS[k], |i| i.cas()).unwrap();
                            assert_eq!(counted.cas, cas);
                            assert_ne!(cas, e.cas, "incr must change the CAS");
                            e.cas = cas;
                        }
                    },
                }
            }
            Op::Flush(delay) => {
                store.flush_all(delay);
                model.apply_flush(now);
                if delay == 0 {
                    model.items.clear();
                    model.flush_at = None;
                } else {
                    model.flush_at = Some(now + delay);
                }
            }
            Op::Advance(secs) => clock.advance(secs),
            Op::Reclaim => store.reclaim_expired(),
        }
    }
    // Reading every key drops what expired; the gauges must then match the model.
    let now = clock.now();
    let mut live = 0;
    let mut bytes = 0;
    for (k, key) in KEYS.iter().enumerate() {
        let got = store.get(key, |i| i.value.len());
        if let Some(e) = model.live(k, now) {
            assert_eq!(got, Ok(e.value.len()));
            live += 1;
            bytes += (key.len() + e.value.len()) as u64;
        } else {
            assert!(matches!(
                got,
                Err(Miss::NotFound | Miss::Expired | Miss::Flushed)
            ));
        }
    }
    let stats = store.stats();
    assert_eq!((stats.curr_items, stats.bytes), (live, bytes));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        check(ops, 1);
    }

    #[test]
    fn sharded_store_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        check(ops, 4);
    }
}
