//! `-e`: the memory file's life around the store (the store maps it and encodes what a restore
//! needs; this decides when, and where the metadata lives).
//!
//! At start: read `FILE.meta` (what the last clean stop saved; memcached keeps its restart
//! metadata at the same path; one empty or too short to hold its header stops the start, as
//! memcached's does), open the store over FILE (restoring when the metadata fits),
//! then remove `FILE.meta` before any worker runs: that is the clean mark cleared, so a crash or
//! `kill -9` from here on leaves no metadata describing a file that has changed since, and the
//! next start begins empty. One log line says what happened.
//!
//! At a graceful stop (SIGTERM, SIGINT, SIGUSR1, `shutdown`), once the workers have stopped:
//! write the heap's pages back to FILE, then `FILE.meta` to a temporary file renamed into
//! place, so the metadata is there whole or not at all.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tern_admin::RestoreStats;
use tern_store::{Clock, Config, Opened, Store};

/// Where the metadata of memory file `file` goes: beside it, as memcached puts it.
pub fn meta_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".meta");
    PathBuf::from(name)
}

/// The store over memory file `file`, restored from the last clean stop's metadata when it
/// fits; with what was restored, for `stats`.
pub fn open(
    config: Config,
    clock: Arc<Clock>,
    file: &Path,
) -> anyhow::Result<(Store, RestoreStats)> {
    warn_if_slow(file);
    let meta = meta_path(file);
    let saved = match std::fs::read(&meta) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(
                "-e: cannot read {}: {e}; the cache starts empty",
                meta.display()
            );
            None
        }
    };
    if let Some(bytes) = &saved {
        refuse_headerless(&meta, bytes)?;
    }
    let started = Instant::now();
    let (store, opened) = Store::open_file(config, clock, file, saved.as_deref())
        .with_context(|| format!("-e {}", file.display()))?;
    let micros = started.elapsed().as_micros() as u64;
    if saved.is_some() {
        std::fs::remove_file(&meta).with_context(|| {
            format!(
                "-e: cannot remove {} (the clean mark) before serving",
                meta.display()
            )
        })?;
    }
    let stats = match opened {
        Opened::Restored(restored) => {
            let down = store.clock().now().saturating_sub(restored.stopped_at);
            tracing::info!(
                "-e {}: restored {} items in {} ms ({} expired while stopped for {down} s)",
                file.display(),
                restored.items,
                micros / 1000,
                restored.expired,
            );
            RestoreStats {
                items: restored.items,
                micros,
            }
        }
        Opened::Empty(why) => {
            tracing::warn!("-e {}: the cache starts empty: {why}", file.display());
            RestoreStats { items: 0, micros }
        }
    };
    Ok((store, stats))
}

/// memcached 1.6.45 refuses to start (it aborts) when its metadata file holds no tag line:
/// empty, "[restart] Failed to read a tag from metadata file"; cut inside its first line,
/// "[restart] corrupt metadata file" (`restart_check` in restart.c; `t/restart.t`, "Died with
/// an empty metadata file"). tern's tag is its header: a file shorter than that is refused the
/// same way, before the memory file is touched, and both files stay as they are. A file with a
/// header but damaged past it starts empty with a reason, as memcached starts a clean cache
/// when its metadata does not validate.
fn refuse_headerless(meta: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let why = match bytes.len() {
        0 => "Failed to read a tag from metadata file: it is empty".to_string(),
        n if n < tern_store::META_HEADER_LEN => format!(
            "corrupt metadata file: {n} bytes, shorter than its {}-byte header",
            tern_store::META_HEADER_LEN
        ),
        _ => return Ok(()),
    };
    anyhow::bail!(
        "-e: [restart] {why} ({}); memcached refuses to start on it too: remove it to start \
         with a clean cache",
        meta.display()
    )
}

/// Saves what the next start needs to restore `store` beside its memory file `file`. Called
/// once no worker runs any more.
pub fn save(store: &Store, file: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    store
        .sync_file()
        .with_context(|| format!("-e: writing the heap back to {}", file.display()))?;
    let bytes = store.snapshot_meta();
    let meta = meta_path(file);
    let mut tmp = meta.clone().into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let write = || -> std::io::Result<()> {
        let mut out = std::fs::File::create(&tmp)?;
        out.write_all(&bytes)?;
        out.sync_all()?;
        std::fs::rename(&tmp, &meta)
    };
    write().with_context(|| format!("-e: writing {}", meta.display()))?;
    tracing::info!(
        "-e {}: saved for a restart ({} KiB of metadata in {} ms)",
        file.display(),
        bytes.len() >> 10,
        started.elapsed().as_millis()
    );
    Ok(())
}

/// A memory file belongs on memory: tmpfs or hugetlbfs (or a DAX file system, which cannot be
/// told from an ordinary one here). On a disk-backed file system every dirty page is written
/// back to the disk, and the heap's speed is the disk's.
fn warn_if_slow(file: &Path) {
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let (rc, fs) = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        (libc::statfs(c_dir.as_ptr(), &mut fs), fs)
    };
    let memory = [libc::TMPFS_MAGIC, libc::HUGETLBFS_MAGIC];
    if rc == 0 && !memory.contains(&fs.f_type) {
        tracing::warn!(
            "-e {}: not on tmpfs or hugetlbfs; unless it is a DAX file system, every write to \
             the cache goes to disk and will be slow (use /dev/shm or a tmpfs under /run)",
            file.display()
        );
    }
}
