//! The flash tier's pieces (memcached's extstore, tern's layout): the files cut into pages,
//! the write buffers items gather in before a page is written, the record an item is on
//! flash, and where an index entry points when its item is there. No `Store` here: the store
//! decides what goes to flash and keeps the index (`store/flash.rs`).
//!
//! **Only the index entry stays in memory.** An item on flash is its index slot alone (8 bytes
//! in a table 75-85% full: 9.6-10.8 bytes per item): the key, header and value are on flash.
//! The slot's 40 location bits say so with their top bit ([`FLASH_BIT`], which a location in
//! memory never sets: [`MAX_RAM_SEGMENTS`]); below it, the item's byte address on flash in
//! 8-byte units, a bit of its page's generation (how many times the page was evicted), and in
//! the bits the address leaves free, more of the key's hash ([`FlashGeometry::check_of`]) than
//! the 24-bit tag, so that a miss, a `set` or an `add` rarely reads flash for a key that is not
//! the one asked for.
//!
//! **Records.** An item goes to flash as a record: a 12-byte header (CRC-32 of what follows,
//! the item's length, the low 32 bits of its page's version), then the item as it is laid out
//! in memory (`item.rs`, with its CAS kept explicitly), padded to 8 bytes. A record of at most
//! a block never straddles a 4 KiB block, so one aligned 4 KiB read fetches it; a zero length
//! marks padding to the next block. A longer record (an item larger than a segment, up to
//! [`largest_item`]) lies within one write buffer, read whole once its first block is in. The version makes a record left from a page's earlier
//! life (the page freed and written again) fail its check, as a torn or stale write fails the
//! CRC, so flash never serves a value that was not the one last stored.
//!
//! **Pages** (`ext_page_size`) are filled one write buffer (`ext_wbuf_size`) at a time, whole
//! and in order; a full buffer is written by a background thread (`Store::flash_work`) while
//! the next fills. A page is freed when its last item is gone, or evicted whole (oldest first,
//! unread: its generation advances, so the entries still pointing there are stale until a
//! lookup or a sweep removes them) or compacted (its live items written again) when free pages
//! run short. Buffers waiting to
//! be written are read from memory. At most [`WRITE_BUFFERS`] buffers exist: when flash falls
//! behind, an item that would go there is evicted as it would be without flash.

//!
//! Files here: `geometry` (an index entry on flash), `buf` (aligned buffers), `record` (the
//! record format), `file` (opening a file), `io` (reads, batched, and the reads workers ask
//! for), `direct` (a worker's own ring for its reads), `save` (a warm restart); this one: the
//! pages and the write buffers.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::mechanics::error::StoreError;
use crate::mechanics::flash_config::{FlashConfig, FlashKnobs, FlashPageInfo};

mod buf;
mod direct;
mod file;
mod geometry;
mod io;
mod record;
pub(crate) mod save;

pub(crate) use buf::{AlignedBuf, BLOCK};
pub(crate) use direct::DirectRing;
use file::open_file;
use geometry::ALIGN;
pub(crate) use geometry::{is_flash, FlashGeometry, MAX_RAM_SEGMENTS};
pub(crate) use record::{records_in, ReadOutcome, Record, RECORD_HEADER};

/// Write buffers at most, those filling (one per bucket) included: a bound of
/// `WRITE_BUFFERS * ext_wbuf_size` bytes outside `-m`.
pub(crate) const WRITE_BUFFERS: usize = 5;

const PAGE_FREE: u32 = 0;
const PAGE_FILLING: u32 = 1;
const PAGE_FULL: u32 = 2;

/// One page's bookkeeping, in memory.
#[derive(Default)]
pub(crate) struct PageMeta {
    pub(crate) version: AtomicU64,
    state: AtomicU32,
    /// Records written into it whose index entry still points there (the low 48 bits), and
    /// its generation (the top 16): how many times it was evicted, which its entries carry.
    /// One word, so that forgetting an entry of an earlier generation can never count
    /// against the page's new records (`forget_one`, `evict`).
    live_and_generation: AtomicU64,
    /// Its generation when the index was last swept of stale entries: entries of older ones
    /// are gone, so the generation may advance until it would look like one of those.
    swept: AtomicU32,
    /// Records written into it since it was opened.
    pub(crate) objects: AtomicU64,
    /// Bytes of it written (records and padding).
    pub(crate) fill: AtomicU64,
    /// Its last buffer was written; it is full once no earlier one still waits (with several
    /// threads writing, buffers may finish out of order).
    closed: std::sync::atomic::AtomicBool,
    /// Its bucket, as memcached's `stats extstore` reports it (`Bucket::memcached_number`).
    bucket: AtomicU32,
    /// The latest deadline of its records (`u32::MAX`: one never expires): once passed, the
    /// page is emptied whole.
    max_expiry: AtomicU32,
}

const LIVE_MASK: u64 = (1 << 48) - 1;

impl PageMeta {
    /// Records whose index entry still points here.
    pub(crate) fn live(&self) -> u64 {
        self.live_and_generation.load(Relaxed) & LIVE_MASK
    }

    /// How many times the page was evicted.
    pub(crate) fn generation(&self) -> u32 {
        (self.live_and_generation.load(Relaxed) >> 48) as u32
    }

    pub(crate) fn swept(&self) -> u32 {
        self.swept.load(Relaxed)
    }

    /// Both at once, as a restore sets them (the index holds no stale entry then).
    pub(crate) fn set_live_and_generation(&self, live: u64, generation: u32) {
        self.live_and_generation
            .store((u64::from(generation) << 48) | live.min(LIVE_MASK), Relaxed);
        self.swept.store(generation, Relaxed);
    }

