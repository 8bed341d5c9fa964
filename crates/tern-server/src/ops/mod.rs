//! The operations layer: what a request means, once for every wire format. The text, meta and
//! binary modules only translate between their framing and these calls; each call turns a
//! client's exptime into an [`Expiry`], makes the store call, maps the store's answer to an
//! outcome and records it in the worker's own counters (latency batch and hot-key sampler
//! included), and applies the policies memcached defines whatever the framing: the too-large
//! rule, incr-or-create, `-F`, and `stats` as data.
//!
//! No I/O and no allocation on the get/set path: a get hands the item to the caller's encoder
//! under the shard lock.
//!
//! The layer between the wire formats and the shared state: it imports `state` and `config`
//! only, never `wire`, `transport` or `startup`.

use std::sync::atomic::Ordering;

use tern_admin::{Command as Cmd, Outcome};
use tern_proto::ascii::ShutdownMode;
use tern_store::{
    Arith, ArithError, Counted, Expiry, HashedKey, ItemView, Marks, Miss, ReadKey, Refused, Store,
    StoreOp, StoreOutcome, MAX_RELATIVE_EXPTIME,
};

use crate::state::prefix_stats::PrefixEvent;
use crate::state::recording::WorkerState;
use crate::state::shared::Shared;
use crate::state::watch::{Kind, LoggedKey};

mod admin;
mod stats;

pub use admin::AdminReply;
pub use stats::{StatsError, StatsReply};

pub use crate::state::{VERSION, VERSION_REPLY};

/// Why an incr/decr changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithFailure {
    NotFound,
    /// The item's CAS is not the one the request expected.
    Exists,
    NonNumeric,
    OutOfMemory,
    /// The item was missing and could not be created (another client kept recreating it, or
    /// the store refused it).
    NotStored,
}

/// What `shutdown` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// Not enabled (`-A` not given).
    Disabled,
    /// Enabled, but the mode is not one memcached knows.
    BadMode,
    /// The server is stopping: close this connection at once.
    Stopping,
}

/// The operations one worker runs, recording into that worker's state.
pub struct Ops<'a> {
    pub shared: &'a Shared,
    /// This worker's recording state (only this worker's thread writes it).
    pub worker: &'a WorkerState,
    /// The store has a flash tier: a request may be deferred for a read (one load to know).
    flash: bool,
}

