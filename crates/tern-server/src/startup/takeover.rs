//! Live hand-over (`--takeover-socket`, `--takeover`; docs/restart.md): a new tern takes the
//! running one's listening sockets over a unix socket, so an upgrade refuses no connection.
//!
//! The conversation on the control socket, old (the running server, [`offer`]) and new
//! ([`take_over`]):
//! 1. new connects; old sends [`HELLO`] with its listening sockets attached (SCM_RIGHTS);
//! 2. new sends `go`: old stops accepting (the sockets stay open in new, so clients queue in
//!    their backlogs), answers what it has read, closes its connections, saves (-e), removes
//!    the control socket and its pidfile, and sends `done` ([`Offered::finish`]), then exits 0;
//! 3. new matches the sockets to its own -l/-p/-U/-s/--admin-port by their type and local
//!    address, maps the memory file (restoring what old saved) and serves from the same sockets.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::transport::net::{self, Listener};
use crate::transport::udp;

/// What old says first, followed by the number of sockets it attached and a newline.
const HELLO: &str = "tern-takeover 1 ";
const GO: &[u8] = b"go\n";
const DONE: &[u8] = b"done\n";
/// Linux's SCM_MAX_FD: the most descriptors one message carries.
const MAX_FDS: usize = 253;
/// How long old waits for a connected successor to say `go` before serving on regardless.
const GO_PATIENCE: Duration = Duration::from_secs(10);

/// The running server's offer of its sockets, until it exits.
pub struct Offered {
    path: PathBuf,
    successor: Arc<Mutex<Option<UnixStream>>>,
}

/// Listens on `path` for a successor; hands it `sockets` (duplicates of every listening socket)
/// and calls `stop` when it says `go`.
pub fn offer(
    path: &Path,
    sockets: Vec<OwnedFd>,
    stop: impl FnOnce() + Send + 'static,
) -> anyhow::Result<Offered> {
    if sockets.len() > MAX_FDS {
        bail!(
            "--takeover-socket: {} listening sockets are more than one hand-over carries \
             ({MAX_FDS}); use fewer threads or addresses",
            sockets.len()
        );
    }
    remove_stale_socket(path);
    let listener = UnixListener::bind(path)
        .with_context(|| format!("--takeover-socket: cannot listen on {}", path.display()))?;
    // Whoever connects can stop this server: only its own user may.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).with_context(|| {
        format!(
            "--takeover-socket: cannot set mode 600 on {}",
            path.display()
        )
    })?;
    let successor = Arc::new(Mutex::new(None));
    let chosen = successor.clone();
    std::thread::Builder::new()
        .name("tern-takeover".into())
        .spawn(move || {
            let handed = hand_over(&listener, &sockets);
            // Old's duplicates go now: the successor holds the sockets.
            drop(sockets);
            *chosen.lock().unwrap_or_else(PoisonError::into_inner) = Some(handed);
            stop();
        })?;
    Ok(Offered {
        path: path.to_path_buf(),
        successor,
    })
}

/// Serves successors until one takes the sockets and says `go`; returns its connection.
fn hand_over(listener: &UnixListener, sockets: &[OwnedFd]) -> UnixStream {
    loop {
        let attempt = || -> io::Result<UnixStream> {
            let (mut stream, _) = listener.accept()?;
            let hello = format!("{HELLO}{}\n", sockets.len());
            let fds: Vec<BorrowedFd<'_>> = sockets.iter().map(AsFd::as_fd).collect();
            send_with_fds(&stream, hello.as_bytes(), &fds)?;
            stream.set_read_timeout(Some(GO_PATIENCE))?;
            let mut go = [0; GO.len()];
            stream.read_exact(&mut go)?;
            if go != GO {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "not `go`"));
            }
            Ok(stream)
        };
        match attempt() {
            Ok(stream) => {
                tracing::info!("--takeover-socket: a successor took the listening sockets");
                return stream;
            }
            Err(e) => tracing::warn!("--takeover-socket: a hand-over did not happen: {e}"),
        }
    }
}

impl Offered {
    /// Whether a successor has taken the sockets (the stop was its `go`).
    pub fn handed_over(&self) -> bool {
        self.lock().is_some()
    }

