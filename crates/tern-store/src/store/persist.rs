//! Warm restart (memcached's `-e`): the heap as a shared mapping of a memory file, and the
//! metadata that, saved at a clean stop, lets the next start serve the same items.
//!
//! The items need nothing more: they sit in the file, self-describing (see `item`). What lives
//! beside the heap is saved as metadata (`Store::snapshot_meta`): the geometry and settings the
//! layout depends on, the key hash's seeds (which shard a key belongs to, and its index tag),
//! every segment's bookkeeping with a CRC32 of its written bytes, each shard's TTL chains and
//! the locations of its live items, the CAS epoch high-water mark, the `flush_all` mark and the
//! time of the stop; a CRC32 of all of it last. A start given that metadata
//! (`Store::open_file`) checks it whole before it uses any of it, then checks each segment's
//! CRC and each item's bounds, and rebuilds the index by hashing each live item's key again
//! (which also proves the key belongs to the shard whose segment holds it). Any failure, and
//! the store starts empty with the reason: never a torn or half-restored item.
//!
//! Saving the index itself instead was not worth it: rebuilding it from the live locations
//! costs about as much as reading the saved table would (see docs/restart.md for the figures)
//! and leaves the index's layout free to change between versions.
//!
//! No I/O policy here beyond the mapping and reserving the file's space for it (`reserve`: a
//! file system too small for the heap fails the start rather than a write later): the server
//! decides when to snapshot, where the metadata goes and when the clean mark is cleared.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use super::Store;
use crate::mechanics::clock::{Clock, UnixSecs};
use crate::mechanics::config::{Config, Geometry};
use crate::mechanics::error::StoreError;
use crate::mechanics::flash::save::SavedFlash;
use crate::mechanics::flash::{is_flash, Flash};
use crate::mechanics::hash_seeds::{hasher_of, random_seeds};
use crate::mechanics::heap::Heap;
use crate::mechanics::index::TAG_BITS;
use crate::mechanics::item;
use crate::mechanics::segments::{get32, Loc, SavedSeg, NO_SEGMENT, OFFSET_BITS, OWNER_PENDING};
use crate::mechanics::shard::Lanes;
use crate::mechanics::ttl::GROUPS;
use crate::mechanics::types::Expiry;

const MAGIC: &[u8; 8] = b"TERNHEAP";
/// Bumped whenever the metadata's or the items' layout changes: a file of another version is
/// refused, not misread. 2: large items carry a CAS field. 3: the index's peak size follows
/// the flush mark (version 2 is still read: its peak is unknown, so 0). 4: the flash tier's
/// bookkeeping and index entries follow the shards (none in versions 2 and 3). 5: an entry on
/// flash carries its page's generation (a version 4 file's flash tier starts empty).
const FORMAT_VERSION: u32 = 5;
/// What every metadata file begins with: the magic and the format version, memcached's "tag"
/// line. A `FILE.meta` shorter than this (empty included) is no metadata at all, and the start
/// refuses it as memcached 1.6.45 does (`startup::restart` in tern-server).
pub const META_HEADER_LEN: usize = MAGIC.len() + 4;
/// Hashed with the saved seeds at save and at restore: a different result means this build
/// hashes keys differently (another ahash), so shards and tags would not match.
const FINGERPRINT_KEY: &[u8] = b"tern memory file fingerprint";

/// What `Store::open_file` did with the memory file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The items saved at the last clean stop are back.
    Restored(Restored),
    /// The store starts empty; why nothing was restored.
    Empty(String),
}

/// A restore's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// Live items back in the store.
    pub items: u64,
    /// Items saved that had expired by the restore (gone, as if read after their deadline).
    pub expired: u64,
    /// The store clock when the metadata was saved.
    pub stopped_at: UnixSecs,
    /// Shards of the saved store, kept whatever the configuration asks for (items are laid out
    /// by shard).
    pub shards: usize,
}

/// The decoded metadata.
struct Saved {
    heap_bytes: u64,
    segment_shift: u32,
    shards: u32,
    max_item_size: u64,
    cas_enabled: bool,
    seeds: [u64; 4],
    fingerprint: u64,
    stopped_at: UnixSecs,
    epoch: u64,
    flush_mark: u64,
    /// Bytes of index tables at their most (`Pool::index_peak`), for `hash_power_level`.
    index_peak: u64,
    segs: Vec<SavedSeg>,
    /// Per segment: CRC32 of the written bytes of the segment or run it heads.
    crcs: Vec<u32>,
    shard_states: Vec<SavedShard>,
    flash: Option<SavedFlash>,
}

#[derive(Default)]
struct SavedShard {
    flush_seq: u32,
    active: Vec<u32>,
    chains: Vec<Vec<u32>>,
    /// Packed `Loc`s of the live items.
    live: Vec<u64>,
    /// Whole index slots (tag and location) of the items on flash: their keys are not in
    /// memory to hash again.
    flash_slots: Vec<u64>,
}

/// Reserves the first `len` bytes of the memory file at `path` (`fallocate`, which also extends
/// a shorter file to `len`), so that every page of the heap's mapping has its place in the file
/// system before anything is written: a file system too small for `-m` fails the start here,
/// with the reason, instead of killing the process with SIGBUS when a write first touches a
/// page the file system cannot provide. On a file system without `fallocate` (EOPNOTSUPP) the
/// file is only sized, sparse as before, with a warning; any other failure (ENOSPC, EFBIG, ...)
/// is the error.
fn reserve(file: &File, path: &Path, len: u64) -> Result<(), StoreError> {
    use std::os::fd::AsRawFd;
    let failed = |e: std::io::Error| {
        StoreError::MemoryFile(format!(
            "cannot reserve {} for the memory file {}: {e}",
            in_mib(len),
            path.display()
        ))
    };
    let off = libc::off_t::try_from(len)
        .map_err(|_| failed(std::io::Error::from_raw_os_error(libc::EFBIG)))?;
    let err = loop {
        // SAFETY: fallocate on a descriptor we hold open; no memory is passed.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            break err;
        }
    };
    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(failed(err));
    }
    tracing::warn!(
        "-e {}: the file system cannot reserve the memory file's {} ({err}): the file stays \
         sparse, and should that file system fill up, a write to the cache kills tern with \
         SIGBUS (put the file on tmpfs or hugetlbfs)",
        path.display(),
        in_mib(len)
    );
    let file_len = file.metadata().map_err(failed)?.len();
    if file_len < len {
        file.set_len(len).map_err(failed)?;
    }
    Ok(())
}

