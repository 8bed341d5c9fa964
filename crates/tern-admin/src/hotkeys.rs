//! Hot keys: the most requested keys over a sliding window, from a sampled sketch.
//!
//! Each worker owns a [`HotKeySampler`]. Per request it only decrements a countdown; about one
//! request in [`HotKeyConfig::sample_every`] (the countdown restarts at a random value with that
//! mean, so periodic traffic cannot hide from it) goes to the slow path: the key is counted in
//! that worker's count-min sketch (conservative update) and kept in a small top-k list if its
//! estimate beats the list's smallest. The sketch sits behind a per-worker mutex that only that
//! worker and the admin thread's reader ever take, so on the sampled path it is uncontended, and
//! unsampled requests touch nothing shared.
//!
//! The window slides by rotating two sketches: `current` fills for one window length, then
//! becomes `previous`. A key's count over the last window is `current + previous * (1 - f)`
//! where `f` is the fraction of the window `current` has covered; times `sample_every` it
//! estimates requests, divided by the window it estimates a rate. On read the workers' candidate
//! keys are pooled and each is estimated in every worker's sketch, so a key spread over workers
//! is summed, not split.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

// Not std's SipHash: a sample hashes its key once, and SipHash made that a third of a sample's
// ~1,000 instructions (~4 per request at one sample in 64).
use ahash::RandomState;

/// How hot keys are sampled and counted.
#[derive(Debug, Clone)]
pub struct HotKeyConfig {
    /// Mean number of requests per sampled request (1 samples every request, 0 none: hot keys
    /// are then not tracked).
    pub sample_every: u32,
    /// Length of the sliding window.
    pub window: Duration,
    /// Keys each worker keeps as candidates per window; the most `top(n)` can return.
    pub capacity: usize,
    /// Counters per row of the count-min sketch (rounded up to a power of two).
    pub sketch_width: usize,
}

impl Default for HotKeyConfig {
    fn default() -> Self {
        HotKeyConfig {
            sample_every: 64,
            window: Duration::from_secs(10),
            capacity: 64,
            sketch_width: 2048,
        }
    }
}

/// Rows of the count-min sketch: four independent estimates, the minimum is kept.
const SKETCH_DEPTH: usize = 4;

#[derive(Debug, Clone)]
struct Candidate {
    hash: u64,
    /// Reused when the slot takes another key, so a full list allocates no more.
    key: Vec<u8>,
    count: u32,
}

/// One window's count-min sketch plus its top-k candidates.
#[derive(Debug, Clone)]
struct Sketch {
    cells: Vec<u32>,
    mask: usize,
    top: Vec<Candidate>,
    /// Index of the smallest count in a full `top`, so a key that cannot enter the list costs
    /// one comparison rather than a scan.
    min_index: usize,
}

impl Sketch {
    fn new(width: usize) -> Sketch {
        let width = width.next_power_of_two();
        Sketch {
            cells: vec![0; width * SKETCH_DEPTH],
            mask: width - 1,
            top: Vec::new(),
            min_index: 0,
        }
    }

    fn clear(&mut self) {
        self.cells.fill(0);
        self.top.clear();
        self.min_index = 0;
    }

    fn refresh_min(&mut self) {
        self.min_index = (0..self.top.len())
            .min_by_key(|&i| self.top[i].count)
            .unwrap_or(0);
    }

    /// Cell indices of `hash` in each row: row `r` takes the hash's `r`-th 16-bit field. Two keys
    /// then share every cell only if 4 x log2(width) bits of their hashes agree; double hashing
    /// (`h1 + r * h2`) made that 2 x log2(width) bits, few enough that a tail key now and then
    /// took a hot key's count (the Zipf test below failed in CI that way).
    fn indices(&self, hash: u64) -> [usize; SKETCH_DEPTH] {
        let width = self.mask + 1;
        std::array::from_fn(|row| {
            row * width + (hash.rotate_right(16 * row as u32) as usize & self.mask)
        })
    }