    /// At exit, once the state is saved and the pidfile gone: removes the control socket (the
    /// successor binds its own there) and tells the successor it may go on.
    pub fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(mut stream) = self.lock().take() {
            if let Err(e) = stream.write_all(DONE) {
                tracing::warn!("--takeover-socket: cannot tell the successor: {e}");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<UnixStream>> {
        self.successor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sockets a successor received, until each is claimed by an address it listens on.
pub struct Inherited {
    tcp: Vec<(SocketAddr, OwnedFd)>,
    udp: Vec<(SocketAddr, OwnedFd)>,
    unix: Vec<(PathBuf, OwnedFd)>,
}

/// `--takeover`: takes the listening sockets of the server on `path` and waits until it has
/// stopped and saved. `None` when no server listens there (a first start).
pub fn take_over(path: &Path) -> anyhow::Result<Option<Inherited>> {
    let mut stream = match UnixStream::connect(path) {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            tracing::info!(
                "--takeover: no server on {} ({e}); starting as usual",
                path.display()
            );
            return Ok(None);
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("--takeover: cannot connect to {}", path.display()))
        }
    };
    let mut hello = [0; 64];
    let (len, fds) = recv_with_fds(&stream, &mut hello)
        .with_context(|| format!("--takeover: receiving sockets from {}", path.display()))?;
    let expected = std::str::from_utf8(&hello[..len])
        .ok()
        .and_then(|text| text.strip_prefix(HELLO))
        .and_then(|count| count.trim_end().parse::<usize>().ok());
    if expected != Some(fds.len()) {
        bail!(
            "--takeover: {} answered {:?} with {} sockets: not a tern of this version",
            path.display(),
            String::from_utf8_lossy(&hello[..len]),
            fds.len()
        );
    }
    let mut inherited = Inherited {
        tcp: Vec::new(),
        udp: Vec::new(),
        unix: Vec::new(),
    };
    for fd in fds {
        let socket = socket2::SockRef::from(&fd);
        let local = socket.local_addr()?;
        match local.as_socket() {
            Some(addr) if socket.r#type()? == socket2::Type::DGRAM => {
                inherited.udp.push((addr, fd))
            }
            Some(addr) => inherited.tcp.push((addr, fd)),
            None => {
                let unix = UnixListener::from(fd);
                match unix.local_addr()?.as_pathname() {
                    Some(path) => inherited.unix.push((path.to_path_buf(), unix.into())),
                    None => tracing::warn!("--takeover: an unnamed unix socket is dropped"),
                }
            }
        }
    }
    stream.write_all(GO)?;
    let mut done = [0; DONE.len()];
    match stream.read_exact(&mut done) {
        Ok(()) if done == DONE => tracing::info!(
            "--takeover: took {} sockets from {}; it has stopped",
            inherited.tcp.len() + inherited.udp.len() + inherited.unix.len(),
            path.display()
        ),
        // It kept the sockets open until it died, and a memory file without its clean mark
        // starts empty: serving is still right.
        _ => tracing::warn!(
            "--takeover: the old server did not confirm its stop and save; serving anyway"
        ),
    }
    Ok(Some(inherited))
}

impl Inherited {
    /// The inherited listening sockets on `addr` (at least `workers` of them: more are bound
    /// into the same SO_REUSEPORT group when old had fewer workers). Empty when old did not
    /// listen there.
    pub fn tcp(
        &mut self,
        addr: SocketAddr,
        workers: usize,
        backlog: i32,
    ) -> anyhow::Result<Vec<Listener>> {
        let (mine, others) = std::mem::take(&mut self.tcp)
            .into_iter()
            .partition::<Vec<_>, _>(|(local, _)| *local == addr);
        self.tcp = others;
        let mut listeners: Vec<Listener> = mine
            .into_iter()
            .map(|(_, fd)| {
                let listener = std::net::TcpListener::from(fd);
                Listener::Tcp(mio::net::TcpListener::from_std(listener))
            })
            .collect();
        if !listeners.is_empty() && listeners.len() < workers {
            listeners.extend(net::join_tcp(addr, workers - listeners.len(), backlog)?);
        }
        Ok(listeners)
    }

    /// The inherited UDP sockets on `addr` (at least `workers` of them, as [`Inherited::tcp`]).
    /// Empty when old did not serve UDP there.
    pub fn udp(
        &mut self,
        addr: SocketAddr,
        workers: usize,
    ) -> anyhow::Result<Vec<mio::net::UdpSocket>> {
        let (mine, others) = std::mem::take(&mut self.udp)
            .into_iter()
            .partition::<Vec<_>, _>(|(local, _)| *local == addr);
        self.udp = others;
        let mut sockets: Vec<mio::net::UdpSocket> = mine
            .into_iter()
            .map(|(_, fd)| mio::net::UdpSocket::from_std(std::net::UdpSocket::from(fd)))
            .collect();
        if !sockets.is_empty() && sockets.len() < workers {
            sockets.extend(udp::bind(addr, workers - sockets.len())?);
        }
        Ok(sockets)
    }

