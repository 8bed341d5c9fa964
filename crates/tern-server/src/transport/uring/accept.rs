//! The io_uring engine's side of accepting: multishot accepts completing, `-c` and its waiting
//! clients, a new connection's slot and `stats conns` entry.

use std::os::fd::IntoRawFd;

use super::*;

impl Engine {
    pub(super) fn accepted(&mut self, listener: usize, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accepting[listener] = false;
        }
        let fd = match RawFd::try_from(res) {
            Ok(fd) if fd >= 0 => fd,
            _ => {
                if res != -libc::ECANCELED {
                    // EMFILE and friends end the multishot accept; the client stays in the
                    // backlog, and `retry_accepts` looks again (at once when a connection
                    // closes).
                    let e = io::Error::from_raw_os_error(-res);
                    self.accept_retry.failed(&self.shared, self.id, &e);
                }
                return;
            }
        };
        let Some(listener) = self.listeners.get(listener) else {
            // Stopping (draining): no new client.
            // SAFETY: the accept handed this descriptor to us alone.
            drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
            return;
        };
        // SAFETY: the accept handed this descriptor to us alone; the stream owns it now.
        let stream = unsafe {
            match listener {
                Listener::Unix(_) => Stream::Unix(mio::net::UnixStream::from_raw_fd(fd)),
                Listener::Tcp(_) | Listener::Tls(..) => {
                    let tcp = mio::net::TcpStream::from_raw_fd(fd);
                    let _ = tcp.set_nodelay(true);
                    Stream::Tcp(tcp)
                }
            }
        };
        if self.draining_since.is_some() {
            return;
        }
        if self.accept_paused {
            self.waiting.push_back(stream);
            return;
        }
        if let Err(mut stream) = self.admit(stream) {
            if self.shared.settings.maxconns_fast {
                self.shared.workers[self.id].metrics.conn_rejected();
                // Best effort, like memcached: the reply fits any socket buffer.
                let _ = stream.write(ascii::TOO_MANY_CONNECTIONS);
            } else {
                // memcached stops accepting at -c: this client waits, unread, and so do those
                // in the backlog.
                self.waiting.push_back(stream);
                self.pause_accepting();
            }
        }
    }

    /// After accepts failed (out of descriptors): takes in what the backlogs hold with plain
    /// non-blocking accepts, as the epoll worker does, and arms each listener's multishot accept
    /// once its backlog is empty. (An accept armed while no descriptor is free fails at once,
    /// client or not, so arming alone would only fail again.)
    pub(super) fn retry_accepts(&mut self) {
        self.accept_retry.at = None;
        for i in 0..self.listeners.len() {
            while !self.accepting[i] && !self.accept_paused && self.accept_retry.at.is_none() {
                match rustix::net::accept_with(
                    &self.listeners[i],
                    rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC,
                ) {
                    Ok(fd) => self.accepted(i, fd.into_raw_fd(), 0),
                    Err(rustix::io::Errno::AGAIN) => self.arm_accept(i),
                    Err(rustix::io::Errno::INTR | rustix::io::Errno::CONNABORTED) => {}
                    Err(e) => {
                        let e = io::Error::from(e);
                        self.accept_retry.failed(&self.shared, self.id, &e);
                    }
                }
            }
        }
        if self.accept_retry.at.is_none() {
            self.accept_retry.succeeded(&self.shared);
        }
    }

    pub(super) fn pause_accepting(&mut self) {
        self.shared.listen_pauses.pause();
        self.accept_paused = true;
        for i in 0..self.listeners.len() {
            if self.accepting[i] {
                let cancel = opcode::AsyncCancel::new(ACCEPT | i as u64).build();
                self.push_plain(cancel.user_data(CLOSE | NO_SLOT));
            }
        }
    }

    /// Takes a waiting client in for each slot that has freed up, then accepts again once none
    /// waits.
    pub(super) fn admit_waiting(&mut self) {
        while let Some(stream) = self.waiting.pop_front() {
            if let Err(stream) = self.admit(stream) {
                self.waiting.push_front(stream);
                return;
            }
        }
        self.accept_paused = false;
        self.shared.listen_pauses.resume();
        for i in 0..self.listeners.len() {
            self.arm_accept(i);
        }
    }

    /// Takes a new client unless -c connections are open (then it is handed back).
    pub(super) fn admit(&mut self, stream: Stream) -> Result<(), Stream> {
        if !self.shared.reserve_connection(self.id) {
            return Err(stream);
        }
        let idx = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::default());
            self.slots.len() - 1
        });
        let entry = stream.conn_entry(self.shared.store.clock().now());
        let activity = self.shared.list_client(self.id, entry, || stream.peer());
        let fd = activity.0;
        if idx < self.activity.len() {
            self.activity[idx] = activity;
        } else {
            self.activity.push(activity);
        }
        let fixed = idx < self.fixed_files
            && self
                .ring
                .submitter()
                .register_files_update(idx as u32, &[fd])
                .is_ok();
        let slot = &mut self.slots[idx];
        slot.free = false;
        slot.fixed = fixed;
        slot.conn = Some(Conn::new(Stream::Ring(Box::new(RingIo::new(stream)))));
        self.arm_receive(idx);
        tracing::debug!(worker = self.id, conn = idx, "new connection");
        Ok(())
    }
}