    /// One index entry of generation `generation` (as an entry keeps it) went away: the live
    /// count before, or `None` when the entry was of an earlier generation (stale: counted
    /// when its page was evicted).
    fn forget_one(&self, generation: u32, geometry: &FlashGeometry) -> Option<u64> {
        let word = self
            .live_and_generation
            .fetch_update(Relaxed, Relaxed, |word| {
                geometry
                    .same_generation((word >> 48) as u32, generation)
                    .then(|| word - u64::from(word & LIVE_MASK != 0))
            })
            .ok()?;
        Some(word & LIVE_MASK)
    }

    /// Evicts the page's records at once: its generation advances, so every entry still
    /// pointing here is stale; the live count before.
    fn evict(&self) -> u64 {
        let word = self
            .live_and_generation
            .fetch_update(Relaxed, Relaxed, |word| Some(((word >> 48) + 1) << 48))
            .expect("always updates");
        word & LIVE_MASK
    }
}

/// A full write buffer waiting for (or in) its write.
struct Sealed {
    data: Arc<AlignedBuf>,
    addr: u64,
    len: usize,
    page: u32,
    /// The page's last buffer: once written, the page is full.
    closes_page: bool,
    writing: bool,
}

/// The buffer items are being appended to.
struct Filling {
    buf: AlignedBuf,
    addr: u64,
    fill: usize,
    page: u32,
}

/// Where records go: memcached's page buckets that tern keeps (an item with less than
/// `ext_low_ttl` left goes with others like it, so their pages expire whole; compaction
/// writes what it keeps to pages of its own, away from new items; an item larger than a
/// segment, memcached's chunked item, goes with others like it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bucket {
    Default,
    Compact,
    LowTtl,
    Large,
}

impl Bucket {
    const ALL: [Bucket; 4] = [
        Bucket::Default,
        Bucket::Compact,
        Bucket::LowTtl,
        Bucket::Large,
    ];

    /// Its number in memcached's `stats extstore` (`PAGE_BUCKET_*`).
    fn memcached_number(self) -> u32 {
        match self {
            Bucket::Default => 0,
            Bucket::Compact => 1,
            Bucket::Large => 2,
            Bucket::LowTtl => 3,
        }
    }
}

/// One bucket's buffer being filled and the page it goes to.
#[derive(Default)]
struct Stream {
    filling: Option<Filling>,
    /// The page being filled and how many of its bytes buffers took.
    page: Option<(u32, u64)>,
}

struct Writer {
    streams: [Stream; Bucket::ALL.len()],
    spare: Vec<AlignedBuf>,
    sealed: VecDeque<Sealed>,
    free_pages: VecDeque<u32>,
    /// Full pages, oldest first.
    full_pages: VecDeque<u32>,
    next_version: u64,
}

/// Counters the flash tier keeps itself (the rest are the pages' sums).
#[derive(Default)]
pub(crate) struct FlashCounters {
    pub(crate) page_allocs: AtomicU64,
    pub(crate) page_evictions: AtomicU64,
    /// Index entries left pointing at evicted pages, not yet removed.
    pub(crate) stale_entries: AtomicU64,
    pub(crate) page_reclaims: AtomicU64,
    pub(crate) objects_evicted: AtomicU64,
    pub(crate) objects_read: AtomicU64,
    pub(crate) objects_written: AtomicU64,
    pub(crate) bytes_evicted: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) compact_lost: AtomicU64,
    pub(crate) compact_rescues: AtomicU64,
    pub(crate) compact_skipped: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) bad_crc: AtomicU64,
    pub(crate) recaches: AtomicU64,
    pub(crate) false_reads: AtomicU64,
    /// Commands deferred for a read (`Store::defer_flash_reads_on_this_thread`).
    pub(crate) deferred: AtomicU64,
    /// Reads since start, for `ext_recache_rate`.
    pub(crate) reads: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Relaxed);
}

/// Something to call when a read a worker asked for has landed (its event loop's waker).
pub type FlashWaker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// Records read for workers that deferred a command (`Store::defer_flash_reads_on_this_thread`), waiting to
/// be taken by the command's second run, and the reads asked for and not yet done.
#[derive(Default)]
struct Reads {
    /// Locations to read, each with who to wake, in the order asked.
    queue: VecDeque<(u64, Vec<FlashWaker>)>,
    /// Locations being read on a worker's own ring (`direct.rs`), with who asked.
    in_flight: std::collections::HashMap<u64, Vec<FlashWaker>>,
    /// What reading each location came to; at most [`LANDED_MAX`] of them and
    /// [`LANDED_BYTES`] besides the last batch, the oldest dropped first (`landed_order`,
    /// where a location taken since is skipped).
    landed: std::collections::HashMap<u64, std::io::Result<ReadOutcome>>,
    landed_order: VecDeque<u64>,
    /// Bytes the records in `landed` hold.
    landed_bytes: usize,
}

/// Records read and not yet taken, at most: a worker that asked and then lost its client
/// leaves its records here until newer ones push them out.
const LANDED_MAX: usize = 4096;
/// Bytes of records read and not yet taken beyond which older ones are dropped (4,096 records
/// of a block; a record of a large item may take a whole write buffer): a bound of this
/// plus one batch outside `-m`.
const LANDED_BYTES: usize = 16 << 20;

/// The largest item a record holds in a write buffer of `wbuf_size` bytes: a record never
/// spans two buffers.
pub(crate) fn largest_item(wbuf_size: usize) -> usize {
    wbuf_size.saturating_sub(RECORD_HEADER)
}