impl<'a> Ops<'a> {
    pub fn new(shared: &'a Shared, worker: usize) -> Ops<'a> {
        Ops {
            shared,
            worker: &shared.workers[worker],
            flash: shared.flash_tier,
        }
    }

    fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Starts loading what gets and sets of `keys` will read (see `Store::prefetch`).
    pub fn prefetch(&self, keys: &[&[u8]]) {
        self.store().prefetch(keys);
    }

    /// `key` hashed once, for read-ahead and then the get (see `tern_store::HashedKey`).
    #[inline]
    pub fn hash_key<'k>(&self, key: &'k [u8]) -> HashedKey<'k> {
        self.store().hash_key(key)
    }

    /// Read-ahead's first stage (see `Store::prefetch_bucket`).
    #[inline]
    pub fn prefetch_bucket(&self, key: HashedKey<'_>) {
        self.store().prefetch_bucket(key);
    }

    /// Read-ahead's second stage (see `Store::prefetch_items`).
    #[inline]
    pub fn prefetch_items<'h, 'k: 'h>(
        &self,
        keys: impl IntoIterator<Item = &'h mut HashedKey<'k>>,
    ) {
        self.store().prefetch_items(keys);
    }

    /// Records one request (one key of a retrieval): its outcome count, and a place in the
    /// latency batch the connection times once its replies are written. A request deferred
    /// for a flash read is not recorded: it runs again.
    #[inline(always)]
    fn record(&self, cmd: Cmd, outcome: Outcome) {
        if !self.deferred(outcome) {
            self.count(cmd, outcome);
        }
    }

    /// [`Ops::record`] for a request known not to be deferred.
    #[inline(always)]
    fn count(&self, cmd: Cmd, outcome: Outcome) {
        self.worker.metrics.count(cmd, outcome);
        self.worker.batch.add(cmd);
    }

    /// Whether a request that ended with `outcome` was deferred for a flash read (it only
    /// ever ends as a miss or a refusal then, so a hit or a store is not asked about).
    #[inline(always)]
    fn deferred(&self, outcome: Outcome) -> bool {
        !matches!(outcome, Outcome::Hit | Outcome::Stored) && self.flash_deferred()
    }

    /// Whether the request just run was deferred for a flash read: its replies are dropped
    /// and it runs again once the read has landed.
    #[inline(always)]
    pub fn flash_deferred(&self) -> bool {
        self.flash && self.deferred_on_flash()
    }

    /// `flash_deferred` once the store has a flash tier: kept out of the request path.
    #[cold]
    #[inline(never)]
    fn deferred_on_flash(&self) -> bool {
        self.store().flash_deferred()
    }

    /// Asks for the flash reads the deferred requests need; this worker wakes as they land.
    pub fn ask_flash_reads(&self) -> Vec<u64> {
        match self.worker.flash_waker.get() {
            Some(wake) => self.store().ask_deferred(wake),
            None => Vec::new(),
        }
    }

    /// Whether a connection waiting for the flash reads `asked` should run again now (see
    /// `Store::flash_ready`).
    pub fn flash_ready(&self, asked: &[u64]) -> bool {
        self.store().flash_ready(asked)
    }

    /// Notes `key`'s flash read too, when its item is on flash, so that it goes with the
    /// others deferred now (the rest of a multiget, the gets read ahead).
    pub fn defer_if_on_flash(&self, key: &[u8]) {
        self.store().defer_if_on_flash(key);
    }

    /// Counts `key`'s prefix for `stats detail` when it is on.
    #[inline]
    fn prefix(&self, key: &[u8], event: PrefixEvent) {
        let prefixes = &self.shared.prefix_stats;
        if prefixes.enabled() {
            prefixes.record(key, event);
        }
    }

    /// [`Ops::prefix`] for a lookup: retrievals count as gets (a touch or `me` does not).
    #[inline]
    fn prefix_lookup(&self, cmd: Cmd, key: &[u8], hit: bool) {
        if self.shared.prefix_stats.enabled() && !matches!(cmd, Cmd::Touch | Cmd::Admin) {
            self.shared
                .prefix_stats
                .record(key, PrefixEvent::Get { hit });
        }
    }

    /// Records a retrieval of `key` that came to `found`. A hit, the common case, counts a
    /// constant outcome and asks nothing about flash (a deferral ends as a miss); a miss,
    /// which may be a deferral, is out of line.
    #[inline(always)]
    fn record_lookup<R>(&self, cmd: Cmd, found: &Result<R, Miss>, key: &[u8]) {
        match found {
            Ok(_) => {
                self.count_key(cmd, Outcome::Hit, key);
                self.prefix_lookup(cmd, key, true);
            }
            Err(miss) => self.record_miss(cmd, *miss, key),
        }
    }

    /// [`Ops::record_lookup`] for a miss, as memcached counts it (expired and flushed items
    /// are misses of their own kind; an item whose flash page was evicted is a hit that the
    /// read from flash then finds gone).
    #[inline(never)]
    fn record_miss(&self, cmd: Cmd, miss: Miss, key: &[u8]) {
        if self.flash_deferred() {
            return;
        }
        let outcome = match miss {
            Miss::NotFound => Outcome::Miss,
            Miss::Expired => Outcome::Expired,
            Miss::Flushed => Outcome::Flushed,
            Miss::GoneFromFlash => Outcome::Hit,
        };
        self.count_key(cmd, outcome, key);
        self.prefix_lookup(cmd, key, outcome == Outcome::Hit);
    }

    /// [`Ops::record`] for a request naming `key`, which the hot-key sampler also sees.
    #[inline(always)]
    fn record_key(&self, cmd: Cmd, outcome: Outcome, key: &[u8]) {
        if !self.deferred(outcome) {
            self.count_key(cmd, outcome, key);
        }
    }

    /// [`Ops::record_key`] for a request known not to be deferred.
    #[inline(always)]
    fn count_key(&self, cmd: Cmd, outcome: Outcome, key: &[u8]) {
        self.count(cmd, outcome);
        self.worker.hot_keys.record(key);
    }

    /// A request the parser refused, answered or not (a bad binary magic byte, an overlong
    /// line and a UDP request cut off by its datagram get no reply): an invalid request with
    /// the error outcome, in none of memcached's counters, as memcached 1.6.18 counts it.
    pub fn refused(&self) {
        self.record(Cmd::Invalid, Outcome::Error);
    }

    /// memcached's exptime: 0 never, negative already expired, up to 30 days relative, beyond
    /// that an absolute unix time.
    pub fn expiry(&self, exptime: i64) -> Expiry {
        Expiry::from_exptime(exptime, self.store().clock().now())
    }

    /// The store clock's current second.
    pub fn now(&self) -> u32 {
        self.store().clock().now()
    }

    /// A retrieval (one key of get/gets/gat/gats, or a touch): looks `key` up, sets its expiry
    /// when `touch` says so, and hands the item to `read`, which writes its reply into `out`.
    /// A plain get reads without the shard's lock, so `read` may run on a state a writer was
    /// changing; the store then cuts `out` back and runs it again (`Store::get_into`).
    #[inline]
    pub fn get<'k, R>(
        &self,
        cmd: Cmd,
        key: impl ReadKey<'k>,
        touch: Option<Expiry>,
        out: &mut Vec<u8>,
        read: impl Fn(ItemView<'_>, &mut Vec<u8>) -> R,
    ) -> Result<R, Miss> {
        let hashed = key.hashed(self.store());
        let key = hashed.bytes();
        let found = if self.shared.watchers.watching(Kind::Fetchers) {
            let found = self.lookup(hashed, touch, out, |item, out| {
                (item.value.len(), read(item, out))
            });
            self.log_fetch(key, found.as_ref().ok().map(|f| f.0));
            found.map(|(_, r)| r)
        } else {
            self.lookup(hashed, touch, out, read)
        };
        self.record_lookup(cmd, &found, key);
        found
    }

    #[inline]
    fn lookup<R>(
        &self,
        key: HashedKey<'_>,
        touch: Option<Expiry>,
        out: &mut Vec<u8>,
        read: impl Fn(ItemView<'_>, &mut Vec<u8>) -> R,
    ) -> Result<R, Miss> {
        // Two calls, not one taking `touch`: the read is inlined into each, and a plain get's
        // copy carries no touch at all (one shared copy cost a pipelined get 33 instructions).
        match touch {
            None => self.store().get_into(key, out, read),
            Some(expiry) => self
                .store()
                .get_and_touch(key, expiry, |item| read(item, out)),
        }
    }

    /// The expiry `key`'s item has, if there is one: a peek, leaving its marks as they were.
    pub fn peek_expiry(&self, key: &[u8]) -> Option<Expiry> {
        self.store()
            .peek_marked(key, None, |item, _| item.expiry)
            .ok()
    }

    /// The value size of `key`'s item, if there is one, for a watch line: a peek, so the
    /// line's own read leaves the item's marks as they were. Only while someone watches.
    #[cold]
    fn peek_size(&self, key: &[u8]) -> Option<usize> {
        self.store()
            .peek_marked(key, None, |item, _| item.value.len())
            .ok()
    }

    /// memcached's `item_get` watch line: the lookup of a retrieval, and the one memcached
    /// 1.6.45 makes first for a store, a delete, an incr/decr and every meta command.
    #[cold]
    fn log_fetch(&self, key: &[u8], size: Option<usize>) {
        let (status, class, size) = match size {
            Some(size) => ("found", 1, size),
            None => ("not_found", 0, 0),
        };
        self.shared.watchers.log(
            Kind::Fetchers,
            format_args!(
                "type=item_get key={} status={status} clsid={class} cfd={} size={size}",
                LoggedKey(key),
                self.worker.serving_fd.load(Ordering::Relaxed)
            ),
        );
    }

    /// memcached's `deleted` watch line.
    #[cold]
    fn log_deleted(&self, key: &[u8], cmd: &str, size: usize) {
        self.shared.watchers.log(
            Kind::Deletions,
            format_args!(
                "type=deleted key={} cmd={cmd} clsid=1 size={size}",
                LoggedKey(key)
            ),
        );
    }

    /// memcached's `item_store` watch line.
    fn log_store(&self, cmd: Cmd, key: &[u8], status: &str, expiry: Expiry, size: usize) {
        let command = match cmd {
            Cmd::Add => "add",
            Cmd::Replace => "replace",
            Cmd::Append => "append",
            Cmd::Prepend => "prepend",
            Cmd::Cas => "cas",
            _ => "set",
        };
        let ttl = expiry.remaining(self.now()).unwrap_or(0);
        let class = u8::from(status != "too_large");
        self.shared.watchers.log(
            Kind::Mutations,
            format_args!(
                "type=item_store key={} status={status} cmd={command} ttl={ttl} clsid={class} \
                 cfd={} size={size}",
                LoggedKey(key),
                self.worker.serving_fd.load(Ordering::Relaxed)
            ),
        );
    }

    /// A read that may change the item's meta marks (meta's `mg`); `peek` leaves the fetched
    /// mark and access time alone (`u`). With `vivify`, a miss creates an empty item with
    /// that expiry (and the CAS `vivify_cas` when given, meta's `E`) and reads it
    /// (get-or-create); `read` is told whether this request created it. Another client's item
    /// created in between is read like any hit.
    #[allow(clippy::too_many_arguments)]
    pub fn get_marked<R>(
        &self,
        cmd: Cmd,
        key: &[u8],
        touch: Option<Expiry>,
        peek: bool,
        vivify: Option<Expiry>,
        vivify_cas: Option<u64>,
        mut read: impl FnMut(ItemView<'_>, &mut Marks, bool) -> R,
    ) -> Result<R, Miss> {
        let store = self.store();
        if self.shared.watchers.watching(Kind::Fetchers) {
            self.log_fetch(key, self.peek_size(key));
        }
        let (mut tried, mut created) = (false, false);
        loop {
            let read = |item: ItemView<'_>, marks: &mut Marks| read(item, marks, created);
            let found = if peek {
                store.peek_marked(key, touch, read)
            } else {
                store.get_marked(key, touch, read)
            };
            match (found, vivify) {
                (Err(_), Some(expiry)) if !tried => {
                    tried = true;
                    created = matches!(
                        store.store_with_cas(StoreOp::Add, key, 0, expiry, b"", vivify_cas),
                        StoreOutcome::Stored { .. }
                    );
                }
                (found, _) => {
                    self.record_lookup(cmd, &found, key);
                    return found;
                }
            }
        }
    }

    /// A storage command whose value has arrived.
    pub fn store_item(
        &self,
        cmd: Cmd,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        expiry: Expiry,
        value: &[u8],
    ) -> StoreOutcome {
        self.store_with(cmd, key, expiry, value, |store| {
            store.store(op, key, flags, expiry, value)
        })
    }

    /// A storage command that takes several store calls (meta's `ms` with `I` or `N`); the
    /// last outcome is what the request recorded. `expiry` and `value` are the request's, for
    /// the watch line.
    pub fn store_with(
        &self,
        cmd: Cmd,
        key: &[u8],
        expiry: Expiry,
        value: &[u8],
        write: impl FnOnce(&Store) -> StoreOutcome,
    ) -> StoreOutcome {
        self.prefix(key, PrefixEvent::Set);
        // One load for both kinds: nobody watching costs a store what it always did.
        let watched = self.shared.watchers.watched();
        if watched & Kind::Fetchers as u8 != 0 {
            // memcached 1.6.45 logs the lookup every store makes first (`t/watcher_connid.t`).
            self.log_fetch(key, self.peek_size(key));
        }
        let outcome = write(self.store());
        let recorded = store_outcome(outcome);
        self.record_key(cmd, recorded, key);
        if watched & Kind::Mutations as u8 != 0 {
            self.log_store(cmd, key, recorded.label(), expiry, value.len());
        }
        outcome
    }

    /// A storage command whose data block did not end in `\r\n`.
    pub fn bad_data_chunk(&self, cmd: Cmd, key: &[u8]) {
        self.record_key(cmd, Outcome::Error, key);
    }

    /// A value larger than `-I`, refused before its data is read: memcached counts it in
    /// `store_too_large` but not `cmd_set` (recorded as an invalid request with the too-large
    /// outcome) and, for a set (text `set`, binary Set, any meta `ms`), removes the old value so
    /// a failed overwrite never leaves a stale copy readable.
    pub fn too_large(&self, cmd: Cmd, key: &[u8]) {
        self.refused_unread(cmd, key, Outcome::TooLarge);
    }

    /// A value refused before its data is read because no read buffer could grow to hold it
    /// (`-o read_buf_mem_limit`): memcached's answer to an item it cannot allocate, counted as
    /// its `store_no_memory` and, for a set, the old value removed (as [`Ops::too_large`]);
    /// `read_buf_oom` counts the refused buffer.
    pub fn no_buffer_memory(&self, cmd: Cmd, key: &[u8]) {
        self.worker.metrics.read_buf_oom();
        self.refused_unread(cmd, key, Outcome::NoMemory);
    }

    /// What [`Ops::too_large`] and [`Ops::no_buffer_memory`] share: a storage command refused
    /// before its data is read, recorded as an invalid request with `outcome`, and a set's old
    /// value removed.
    fn refused_unread(&self, cmd: Cmd, key: &[u8], outcome: Outcome) {
        self.record(Cmd::Invalid, outcome);
        self.prefix(key, PrefixEvent::Set);
        if self.shared.watchers.watching(Kind::Mutations) {
            self.log_store(cmd, key, outcome.label(), Expiry::NEVER, 0);
        }
        if matches!(cmd, Cmd::Set | Cmd::MetaSet) && !key.is_empty() {
            self.store().delete(key);
        }
    }

    /// delete, conditioned on `expected_cas` when given; `logged` as for `delete_with`.
    pub fn delete(
        &self,
        cmd: Cmd,
        key: &[u8],
        expected_cas: Option<u64>,
        logged: Option<&'static str>,
    ) -> Result<(), Refused> {
        self.delete_with(cmd, key, logged, |store| {
            store.delete_checked(key, expected_cas)
        })
    }

    /// A delete that takes other store calls (meta's `md` with `x` or `I`). `logged` is the
    /// `cmd=` of memcached's `deleted` watch line for an item it removes (`delete` for text's
    /// delete, `md` for a meta delete that is no `I`); `None` logs none (binary's delete, `md
    /// I`), as in 1.6.45.
    pub fn delete_with(
        &self,
        cmd: Cmd,
        key: &[u8],
        logged: Option<&'static str>,
        delete: impl FnOnce(&Store) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.prefix(key, PrefixEvent::Delete);
        let watched = self.shared.watchers.watched();
        let size = if watched & (Kind::Fetchers as u8 | Kind::Deletions as u8) != 0 {
            let size = self.peek_size(key);
            if watched & Kind::Fetchers as u8 != 0 {
                self.log_fetch(key, size);
            }
            size
        } else {
            None
        };
        let done = delete(self.store());
        if let (Ok(()), Some(word), true) = (&done, logged, watched & Kind::Deletions as u8 != 0) {
            self.log_deleted(key, word, size.unwrap_or(0));
        }
        let outcome = match done {
            Ok(()) => Outcome::Hit,
            Err(Refused::NotFound) => Outcome::Miss,
            Err(Refused::Exists) => Outcome::Exists,
        };
        self.record_key(cmd, outcome, key);
        done
    }

    /// incr/decr, conditioned on `expected_cas` when given. With `create`, a miss creates the
    /// item holding that number with that expiry (binary's initial value, meta's `N`): the
    /// bool says so. If another client created it first, the arithmetic applies to theirs.
    /// `new_expiry` then sets the item's expiry (meta's `T`; a touch keeps the CAS).
    #[allow(clippy::too_many_arguments)]
    pub fn arithmetic(
        &self,
        cmd: Cmd,
        key: &[u8],
        direction: Arith,
        delta: u64,
        expected_cas: Option<u64>,
        create: Option<(u64, Expiry)>,
        new_expiry: Option<Expiry>,
    ) -> Result<(Counted, bool), ArithFailure> {
        self.arithmetic_with_cas(
            cmd,
            key,
            direction,
            delta,
            expected_cas,
            create,
            new_expiry,
            None,
        )
    }

    /// `arithmetic`, the version it writes (or creates) taking the CAS `new_cas` when given
    /// (meta's `E`) instead of a fresh one.
    #[allow(clippy::too_many_arguments)]
    pub fn arithmetic_with_cas(
        &self,
        cmd: Cmd,
        key: &[u8],
        direction: Arith,
        delta: u64,
        expected_cas: Option<u64>,
        create: Option<(u64, Expiry)>,
        new_expiry: Option<Expiry>,
        new_cas: Option<u64>,
    ) -> Result<(Counted, bool), ArithFailure> {
        let store = self.store();
        if self.shared.watchers.watching(Kind::Fetchers) {
            self.log_fetch(key, self.peek_size(key));
        }
        for _ in 0..2 {
            let counted = store.incr_decr(key, direction, delta, expected_cas, new_cas);
            let (outcome, failure) = match counted {
                Ok(mut counted) => {
                    self.record_key(cmd, Outcome::Hit, key);
                    if let Some(expiry) = new_expiry {
                        store.touch(key, expiry);
                        counted.expiry = expiry;
                    }
                    return Ok((counted, false));
                }
                Err(ArithError::NotFound) => (Outcome::Miss, ArithFailure::NotFound),
                Err(ArithError::Exists) => (Outcome::Exists, ArithFailure::Exists),
                Err(ArithError::NonNumeric) => (Outcome::Error, ArithFailure::NonNumeric),
                Err(ArithError::OutOfMemory) => (Outcome::NoMemory, ArithFailure::OutOfMemory),
            };
            self.record_key(cmd, outcome, key);
            let Some((initial, expiry)) = create.filter(|_| failure == ArithFailure::NotFound)
            else {
                return Err(failure);
            };
            let digits = initial.to_string();
            // memcached sets the new TTL (meta's `T`) on the item it created, too.
            let expiry = new_expiry.unwrap_or(expiry);
            match store.store_with_cas(StoreOp::Add, key, 0, expiry, digits.as_bytes(), new_cas) {
                StoreOutcome::Stored { cas } => {
                    let counted = Counted {
                        value: initial,
                        cas,
                        expiry,
                    };
                    return Ok((counted, true));
                }
                StoreOutcome::NotStored => continue,
                StoreOutcome::OutOfMemory => return Err(ArithFailure::OutOfMemory),
                _ => return Err(ArithFailure::NotStored),
            }
        }
        Err(ArithFailure::NotStored)
    }

    /// `flush_all`: false when `-F` disabled it (memcached counts the refusal in cmd_flush).
    pub fn flush_all(&self, delay: i64) -> bool {
        if self.shared.settings.disable_flush_all {
            self.record(Cmd::Flush, Outcome::Error);
            return false;
        }
        self.record(Cmd::Flush, Outcome::Hit);
        self.store().flush_all(self.flush_delay(delay));
        true
    }

    /// memcached's flush delay: 0 or negative is now, up to 30 days relative, beyond that an
    /// absolute unix time.
    fn flush_delay(&self, delay: i64) -> u32 {
        if delay <= 0 {
            0
        } else if delay > MAX_RELATIVE_EXPTIME {
            let now = i64::from(self.now());
            (delay - now).clamp(0, i64::from(u32::MAX)) as u32
        } else {
            delay as u32
        }
    }

    /// A request that changes nothing in the store: `version`, `quit`, a no-op (`cmd` says
    /// which kind: an administrative command, or meta's `mn`).
    pub fn admin(&self, cmd: Cmd) {
        self.record(cmd, Outcome::Hit);
    }

    /// `verbosity`: memcached caps the level at 2; level N logs as much as -v repeated N times.
    pub fn verbosity(&self, level: u32) {
        self.admin(Cmd::Admin);
        let level = level.min(2);
        self.shared.verbosity.store(level, Ordering::Relaxed);
        if let Some(set) = &self.shared.set_log_level {
            set(level);
        }
    }

    /// `shutdown` (with `-A`): the signal thread runs the same graceful stop as SIGTERM.
    pub fn shutdown(&self, mode: ShutdownMode) -> Shutdown {
        self.admin(Cmd::Admin);
        if !self.shared.settings.enable_shutdown {
            return Shutdown::Disabled;
        }
        if mode == ShutdownMode::Invalid {
            return Shutdown::BadMode;
        }
        tracing::info!("shutdown command received");
        let _ = signal_hook::low_level::raise(signal_hook::consts::SIGTERM);
        Shutdown::Stopping
    }
}

fn store_outcome(outcome: StoreOutcome) -> Outcome {
    match outcome {
        StoreOutcome::Stored { .. } => Outcome::Stored,
        StoreOutcome::NotStored => Outcome::NotStored,
        StoreOutcome::Exists => Outcome::Exists,
        StoreOutcome::NotFound => Outcome::NotFound,
        StoreOutcome::TooLarge => Outcome::TooLarge,
        StoreOutcome::OutOfMemory => Outcome::NoMemory,
    }
}
