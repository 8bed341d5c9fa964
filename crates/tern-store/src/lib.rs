//! tern-store: the storage engine behind every command. No I/O: the server calls it, tests and
//! benchmarks call it directly.
//!
//! The API is shaped for the server's hot path: reads hand a borrowed view of the item to a
//! closure (the caller copies the value straight into its output buffer, nothing is allocated),
//! writes take the value as a slice of the connection's read buffer.

pub mod clock;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use clock::{Clock, UnixSecs, MAX_RELATIVE_EXPTIME};

/// What to do when the heap is full and a write needs room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Eviction {
    /// Segcache-style merge eviction: keeps frequently read items.
    #[default]
    Merge,
    /// Evict the oldest written items first.
    Fifo,
    /// Evict items chosen at random.
    Random,
    /// Never evict: a write that needs room fails (memcached's `-M`).
    None,
}

/// Store settings, fixed at start.
#[derive(Clone, Debug)]
pub struct Config {
    /// The heap: item bytes never exceed this (memcached's `-m`).
    pub heap_bytes: usize,
    /// Largest value accepted (memcached's `-I`).
    pub max_item_size: usize,
    pub eviction: Eviction,
    /// With `false`, every CAS is 0 (memcached's `-C`).
    pub cas_enabled: bool,
    /// Independent partitions, each with its own lock; rounded up to a power of two.
    pub shards: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            heap_bytes: 64 << 20,
            max_item_size: 1 << 20,
            eviction: Eviction::default(),
            cas_enabled: true,
            shards: 16,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid store configuration: {0}")]
    Config(String),
}

/// When an item stops being served: never, or at a deadline in unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Expiry(UnixSecs);

impl Expiry {
    pub const NEVER: Expiry = Expiry(0);
    /// A deadline already past: the item is stored and never served (memcached's negative exptime).
    pub const EXPIRED: Expiry = Expiry(1);

    /// memcached's rule for an `exptime` field: 0 never expires, a negative value is already
    /// expired, up to 30 days is relative to `now`, anything larger is an absolute unix time.
    pub fn from_exptime(exptime: i64, now: UnixSecs) -> Expiry {
        if exptime == 0 {
            Expiry::NEVER
        } else if exptime < 0 {
            Expiry::EXPIRED
        } else if exptime > MAX_RELATIVE_EXPTIME {
            Expiry(exptime.min(UnixSecs::MAX as i64) as UnixSecs).max_past()
        } else {
            Expiry((now as i64 + exptime).min(UnixSecs::MAX as i64) as UnixSecs)
        }
    }

    /// Keeps 0 meaning "never" even for an absolute time of 0.
    fn max_past(self) -> Expiry {
        if self.0 == 0 {
            Expiry::EXPIRED
        } else {
            self
        }
    }

    /// The deadline, or `None` for never.
    pub fn deadline(self) -> Option<UnixSecs> {
        (self.0 != 0).then_some(self.0)
    }

    pub fn is_expired_at(self, now: UnixSecs) -> bool {
        self.0 != 0 && self.0 <= now
    }
}

/// A stored item as a reader sees it, borrowed for the duration of the read.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    pub expiry: Expiry,
}

/// Why a lookup found nothing; the server counts each kind (`get_misses`, `get_expired`,
/// `get_flushed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    NotFound,
    Expired,
    Flushed,
}

/// The write commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// Store only if the item's CAS is still this one.
    Cas(u64),
}

/// The outcome of a write, one per memcached reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// `STORED`, with the new version's CAS.
    Stored { cas: u64 },
    /// `NOT_STORED`: add on an existing key, replace/append/prepend on a missing one.
    NotStored,
    /// `EXISTS`: cas with a stale unique.
    Exists,
    /// `NOT_FOUND`: cas on a missing key.
    NotFound,
    /// `SERVER_ERROR object too large for cache`.
    TooLarge,
    /// `SERVER_ERROR out of memory storing object` (eviction off and the heap full).
    OutOfMemory,
}

/// incr/decr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Incr,
    Decr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArithError {
    #[error("NOT_FOUND")]
    NotFound,
    #[error("CLIENT_ERROR cannot increment or decrement non-numeric value")]
    NonNumeric,
    #[error("SERVER_ERROR out of memory")]
    OutOfMemory,
}

/// The store's counters for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    /// Key + value bytes of the items held.
    pub bytes: u64,
    pub limit_maxbytes: u64,
    pub evictions: u64,
    /// Expired items whose memory was taken back.
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
}

