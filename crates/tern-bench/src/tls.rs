//! `--tls-ca FILE`: the generator's connections over TLS, trusting that CA. The handshake runs
//! blocking at connect time; afterwards the session is driven by the worker's event loop like a
//! plain socket: a short read means the socket is drained, a write encrypts what the session
//! buffers and sends it, and encrypted bytes left unsent ask for a writable edge.

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

/// A TLS session over a non-blocking socket, its handshake done.
pub struct TlsClient {
    pub tcp: TcpStream,
    session: ClientConnection,
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
}

impl Read for TlsClient {
    /// Plaintext into `buf`; short only once the socket is drained.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        loop {
            if filled == buf.len() {
                return Ok(filled);
            }
            match self.session.reader().read(&mut buf[filled..]) {
                Ok(0) => return Ok(filled),
                Ok(n) => {
                    filled += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(filled),
                Err(e) => return Err(e),
            }
            match self.session.read_tls(&mut self.tcp) {
                Ok(_) => {
                    self.session
                        .process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    self.push()?;
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