/// `len` bytes for a message: in MiB when whole.
fn in_mib(len: u64) -> String {
    if len % (1 << 20) == 0 {
        format!("{} MiB", len >> 20)
    } else {
        format!("{len} bytes")
    }
}

/// Runs `work` on every shard index, spread over the machine's cores.
fn each_shard_in_parallel<T: Send>(shards: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(shards)
        .max(1);
    let work = &work;
    let mut results: Vec<(usize, T)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (t..shards)
                        .step_by(threads)
                        .map(|id| (id, work(id)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a restore thread panicked"))
            .collect()
    });
    results.sort_by_key(|(id, _)| *id);
    results.into_iter().map(|(_, r)| r).collect()
}

impl Store {
    /// A store whose heap is a shared mapping of `path` (created if missing), restored from
    /// `saved` (metadata from `snapshot_meta` at the last clean stop) when that matches the
    /// file and this configuration, else empty, with the reason. The file is resized to the
    /// heap when the store starts empty. Either way its space is reserved before it is mapped
    /// (see `reserve`): a file system that cannot hold the heap is an error, not a SIGBUS on a
    /// later write. `config.shards` gives way to the saved store's shard count on a restore.
    pub fn open_file(
        mut config: Config,
        clock: Arc<Clock>,
        path: &Path,
        saved: Option<&[u8]>,
    ) -> Result<(Store, Opened), StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| StoreError::MemoryFile(format!("memory file {}: {e}", path.display())))?;
        let file_len = file
            .metadata()
            .map_err(|e| StoreError::MemoryFile(format!("memory file {}: {e}", path.display())))?
            .len();
        // Locked before anything else is read: a file another server uses fails the start.
        let flash = config
            .flash
            .as_ref()
            .map(|f| Flash::open(f).map(Box::new))
            .transpose()?;
        let saved = match saved {
            None => Err("no metadata from a clean stop".to_string()),
            Some(bytes) => Saved::decode(bytes).and_then(|saved| {
                config.shards = saved.shards as usize;
                saved.check(&config, file_len)?;
                Ok(saved)
            }),
        };
        let why = match saved {
            Ok(saved) => {
                let geometry = Geometry::of(&config)?;
                // A file of the right size may still be sparse (copied, or written by a tern
                // before this check): its holes are reserved too. A failure stops the start
                // with the file and its metadata as they were, for a start with room to
                // restore.
                reserve(&file, path, saved.heap_bytes)?;
                let heap = Heap::from_file(
                    &file,
                    saved.heap_bytes as usize,
                    config.large_pages,
                    config.lock_memory,
                )?;
                let mut store = Store::with_heap(
                    config.clone(),
                    clock.clone(),
                    &geometry,
                    heap,
                    hasher_of(saved.seeds),
                    saved.seeds,
                );
                store.flash = flash;
                match store.restore(&saved) {
                    Ok(restored) => return Ok((store, Opened::Restored(restored))),
                    Err(why) => {
                        // A fresh start over the same files: their bookkeeping starts empty.
                        let Store { flash: taken, .. } = store;
                        return Self::empty_start(config, clock, &file, path, taken, why);
                    }
                }
            }
            Err(why) => why,
        };
        Self::empty_start(config, clock, &file, path, flash, why)
    }

    /// `open_file`'s empty start, for `why`, with the flash tier's files as opened.
    fn empty_start(
        config: Config,
        clock: Arc<Clock>,
        file: &File,
        path: &Path,
        flash: Option<Box<Flash>>,
        why: String,
    ) -> Result<(Store, Opened), StoreError> {
        let geometry = Geometry::of(&config)?;
        let len = geometry.segments << geometry.segment_shift;
        let mut store = Store::empty_on_file(config, clock, &geometry, file, path, len)?;
        store.flash = match flash {
            // The old bookkeeping may have been taken back in part: open the files afresh.
            Some(old) => {
                drop(old);
                store
                    .config
                    .flash
                    .as_ref()
                    .map(|f| Flash::open(f).map(Box::new))
                    .transpose()?
            }
            None => None,
        };
        Ok((store, Opened::Empty(why)))
    }

    /// An empty store over `file`, whose old bytes are dropped first (truncating frees them),
    /// then reserved afresh (`reserve`); a reservation that fails leaves the file empty.
    fn empty_on_file(
        config: Config,
        clock: Arc<Clock>,
        geometry: &Geometry,
        file: &File,
        path: &Path,
        len: usize,
    ) -> Result<Store, StoreError> {
        file.set_len(0).map_err(|e| {
            StoreError::MemoryFile(format!(
                "cannot empty the memory file {}: {e}",
                path.display()
            ))
        })?;
        if let Err(e) = reserve(file, path, len as u64) {
            // Whatever part was allocated before the failure goes back to the file system.
            let _ = file.set_len(0);
            return Err(e);
        }
        let heap = Heap::from_file(file, len, config.large_pages, config.lock_memory)?;
        let seeds = random_seeds();
        Ok(Store::with_heap(
            config,
            clock,
            geometry,
            heap,
            hasher_of(seeds),
            seeds,
        ))
    }

    /// Writes the heap's pages back to its memory file (see `Heap::sync`); before the metadata
    /// is saved, so that metadata never describes bytes the file does not hold yet.
    pub fn sync_file(&self) -> std::io::Result<()> {
        self.segs.sync()?;
        // Every record the index names goes to its file, for the metadata to describe.
        match &self.flash {
            Some(flash) => flash.write_all(),
            None => Ok(()),
        }
    }

    /// Everything beside the heap that a restore needs (see the module's doc), as bytes for
    /// the server to keep beside the memory file. Call it once no command runs any more (at a
    /// graceful stop, after the workers have stopped): a write after it is lost on restore.
    pub fn snapshot_meta(&self) -> Vec<u8> {
        let shard_states = each_shard_in_parallel(self.shards.len(), |id| {
            let sh = self.lock(id);
            let mut crcs = Vec::new();
            for &head in sh.chains.iter().flatten() {
                let bytes = self.segs.read(&sh.owner, head);
                let written = (get32(&self.segs.meta(head).write_off) as usize).min(bytes.len());
                crcs.push((head, crc32fast::hash(&bytes[..written])));
            }
            let mut live = Vec::with_capacity(sh.index.len());
            sh.index.entries_with_tags(0..1 << TAG_BITS, |loc| {
                if !is_flash(loc) {
                    live.push(loc)
                }
            });
            // Entries of evicted pages are left behind; the rest are saved as of generation
            // 0, which every page restarts at.
            let flash_slots = match &self.flash {
                Some(flash) => sh
                    .index
                    .slots_where(|l| is_flash(l) && !flash.is_stale(l))
                    .into_iter()
                    .map(|slot| flash.geometry.of_generation_zero(slot))
                    .collect(),
                None => Vec::new(),
            };
            // In heap order, not the walk's tag order: a restore then reads the heap front to
            // back, and inserting keys in tag order would pile them into the growing index's
            // first buckets (7.6 s instead of 0.17 s for a million items).
            live.sort_unstable();
            let state = SavedShard {
                flush_seq: sh.flush_seq,
                active: sh.active.iter().map(Lanes::any).collect(),
                chains: sh
                    .chains
                    .iter()
                    .map(|c| c.iter().copied().collect())
                    .collect(),
                live,
                flash_slots,
            };
            (state, crcs)
        });
        let count = self.segs.count();
        let mut crcs = vec![0; count];
        let mut states = Vec::with_capacity(shard_states.len());
        for (state, seg_crcs) in shard_states {
            for (head, crc) in seg_crcs {
                crcs[head as usize] = crc;
            }
            states.push(state);
        }
        let saved = Saved {
            heap_bytes: (count * self.segs.size()) as u64,
            segment_shift: self.segs.size().trailing_zeros(),
            shards: self.shards.len() as u32,
            max_item_size: self.config.max_item_size as u64,
            cas_enabled: self.config.cas_enabled,
            seeds: self.seeds,
            fingerprint: self.hasher.hash_one(FINGERPRINT_KEY),
            stopped_at: self.clock.now(),
            epoch: self.segs.epoch_high_water(),
            flush_mark: self.flush.mark(),
            index_peak: self.pool().index_peak() as u64,
            segs: (0..count as u32).map(|seg| self.segs.save(seg)).collect(),
            crcs,
            shard_states: states,
            flash: self.flash.as_ref().map(|flash| {
                let config = self
                    .config
                    .flash
                    .as_ref()
                    .expect("a flash tier has its config");
                flash.save(config)
            }),
        };
        if let Some(flash) = &self.flash {
            // The next process (a hand-over's) may open the files from now on.
            flash.unlock_files();
        }
        saved.encode()
    }

    /// Puts `saved` back into this fresh store over the saved file; the reason on any mismatch
    /// (the store is then dropped: some items may be linked already).
    fn restore(&self, saved: &Saved) -> Result<Restored, String> {
        if self.hasher.hash_one(FINGERPRINT_KEY) != saved.fingerprint {
            return Err("this build hashes keys differently from the one that saved it".into());
        }
        let count = self.segs.count();
        let shards = self.shards.len();
        for (i, seg) in saved.segs.iter().enumerate() {
            if !self.consistent(saved, i) {
                return Err(format!("segment {i}'s saved bookkeeping is inconsistent"));
            }
            self.segs.restore(i as u32, seg);
        }
        {
            let mut pool = self.pool();
            for seg in 0..count as u32 {
                if !self.segs.is_free(seg) {
                    pool.take_restored(seg);
                }
            }
        }
        self.segs.set_epoch_high_water(saved.epoch);
        self.flush.restore_mark(saved.flush_mark);
        self.pool().restore_index_peak(saved.index_peak as usize);
        // The flash tier comes back only whole: otherwise it starts empty and the items in
        // memory come back alone.
        let flash_back = match (&self.flash, &saved.flash, &self.config.flash) {
            (Some(flash), Some(saved_flash), Some(config)) => {
                match flash.restore(config, saved_flash) {
                    Ok(()) => true,
                    Err(why) => {
                        tracing::warn!("the flash tier starts empty: {why}");
                        false
                    }
                }
            }
            _ => false,
        };
        let now = self.clock.now();
        let outcomes =
            each_shard_in_parallel(shards, |id| self.restore_shard(id, saved, now, flash_back));
        let mut restored = Restored {
            items: 0,
            expired: 0,
            stopped_at: saved.stopped_at,
            shards,
        };
        for outcome in outcomes {
            let (items, expired) = outcome?;
            restored.items += items;
            restored.expired += expired;
        }
        // The rebuilt index may be charged a little more than the saved one was (it is built
        // 80% full, the saved one was 75-85%): the oldest items make room, as in a full heap.
        self.evict_to_limit();
        self.discard_excess_warm();
        Ok(restored)
    }

    /// Whether segment `i`'s saved bookkeeping can be trusted to index the heap: a free one
    /// always; an owned run head (or ordinary segment) when its run and written bytes lie in
    /// the heap and every segment of the run names it; any other owned segment when it lies
    /// inside its head's run, same owner.
    fn consistent(&self, saved: &Saved, i: usize) -> bool {
        let seg = &saved.segs[i];
        if seg.owner >= OWNER_PENDING {
            return true;
        }
        let head = seg.head as usize;
        if seg.owner as usize >= self.shards.len() || head > i {
            return false;
        }
        let run = &saved.segs[head];
        let run_len = run.run_len as usize;
        if head == i {
            run_len > 0
                && i + run_len <= saved.segs.len()
                && saved.segs[i + 1..i + run_len]
                    .iter()
                    .all(|tail| tail.owner == seg.owner && tail.head == seg.head)
                && run.write_off as usize <= run_len * self.segs.size()
                && (run.group as usize) < GROUPS
                && run.epoch < saved.epoch
        } else {
            run.owner == seg.owner && run.head as usize == head && i < head + run_len
        }
    }

    /// One shard's chains and items; `(restored, expired)` items.
    fn restore_shard(
        &self,
        id: usize,
        saved: &Saved,
        now: UnixSecs,
        flash_back: bool,
    ) -> Result<(u64, u64), String> {
        let state = &saved.shard_states[id];
        let mut guard = self.lock(id);
        let sh = &mut *guard;
        self.set_flush_applied(sh, state.flush_seq);
        let is_own_head = |seg: u32| {
            (seg as usize) < saved.segs.len()
                && self.segs.owner_shard(seg) == Some(id)
                && get32(&self.segs.meta(seg).head) == seg
        };
        for (g, chain) in state.chains.iter().enumerate() {
            for &head in chain {
                if !is_own_head(head) || get32(&self.segs.meta(head).group) as usize != g {
                    return Err(format!(
                        "shard {id}'s chains name segment {head}, not its own"
                    ));
                }
                let bytes = self.segs.read(&sh.owner, head);
                let written = get32(&self.segs.meta(head).write_off) as usize;
                if crc32fast::hash(&bytes[..written]) != saved.crcs[head as usize] {
                    return Err(format!(
                        "segment {head}'s bytes do not match their checksum (the memory file \
                         changed after the stop)"
                    ));
                }
                sh.chains[g].push_back(head);
            }
            let active = state.active[g];
            if active != NO_SEGMENT && !sh.chains[g].contains(&active) {
                return Err(format!(
                    "shard {id}'s active segment {active} is not in its chain"
                ));
            }
            // Not appended to again: new writes open new segments, whose epochs are above every
            // saved one, so every CAS handed out after the restart is above every one before.
        }
        let (mut items, mut expired) = (0, 0);
        let flash_slots: &[u64] = if flash_back { &state.flash_slots } else { &[] };
        let entries = state.live.len() + flash_slots.len();
        let old = sh.index.bytes();
        self.charge_restored_index(sh.index.reserved_bytes(entries));
        sh.index.reserve(entries);
        self.refresh_hint(sh);
        self.pool().uncharge_index(old);
        // Saved in heap order (`snapshot_meta`), so strictly rising: a location listed twice
        // would link one item twice and count it twice.
        let mut previous = 0;
        for &packed in &state.live {
            if packed >> OFFSET_BITS == 0 {
                return Err(format!("shard {id} lists an item at no segment"));
            }
            if packed <= previous {
                return Err(format!("shard {id} lists its items out of heap order"));
            }
            previous = packed;
            let loc = Loc::unpack(packed);
            if !is_own_head(loc.seg) {
                return Err(format!("shard {id} lists an item in segment {}", loc.seg));
            }
            let bytes = self.segs.read(&sh.owner, loc.seg);
            let written = get32(&self.segs.meta(loc.seg).write_off) as usize;
            let Some(hdr) = bytes[..written]
                .get(loc.off as usize..)
                .and_then(item::parse_checked)
            else {
                return Err(format!("no whole item at {}:{}", loc.seg, loc.off));
            };
            let item = &bytes[loc.off as usize..];
            let (shard, key) = self.hash(hdr.key(item));
            if shard != id {
                return Err(format!(
                    "the item at {}:{} is not shard {id}'s",
                    loc.seg, loc.off
                ));
            }
            if Expiry(hdr.expiry).is_expired_at(now) {
                expired += 1;
                continue;
            }
            self.link(sh, key.tag, loc, hdr.footprint(), None);
            items += 1;
        }
        if let Some(flash) = &self.flash {
            for &slot in flash_slots {
                let location = slot & ((1 << 40) - 1);
                if !is_flash(location) || !flash.holds(location) || !sh.index.insert_slot(slot) {
                    return Err(format!("shard {id} lists a flash entry at no record"));
                }
                sh.counters.curr_items += 1;
                items += 1;
            }
        }
        // Segments whose items all expired meanwhile go back to the pool now.
        let emptied: Vec<u32> = sh
            .chains
            .iter()
            .flatten()
            .copied()
            .filter(|&head| get32(&self.segs.meta(head).live) == 0)
            .collect();
        for head in emptied {
            self.drop_segment(sh, head);
        }
        self.release(sh, false);
        self.publish_oldest(sh);
        Ok((items, expired))
    }
}

