//! Process-level chores memcached does at start: daemonize (`-d`), drop root (`-u`), pidfile
//! (`-P`), lock memory (`-k`).

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The daemon's end of `-d`'s readiness pipe; [`Readiness::serving`] lets the parent exit.
pub struct Readiness(std::fs::File);

impl Readiness {
    /// The daemon serves (and has told systemd so): the parent exits 0.
    pub fn serving(mut self) {
        let _ = self.0.write_all(b"1");
    }
}

/// Forks into the background: the child starts a new session, moves to `/` and points
/// stdin/stdout (and stderr unless verbose) at /dev/null; the parent exits once the child says
/// it serves ([`Readiness::serving`]): 0, or 1 if the child died before. So whoever started
/// `tern serve -d` (a shell, systemd's `ExecReload=` of a hand-over) sees the daemon serving
/// when the command returns. Must run before any thread is started.
pub fn daemonize(keep_stderr: bool) -> anyhow::Result<Readiness> {
    let mut pipe = [0; 2];
    // SAFETY: pipe2 fills the two-element array on success.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        bail!("-d: pipe failed: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    // SAFETY: called before any thread is spawned, so the child is a full copy of a
    // single-threaded process; the parent only reads the pipe and calls _exit.
    match unsafe { libc::fork() } {
        -1 => bail!("-d: fork failed: {}", std::io::Error::last_os_error()),
        0 => drop(read),
        _ => {
            // The child's end closes when it exits: EOF without the byte means it died.
            drop(write);
            let mut byte = [0u8];
            let served = std::fs::File::from(read).read_exact(&mut byte).is_ok();
            // SAFETY: _exit ends the process without running the child's destructors twice.
            unsafe { libc::_exit(if served { 0 } else { 1 }) }
        }
    }
    // SAFETY: plain system calls on our own process and on fds we own.
    unsafe {
        if libc::setsid() == -1 {
            bail!("-d: setsid failed: {}", std::io::Error::last_os_error());
        }
        let root = CString::new("/").unwrap();
        libc::chdir(root.as_ptr());
        let null = CString::new("/dev/null").unwrap();
        let fd = libc::open(null.as_ptr(), libc::O_RDWR);
        if fd >= 0 {
            libc::dup2(fd, 0);
            libc::dup2(fd, 1);
            if !keep_stderr {
                libc::dup2(fd, 2);
            }
            if fd > 2 {
                libc::close(fd);
            }
        }
    }
    Ok(Readiness(write.into()))
}

/// `-u`: as memcached does, only when running as root; otherwise the option is ignored.
pub fn drop_privileges(user: &str) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tracing::debug!("-u {user} ignored: not running as root");
        return Ok(());
    }
    let name = CString::new(user).context("-u: bad user name")?;
    // SAFETY: getpwnam returns null or a pointer to a static record, read at once.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            bail!("-u {user}: no such user");
        }
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    // SAFETY: plain system calls changing our own credentials, group list first.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            bail!(
                "-u {user}: cannot switch user: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// `-k`: lock every page, now and later, as memcached does. As root, the locked-memory limit is
/// lifted first, so the pages mapped after dropping to the `-u` user can be locked too.
pub fn lock_memory() -> anyhow::Result<()> {
    // SAFETY: geteuid, setrlimit and mlockall take plain values; the rlimit struct is ours.
    unsafe {
        if libc::geteuid() == 0 {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited);
        }
        if libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) != 0 {
            bail!(
                "-k: cannot lock memory: {} (raise the limit, e.g. `ulimit -l unlimited`, or \
                 run without -k)",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

/// Large buffers (values and replies past 64 KiB) get pages of their own from glibc, given back
/// to the OS when freed: glibc's default raises its mmap threshold to the largest block freed,
/// after which such buffers come from the heap and stay resident when freed. Measured
/// 2026-11-26 (docs/reliability.md, `scripts/churn-rss.py`): 1,000 connections uploading
/// 100 B-500 KB values at `-m 64` peaked at -m + 37-46 MiB by default, -m + 22-33 MiB with it.
/// Called before the workers start (mallopt is not thread-safe against allocation).
pub fn return_large_buffers_at_once() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes plain values and runs before any other thread allocates.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
}

/// The pidfile, removed when dropped (at a clean exit).
pub struct PidFile(PathBuf);

impl PidFile {
    pub fn create(path: &Path) -> anyhow::Result<PidFile> {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("-P: cannot write {}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
