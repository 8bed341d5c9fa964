//! Opening a flash file: created, sized, O_DIRECT where the file system allows it, locked.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use crate::mechanics::error::StoreError;

/// Opens (creating and sizing) a flash file, O_DIRECT where the file system allows it, and
/// locks it so that a second server cannot use it.
pub(crate) fn open_file(path: &std::path::Path, bytes: u64) -> Result<File, StoreError> {
    let fail = |what: &str, e: std::io::Error| {
        StoreError::Flash(format!("ext_path {}: {what}: {e}", path.display()))
    };
    let open = |direct: bool| {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        if direct {
            options.custom_flags(libc::O_DIRECT);
        }
        options.open(path)
    };
    // tmpfs and some others refuse O_DIRECT: the page cache serves reads there.
    let file = match open(true) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(false),
        other => other,
    }
    .map_err(|e| fail("cannot open", e))?;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(fail(
            "in use by another process",
            std::io::Error::last_os_error(),
        ));
    }
    file.set_len(bytes).map_err(|e| fail("cannot size", e))?;
    Ok(file)
}