    /// The inherited unix listening socket at `path`, if old listened there.
    pub fn unix(&mut self, path: &Path) -> Option<Listener> {
        let at = self.unix.iter().position(|(p, _)| p == path)?;
        let (_, fd) = self.unix.remove(at);
        Some(Listener::Unix(mio::net::UnixListener::from_std(
            UnixListener::from(fd),
        )))
    }

    /// The inherited admin endpoint's socket on `addr`, if old had one there.
    pub fn admin(&mut self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        let at = self.tcp.iter().position(|(local, _)| *local == addr)?;
        Some(self.tcp.remove(at).1.into())
    }

    /// Closes what no address of the new settings claimed: clients queued there are reset.
    pub fn close_unclaimed(self) {
        for (addr, _) in &self.tcp {
            tracing::warn!("--takeover: no longer listening on {addr}");
        }
        for (addr, _) in &self.udp {
            tracing::warn!("--takeover: no longer listening on UDP {addr}");
        }
        for (path, _) in &self.unix {
            tracing::warn!("--takeover: no longer listening on {}", path.display());
        }
    }
}

fn remove_stale_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Sends `bytes` with `fds` attached as SCM_RIGHTS (the receiver gets its own descriptors for
/// the same open sockets).
fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let payload = std::mem::size_of_val(raw.as_slice()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    // u64s, so the control buffer has the alignment a cmsghdr needs.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer is CMSG_SPACE(payload) bytes, aligned, and owned here, so
        // the first header and its `raw.len()` descriptors fit in it; sendmsg only reads `msg`,
        // whose pointers (iov over `bytes`, control) outlive the call.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr(),
                libc::CMSG_DATA(header).cast::<RawFd>(),
                raw.len(),
            );
        }
    }
    // SAFETY: see above; the socket is ours and open.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    match sent {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize != bytes.len() => Err(io::ErrorKind::WriteZero.into()),
        _ => Ok(()),
    }
}

/// Receives one message into `buf` and the descriptors attached to it (close-on-exec).
fn recv_with_fds(stream: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fd_bytes = (MAX_FDS * std::mem::size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all-zero is its empty value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `buf` and `control`, both ours and alive for the call; recvmsg
    // writes at most their lengths.
    let received = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with well-formed headers up to msg_controllen, and
    // CMSG_FIRSTHDR/CMSG_NXTHDR stay within it; each SCM_RIGHTS descriptor it carries is new
    // in this process and owned by nothing else, so OwnedFd may take it (unaligned reads, as
    // CMSG_DATA promises no alignment).
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("more sockets than one message carries"));
    }
    Ok((received as usize, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors sent over a socket pair arrive as new descriptors for the same sockets: a
    /// connection made to the original listener is accepted on the received one.
    #[test]
    fn listening_sockets_pass_over_a_unix_socket() {
        let (old, new) = UnixStream::pair().unwrap();
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let second = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addrs = [first.local_addr().unwrap(), second.local_addr().unwrap()];
        send_with_fds(&old, b"two", &[first.as_fd(), second.as_fd()]).unwrap();
        drop((first, second));

        let mut buf = [0; 16];
        let (len, fds) = recv_with_fds(&new, &mut buf).unwrap();
        assert_eq!(&buf[..len], b"two");
        assert_eq!(fds.len(), 2);
        for (fd, addr) in fds.into_iter().zip(addrs) {
            let listener = std::net::TcpListener::from(fd);
            assert_eq!(listener.local_addr().unwrap(), addr);
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            let (mut served, _) = listener.accept().unwrap();
            client.write_all(b"ping").unwrap();
            let mut got = [0; 4];
            served.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"ping");
        }
    }

    /// A message with no descriptors attached arrives with none.
    #[test]
    fn a_message_without_sockets_carries_none() {
        let (old, new) = UnixStream::pair().unwrap();
        send_with_fds(&old, b"none", &[]).unwrap();
        let mut buf = [0; 16];
        let (len, fds) = recv_with_fds(&new, &mut buf).unwrap();
        assert_eq!((&buf[..len], fds.len()), (&b"none"[..], 0));
    }
}