/// The flash tier: its files, pages, buffers and counters.
pub(crate) struct Flash {
    files: Vec<File>,
    /// Per file, its first page's number.
    first_page: Vec<u32>,
    pub(crate) page_size: u64,
    wbuf_size: usize,
    pub(crate) geometry: FlashGeometry,
    pub(crate) pages: Box<[PageMeta]>,
    writer: Mutex<Writer>,
    pub(crate) knobs: FlashKnobs,
    pub(crate) counters: FlashCounters,
    reads: Mutex<Reads>,
    /// Held while a page is evicted and while the index is swept for it, so that no page's
    /// generation advances during a sweep (`must_sweep_before_evicting`).
    pub(crate) evicting: Mutex<()>,
    /// Signalled when a read is queued.
    read_queued: parking_lot::Condvar,
    /// Reads in flight on the workers' rings, and how many may be (`FlashConfig::read_depth`).
    ring_reads: Arc<std::sync::atomic::AtomicUsize>,
    ring_read_limit: usize,
}

impl Flash {
    pub(crate) fn open(config: &FlashConfig) -> Result<Flash, StoreError> {
        let fail = |msg: String| StoreError::Flash(msg);
        if config.files.is_empty() {
            return Err(fail("ext_path: no file given".into()));
        }
        let page_size = config.page_size as u64;
        if page_size == 0 || page_size % BLOCK as u64 != 0 {
            return Err(fail(format!(
                "ext_page_size must be a positive multiple of {BLOCK} bytes"
            )));
        }
        let wbuf_size = config.wbuf_size;
        if wbuf_size == 0 || wbuf_size % BLOCK != 0 || wbuf_size as u64 > page_size {
            return Err(fail(format!(
                "ext_wbuf_size must be a positive multiple of {BLOCK} bytes, at most ext_page_size"
            )));
        }
        let mut files = Vec::new();
        let mut first_page = Vec::new();
        let mut pages = 0u64;
        for f in &config.files {
            let in_file = f.bytes / page_size;
            if in_file == 0 {
                return Err(fail(format!(
                    "ext_path {}: {} bytes hold no {page_size}-byte page",
                    f.path.display(),
                    f.bytes
                )));
            }
            let file = open_file(&f.path, in_file * page_size)?;
            first_page.push(pages as u32);
            pages += in_file;
            files.push(file);
        }
        let geometry = FlashGeometry::of(pages * page_size)?;
        let spare = (0..WRITE_BUFFERS)
            .map(|_| AlignedBuf::new(wbuf_size))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| fail(format!("ext_wbuf_size: cannot map write buffers: {e}")))?;
        Ok(Flash {
            files,
            first_page,
            page_size,
            wbuf_size,
            geometry,
            pages: (0..pages).map(|_| PageMeta::default()).collect(),
            writer: Mutex::new(Writer {
                streams: Default::default(),
                spare,
                sealed: VecDeque::new(),
                free_pages: (0..pages as u32).collect(),
                full_pages: VecDeque::new(),
                next_version: 1,
            }),
            knobs: FlashKnobs::new(&config.knobs),
            counters: FlashCounters::default(),
            reads: Mutex::new(Reads::default()),
            evicting: Mutex::new(()),
            read_queued: parking_lot::Condvar::new(),
            ring_reads: Arc::default(),
            ring_read_limit: config.read_depth.max(1),
        })
    }

    pub(crate) fn page_of(&self, addr: u64) -> u32 {
        (addr / self.page_size) as u32
    }

    pub(crate) fn page_count(&self) -> usize {
        self.pages.len()
    }

    fn file_at(&self, addr: u64) -> (&File, u64) {
        let page = self.page_of(addr);
        let i = self.first_page.partition_point(|&first| first <= page) - 1;
        let within = addr - self.first_page[i] as u64 * self.page_size;
        (&self.files[i], within)
    }

    /// Appends a record of an `len`-byte item that expires at `expiry` (0: never), which
    /// `write` fills in, to `bucket`'s filling buffer; its flash address, or `None` when flash
    /// has no room now (no buffer or page free).
    pub(crate) fn append(
        &self,
        bucket: Bucket,
        len: usize,
        expiry: u32,
        write: impl FnOnce(&mut [u8]),
    ) -> Option<u64> {
        if len > largest_item(self.wbuf_size) {
            return None;
        }
        let size = (RECORD_HEADER + len).next_multiple_of(ALIGN as usize);
        let s = bucket as usize;
        let mut w = self.writer.lock();
        let at = loop {
            if let Some(f) = &mut w.streams[s].filling {
                let mut at = f.fill;
                if size <= BLOCK && at % BLOCK + size > BLOCK {
                    at = at.next_multiple_of(BLOCK);
                }
                if at + size <= self.wbuf_size {
                    break at;
                }
                self.seal(&mut w, s);
            }
            if !self.start_buffer(&mut w, bucket) {
                return None;
            }
        };
        let f = w.streams[s].filling.as_mut().expect("a filling buffer");
        let fill_before = f.fill;
        let page = &self.pages[f.page as usize];
        let version = page.version.load(Relaxed) as u32;
        // The buffer was zeroed when taken: padding before and after the record reads as such.
        let record = &mut f.buf[at..at + size];
        write(&mut record[RECORD_HEADER..RECORD_HEADER + len]);
        record[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        record[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&record[4..RECORD_HEADER + len]);
        record[..4].copy_from_slice(&crc.to_le_bytes());
        f.fill = at + size;
        let addr = f.addr + at as u64;
        page.live_and_generation.fetch_add(1, Relaxed);
        page.objects.fetch_add(1, Relaxed);
        page.max_expiry
            .fetch_max(if expiry == 0 { u32::MAX } else { expiry }, Relaxed);
        bump(&self.counters.objects_written, 1);
        // Padding to a block counts: it is written to flash too.
        bump(
            &self.counters.bytes_written,
            (at + size - fill_before) as u64,
        );
        Some(addr)
    }

    /// Seals stream `s`'s filling buffer: it waits for a background write.
    fn seal(&self, w: &mut Writer, s: usize) {
        let Some(f) = w.streams[s].filling.take() else {
            return;
        };
        let (page, used) = w.streams[s].page.expect("a page is filling");
        let closes_page = used + self.wbuf_size as u64 > self.page_size;
        self.pages[f.page as usize]
            .fill
            .fetch_add(self.wbuf_size as u64, Relaxed);
        if closes_page {
            w.streams[s].page = None;
        }
        debug_assert_eq!(page, f.page);
        w.sealed.push_back(Sealed {
            data: Arc::new(f.buf),
            addr: f.addr,
            len: self.wbuf_size,
            page: f.page,
            closes_page,
            writing: false,
        });
    }

    /// Takes a spare buffer and the next stretch of a page for it; false when either is
    /// missing.
    fn start_buffer(&self, w: &mut Writer, bucket: Bucket) -> bool {
        let s = bucket as usize;
        if w.spare.is_empty() {
            return false;
        }
        let (page, used) = match w.streams[s].page {
            Some(p) => p,
            None => {
                let Some(page) = w.free_pages.pop_front() else {
                    return false;
                };
                let meta = &self.pages[page as usize];
                meta.version.store(w.next_version, Relaxed);
                w.next_version += 1;
                meta.state.store(PAGE_FILLING, Relaxed);
                meta.live_and_generation.fetch_and(!LIVE_MASK, Relaxed);
                meta.objects.store(0, Relaxed);
                meta.fill.store(0, Relaxed);
                meta.max_expiry.store(0, Relaxed);
                meta.bucket.store(bucket.memcached_number(), Relaxed);
                bump(&self.counters.page_allocs, 1);
                (page, 0)
            }
        };
        let mut buf = w.spare.pop().expect("checked");
        buf.fill(0);
        w.streams[s].page = Some((page, used + self.wbuf_size as u64));
        w.streams[s].filling = Some(Filling {
            buf,
            addr: page as u64 * self.page_size + used,
            fill: 0,
            page,
        });
        true
    }

    /// Writes the oldest sealed buffer no other thread is writing; false when there is none.
    pub(crate) fn write_one(&self) -> std::io::Result<bool> {
        let (data, addr, len) = {
            let mut w = self.writer.lock();
            let Some(s) = w.sealed.iter_mut().find(|s| !s.writing) else {
                return Ok(false);
            };
            s.writing = true;
            (s.data.clone(), s.addr, s.len)
        };
        let (file, at) = self.file_at(addr);
        let written = file.write_all_at(&data[..len], at);
        let mut w = self.writer.lock();
        let i = w
            .sealed
            .iter()
            .position(|s| s.addr == addr)
            .expect("a buffer being written stays sealed");
        if let Err(e) = written {
            w.sealed[i].writing = false;
            return Err(e);
        }
        let s = w.sealed.remove(i).expect("found");
        let meta = &self.pages[s.page as usize];
        if s.closes_page {
            meta.closed.store(true, Relaxed);
        }
        if meta.closed.load(Relaxed) && !w.sealed.iter().any(|other| other.page == s.page) {
            meta.closed.store(false, Relaxed);
            meta.state.store(PAGE_FULL, Relaxed);
            w.full_pages.push_back(s.page);
            self.free_if_empty(&mut w, s.page);
        }
        drop(data);
        let buf = Arc::try_unwrap(s.data)
            .unwrap_or_else(|_| unreachable!("readers copy under the lock and keep no clone"));
        w.spare.push(buf);
        Ok(true)
    }

    /// Seals the partly filled buffers so that they are written (a clean stop).
    pub(crate) fn seal_partial(&self) {
        let mut w = self.writer.lock();
        for s in 0..Bucket::ALL.len() {
            if w.streams[s].filling.as_ref().is_some_and(|f| f.fill > 0) {
                self.seal(&mut w, s);
            }
        }
    }

    /// Buffers sealed and not yet written.
    pub(crate) fn queued(&self) -> usize {
        self.writer.lock().sealed.len()
    }

    /// The location bits of an item at `addr` (in a page being filled) whose key hashed to
    /// `hash`: the page's generation goes with it.
    pub(crate) fn location(&self, addr: u64, hash: u64) -> u64 {
        let generation = self.pages[self.page_of(addr) as usize].generation();
        self.geometry.pack(addr, generation, hash)
    }

    /// Whether the entry at `location` names a record of a page evicted since it was written.
    pub(crate) fn is_stale(&self, location: u64) -> bool {
        let page = &self.pages[self.page_of(self.geometry.addr_of(location)) as usize];
        !self
            .geometry
            .same_generation(self.geometry.generation_of(location), page.generation())
    }

    /// The index entry at `location` went away; false when it was stale (its page evicted
    /// since: it was counted then, and now leaves `stale_entries`).
    pub(crate) fn forget(&self, location: u64) -> bool {
        let page = self.page_of(self.geometry.addr_of(location));
        let meta = &self.pages[page as usize];
        let Some(before) = meta.forget_one(self.geometry.generation_of(location), &self.geometry)
        else {
            self.forget_stale(1);
            return false;
        };
        if before == 1 && meta.state.load(Relaxed) == PAGE_FULL {
            let mut w = self.writer.lock();
            self.free_if_empty(&mut w, page);
        }
        true
    }

    /// Stale entries some index still holds.
    pub(crate) fn stale_entries(&self) -> u64 {
        // Held as two's complement: an entry may leave (a lookup, a sweep) between its page's
        // eviction and the eviction's count of it, taking the count below zero for a moment.
        (self.counters.stale_entries.load(Relaxed) as i64).max(0) as u64
    }

    /// `n` stale entries left the index.
    pub(crate) fn forget_stale(&self, n: u64) {
        self.counters.stale_entries.fetch_sub(n, Relaxed);
    }

    /// Evicts a page taken by `take_victim` without reading it: its generation advances, so
    /// the entries pointing there turn stale, left in the index for a lookup or a sweep to
    /// find (a get of one is memcached's `miss_from_extstore`); then frees it. The caller
    /// holds `evicting` and has swept when `must_sweep_before_evicting` said so.
    pub(crate) fn evict_page(&self, page: u32) {
        let meta = &self.pages[page as usize];
        let bytes = self.live_bytes(meta);
        let live = meta.evict();
        bump(&self.counters.stale_entries, live);
        bump(&self.counters.page_evictions, 1);
        bump(&self.counters.objects_evicted, live);
        bump(&self.counters.bytes_evicted, bytes);
        self.finish_page(page);
    }

    /// Whether evicting `page` once more would give its entries a generation that stale
    /// entries of an earlier one may still carry: the index must be swept first.
    pub(crate) fn must_sweep_before_evicting(&self, page: u32) -> bool {
        let meta = &self.pages[page as usize];
        let since_swept = (meta.generation().wrapping_sub(meta.swept()) & 0xffff) + 1;
        since_swept >= self.geometry.generations()
    }

    /// Every stale entry is gone from the index (a sweep ended with `evicting` held).
    pub(crate) fn mark_swept(&self) {
        for meta in self.pages.iter() {
            meta.swept.store(meta.generation(), Relaxed);
        }
    }

    fn free_if_empty(&self, w: &mut Writer, page: u32) {
        let meta = &self.pages[page as usize];
        if meta.live() == 0 && meta.state.load(Relaxed) == PAGE_FULL {
            self.release_page(w, page);
            bump(&self.counters.page_reclaims, 1);
        }
    }

    fn release_page(&self, w: &mut Writer, page: u32) {
        let meta = &self.pages[page as usize];
        meta.state.store(PAGE_FREE, Relaxed);
        meta.bucket.store(0, Relaxed);
        w.full_pages.retain(|&p| p != page);
        w.free_pages.push_back(page);
    }

    /// Free pages now.
    pub(crate) fn pages_free(&self) -> usize {
        self.writer.lock().free_pages.len()
    }

    /// A full page whose every record has expired by `now`, taken out of the full list as
    /// `take_victim` does.
    pub(crate) fn take_expired(&self, now: u32) -> Option<u32> {
        let mut w = self.writer.lock();
        let at = w.full_pages.iter().position(|&p| {
            let deadline = self.pages[p as usize].max_expiry.load(Relaxed);
            deadline != u32::MAX && deadline <= now
        })?;
        let page = w.full_pages.remove(at).expect("found");
        self.pages[page as usize].state.store(PAGE_FILLING, Relaxed);
        Some(page)
    }

    /// A full page to empty: with `by_fragmentation`, the emptiest one whose live share is
    /// under `max_frag`, else the oldest. Taken out of the full list (the caller empties it
    /// and hands it back with `finish_page`).
    pub(crate) fn take_victim(&self, by_fragmentation: Option<f64>) -> Option<u32> {
        let mut w = self.writer.lock();
        let pick = match by_fragmentation {
            None => w.full_pages.front().copied(),
            Some(max_frag) => w
                .full_pages
                .iter()
                .copied()
                .filter(|&p| self.live_share(p) < max_frag)
                .min_by(|&a, &b| self.live_share(a).total_cmp(&self.live_share(b))),
        }?;
        w.full_pages.retain(|&p| p != pick);
        // Not FULL while it is emptied, so `forget` leaves it to `finish_page`.
        self.pages[pick as usize].state.store(PAGE_FILLING, Relaxed);
        Some(pick)
    }

    fn live_share(&self, page: u32) -> f64 {
        let meta = &self.pages[page as usize];
        let objects = meta.objects.load(Relaxed).max(1);
        meta.live() as f64 / objects as f64
    }

    /// A page emptied by eviction or compaction goes back to the free list (a reclaim, as
    /// memcached counts every page it frees).
    pub(crate) fn finish_page(&self, page: u32) {
        let mut w = self.writer.lock();
        self.release_page(&mut w, page);
        bump(&self.counters.page_reclaims, 1);
    }

    /// The page's bytes from `from`, `buf.len()` of them, read into `buf` (page read-back).
    pub(crate) fn read_page(
        &self,
        page: u32,
        from: u64,
        buf: &mut AlignedBuf,
    ) -> std::io::Result<()> {
        let (file, at) = self.file_at(page as u64 * self.page_size + from);
        let len = buf.len();
        file.read_exact_at(&mut buf[..len], at)
    }

    pub(crate) fn wbuf_size(&self) -> usize {
        self.wbuf_size
    }

    pub(crate) fn page_info(&self) -> Vec<FlashPageInfo> {
        self.pages
            .iter()
            .map(|p| {
                let free = p.state.load(Relaxed) == PAGE_FREE;
                FlashPageInfo {
                    version: if free { 0 } else { p.version.load(Relaxed) },
                    bytes_used: if free { 0 } else { self.live_bytes(p) },
                    bucket: p.bucket.load(Relaxed),
                    free,
                }
            })
            .collect()
    }

    /// A page's live bytes, estimated from its live share of the records written into it (a
    /// record's size is on flash, not in memory).
    pub(crate) fn live_bytes(&self, p: &PageMeta) -> u64 {
        let objects = p.objects.load(Relaxed);
        if objects == 0 {
            return 0;
        }
        p.fill.load(Relaxed) * p.live().min(objects) / objects
    }

    #[cfg(test)]
    fn is_full(&self, page: u32) -> bool {
        self.pages[page as usize].state.load(Relaxed) == PAGE_FULL
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanics::flash_config::{FlashFile, DEFAULT_READ_DEPTH};

    fn flash(dir: &std::path::Path, pages: u64) -> Flash {
        flash_at_depth(dir, pages, DEFAULT_READ_DEPTH)
    }

    /// `flash` whose workers' rings keep at most `read_depth` reads in flight.
    fn flash_at_depth(dir: &std::path::Path, pages: u64, read_depth: usize) -> Flash {
        Flash::open(&FlashConfig {
            files: vec![FlashFile {
                path: dir.join("flash"),
                bytes: pages << 20,
            }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            read_depth,
            ..FlashConfig::default()
        })
        .unwrap()
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tern-flash-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn item(n: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (n * 31 + i) as u8).collect()
    }

    /// Appends `item(n, sizes[n])` for each n; their addresses.
    fn append_items(f: &Flash, sizes: &[usize]) -> Vec<u64> {
        sizes
            .iter()
            .enumerate()
            .map(|(n, &len)| {
                f.append(Bucket::Default, len, 0, |out| {
                    out.copy_from_slice(&item(n, len))
                })
                .unwrap()
            })
            .collect()
    }

    /// Appends `item(n, sizes[n])` for each n and writes them to the file: their locations.
    fn on_file(f: &Flash, sizes: &[usize]) -> Vec<u64> {
        let addrs = append_items(f, sizes);
        f.seal_partial();
        while f.write_one().unwrap() {}
        addrs.iter().map(|&a| f.location(a, 0)).collect()
    }

    /// Each of `locations` landed with its record: `item(n, sizes[n])` for the nth.
    fn assert_landed_items(f: &Flash, locations: &[u64], sizes: &[usize]) {
        for (n, &l) in locations.iter().enumerate() {
            match f.take_landed(l).unwrap().unwrap() {
                ReadOutcome::Record(r) => assert_eq!(r.item(), item(n, sizes[n]), "record {n}"),
                _ => panic!("record {n} failed its check"),
            }
        }
    }

    #[test]
    fn records_read_back_from_buffers_and_from_the_file_alike() {
        let dir = temp_dir("roundtrip");
        let f = flash(&dir, 4);
        let sizes = [10, 4000, 4084, 5000, 70_000, 100];
        let addrs = append_items(&f, &sizes);
        let check = |f: &Flash| {
            for (n, (&addr, &len)) in addrs.iter().zip(&sizes).enumerate() {
                match f.read(addr).unwrap() {
                    ReadOutcome::Record(r) => assert_eq!(r.item(), item(n, len), "record {n}"),
                    ReadOutcome::Bad | ReadOutcome::Stale => panic!("record {n} failed its check"),
                }
            }
        };
        let check = |f: &Flash| {
            check(f);
            // A batch through io_uring (or preads) reads the same, in order.
            for (n, read) in f.read_batch(&addrs).into_iter().enumerate() {
                match read.unwrap() {
                    ReadOutcome::Record(r) => assert_eq!(r.item(), item(n, sizes[n]), "record {n}"),
                    _ => panic!("record {n} failed its check in a batch"),
                }
            }
        };
        check(&f);
        // Sealed, waiting for their write: read from the buffers still.
        f.seal_partial();
        check(&f);
        // Written, with a new buffer filling: read from the file.
        while f.write_one().unwrap() {}
        f.append(Bucket::Default, 300, 0, |out| out.fill(3))
            .unwrap();
        check(&f);
        // Small records never straddle a block.
        for (&addr, &len) in addrs.iter().zip(&sizes) {
            if RECORD_HEADER + len <= BLOCK {
                assert!(addr % BLOCK as u64 + (RECORD_HEADER + len) as u64 <= BLOCK as u64);
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A worker's own ring reads what the I/O threads would: records on the file land once
    /// its eventfd turns readable, one in a buffer not yet written lands at once (signalled
    /// all the same), a record longer than a block goes to the I/O threads' queue, and a
    /// location another worker asks for meanwhile wakes it when it lands.
    #[test]
    fn a_workers_own_ring_lands_its_reads_and_wakes_the_others_that_asked() {
        use std::sync::atomic::AtomicUsize;
        let dir = temp_dir("direct");
        let f = flash(&dir, 4);
        let sizes = [100, 3000, 20_000, 500];
        let addrs = append_items(&f, &sizes);
        f.seal_partial();
        while f.write_one().unwrap() {}
        // On the file now but the last, which a new buffer holds.
        let last = f
            .append(Bucket::Default, 700, 0, |out| {
                out.copy_from_slice(&item(9, 700))
            })
            .unwrap();
        let locations: Vec<u64> = addrs.iter().map(|&a| f.location(a, 0)).collect();
        let buffered = f.location(last, 0);
        let own_wakes = Arc::new(AtomicUsize::new(0));
        let counted = own_wakes.clone();
        let own: FlashWaker = Arc::new(move || {
            counted.fetch_add(1, Relaxed);
        });
        let other_wakes = Arc::new(AtomicUsize::new(0));
        let counted = other_wakes.clone();
        let other: FlashWaker = Arc::new(move || {
            counted.fetch_add(1, Relaxed);
        });
        let Some(mut ring) = f.direct_ring(own.clone()) else {
            // No io_uring here: workers use the I/O threads, tested elsewhere.
            return;
        };
        let readable = |ring: &DirectRing| {
            let mut fd = libc::pollfd {
                fd: ring.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the call's length.
            unsafe { libc::poll(&mut fd, 1, 10_000) == 1 }
        };
        f.submit(&mut ring, &[buffered]);
        assert!(readable(&ring), "a read from a buffer signals at once");
        assert!(f.is_landed(buffered));
        f.submit(&mut ring, &locations);
        // Another worker asks for the same while they are in flight: nothing queued twice.
        f.ask(&locations[..2], &other);
        assert!(!f.ready(&locations[..2]) || f.is_landed(locations[0]));
        let short: Vec<u64> = [0, 1, 3].iter().map(|&i| locations[i]).collect();
        for _ in 0..1000 {
            if short.iter().all(|&l| f.is_landed(l)) {
                break;
            }
            assert!(readable(&ring), "every read completes");
            f.reap(&mut ring);
        }
        for (i, &l) in short.iter().enumerate() {
            let n = [0, 1, 3][i];
            match f.take_landed(l).unwrap().unwrap() {
                ReadOutcome::Record(r) => assert_eq!(r.item(), item(n, sizes[n]), "record {n}"),
                _ => panic!("record {n} failed its check"),
            }
        }
        assert!(other_wakes.load(Relaxed) >= 1, "the other asker is woken");
        assert_eq!(
            own_wakes.load(Relaxed),
            0,
            "the ring's worker wakes by its eventfd"
        );
        // The record longer than a block waits for an I/O thread, which reads it whole.
        assert!(!f.ready(&locations[2..3]));
        f.serve_reads(std::time::Duration::ZERO);
        match f.take_landed(locations[2]).unwrap().unwrap() {
            ReadOutcome::Record(r) => assert_eq!(r.item(), item(2, sizes[2])),
            _ => panic!("the long record failed its check"),
        }
        assert!(
            own_wakes.load(Relaxed) >= 1,
            "the I/O thread wakes the ring's worker"
        );
        drop(ring);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The workers' rings keep at most `read_depth` reads in flight together; the rest wait in
    /// each ring's backlog and start as reads complete. A ring with none in flight starts one
    /// whatever the others hold, so its completion wakes it for the rest of its backlog.
    #[test]
    fn workers_rings_keep_at_most_the_read_depth_in_flight_and_read_everything() {
        let dir = temp_dir("depth");
        let f = flash_at_depth(&dir, 4, 2);
        let sizes = [3000; 14];
        let locations = on_file(&f, &sizes);
        let waker = || -> FlashWaker { Arc::new(|| {}) };
        let (Some(mut first), Some(mut second)) = (f.direct_ring(waker()), f.direct_ring(waker()))
        else {
            // No io_uring here: workers use the I/O threads, tested elsewhere.
            return;
        };
        f.submit(&mut first, &locations[..10]);
        assert_eq!((first.own_in_flight(), first.backlog.len()), (2, 8));
        f.submit(&mut second, &locations[10..]);
        assert_eq!((second.own_in_flight(), second.backlog.len()), (1, 3));
        let mut fds = [&first, &second].map(|ring| libc::pollfd {
            fd: ring.fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for _ in 0..1000 {
            if locations.iter().all(|&l| f.is_landed(l)) {
                break;
            }
            // SAFETY: two valid pollfds for the call's length.
            assert!(
                unsafe { libc::poll(fds.as_mut_ptr(), 2, 10_000) } > 0,
                "reads complete"
            );
            f.reap(&mut first);
            f.reap(&mut second);
            let in_flight = f.ring_reads.load(Relaxed);
            assert!(in_flight <= 3, "{in_flight} in flight");
            assert_eq!(in_flight, first.own_in_flight() + second.own_in_flight());
        }
        assert_landed_items(&f, &locations, &sizes);
        assert_eq!(f.ring_reads.load(Relaxed), 0);
        drop((first, second));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A worker that stops reads what its ring has in flight and in its backlog and lands it:
    /// another worker that asked for one of those locations is woken.
    #[test]
    fn a_stopping_workers_ring_lands_all_it_was_asked_for() {
        use std::sync::atomic::AtomicUsize;
        let dir = temp_dir("retire");
        let f = flash_at_depth(&dir, 4, 2);
        let sizes = [3000; 10];
        let locations = on_file(&f, &sizes);
        let Some(mut ring) = f.direct_ring(Arc::new(|| {})) else {
            // No io_uring here: workers use the I/O threads, tested elsewhere.
            return;
        };
        f.submit(&mut ring, &locations);
        let woken = Arc::new(AtomicUsize::new(0));
        let counted = woken.clone();
        let other: FlashWaker = Arc::new(move || {
            counted.fetch_add(1, Relaxed);
        });
        // Another worker asks for the last, which waits in the backlog.
        f.ask(&locations[9..], &other);
        assert!(!f.is_landed(locations[9]));
        f.retire(ring);
        assert!(woken.load(Relaxed) >= 1, "the other asker is woken");
        assert_landed_items(&f, &locations, &sizes);
        assert_eq!(f.ring_reads.load(Relaxed), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_page_written_again_fails_the_old_records_check() {
        let dir = temp_dir("reuse");
        let f = flash(&dir, 1);
        let old = f
            .append(Bucket::Default, 100, 0, |out| out.fill(7))
            .unwrap();
        // Fill the page's four buffers, then write them: the page is full.
        let mut filled = Vec::new();
        while let Some(addr) = f.append(Bucket::Default, 200_000, 0, |out| out.fill(1)) {
            filled.push(addr);
        }
        let beyond_first_buffer = *filled.iter().find(|&&a| a >= 256 << 10).unwrap();
        while f.write_one().unwrap() {}
        let page = f.page_of(old);
        assert!(f.is_full(page));
        assert_eq!(f.take_victim(None), Some(page));
        f.finish_page(page);
        let new = f
            .append(Bucket::Default, 100, 0, |out| out.fill(9))
            .unwrap();
        assert_eq!(new, old, "the page is used again from its start");
        f.seal_partial();
        while f.write_one().unwrap() {}
        match f.read(old).unwrap() {
            ReadOutcome::Record(r) => assert_eq!(r.item(), &[9; 100][..]),
            ReadOutcome::Bad | ReadOutcome::Stale => panic!("the new record must read"),
        }
        // Damage: the CRC catches a flipped byte.
        let (file, at) = f.file_at(old);
        let mut byte = [0u8; 1];
        let path = dir.join("flash");
        let plain = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        plain.read_exact_at(&mut byte, at + 20).unwrap();
        plain.write_all_at(&[byte[0] ^ 1], at + 20).unwrap();
        drop((file, plain));
        assert!(matches!(f.read(old).unwrap(), ReadOutcome::Bad));
        // A record of the page's earlier life, still on the file, reads as stale.
        assert!(matches!(
            f.read(beyond_first_buffer).unwrap(),
            ReadOutcome::Stale
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_evicted_pages_entries_turn_stale_until_its_generation_would_repeat() {
        let dir = temp_dir("generations");
        let f = flash(&dir, 1);
        let generations = f.geometry.generations();
        // Entries of the page's evicted lives, as a sweep would find them.
        let mut stale = Vec::new();
        for _ in 0..2 * generations + 1 {
            let addr = f
                .append(Bucket::Default, 100, 0, |out| out.fill(1))
                .unwrap();
            let entry = f.location(addr, 0);
            while f.append(Bucket::Default, 200_000, 0, |_| ()).is_some() {}
            while f.write_one().unwrap() {}
            let page = f.page_of(addr);
            assert!(!f.is_stale(entry));
            assert_eq!(f.take_victim(None), Some(page));
            // Once the page's stale entries span every generation an entry tells apart, one
            // more eviction would make the oldest look current: the index is swept first.
            let must_sweep = f.must_sweep_before_evicting(page);
            assert_eq!(must_sweep, stale.len() as u32 == generations - 1);
            if must_sweep {
                for old in stale.drain(..) {
                    assert!(f.is_stale(old));
                    assert!(!f.forget(old));
                }
                f.mark_swept();
                assert!(!f.must_sweep_before_evicting(page));
            }
            let live = f.pages[page as usize].live();
            let stale_before = f.stale_entries();
            f.evict_page(page);
            assert!(f.is_stale(entry));
            stale.push(entry);
            assert_eq!(f.stale_entries(), stale_before + live);
            assert_eq!(f.pages[page as usize].live(), 0);
        }
        // Forgetting a stale entry leaves the page's new records counted.
        let addr = f
            .append(Bucket::Default, 100, 0, |out| out.fill(2))
            .unwrap();
        let stale_before = f.stale_entries();
        assert!(!f.forget(f.geometry.pack(addr, f.pages[0].generation() - 1, 0)));
        assert_eq!(f.stale_entries(), stale_before - 1);
        assert_eq!(f.pages[0].live(), 1);
        assert!(f.forget(f.location(addr, 0)));
        assert_eq!(f.pages[0].live(), 0);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_second_opener_of_a_file_is_refused() {
        let dir = temp_dir("lock");
        let _first = flash(&dir, 1);
        let second = Flash::open(&FlashConfig {
            files: vec![FlashFile {
                path: dir.join("flash"),
                bytes: 1 << 20,
            }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            ..FlashConfig::default()
        });
        assert!(matches!(second, Err(StoreError::Flash(m)) if m.contains("in use")));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn chunks_read_back_list_their_records() {
        let dir = temp_dir("records");
        let f = flash(&dir, 1);
        let a = f.append(Bucket::Default, 50, 0, |out| out.fill(1)).unwrap();
        let b = f
            .append(Bucket::Default, 4080, 0, |out| out.fill(2))
            .unwrap();
        f.seal_partial();
        while f.write_one().unwrap() {}
        let page = f.page_of(a);
        let mut buf = AlignedBuf::new(f.wbuf_size()).unwrap();
        f.read_page(page, 0, &mut buf).unwrap();
        let version = f.pages[page as usize].version.load(Relaxed) as u32;
        let found: Vec<(usize, usize)> = records_in(&buf, version)
            .map(|(at, item)| (at, item.len()))
            .collect();
        assert_eq!(found, vec![(a as usize, 50), (b as usize, 4080)]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
