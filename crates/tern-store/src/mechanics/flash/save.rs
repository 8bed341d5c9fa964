//! The flash tier across a warm restart: every buffer written at a clean stop, its
//! bookkeeping saved and taken back, its files freed for the next process.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;

use super::{Bucket, Flash, PAGE_FREE, PAGE_FULL};
use crate::mechanics::flash_config::FlashConfig;

/// The flash tier's bookkeeping as a warm restart saves it (`store/persist.rs` encodes it):
/// the files it describes, each page's state, and the order of the free and full lists. Saved
/// once every buffer is written (`Flash::write_all`), so the records it describes are on the
/// files.
#[derive(Debug, PartialEq)]
pub(crate) struct SavedFlash {
    pub(crate) files: Vec<(std::path::PathBuf, u64)>,
    pub(crate) page_size: u64,
    pub(crate) next_version: u64,
    /// Per page: version, state, live, objects, fill, bucket, latest deadline.
    pub(crate) pages: Vec<(u64, u32, u64, u64, u64, u32, u32)>,
    pub(crate) free_pages: Vec<u32>,
    pub(crate) full_pages: Vec<u32>,
}

impl Flash {
    /// Seals the filling buffer and writes every sealed one, then syncs the files: a clean
    /// stop's last writes, so that flash holds every record its index entries name.
    pub(crate) fn write_all(&self) -> std::io::Result<()> {
        self.seal_partial();
        while self.write_one()? {}
        // The pages left filling are full now: new records go to new pages after a restart.
        {
            let mut w = self.writer.lock();
            for s in 0..Bucket::ALL.len() {
                if let Some((page, _)) = w.streams[s].page.take() {
                    self.pages[page as usize].state.store(PAGE_FULL, Relaxed);
                    w.full_pages.push_back(page);
                    self.free_if_empty(&mut w, page);
                }
            }
        }
        for file in &self.files {
            file.sync_data()?;
        }
        Ok(())
    }

    /// The bookkeeping to save, after `write_all`; `paths` name the files as configured.
    pub(crate) fn save(&self, config: &FlashConfig) -> SavedFlash {
        let w = self.writer.lock();
        SavedFlash {
            files: config
                .files
                .iter()
                .map(|f| (f.path.clone(), f.bytes))
                .collect(),
            page_size: self.page_size,
            next_version: w.next_version,
            pages: self
                .pages
                .iter()
                .map(|p| {
                    (
                        p.version.load(Relaxed),
                        p.state.load(Relaxed),
                        p.live(),
                        p.objects.load(Relaxed),
                        p.fill.load(Relaxed),
                        p.bucket.load(Relaxed),
                        p.max_expiry.load(Relaxed),
                    )
                })
                .collect(),
            free_pages: w.free_pages.iter().copied().collect(),
            full_pages: w.full_pages.iter().copied().collect(),
        }
    }

    /// Takes back the saved bookkeeping of these same files; the reason when it is not theirs
    /// or does not hold together (the flash tier then starts empty).
    pub(crate) fn restore(&self, config: &FlashConfig, saved: &SavedFlash) -> Result<(), String> {
        let files: Vec<(std::path::PathBuf, u64)> = config
            .files
            .iter()
            .map(|f| (f.path.clone(), f.bytes))
            .collect();
        if saved.files != files || saved.page_size != self.page_size {
            return Err("the flash files or their page size changed since the stop".into());
        }
        let pages = self.pages.len();
        if saved.pages.len() != pages
            || saved.free_pages.len() + saved.full_pages.len() != pages
            || saved
                .free_pages
                .iter()
                .chain(&saved.full_pages)
                .any(|&p| p as usize >= pages)
        {
            return Err("the saved flash pages do not match the files".into());
        }
        let mut seen = vec![false; pages];
        for &p in saved.free_pages.iter().chain(&saved.full_pages) {
            if std::mem::replace(&mut seen[p as usize], true) {
                return Err("a flash page is listed twice".into());
            }
        }
        let full = |p: usize| saved.full_pages.contains(&(p as u32));
        for (p, &(version, state, live, objects, fill, _, _)) in saved.pages.iter().enumerate() {
            if fill > self.page_size
                || live > objects
                || version >= saved.next_version
                || (state == PAGE_FULL) != full(p)
                || (state != PAGE_FULL && state != PAGE_FREE)
            {
                return Err("a saved flash page's bookkeeping is inconsistent".into());
            }
        }
        for (meta, &(version, state, live, objects, fill, bucket, max_expiry)) in
            self.pages.iter().zip(&saved.pages)
        {
            meta.max_expiry.store(max_expiry, Relaxed);
            meta.version.store(version, Relaxed);
            meta.state.store(state, Relaxed);
            // Saved entries were written back as of generation 0 (`Store::snapshot_meta`).
            meta.set_live_and_generation(live, 0);
            meta.objects.store(objects, Relaxed);
            meta.fill.store(fill, Relaxed);
            meta.bucket.store(bucket, Relaxed);
        }
        let mut w = self.writer.lock();
        w.next_version = saved.next_version;
        w.free_pages = saved.free_pages.iter().copied().collect();
        w.full_pages = saved.full_pages.iter().copied().collect();
        Ok(())
    }

    /// Whether an index entry restored from a save may point at `location`: a record in a
    /// full page, where `write_all` left every record before the save.
    pub(crate) fn holds(&self, location: u64) -> bool {
        let addr = self.geometry.addr_of(location);
        let page = (addr / self.page_size) as usize;
        page < self.pages.len()
            && self.pages[page].state.load(Relaxed) == PAGE_FULL
            && addr % self.page_size < self.pages[page].fill.load(Relaxed)
    }

    /// Lets another process open the files (a hand-over's successor), after the last save.
    pub(crate) fn unlock_files(&self) {
        for file in &self.files {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        }
    }
}