    fn estimate(&self, hash: u64) -> u32 {
        self.indices(hash)
            .iter()
            .map(|&i| self.cells[i])
            .min()
            .unwrap_or(0)
    }

    fn insert(&mut self, key: &[u8], hash: u64, capacity: usize) {
        // Conservative update: raise only the cells at the minimum, which keeps the estimate an
        // upper bound but much tighter than incrementing every row.
        let idx = self.indices(hash);
        let new = idx.iter().map(|&i| self.cells[i]).min().unwrap_or(0) + 1;
        for i in idx {
            if self.cells[i] < new {
                self.cells[i] = new;
            }
        }
        // A listed key's count is its estimate when last counted, and estimates only grow, so
        // its new estimate is above the list's minimum. An estimate not above it means the key
        // is not listed and cannot enter: skip the scan (most samples of a long tail end here).
        if self.top.len() == capacity && new <= self.top[self.min_index].count {
            return;
        }
        if let Some(pos) = self.top.iter().position(|c| c.hash == hash && c.key == key) {
            self.top[pos].count = new;
            if pos == self.min_index {
                self.refresh_min();
            }
        } else if self.top.len() < capacity {
            self.top.push(Candidate {
                hash,
                key: key.to_vec(),
                count: new,
            });
            if self.top.len() == capacity {
                self.refresh_min();
            }
        } else if new > self.top[self.min_index].count {
            let slot = &mut self.top[self.min_index];
            slot.hash = hash;
            slot.key.clear();
            slot.key.extend_from_slice(key);
            slot.count = new;
            self.refresh_min();
        }
    }
}

/// One worker's two windows.
#[derive(Debug, Clone)]
struct WindowedSketch {
    current: Sketch,
    previous: Sketch,
    current_start: Instant,
    created: Instant,
}

impl WindowedSketch {
    fn new(width: usize, now: Instant) -> WindowedSketch {
        WindowedSketch {
            current: Sketch::new(width),
            previous: Sketch::new(width),
            current_start: now,
            created: now,
        }
    }

    /// Moves the windows forward so that `current` began at most one window before `now`.
    fn rotate(&mut self, now: Instant, window: Duration) {
        let elapsed = now.saturating_duration_since(self.current_start);
        if elapsed >= window * 2 {
            self.current.clear();
            self.previous.clear();
            self.current_start = now;
        } else if elapsed >= window {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
            self.current_start += window;
        }
    }
}

/// A hot key and its estimated traffic over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKey {
    /// The key's bytes.
    pub key: Vec<u8>,
    /// Estimated requests for the key over the window (sampled counts times `sample_every`).
    pub estimated_requests: u64,
    /// `estimated_requests` per second of window.
    pub rate_per_second: f64,
}

/// The answer to `stats hotkeys N` and `/hotkeys`.
#[derive(Debug, Clone, PartialEq)]
pub struct HotKeysReport {
    /// Seconds of traffic the estimates cover (the window, or less just after start).
    pub window_seconds: f64,
    /// Mean requests per sample.
    pub sample_every: u32,
    /// Hottest first.
    pub keys: Vec<HotKey>,
}

/// The hot-key tracker the server creates once; hands out one [`HotKeySampler`] per worker and
/// answers [`HotKeys::top`] from the admin thread or a `stats hotkeys` command.
#[derive(Debug)]
pub struct HotKeys {
    config: HotKeyConfig,
    hasher: RandomState,
    workers: Mutex<Vec<Arc<Mutex<WindowedSketch>>>>,
}

