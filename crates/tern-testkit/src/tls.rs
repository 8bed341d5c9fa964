//! TLS for tests: certificates made on the spot (a CA, a server certificate for localhost and
//! 127.0.0.1, a client certificate the CA signed and one another CA signed), a blocking TLS
//! client, and the relay behind `TERN_TEST_TLS=1` that puts every end-to-end test's plain
//! connection through TLS to tern.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// PEM files in a directory of their own (removed on drop, unless shared).
pub struct Certs {
    pub dir: PathBuf,
    /// Made for this value alone, so removed with it.
    owned: bool,
}

impl Certs {
    /// A CA, `server.pem`/`server.key` (localhost, 127.0.0.1), `client.pem`/`client.key` signed
    /// by the CA, and `rogue.pem`/`rogue.key`, a client certificate from another CA.
    pub fn generate() -> Certs {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tern-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        write_certs(&dir);
        Certs { dir, owned: true }
    }

    /// The certificates in `dir`, made there by the first process that asks and kept for every
    /// later one: for a process-wide set (a static is never dropped, so a directory of its own
    /// would be left in the temp directory at every run). A new set is written aside and renamed
    /// into place, so a process never reads half of one.
    pub fn shared(dir: &Path) -> Certs {
        if !dir.join("rogue.key").exists() {
            let aside = dir.with_extension(format!("new-{}", std::process::id()));
            write_certs(&aside);
            // Another process may have put its set there first: then that one is used.
            if std::fs::rename(&aside, dir).is_err() {
                let _ = std::fs::remove_dir_all(&aside);
            }
        }
        Certs {
            dir: dir.to_path_buf(),
            owned: false,
        }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// tern's `-Z -o ...` arguments serving `server.pem`, with `extra` `-o` options appended.
    pub fn server_args(&self, extra: &str) -> Vec<String> {
        let mut o = format!(
            "ssl_chain_cert={},ssl_key={},ssl_ca_cert={}",
            self.path("server.pem"),
            self.path("server.key"),
            self.path("ca.pem")
        );
        if !extra.is_empty() {
            o = format!("{o},{extra}");
        }
        vec!["-Z".into(), "-o".into(), o]
    }

    /// A client trusting the test CA, presenting `identity` (`client`, `rogue`) if given.
    pub fn client_config(&self, identity: Option<&str>) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.dir.join("ca.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots);
        let config = match identity {
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(self.dir.join(format!("{name}.pem")))
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key =
                    PrivateKeyDer::from_pem_file(self.dir.join(format!("{name}.key"))).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        Arc::new(config)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A CA and the three certificates of [`Certs::generate`] into `dir`.
fn write_certs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let ca = new_ca("tern test CA");
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let server = ["localhost".to_string(), "127.0.0.1".to_string()];
    leaf(
        dir,
        "server",
        &ca,
        &server,
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    leaf(dir, "client", &ca, &[], ExtendedKeyUsagePurpose::ClientAuth);
    let rogue_ca = new_ca("another CA");
    leaf(
        dir,
        "rogue",
        &rogue_ca,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
}

fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    dir: &Path,
    name: &str,
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: &[String],
    usage: ExtendedKeyUsagePurpose,
) {
    let mut params = CertificateParams::new(names.to_vec()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

/// A blocking TLS connection to 127.0.0.1:`port` (server name `localhost`).
pub type TlsConn = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes the handshake; the error is what the server's alert (or its
/// hanging up) made of it. With TLS 1.3 a refused client certificate surfaces only at the first
/// read, so callers that test refusal read.
pub fn connect(port: u16, config: Arc<ClientConfig>) -> io::Result<TlsConn> {
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(crate::PATIENCE))?;
    tcp.set_write_timeout(Some(crate::PATIENCE))?;
    let name = ServerName::try_from("localhost").unwrap();
    let session = ClientConnection::new(config, name).map_err(io::Error::other)?;
    let mut conn = StreamOwned::new(session, tcp);
    while conn.conn.is_handshaking() {
        conn.conn.complete_io(&mut conn.sock)?;
    }
    Ok(conn)
}

/// Relays plain connections on 127.0.0.1:`public` to TLS connections to tern on
/// 127.0.0.1:`inner`, for the life of the test process (each test's ports are its own).
pub fn relay(public: u16, inner: u16, config: Arc<ClientConfig>) {
    let listener = TcpListener::bind(("127.0.0.1", public)).expect("bind the TLS relay's port");
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let _ = relay_one(client, inner, config);
            });
        }
    });
}

/// One relayed connection: a thread each way around one TLS session.
fn relay_one(client: TcpStream, inner: u16, config: Arc<ClientConfig>) -> io::Result<()> {
    let tls = match connect(inner, config) {
        Ok(tls) => tls,
        Err(e) => {
            // tern is gone (or refused the session): the client sees its connection closed, as
            // it would without the relay; the test's output says why.
            eprintln!("TLS relay: no session with tern on port {inner}: {e}");
            return Ok(());
        }
    };
    let (session, mut server) = (tls.conn, tls.sock);
    server.set_read_timeout(None)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let session = Arc::new(Mutex::new(session));
    let upstream = {
        let (session, mut client, mut server) =
            (session.clone(), client.try_clone()?, server.try_clone()?);
        std::thread::spawn(move || -> io::Result<()> {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = client.read(&mut buf)?;
                let mut s = lock(&session);
                if n == 0 {
                    s.send_close_notify();
                } else {
                    s.writer().write_all(&buf[..n])?;
                }
                while s.wants_write() {
                    s.write_tls(&mut server)?;
                }
                if n == 0 {
                    return server.shutdown(Shutdown::Write);
                }
            }
        })
    };
    let (mut client_w, mut server_r) = (client, server.try_clone()?);
    let mut buf = vec![0u8; 64 * 1024];
    let mut plain = vec![0u8; 64 * 1024];
    loop {
        let n = server_r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let mut out = Vec::new();
        {
            let mut s = lock(&session);
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                s.read_tls(&mut rest)?;
                s.process_new_packets().map_err(io::Error::other)?;
                loop {
                    match s.reader().read(&mut plain) {
                        Ok(0) => break,
                        Ok(m) => out.extend_from_slice(&plain[..m]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            while s.wants_write() {
                s.write_tls(&mut server)?;
            }
        }
        client_w.write_all(&out)?;
    }
    let _ = client_w.shutdown(Shutdown::Both);
    let _ = upstream.join();
    Ok(())
}

fn lock(s: &Mutex<ClientConnection>) -> std::sync::MutexGuard<'_, ClientConnection> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