impl Saved {
    /// Whether this metadata can describe `file_len` bytes laid out for `config`.
    fn check(&self, config: &Config, file_len: u64) -> Result<(), String> {
        let geometry = Geometry::of(config).map_err(|e| e.to_string())?;
        let heap_bytes = (geometry.segments << geometry.segment_shift) as u64;
        if self.heap_bytes != heap_bytes {
            return Err(format!(
                "the memory file holds a {} MiB heap, this start asks for {} MiB (-m)",
                self.heap_bytes >> 20,
                heap_bytes >> 20
            ));
        }
        if self.segment_shift != geometry.segment_shift {
            return Err(format!(
                "the memory file has {}-byte segments, this start would use {}",
                1u64 << self.segment_shift,
                1u64 << geometry.segment_shift
            ));
        }
        if self.max_item_size != config.max_item_size as u64 {
            return Err(format!(
                "the memory file was saved with an item size limit of {} bytes, this start asks \
                 for {} (-I)",
                self.max_item_size, config.max_item_size
            ));
        }
        if self.cas_enabled != config.cas_enabled {
            return Err("the memory file was saved with CAS set differently (-C)".into());
        }
        if self.segs.len() != geometry.segments {
            return Err("the metadata's segment count does not match its heap".into());
        }
        if file_len != self.heap_bytes {
            return Err(format!(
                "the memory file is {file_len} bytes, its metadata says {} (truncated or replaced)",
                self.heap_bytes
            ));
        }
        Ok(())
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::with_capacity(
            256 + self.segs.len() * 48
                + self
                    .shard_states
                    .iter()
                    .map(|s| 8 * s.live.len() + 300)
                    .sum::<usize>(),
        ));
        w.0.extend_from_slice(MAGIC);
        w.u32(FORMAT_VERSION);
        w.u64(self.heap_bytes);
        w.u32(self.segment_shift);
        w.u32(self.shards);
        w.u64(self.max_item_size);
        w.u32(self.cas_enabled as u32);
        for seed in self.seeds {
            w.u64(seed);
        }
        w.u64(self.fingerprint);
        w.u32(self.stopped_at);
        w.u64(self.epoch);
        w.u64(self.flush_mark);
        w.u64(self.index_peak);
        w.u64(self.segs.len() as u64);
        for (seg, &crc) in self.segs.iter().zip(&self.crcs) {
            for v in [
                seg.owner,
                seg.head,
                seg.run_len,
                seg.write_off,
                seg.max_expiry,
                seg.created,
                seg.group,
                crc,
            ] {
                w.u32(v);
            }
            w.u64(seg.epoch);
            w.u64(seg.order);
        }
        for state in &self.shard_states {
            w.u32(state.flush_seq);
            for &active in &state.active {
                w.u32(active);
            }
            for chain in &state.chains {
                w.u64(chain.len() as u64);
                for &seg in chain {
                    w.u32(seg);
                }
            }
            w.u64(state.live.len() as u64);
            for &loc in &state.live {
                w.u64(loc);
            }
        }
        // Last, so that a store without a flash tier differs from version 3 by one word.
        match &self.flash {
            None => w.u32(0),
            Some(f) => {
                w.u32(1);
                for state in &self.shard_states {
                    w.u64(state.flash_slots.len() as u64);
                    for &slot in &state.flash_slots {
                        w.u64(slot);
                    }
                }
                w.u64(f.files.len() as u64);
                for (path, bytes) in &f.files {
                    let path = path.as_os_str().as_encoded_bytes();
                    w.u64(path.len() as u64);
                    w.0.extend_from_slice(path);
                    w.u64(*bytes);
                }
                w.u64(f.page_size);
                w.u64(f.next_version);
                w.u64(f.pages.len() as u64);
                for &(version, state, live, objects, fill, bucket, max_expiry) in &f.pages {
                    w.u64(version);
                    w.u32(state);
                    w.u64(live);
                    w.u64(objects);
                    w.u64(fill);
                    w.u32(bucket);
                    w.u32(max_expiry);
                }
                for list in [&f.free_pages, &f.full_pages] {
                    w.u64(list.len() as u64);
                    for &p in list {
                        w.u32(p);
                    }
                }
            }
        }
        let crc = crc32fast::hash(&w.0);
        w.u32(crc);
        w.0
    }

    fn decode(bytes: &[u8]) -> Result<Saved, String> {
        let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
            return Err("the metadata file is too short".into());
        };
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
            return Err("the metadata file fails its checksum (torn or corrupted)".into());
        }
        let mut r = Reader(body);
        if r.take(MAGIC.len())? != MAGIC {
            return Err("the metadata file is not tern's".into());
        }
        let version = r.u32()?;
        if !(2..=FORMAT_VERSION).contains(&version) {
            return Err(format!(
                "the memory file has format version {version}, this tern reads versions 2 to \
                 {FORMAT_VERSION}"
            ));
        }
        let mut saved = Saved {
            heap_bytes: r.u64()?,
            segment_shift: r.u32()?,
            shards: r.u32()?,
            max_item_size: r.u64()?,
            cas_enabled: r.u32()? != 0,
            seeds: [r.u64()?, r.u64()?, r.u64()?, r.u64()?],
            fingerprint: r.u64()?,
            stopped_at: r.u32()?,
            epoch: r.u64()?,
            flush_mark: r.u64()?,
            index_peak: if version >= 3 { r.u64()? } else { 0 },
            segs: Vec::new(),
            crcs: Vec::new(),
            shard_states: Vec::new(),
            flash: None,
        };
        let count = r.count(48)?;
        for _ in 0..count {
            let mut v = [0u32; 8];
            for x in &mut v {
                *x = r.u32()?;
            }
            saved.segs.push(SavedSeg {
                owner: v[0],
                head: v[1],
                run_len: v[2],
                write_off: v[3],
                max_expiry: v[4],
                created: v[5],
                group: v[6],
                epoch: r.u64()?,
                order: r.u64()?,
            });
            saved.crcs.push(v[7]);
        }
        if !saved.shards.is_power_of_two() || saved.shards > 1 << 16 {
            return Err(format!("the metadata names {} shards", saved.shards));
        }
        for _ in 0..saved.shards {
            let mut state = SavedShard {
                flush_seq: r.u32()?,
                ..SavedShard::default()
            };
            for _ in 0..GROUPS {
                state.active.push(r.u32()?);
            }
            for _ in 0..GROUPS {
                let len = r.count(4)?;
                state
                    .chains
                    .push((0..len).map(|_| r.u32()).collect::<Result<_, _>>()?);
            }
            let live = r.count(8)?;
            state.live = (0..live).map(|_| r.u64()).collect::<Result<_, _>>()?;
            saved.shard_states.push(state);
        }
        if version >= 4 && r.u32()? == 1 {
            for state in &mut saved.shard_states {
                let slots = r.count(8)?;
                state.flash_slots = (0..slots).map(|_| r.u64()).collect::<Result<_, _>>()?;
            }
            let files = r.count(16)?;
            let mut f = SavedFlash {
                files: Vec::new(),
                page_size: 0,
                next_version: 0,
                pages: Vec::new(),
                free_pages: Vec::new(),
                full_pages: Vec::new(),
            };
            for _ in 0..files {
                let len = r.count(1)?;
                let path = std::path::PathBuf::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(r.take(len)?),
                );
                f.files.push((path, r.u64()?));
            }
            f.page_size = r.u64()?;
            f.next_version = r.u64()?;
            let pages = r.count(44)?;
            for _ in 0..pages {
                f.pages.push((
                    r.u64()?,
                    r.u32()?,
                    r.u64()?,
                    r.u64()?,
                    r.u64()?,
                    r.u32()?,
                    r.u32()?,
                ));
            }
            for list in [&mut f.free_pages, &mut f.full_pages] {
                let len = r.count(4)?;
                *list = (0..len).map(|_| r.u32()).collect::<Result<_, _>>()?;
            }
            // Version 4's entries keep check bits where version 5's keep the generation.
            if version >= 5 {
                saved.flash = Some(f);
            } else {
                tracing::warn!(
                    "the flash tier starts empty: saved by a tern whose flash entries carry no \
                     page generation (format version {version})"
                );
            }
        }
        if !r.0.is_empty() {
            return Err("the metadata file has bytes past its end".into());
        }
        Ok(saved)
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("the metadata file ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A count of records of `size` bytes each, no more than the bytes left can hold.
    fn count(&mut self, size: usize) -> Result<usize, String> {
        let n = self.u64()?;
        if n > (self.0.len() / size) as u64 {
            return Err("the metadata file ends early".into());
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::mechanics::types::{Miss, StoreOp, StoreOutcome};

    const T0: UnixSecs = 1_700_000_000;

    /// A memory file path of its own, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str) -> TempFile {
            let path = std::env::temp_dir().join(format!(
                "tern-persist-{name}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_file(&path);
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn config() -> Config {
        Config {
            heap_bytes: 8 << 20,
            shards: 4,
            ..Config::default()
        }
    }

    fn open(
        file: &TempFile,
        config: Config,
        now: UnixSecs,
        saved: Option<&[u8]>,
    ) -> (Store, Opened) {
        Store::open_file(config, Arc::new(Clock::manual(now)), &file.0, saved).unwrap()
    }

    /// A clean stop of `s` (its memory file synced, its metadata taken) and a start at `now`
    /// that must restore it.
    fn stop_and_restore(file: &TempFile, s: Store, now: UnixSecs) -> (Store, Restored) {
        s.sync_file().unwrap();
        let meta = s.snapshot_meta();
        drop(s);
        let (s, opened) = open(file, config(), now, Some(&meta));
        let Opened::Restored(restored) = opened else {
            panic!("not restored: {opened:?}");
        };
        (s, restored)
    }

    /// Value, flags, CAS and deadline of `key`.
    fn read(s: &Store, key: &[u8]) -> Result<(Vec<u8>, u32, u64, Option<UnixSecs>), Miss> {
        s.get(key, |i| {
            (i.value.to_vec(), i.flags, i.cas(), i.expiry.deadline())
        })
    }

    fn set(s: &Store, key: &[u8], flags: u32, expiry: Expiry, value: &[u8]) {
        let outcome = s.store(StoreOp::Set, key, flags, expiry, value);
        assert!(
            matches!(outcome, StoreOutcome::Stored { .. }),
            "{outcome:?}"
        );
    }

    fn value_of(i: usize) -> Vec<u8> {
        (0..(i * 7) % 300).map(|b| (b * 31 + i) as u8).collect()
    }

    #[test]
    fn a_clean_stop_restores_every_live_item_byte_for_byte() {
        let file = TempFile::new("roundtrip");
        let (s, opened) = open(&file, config(), T0, None);
        assert_eq!(
            opened,
            Opened::Empty("no metadata from a clean stop".into())
        );
        for i in 0..20_000 {
            let expiry = if i % 3 == 0 {
                Expiry(T0 + 1000 + i as u32)
            } else {
                Expiry::NEVER
            };
            set(
                &s,
                format!("key:{i}").as_bytes(),
                i as u32,
                expiry,
                &value_of(i),
            );
        }
        // A large item (a run of segments), a deleted one, an overwritten one, a touched one.
        let large: Vec<u8> = (0..700_000u32).map(|b| (b % 251) as u8).collect();
        set(&s, b"large", 9, Expiry::NEVER, &large);
        assert!(s.delete(b"key:5"));
        set(&s, b"key:6", 66, Expiry::NEVER, b"new");
        assert!(s.touch(b"key:7", Expiry(T0 + 50)));
        let mut before = Vec::new();
        for i in 0..20_000 {
            before.push(read(&s, format!("key:{i}").as_bytes()));
        }
        let large_before = read(&s, b"large").unwrap();
        let items = s.stats().curr_items;
        let (s, restored) = stop_and_restore(&file, s, T0 + 1);
        assert_eq!((restored.items, restored.expired), (items, 0));
        assert_eq!(restored.stopped_at, T0);
        assert_eq!(s.stats().curr_items, items);
        for (i, was) in before.iter().enumerate() {
            assert_eq!(&read(&s, format!("key:{i}").as_bytes()), was, "key:{i}");
        }
        assert_eq!(read(&s, b"key:5"), Err(Miss::NotFound));
        assert_eq!(read(&s, b"key:6").unwrap().0, b"new");
        assert_eq!(read(&s, b"large").unwrap(), large_before);
        // The restored store goes on working: overwrite, delete, fill.
        set(&s, b"key:1", 0, Expiry::NEVER, b"again");
        assert_eq!(read(&s, b"key:1").unwrap().0, b"again");
        assert!(s.delete(b"key:2"));
        // A memory file's heap is the file: the limit cannot pass it.
        let heap = config().heap_bytes;
        assert_eq!(
            s.set_memory_limit(heap + (1 << 20)),
            Err(crate::store::memlimit::MemoryLimitError::TooLarge { max: heap })
        );
    }

    #[test]
    fn a_store_two_threads_wrote_on_two_lanes_restores_whole_onto_one() {
        let file = TempFile::new("lanes");
        let two_lanes = Config {
            writers: 2,
            ..config()
        };
        let (s, _) = open(&file, two_lanes, T0, None);
        std::thread::scope(|scope| {
            for t in 0..2 {
                let s = &s;
                scope.spawn(move || {
                    for i in (t..10_000).step_by(2) {
                        let key = format!("key:{i}");
                        set(s, key.as_bytes(), 0, Expiry::NEVER, &value_of(i));
                    }
                });
            }
        });
        let shard = s.lock(0);
        assert!(
            shard.active.iter().any(|lanes| lanes.of(1) != NO_SEGMENT),
            "the second thread had no lane of its own"
        );
        drop(shard);
        let (s, restored) = stop_and_restore(&file, s, T0 + 1);
        assert_eq!(restored.items, 10_000);
        for i in 0..10_000 {
            let key = format!("key:{i}");
            assert_eq!(read(&s, key.as_bytes()).unwrap().0, value_of(i), "{key}");
        }
    }

    #[test]
    fn the_index_peak_survives_deletes_a_flush_and_a_restart() {
        let file = TempFile::new("index-peak");
        let (s, _) = open(&file, config(), T0, None);
        let start = s.stats().index_slots_peak;
        for i in 0..100_000u32 {
            set(&s, &i.to_le_bytes(), 0, Expiry::NEVER, b"");
        }
        let grown = s.stats();
        assert!(grown.index_slots >= 100_000, "{grown:?}");
        assert_eq!(grown.index_slots_peak, grown.index_slots);
        assert!(grown.index_slots_peak > start);
        for i in 0..100_000u32 {
            assert!(s.delete(&i.to_le_bytes()));
        }
        s.flush_all(0);
        let flushed = s.stats();
        assert!(flushed.index_slots < grown.index_slots / 8, "{flushed:?}");
        assert_eq!(flushed.index_slots_peak, grown.index_slots_peak);
        s.sync_file().unwrap();
        let meta = s.snapshot_meta();
        // A version 2 file (an older tern's: no peak) still restores, its peak unknown.
        let peak_at = 100;
        let mut v2 = meta[..meta.len() - 4].to_vec();
        let peak_bytes = s.pool().index_peak() as u64;
        assert_eq!(v2[peak_at..peak_at + 8], peak_bytes.to_le_bytes());
        v2.drain(peak_at..peak_at + 8);
        // Nor the word saying whether a flash tier follows.
        v2.truncate(v2.len() - 4);
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        v2.extend_from_slice(&crc32fast::hash(&v2).to_le_bytes());
        assert_eq!(Saved::decode(&v2).unwrap().index_peak, 0);
        let (s, _) = stop_and_restore(&file, s, T0 + 1);
        assert_eq!(s.stats().index_slots_peak, grown.index_slots_peak);
    }

    /// Bytes the file system holds for `file`.
    fn allocated(file: &TempFile) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&file.0).unwrap().blocks() * 512
    }

    #[test]
    fn the_memory_file_is_reserved_whole_fresh_or_restored_from_a_sparse_copy() {
        let file = TempFile::new("reserved");
        let heap = config().heap_bytes as u64;
        let (s, _) = open(&file, config(), T0, None);
        assert!(allocated(&file) >= heap, "{} of {heap}", allocated(&file));
        for i in 0..1_000 {
            set(
                &s,
                format!("k{i}").as_bytes(),
                0,
                Expiry::NEVER,
                &value_of(i),
            );
        }
        s.sync_file().unwrap();
        let meta = s.snapshot_meta();
        drop(s);
        // A sparse copy, as `cp --sparse=always` makes: only the 4 KiB blocks holding data.
        let bytes = std::fs::read(&file.0).unwrap();
        std::fs::remove_file(&file.0).unwrap();
        let copy = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&file.0)
            .unwrap();
        copy.set_len(bytes.len() as u64).unwrap();
        for (at, block) in bytes.chunks(4096).enumerate() {
            if block.iter().any(|&b| b != 0) {
                std::os::unix::fs::FileExt::write_all_at(&copy, block, at as u64 * 4096).unwrap();
            }
        }
        drop(copy);
        assert!(allocated(&file) < heap / 2, "the copy is not sparse");
        let (s, opened) = open(&file, config(), T0, Some(&meta));
        assert!(matches!(opened, Opened::Restored(_)), "{opened:?}");
        assert!(allocated(&file) >= heap, "{} of {heap}", allocated(&file));
        assert_eq!(read(&s, b"k10").unwrap().0, value_of(10));
    }

    /// A file system that cannot hold the heap fails the start, naming the file and why, and
    /// leaves the file empty. Provoked with a file size limit (RLIMIT_FSIZE: fallocate fails
    /// with EFBIG), in a child process of this test binary, since the limit is the whole
    /// process's and other tests write files.
    #[test]
    fn a_memory_file_that_cannot_be_reserved_fails_the_start() {
        const CHILD: &str = "TERN_PERSIST_RESERVE_CHILD";
        const NAME: &str =
            "store::persist::tests::a_memory_file_that_cannot_be_reserved_fails_the_start";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{said}");
            assert!(said.contains("1 passed"), "the child ran no test: {said}");
            return;
        }
        // SAFETY: plain system calls on this process's own settings; no memory is shared. The
        // signal a write past the limit raises (SIGXFSZ, fatal by default) is ignored, so the
        // call fails with EFBIG instead.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let mut limit: libc::rlimit = std::mem::zeroed();
            assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
            limit.rlim_cur = 1 << 20;
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
        }
        let file = TempFile::new("unreservable");
        let clock = Arc::new(Clock::manual(T0));
        let err = match Store::open_file(config(), clock, &file.0, None) {
            Ok(_) => panic!("a file past the size limit was reserved"),
            Err(e) => e.to_string(),
        };
        let want = format!(
            "cannot reserve 8 MiB for the memory file {}: ",
            file.0.display()
        );
        assert!(err.starts_with(&want), "{err}");
        assert!(err.contains("File too large"), "{err}");
        assert_eq!(std::fs::metadata(&file.0).unwrap().len(), 0);
    }

    #[test]
    fn a_store_full_of_tiny_items_restores_within_its_limit() {
        let file = TempFile::new("tiny");
        let (s, _) = open(&file, config(), T0, None);
        for i in 0..1_200_000u64 {
            set(&s, &i.to_le_bytes(), 0, Expiry::NEVER, b"v");
        }
        let before = s.stats();
        assert!(before.evictions > 0, "{before:?}");
        let (s, restored) = stop_and_restore(&file, s, T0 + 1);
        let after = s.stats();
        // The rebuilt index may need a little more than the saved one: the oldest items make
        // room for it, so items and index fit the limit again.
        let pool = s.pool();
        assert!(pool.in_use() + pool.index_segments() <= pool.limit());
        drop(pool);
        assert_eq!(restored.items, before.curr_items);
        assert!(
            after.curr_items * 100 >= before.curr_items * 95,
            "{after:?}"
        );
        assert!(read(&s, &1_199_999u64.to_le_bytes()).is_ok());
    }

    #[test]
    fn deadlines_are_wall_clock_across_the_downtime() {
        let file = TempFile::new("ttl");
        let (s, _) = open(&file, config(), T0, None);
        set(&s, b"short", 0, Expiry::from_exptime(5, T0), b"a");
        set(&s, b"long", 0, Expiry::from_exptime(100, T0), b"b");
        set(&s, b"never", 0, Expiry::NEVER, b"c");
        // Ten seconds down: the 5 s item is gone, the 100 s one has 90 s left.
        let (s, restored) = stop_and_restore(&file, s, T0 + 10);
        assert_eq!((restored.items, restored.expired), (2, 1));
        assert_eq!(read(&s, b"short"), Err(Miss::NotFound));
        let deadline = read(&s, b"long").unwrap().3.unwrap();
        assert_eq!(Expiry(deadline).remaining(s.clock().now()), Some(90));
        assert_eq!(read(&s, b"never").unwrap().3, None);
        s.clock().advance(90);
        assert_eq!(read(&s, b"long"), Err(Miss::Expired));
    }

    #[test]
    fn no_cas_unique_is_handed_out_twice_across_restarts() {
        let file = TempFile::new("cas");
        let (mut s, _) = open(&file, config(), T0, None);
        let mut seen = std::collections::HashSet::new();
        for round in 0..3 {
            for i in 0..2_000 {
                let key = format!("r{round}:{i}");
                set(&s, key.as_bytes(), 0, Expiry::NEVER, b"v");
                let cas = read(&s, key.as_bytes()).unwrap().2;
                assert!(seen.insert(cas), "CAS {cas} reused in round {round}");
            }
            // Every earlier key still has its own CAS, and it was handed out before.
            let meta = s.snapshot_meta();
            drop(s);
            let (next, opened) = open(&file, config(), T0, Some(&meta));
            assert!(matches!(opened, Opened::Restored(_)), "{opened:?}");
            let max_before = *seen.iter().max().unwrap();
            set(&next, b"fresh", 0, Expiry::NEVER, b"v");
            let fresh = read(&next, b"fresh").unwrap().2;
            assert!(fresh > max_before, "{fresh} after {max_before}");
            seen.insert(fresh);
            s = next;
        }
    }

    fn refused(file: &TempFile, config: Config, meta: &[u8]) -> String {
        match open(file, config, T0, Some(meta)).1 {
            Opened::Empty(why) => why,
            Opened::Restored(r) => panic!("restored {r:?}"),
        }
    }

    /// A store with a few items, stopped cleanly: its metadata.
    fn saved(file: &TempFile) -> Vec<u8> {
        let (s, _) = open(file, config(), T0, None);
        for i in 0..1_000 {
            set(
                &s,
                format!("k{i}").as_bytes(),
                0,
                Expiry::NEVER,
                &value_of(i),
            );
        }
        s.snapshot_meta()
    }

    #[test]
    fn other_settings_start_empty_and_say_why() {
        let file = TempFile::new("mismatch");
        let meta = saved(&file);
        let bigger = Config {
            heap_bytes: 16 << 20,
            ..config()
        };
        assert!(refused(&file, bigger, &meta).contains("(-m)"));
        let meta = saved(&file);
        let items = Config {
            max_item_size: 2 << 20,
            ..config()
        };
        assert!(refused(&file, items, &meta).contains("(-I)"));
        let meta = saved(&file);
        let no_cas = Config {
            cas_enabled: false,
            ..config()
        };
        assert!(refused(&file, no_cas, &meta).contains("(-C)"));
        // Another shard count (another -t) is fine: the saved layout is kept.
        let meta = saved(&file);
        let (s, opened) = open(
            &file,
            Config {
                shards: 64,
                ..config()
            },
            T0,
            Some(&meta),
        );
        assert!(matches!(
            opened,
            Opened::Restored(Restored { shards: 4, .. })
        ));
        assert_eq!(read(&s, b"k10").unwrap().0, value_of(10));
    }

    /// Metadata whose checksum holds but whose content does not (a bug, or a forgery) is
    /// refused by the checks behind the checksum, never followed out of bounds.
    #[test]
    fn metadata_that_checks_out_but_lies_is_refused() {
        let file = TempFile::new("lies");
        let resealed = |mut meta: Vec<u8>, at: usize, value: u64| {
            meta.truncate(meta.len() - 4);
            meta[at..at + 8].copy_from_slice(&value.to_le_bytes());
            let crc = crc32fast::hash(&meta);
            meta.extend_from_slice(&crc.to_le_bytes());
            meta
        };
        // Each lie is told about the save it is put in: a save places the items by its own
        // random hash seeds, so another save's last location may be this one's real one.
        let lies: [fn(u64) -> u64; 5] = [
            |_| 0,
            |_| u64::MAX,
            |real| real + 1,
            |real| real ^ (1 << 20),
            |_| (1 << 20) | 0xf_ffff,
        ];
        for lie in lies {
            let meta = saved(&file);
            // The last field before the checksum and the word saying no flash tier follows is
            // the last shard's last live item's location.
            let last_loc = meta.len() - 16;
            let real = u64::from_le_bytes(meta[last_loc..last_loc + 8].try_into().unwrap());
            let lie = lie(real);
            let why = refused(&file, config(), &resealed(meta, last_loc, lie));
            assert!(!why.contains("checksum"), "{lie:#x}: {why}");
        }
        // The last location repeats the one before it: an item listed twice. Told explicitly,
        // as `real ^ (1 << 20)` may name the item a segment below `real` only now and then.
        let meta = saved(&file);
        let last_loc = meta.len() - 16;
        let before = u64::from_le_bytes(meta[last_loc - 8..last_loc].try_into().unwrap());
        let why = refused(&file, config(), &resealed(meta, last_loc, before));
        assert!(why.contains("heap order"), "{why}");
        // Segment 0's write offset (with its max expiry) past its end: the segment records
        // start after 108 bytes of header (see `encode`), the write offset 12 bytes in.
        let why = refused(&file, config(), &resealed(saved(&file), 108 + 12, u64::MAX));
        assert!(why.contains("inconsistent"), "{why}");
    }

    #[test]
    fn a_torn_or_corrupted_file_is_refused_and_the_store_starts_empty() {
        let file = TempFile::new("corrupt");
        // The memory file truncated.
        let meta = saved(&file);
        let f = OpenOptions::new().write(true).open(&file.0).unwrap();
        f.set_len(4 << 20).unwrap();
        let why = refused(&file, config(), &meta);
        assert!(why.contains("truncated"), "{why}");
        // A byte of an item changed.
        let meta = saved(&file);
        let mut bytes = std::fs::read(&file.0).unwrap();
        let at = bytes.iter().position(|&b| b != 0).unwrap() + 20;
        bytes[at] ^= 0x40;
        std::fs::write(&file.0, &bytes).unwrap();
        let (s, opened) = open(&file, config(), T0, Some(&meta));
        assert!(
            matches!(&opened, Opened::Empty(why) if why.contains("checksum")),
            "{opened:?}"
        );
        assert_eq!(s.stats().curr_items, 0);
        assert_eq!(read(&s, b"k1"), Err(Miss::NotFound));
        set(&s, b"k1", 0, Expiry::NEVER, b"works");
        assert_eq!(read(&s, b"k1").unwrap().0, b"works");
        drop(s);
        // The metadata torn, or flipped anywhere.
        let meta = saved(&file);
        let why = refused(&file, config(), &meta[..meta.len() / 2]);
        assert!(why.contains("checksum"), "{why}");
        for at in [0, 9, meta.len() / 2, meta.len() - 1] {
            let meta = saved(&file);
            let mut bad = meta.clone();
            bad[at] ^= 1;
            let why = refused(&file, config(), &bad);
            assert!(why.contains("checksum"), "{why}");
        }
        assert!(refused(&file, config(), b"").contains("too short"));
    }
}
