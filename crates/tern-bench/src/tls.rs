//! `--tls-ca FILE`: the generator's connections over TLS, trusting that CA. The handshake runs
//! blocking at connect time; afterwards the session is driven by the worker's event loop like a
//! plain socket: one `recv` takes up to 64 KiB of records (a short one means the socket is
//! drained), a write encrypts a batch into records of up to 16 KiB and sends them with one
//! system call, and encrypted bytes left unsent ask for a writable edge.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// A client configuration trusting the PEM certificates in `ca`.
pub fn client_config(ca: &Path) -> anyhow::Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in
        CertificateDer::pem_file_iter(ca).with_context(|| format!("--tls-ca {}", ca.display()))?
    {
        roots.add(cert.with_context(|| format!("--tls-ca {}", ca.display()))?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(Arc::new(
        ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// Bytes of ciphertext one `recv` may bring in: several full records (16 KiB of plaintext
/// each at most), so a pipeline's replies take one system call instead of rustls's 4 KiB reads.
const CIPHERTEXT_READ: usize = 64 * 1024;

/// A TLS session over a non-blocking socket, its handshake done.
pub struct TlsClient {
    pub tcp: TcpStream,
    session: ClientConnection,
    /// Received from the socket, not yet handed to rustls: bytes `fed..received`.
    ciphertext: Box<[u8]>,
    fed: usize,
    received: usize,
    /// The last `recv` came back short: the socket is empty until its next readable edge.
    drained: bool,
}

impl TlsClient {
    /// Connects to `addr` (whose certificate must name its IP address), handshakes, and turns
    /// the socket non-blocking.
    pub fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> anyhow::Result<TlsClient> {
        let mut tcp =
            std::net::TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(addr.ip().into());
        let mut session = ClientConnection::new(config, name)?;
        while session.is_handshaking() {
            session
                .complete_io(&mut tcp)
                .with_context(|| format!("TLS handshake with {addr}"))?;
        }
        tcp.set_nonblocking(true)?;
        Ok(TlsClient {
            tcp: TcpStream::from_std(tcp),
            session,
            ciphertext: vec![0; CIPHERTEXT_READ].into_boxed_slice(),
            fed: 0,
            received: 0,
            drained: false,
        })
    }

    /// Encrypted bytes wait for the socket.
    pub fn pending_output(&self) -> bool {
        self.session.wants_write()
    }

    fn push(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Hands rustls the next part of the received ciphertext (it takes up to 4 KiB a call) and
    /// decrypts the records it completes.
    fn feed(&mut self) -> io::Result<()> {
        let mut unfed = &self.ciphertext[self.fed..self.received];
        let taken = self.session.read_tls(&mut unfed)?;
        if taken == 0 {
            // rustls takes some of any non-empty input; were it not to, `read` would spin.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "rustls took no input",
            ));
        }
        self.fed += taken;
        if self.fed == self.received {
            self.fed = 0;
            self.received = 0;
        }
        self.session
            .process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        // A key update or an alert may want an answer.
        self.push()
    }
}

impl Read for TlsClient {
    /// Plaintext into `buf`; short only once the socket is drained (a `recv` came back short),
    /// so the caller waits for the next edge as with a plain socket, without the `recv` that
    /// would only say `WouldBlock`.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        loop {
            if filled == buf.len() {
                return Ok(filled);
            }
            match self.session.reader().read(&mut buf[filled..]) {
                // The server's close_notify.
                Ok(0) => return Ok(filled),
                Ok(n) => {
                    filled += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket closed without close_notify: an end like any other.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(filled),
                Err(e) => return Err(e),
            }
            if self.fed < self.received {
                self.feed()?;
                continue;
            }
            if self.drained {
                self.drained = false;
                return if filled > 0 {
                    Ok(filled)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            match self.tcp.read(&mut self.ciphertext) {
                Ok(0) => {
                    // The end of the stream: rustls's reader says whether it was clean.
                    self.session.read_tls(&mut io::empty())?;
                    self.session
                        .process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                Ok(n) => {
                    self.received = n;
                    self.drained = n < self.ciphertext.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if filled > 0 { Ok(filled) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for TlsClient {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push()?;
        if self.session.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.session.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.push()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
}