impl HotKeys {
    /// A tracker with `config` and no workers yet.
    pub fn new(config: HotKeyConfig) -> HotKeys {
        HotKeys {
            config: HotKeyConfig {
                capacity: config.capacity.max(1),
                sketch_width: config.sketch_width.max(64),
                ..config
            },
            hasher: RandomState::new(),
            workers: Mutex::new(Vec::new()),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &HotKeyConfig {
        &self.config
    }

    /// A sampler for one worker thread; call once per worker at start-up.
    pub fn sampler(&self) -> HotKeySampler {
        let sketch = Arc::new(Mutex::new(WindowedSketch::new(
            self.config.sketch_width,
            Instant::now(),
        )));
        lock(&self.workers).push(sketch.clone());
        let mut rng = fastrand::Rng::new();
        let every = self.config.sample_every;
        HotKeySampler {
            countdown: AtomicU32::new(next_countdown(&mut rng, every)),
            every,
            capacity: self.config.capacity,
            window: self.config.window,
            hasher: self.hasher.clone(),
            seed: AtomicU64::new(rng.get_seed()),
            sketch,
        }
    }

    /// The `n` hottest keys over the window, merged over all workers.
    pub fn top(&self, n: usize) -> HotKeysReport {
        self.top_at(n, Instant::now())
    }

    fn top_at(&self, n: usize, now: Instant) -> HotKeysReport {
        let window = self.config.window;
        // Copy each worker's windows out under its lock, so the worker waits at most a memcpy.
        let sketches: Vec<WindowedSketch> = lock(&self.workers)
            .iter()
            .map(|s| {
                let mut s = lock(s);
                s.rotate(now, window);
                s.clone()
            })
            .collect();
        let span = sketches
            .iter()
            .map(|s| now.saturating_duration_since(s.created))
            .max()
            .unwrap_or_default()
            .min(window);
        let mut candidates: HashMap<&[u8], u64> = HashMap::new();
        for s in &sketches {
            for c in s.current.top.iter().chain(s.previous.top.iter()) {
                candidates.insert(c.key.as_slice(), c.hash);
            }
        }
        let mut keys: Vec<HotKey> = candidates
            .into_iter()
            .map(|(key, hash)| {
                let sampled: f64 = sketches
                    .iter()
                    .map(|s| {
                        let covered = now.saturating_duration_since(s.current_start).as_secs_f64()
                            / window.as_secs_f64();
                        let previous_weight = (1.0 - covered).clamp(0.0, 1.0);
                        s.current.estimate(hash) as f64
                            + s.previous.estimate(hash) as f64 * previous_weight
                    })
                    .sum();
                let estimated = sampled * self.config.sample_every as f64;
                HotKey {
                    key: key.to_vec(),
                    estimated_requests: estimated.round() as u64,
                    rate_per_second: if span.is_zero() {
                        0.0
                    } else {
                        estimated / span.as_secs_f64()
                    },
                }
            })
            .filter(|k| k.estimated_requests > 0)
            .collect();
        keys.sort_by(|a, b| {
            b.estimated_requests
                .cmp(&a.estimated_requests)
                .then_with(|| a.key.cmp(&b.key))
        });
        keys.truncate(n.min(self.config.capacity));
        HotKeysReport {
            window_seconds: span.as_secs_f64(),
            sample_every: self.config.sample_every,
            keys,
        }
    }
}

/// A worker's handle: call [`HotKeySampler::record`] with each requested key.
///
/// Owned by one worker, the only thread that records into it: the countdown and the random
/// state are written with a relaxed load + store (no `lock` prefix), so recording takes a
/// shared reference and the sampler can sit beside the worker's other state.
#[derive(Debug)]
pub struct HotKeySampler {
    countdown: AtomicU32,
    every: u32,
    capacity: usize,
    window: Duration,
    hasher: RandomState,
    /// The random generator's state between samples.
    seed: AtomicU64,
    sketch: Arc<Mutex<WindowedSketch>>,
}

impl HotKeySampler {
    /// Notes one request for `key` (each key of a multi-get counts). Costs a decrement and a
    /// branch unless this request is sampled.
    #[inline]
    pub fn record(&self, key: &[u8]) {
        let left = self.countdown.load(Ordering::Relaxed);
        if left > 1 {
            self.countdown.store(left - 1, Ordering::Relaxed);
        } else {
            self.sample(key, Instant::now());
        }
    }

    #[cold]
    fn sample(&self, key: &[u8], now: Instant) {
        let mut rng = fastrand::Rng::with_seed(self.seed.load(Ordering::Relaxed));
        let countdown = next_countdown(&mut rng, self.every);
        self.countdown.store(countdown, Ordering::Relaxed);
        self.seed.store(rng.get_seed(), Ordering::Relaxed);
        if self.every == 0 {
            return;
        }
        let hash = self.hasher.hash_one(key);
        let mut s = lock(&self.sketch);
        s.rotate(now, self.window);
        s.current.insert(key, hash, self.capacity);
    }
}

/// A countdown with mean `every`, uniform in 1..=2*every-1; with sampling off (0), as long as
/// possible, so the slow path runs once per 4 billion requests and only restarts it.
fn next_countdown(rng: &mut fastrand::Rng, every: u32) -> u32 {
    if every == 0 {
        u32::MAX
    } else if every == 1 {
        1
    } else {
        rng.u32(1..2 * every)
    }
}

/// Locks, going on after a panic elsewhere: the sketch holds only counts, which stay usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HotKeysReport {
    /// The JSON served at `/hotkeys`. Keys are shown with non-printable bytes and `\` escaped
    /// as `\xNN` / `\\` (Rust's `escape_ascii`), so any byte string prints unambiguously.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "window_seconds": self.window_seconds,
            "sample_every": self.sample_every,
            "keys": self.keys.iter().map(|k| serde_json::json!({
                "key": k.key.escape_ascii().to_string(),
                "estimated_requests": k.estimated_requests,
                "rate_per_second": k.rate_per_second,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Draws ranks 0..n from Zipf(s) by inverse CDF.
    struct Zipf {
        cdf: Vec<f64>,
    }

    impl Zipf {
        fn new(n: usize, s: f64) -> Zipf {
            let mut acc = 0.0;
            let mut cdf: Vec<f64> = (1..=n)
                .map(|k| {
                    acc += 1.0 / (k as f64).powf(s);
                    acc
                })
                .collect();
            for c in &mut cdf {
                *c /= acc;
            }
            Zipf { cdf }
        }

        fn sample(&self, rng: &mut fastrand::Rng) -> usize {
            let u = rng.f64();
            self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
        }
    }

    fn key(rank: usize) -> Vec<u8> {
        format!("key:{rank}").into_bytes()
    }

    #[test]
    fn zipf_stream_finds_the_hottest_keys() {
        let hot = HotKeys::new(HotKeyConfig {
            sample_every: 16,
            window: Duration::from_secs(3600),
            ..HotKeyConfig::default()
        });
        let workers = [hot.sampler(), hot.sampler()];
        let zipf = Zipf::new(10_000, 1.0);
        let mut rng = fastrand::Rng::with_seed(7);
        let requests = 1_000_000;
        let mut truth = vec![0u64; 10_000];
        for i in 0..requests {
            let rank = zipf.sample(&mut rng);
            truth[rank] += 1;
            workers[i % 2].record(&key(rank));
        }
        let report = hot.top(10);
        assert_eq!(report.keys.len(), 10);
        let found: Vec<Vec<u8>> = report.keys.iter().map(|k| k.key.clone()).collect();
        // The five hottest are far enough apart under Zipf(1) to come out in exact order.
        assert_eq!(found[..5], (0..5).map(key).collect::<Vec<_>>()[..]);
        // Ranks 9 and 10 differ by ~10%, so allow one swap at the edge of the top 10.
        let true_top10: Vec<Vec<u8>> = (0..10).map(key).collect();
        let hits = found.iter().filter(|k| true_top10.contains(k)).count();
        assert!(hits >= 9, "found {found:?}");
        // The hottest key's estimate is within 10% of its true count.
        let est = report.keys[0].estimated_requests as f64;
        let real = truth[0] as f64;
        assert!((est - real).abs() / real < 0.10, "estimate {est} vs {real}");
    }

    #[test]
    fn old_windows_age_out() {
        let window = Duration::from_secs(10);
        let hot = HotKeys::new(HotKeyConfig {
            sample_every: 1,
            window,
            ..HotKeyConfig::default()
        });
        let w = hot.sampler();
        let t0 = w.sketch.lock().unwrap().current_start;
        for _ in 0..100 {
            w.sample(b"old", t0);
        }
        for _ in 0..10 {
            w.sample(b"new", t0 + Duration::from_secs(12));
        }
        // 12 s in: "old" is in the previous window, weighted by the 80% not yet covered.
        let r = hot.top_at(5, t0 + Duration::from_secs(12));
        assert_eq!(r.keys[0].key, b"old");
        assert_eq!(r.keys[0].estimated_requests, 80);
        assert_eq!(r.keys[1].estimated_requests, 10);
        assert!((r.keys[1].rate_per_second - 1.0).abs() < 1e-9);
        // 31 s in: the window holding "new" ended more than a window ago.
        assert!(hot.top_at(5, t0 + Duration::from_secs(31)).keys.is_empty());
    }

    #[test]
    fn sampling_rate_is_about_one_in_n() {
        let hot = HotKeys::new(HotKeyConfig {
            sample_every: 32,
            window: Duration::from_secs(3600),
            ..HotKeyConfig::default()
        });
        let w = hot.sampler();
        for _ in 0..320_000 {
            w.record(b"k");
        }
        let sampled = w
            .sketch
            .lock()
            .unwrap()
            .current
            .estimate(hot.hasher.hash_one(b"k"));
        assert!((9_000..11_000).contains(&sampled), "sampled {sampled}");
    }

    #[test]
    fn a_full_list_keeps_counting_listed_keys_and_admits_risers() {
        let mut sketch = Sketch::new(1024);
        let hash = |k: &[u8]| RandomState::new().hash_one(k);
        let keys: Vec<(&[u8], u64)> = [&b"a"[..], b"b", b"c", b"d", b"e"]
            .iter()
            .map(|&k| (k, hash(k)))
            .collect();
        for &(k, h) in &keys[..4] {
            for _ in 0..3 {
                sketch.insert(k, h, 4);
            }
        }
        // "e" estimates 1, not above the minimum 3: not admitted (the scan is skipped).
        let (e, eh) = keys[4];
        sketch.insert(e, eh, 4);
        assert!(sketch.top.iter().all(|c| c.key != e));
        // A listed key is still found and counted.
        sketch.insert(keys[0].0, keys[0].1, 4);
        let count = |s: &Sketch, k: &[u8]| s.top.iter().find(|c| c.key == k).map(|c| c.count);
        assert_eq!(count(&sketch, b"a"), Some(4));
        // "e" rising above the minimum takes the smallest slot.
        for _ in 0..3 {
            sketch.insert(e, eh, 4);
        }
        assert_eq!(count(&sketch, b"e"), Some(4));
        assert_eq!(sketch.top.len(), 4);
    }

    #[test]
    fn sample_rate_zero_tracks_nothing() {
        let hot = HotKeys::new(HotKeyConfig {
            sample_every: 0,
            ..HotKeyConfig::default()
        });
        let w = hot.sampler();
        for _ in 0..10_000 {
            w.record(b"k");
        }
        // The slow path still runs once when the first countdown ends; it must not count.
        w.countdown.store(1, Ordering::Relaxed);
        w.record(b"k");
        assert_eq!(w.countdown.load(Ordering::Relaxed), u32::MAX);
        let report = hot.top(5);
        assert!(report.keys.is_empty());
        assert_eq!(report.sample_every, 0);
    }

    #[test]
    fn json_escapes_binary_keys() {
        let r = HotKeysReport {
            window_seconds: 1.0,
            sample_every: 1,
            keys: vec![HotKey {
                key: b"a\\b\x01".to_vec(),
                estimated_requests: 3,
                rate_per_second: 3.0,
            }],
        };
        assert_eq!(r.to_json()["keys"][0]["key"], "a\\\\b\\x01");
    }
}