struct Entry {
    value: Box<[u8]>,
    flags: u32,
    cas: u64,
    expiry: Expiry,
    stored_at: UnixSecs,
    fetched: bool,
}

/// Memory charged per entry beyond key and value, for the heap limit.
const ENTRY_OVERHEAD: usize = 48;

#[derive(Default)]
struct Shard {
    map: HashMap<Box<[u8]>, Entry>,
    used: usize,
}

#[derive(Default)]
struct Counters {
    total_items: AtomicU64,
    evictions: AtomicU64,
    reclaimed: AtomicU64,
    expired_unfetched: AtomicU64,
    evicted_unfetched: AtomicU64,
}

/// A delayed or immediate `flush_all`: items stored at or before `at` are invalid once `at` has
/// come.
#[derive(Clone, Copy, Default)]
struct FlushMark {
    at: UnixSecs,
    /// Items whose CAS is below this were stored before an immediate flush.
    below_cas: u64,
}

/// The store. `Sync`: share one behind an `Arc` across worker threads.
pub struct Store {
    config: Config,
    clock: Arc<Clock>,
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
    shard_heap: usize,
    next_cas: AtomicU64,
    flush: Mutex<FlushMark>,
    counters: Counters,
}

impl Store {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Store, StoreError> {
        if config.heap_bytes == 0 {
            return Err(StoreError::Config("the heap must not be empty".into()));
        }
        let shard_count = config.shards.max(1).next_power_of_two();
        let shards = (0..shard_count).map(|_| Mutex::default()).collect();
        Ok(Store {
            shard_heap: config.heap_bytes / shard_count,
            config,
            clock,
            hasher: RandomState::new(),
            shards,
            next_cas: AtomicU64::new(1),
            flush: Mutex::default(),
            counters: Counters::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn shard(&self, key: &[u8]) -> &Mutex<Shard> {
        let hash = self.hasher.hash_one(key) as usize;
        &self.shards[hash & (self.shards.len() - 1)]
    }

    fn new_cas(&self) -> u64 {
        if self.config.cas_enabled {
            self.next_cas.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        }
    }

    fn is_flushed(&self, entry: &Entry, now: UnixSecs) -> bool {
        let mark = *self.flush.lock().unwrap();
        mark.at != 0
            && mark.at <= now
            && (entry.stored_at < mark.at || entry.cas < mark.below_cas)
    }

    /// Removes `key` if it is expired or flushed and says why it is not served.
    fn check_live(&self, shard: &mut Shard, key: &[u8], now: UnixSecs) -> Result<(), Miss> {
        let Some(entry) = shard.map.get(key) else {
            return Err(Miss::NotFound);
        };
        let miss = if entry.expiry.is_expired_at(now) {
            if !entry.fetched {
                self.counters
                    .expired_unfetched
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
            Miss::Expired
        } else if self.is_flushed(entry, now) {
            Miss::Flushed
        } else {
            return Ok(());
        };
        remove(shard, key);
        Err(miss)
    }

    /// Looks `key` up and hands the item to `read`.
    pub fn get<R>(&self, key: &[u8], read: impl FnOnce(ItemView<'_>) -> R) -> Result<R, Miss> {
        let now = self.clock.now();
        let mut shard = self.shard(key).lock().unwrap();
        self.check_live(&mut shard, key, now)?;
        let entry = shard.map.get_mut(key).expect("checked live");
        entry.fetched = true;
        Ok(read(view(entry)))
    }

    /// Looks `key` up, sets its expiry (get-and-touch), and hands the item to `read`.
    pub fn get_and_touch<R>(
        &self,
        key: &[u8],
        expiry: Expiry,
        read: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Miss> {
        let now = self.clock.now();
        let mut shard = self.shard(key).lock().unwrap();
        self.check_live(&mut shard, key, now)?;
        let entry = shard.map.get_mut(key).expect("checked live");
        entry.fetched = true;
        entry.expiry = expiry;
        Ok(read(view(entry)))
    }

    /// Sets the expiry of `key`; false when it is not there.
    pub fn touch(&self, key: &[u8], expiry: Expiry) -> bool {
        self.get_and_touch(key, expiry, |_| ()).is_ok()
    }

    pub fn store(
        &self,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        value: &[u8],
    ) -> StoreOutcome {
        let now = self.clock.now();
        let mut shard = self.shard(key).lock().unwrap();
        let live = self.check_live(&mut shard, key, now).is_ok();
        let (flags, expiry, new_value) = match op {
            StoreOp::Set => (flags, expiry, None),
            StoreOp::Add if live => return StoreOutcome::NotStored,
            StoreOp::Add => (flags, expiry, None),
            StoreOp::Replace | StoreOp::Append | StoreOp::Prepend if !live => {
                return StoreOutcome::NotStored
            }
            StoreOp::Replace => (flags, expiry, None),
            StoreOp::Append | StoreOp::Prepend => {
                let old = &shard.map[key];
                let mut joined = Vec::with_capacity(old.value.len() + value.len());
                if op == StoreOp::Append {
                    joined.extend_from_slice(&old.value);
                    joined.extend_from_slice(value);
                } else {
                    joined.extend_from_slice(value);
                    joined.extend_from_slice(&old.value);
                }
                (old.flags, old.expiry, Some(joined))
            }
            StoreOp::Cas(_) if !live => return StoreOutcome::NotFound,
            StoreOp::Cas(unique) if shard.map[key].cas != unique => return StoreOutcome::Exists,
            StoreOp::Cas(_) => (flags, expiry, None),
        };
        let new_value = new_value.as_deref().unwrap_or(value);
        if new_value.len() > self.config.max_item_size {
            // Like memcached, a failed set leaves no stale copy behind.
            if op == StoreOp::Set {
                remove(&mut shard, key);
            }
            return StoreOutcome::TooLarge;
        }
        let cas = self.new_cas();
        let entry = Entry {
            value: new_value.into(),
            flags,
            cas,
            expiry,
            stored_at: now,
            fetched: false,
        };
        match self.insert(&mut shard, key, entry) {
            Ok(()) => StoreOutcome::Stored { cas },
            Err(()) => {
                if op == StoreOp::Set {
                    remove(&mut shard, key);
                }
                StoreOutcome::OutOfMemory
            }
        }
    }

    /// Inserts, evicting others from the shard when the heap share is full.
    fn insert(&self, shard: &mut Shard, key: &[u8], entry: Entry) -> Result<(), ()> {
        let need = charge(key, &entry.value);
        let old = shard.map.get(key).map_or(0, |e| charge(key, &e.value));
        while shard.used - old + need > self.shard_heap {
            if self.config.eviction == Eviction::None {
                return Err(());
            }
            let victim = shard.map.keys().find(|k| k.as_ref() != key).cloned();
            let Some(victim) = victim else {
                return Err(());
            };
            if !shard.map[&victim].fetched {
                self.counters
                    .evicted_unfetched
                    .fetch_add(1, Ordering::Relaxed);
            }
            remove(shard, &victim);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        }
        remove(shard, key);
        shard.used += need;
        shard.map.insert(key.into(), entry);
        self.counters.total_items.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub fn delete(&self, key: &[u8]) -> bool {
        let now = self.clock.now();
        let mut shard = self.shard(key).lock().unwrap();
        if self.check_live(&mut shard, key, now).is_err() {
            return false;
        }
        remove(&mut shard, key);
        true
    }

    /// incr/decr as memcached does them: the value must be a decimal u64 (leading spaces allowed),
    /// incr wraps at 2^64, decr stops at 0, and a result shorter than the value is space-padded in
    /// place. Returns the new number.
    pub fn incr_decr(&self, key: &[u8], op: Arith, delta: u64) -> Result<u64, ArithError> {
        let now = self.clock.now();
        let mut shard = self.shard(key).lock().unwrap();
        self.check_live(&mut shard, key, now)
            .map_err(|_| ArithError::NotFound)?;
        let entry = shard.map.get(key).expect("checked live");
        let current = parse_u64(&entry.value).ok_or(ArithError::NonNumeric)?;
        let next = match op {
            Arith::Incr => current.wrapping_add(delta),
            Arith::Decr => current.saturating_sub(delta),
        };
        let digits = next.to_string();
        let mut value = digits.clone().into_bytes();
        if value.len() < entry.value.len() {
            value.resize(entry.value.len(), b' ');
        }
        let cas = self.new_cas();
        let replacement = Entry {
            value: value.into(),
            flags: entry.flags,
            cas,
            expiry: entry.expiry,
            stored_at: now,
            fetched: entry.fetched,
        };
        self.insert(&mut shard, key, replacement)
            .map_err(|_| ArithError::OutOfMemory)?;
        Ok(next)
    }

    /// `flush_all [delay]`: items stored before `now + delay` stop being served from then on.
    pub fn flush_all(&self, delay_secs: u32) {
        let now = self.clock.now();
        let mut mark = self.flush.lock().unwrap();
        if delay_secs == 0 {
            *mark = FlushMark {
                at: now.max(1),
                below_cas: self.next_cas.load(Ordering::Relaxed),
            };
            drop(mark);
            for shard in self.shards.iter() {
                let mut shard = shard.lock().unwrap();
                shard.map.clear();
                shard.used = 0;
            }
        } else {
            *mark = FlushMark {
                at: now.saturating_add(delay_secs),
                below_cas: 0,
            };
        }
    }

    /// Takes back the memory of expired items without waiting for them to be read. The server
    /// calls this from a background thread.
    pub fn reclaim_expired(&self) {
        let now = self.clock.now();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap();
            let expired: Vec<Box<[u8]>> = shard
                .map
                .iter()
                .filter(|(_, e)| e.expiry.is_expired_at(now))
                .map(|(k, _)| k.clone())
                .collect();
            for key in expired {
                let _ = self.check_live(&mut shard, &key, now);
            }
        }
    }

    pub fn stats(&self) -> StoreStats {
        let (mut curr_items, mut bytes) = (0u64, 0u64);
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap();
            curr_items += shard.map.len() as u64;
            bytes += shard
                .map
                .iter()
                .map(|(k, e)| (k.len() + e.value.len()) as u64)
                .sum::<u64>();
        }
        let c = &self.counters;
        StoreStats {
            curr_items,
            total_items: c.total_items.load(Ordering::Relaxed),
            bytes,
            limit_maxbytes: self.config.heap_bytes as u64,
            evictions: c.evictions.load(Ordering::Relaxed),
            reclaimed: c.reclaimed.load(Ordering::Relaxed),
            expired_unfetched: c.expired_unfetched.load(Ordering::Relaxed),
            evicted_unfetched: c.evicted_unfetched.load(Ordering::Relaxed),
        }
    }

    /// `stats reset`: zeroes the cumulative counters (not the gauges).
    pub fn reset_stats(&self) {
        let c = &self.counters;
        for counter in [
            &c.total_items,
            &c.evictions,
            &c.reclaimed,
            &c.expired_unfetched,
            &c.evicted_unfetched,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

fn view(entry: &Entry) -> ItemView<'_> {
    ItemView {
        value: &entry.value,
        flags: entry.flags,
        cas: entry.cas,
        expiry: entry.expiry,
    }
}

fn charge(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

fn remove(shard: &mut Shard, key: &[u8]) {
    if let Some(old) = shard.map.remove(key) {
        shard.used -= charge(key, &old.value);
    }
}

/// memcached's `safe_strtoull` on an item's value: optional leading white space, decimal digits,
/// then the end or white space; no sign, no overflow.
pub fn parse_u64(value: &[u8]) -> Option<u64> {
    let start = value.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &value[start..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    if let Some(after) = rest.get(digits) {
        if !after.is_ascii_whitespace() {
            return None;
        }
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn expiry_relative_absolute_negative() {
        assert_eq!(Expiry::from_exptime(0, T0), Expiry::NEVER);
        assert!(Expiry::from_exptime(-1, T0).is_expired_at(T0));
        assert_eq!(Expiry::from_exptime(10, T0).deadline(), Some(T0 + 10));
        assert_eq!(
            Expiry::from_exptime(T0 as i64 + 99, T0).deadline(),
            Some(T0 + 99)
        );
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
    fn incr_decr_follow_memcached() {
        let s = store();
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"100");
        assert_eq!(s.incr_decr(b"n", Arith::Decr, 1), Ok(99));
        assert_eq!(get(&s, b"n"), Ok(b"99 ".to_vec()));
        assert_eq!(s.incr_decr(b"n", Arith::Decr, 1000), Ok(0));
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"18446744073709551615");
        assert_eq!(s.incr_decr(b"n", Arith::Incr, 2), Ok(1));
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b" 12");
        assert_eq!(s.incr_decr(b"n", Arith::Incr, 1), Ok(13));
        s.store(StoreOp::Set, b"n", 0, Expiry::NEVER, b"abc");
        assert_eq!(
            s.incr_decr(b"n", Arith::Incr, 1),
            Err(ArithError::NonNumeric)
        );
        assert_eq!(
            s.incr_decr(b"missing", Arith::Incr, 1),
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
        let StoreOutcome::Stored { cas } = s.store(StoreOp::Add, b"k", 0, Expiry::NEVER, b"a")
        else {
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
        s.store(StoreOp::Append, b"k", 9, Expiry::NEVER, b"d");
        s.store(StoreOp::Prepend, b"k", 9, Expiry::NEVER, b"b");
        assert_eq!(get(&s, b"k"), Ok(b"bcd".to_vec()));
        assert_eq!(s.get(b"k", |i| i.flags), Ok(0));
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
}
