//! TLS (`-Z`): the server's rustls configurations, built from the `-o ssl_*` options and swapped
//! by `refresh_certs` (the operations layer's admin command), the handshake timeout and the
//! counters every TLS connection adds to. Server-wide state: the transport starts each TLS
//! connection's session from it, `stats` shows it.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{ListenTls, TlsOptions, TlsVersion};

/// Sessions the server-side cache holds with `ssl_session_cache` (OpenSSL's default size).
const SESSION_CACHE_ENTRIES: usize = 20 * 1024;

/// Counters every TLS connection adds to; shown in `stats`.
#[derive(Default)]
pub struct TlsCounters {
    pub handshake_errors: AtomicU64,
    /// Full handshakes that created a session (resumptions are not counted), as memcached's
    /// `ssl_new_sessions` counts sessions entering its cache.
    pub new_sessions: AtomicU64,
}

/// The configurations the listeners hand new connections, as loaded at start or by the last
/// successful `refresh_certs`.
struct Loaded {
    tls: Arc<ServerConfig>,
    mutual: Arc<ServerConfig>,
    at: Instant,
}

/// The server's TLS state: options, current configurations, counters.
pub struct Tls {
    pub options: TlsOptions,
    loaded: RwLock<Loaded>,
    pub counters: Arc<TlsCounters>,
}

impl Tls {
    /// Reads the certificate, key and CA files; the error is the line memcached prints.
    pub fn load(options: &TlsOptions) -> Result<Tls, String> {
        Ok(Tls {
            loaded: RwLock::new(build(options)?),
            options: options.clone(),
            counters: Arc::default(),
        })
    }

    /// `refresh_certs`: reads the files again; connections already open keep their session.
    pub fn refresh(&self) -> Result<(), String> {
        let fresh = build(&self.options)?;
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// `time_since_server_cert_refresh`, in seconds.
    pub fn since_refresh(&self) -> u64 {
        let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
        loaded.at.elapsed().as_secs()
    }

    /// The configuration a new connection on a `mode` listener starts its session with (the
    /// one loaded at start or by the last `refresh_certs`).
    pub fn config(&self, mode: ListenTls) -> Arc<ServerConfig> {
        let loaded = self.loaded.read().unwrap_or_else(|e| e.into_inner());
        match mode {
            ListenTls::Mutual => loaded.mutual.clone(),
            _ => loaded.tls.clone(),
        }
    }

    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.options.handshake_timeout_secs)
    }
}

fn build(o: &TlsOptions) -> Result<Loaded, String> {
    let provider = Arc::new(provider(o)?);
    let chain_path = o.chain_cert.as_deref().unwrap_or(Path::new(""));
    let chain = read_certs(chain_path).map_err(|e| {
        format!(
            "Error loading the certificate chain: {} : {e}",
            chain_path.display()
        )
    })?;
    let key_path = o.key.as_deref().unwrap_or(chain_path);
    let key = read_key(key_path, o.keyformat).map_err(|e| {
        format!(
            "Error loading the private key: {} : {e}",
            key_path.display()
        )
    })?;
    let roots = match &o.ca_cert {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            let certs = read_certs(path).map_err(|e| {
                format!("Error loading the CA certificate: {} : {e}", path.display())
            })?;
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    format!("Error loading the CA certificate: {} : {e}", path.display())
                })?;
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let verifier = |required: bool| -> Result<Arc<dyn ClientCertVerifier>, String> {
        let Some(roots) = &roots else {
            return Ok(Arc::new(NoTrustedRoots {
                required,
                schemes: provider
                    .signature_verification_algorithms
                    .supported_schemes(),
            }));
        };
        let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        let builder = if required {
            builder
        } else {
            builder.allow_unauthenticated()
        };
        builder
            .build()
            .map_err(|e| format!("Error loading the CA certificate: {e}"))
    };
    let versions: &[&rustls::SupportedProtocolVersion] = match o.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let config = |verifier: Arc<dyn ClientCertVerifier>| -> Result<Arc<ServerConfig>, String> {
        let mut config = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| format!("Error setting up TLS: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| {
                format!(
                    "Error loading the private key: {} : {e}",
                    key_path.display()
                )
            })?;
        if o.session_cache {
            config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        } else {
            // memcached's default: no server-side session cache, so no resumption tickets.
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Arc::new(config))
    };
    let tls = match o.verify_mode {
        0 => config(WebPkiClientVerifier::no_client_auth())?,
        1 => config(verifier(false)?)?,
        _ => config(verifier(true)?)?,
    };
    let mutual = config(verifier(true)?)?;
    Ok(Loaded {
        tls,
        mutual,
        at: Instant::now(),
    })
}

/// Client certificates asked for with no `ssl_ca_cert` to check them against: memcached 1.6.45
/// starts so (an `mtls:` listener or `ssl_verify_mode` > 0 without a CA: `t/ssl_ports.t`), and
/// OpenSSL then trusts no certificate. So here: a client that must show one is refused, as is
/// any certificate shown; with `ssl_verify_mode=1` a client showing none is let in.
#[derive(Debug)]
struct NoTrustedRoots {
    required: bool,
    schemes: Vec<rustls::SignatureScheme>,
}

impl ClientCertVerifier for NoTrustedRoots {
    fn client_auth_mandatory(&self) -> bool {
        self.required
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.verify_tls12_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.schemes.clone()
    }
}

/// ring's algorithms, with `ssl_ciphers` choosing among the TLS 1.2 suites (OpenSSL's or
/// IANA's names, ':'-separated; names rustls lacks are skipped as OpenSSL skips unknown ones).
/// A list of OpenSSL's keywords only (`HIGH`, `DEFAULT`, `!aNULL`, ...) keeps every suite:
/// rustls offers only strong ones.
fn provider(o: &TlsOptions) -> Result<CryptoProvider, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    let names = o.ciphers.as_deref().map(|list| {
        let names: Vec<&str> = list.split([':', ' ']).filter(|n| !n.is_empty()).collect();
        (list, names)
    });
    let is_keyword = |n: &&str| n.starts_with(['!', '-', '+', '@']) || !n.contains(['-', '_']);
    if let Some((list, wanted)) = names.filter(|(_, names)| !names.iter().all(is_keyword)) {
        let chosen = |suite: &SupportedCipherSuite| {
            let iana = suite.suite().as_str().unwrap_or_default();
            wanted
                .iter()
                .any(|w| *w == iana || openssl_name(iana).as_deref() == Some(*w))
        };
        let tls12_chosen = provider
            .cipher_suites
            .iter()
            .any(|s| s.tls13().is_none() && chosen(s));
        if !tls12_chosen {
            return Err(format!(
                "Error setting the cipher list: {list} : no cipher rustls offers"
            ));
        }
        provider
            .cipher_suites
            .retain(|s| s.tls13().is_some() || chosen(s));
    }
    Ok(provider)
}

/// OpenSSL's name of a TLS 1.2 suite: TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 is
/// ECDHE-RSA-AES128-GCM-SHA256.
fn openssl_name(iana: &str) -> Option<String> {
    let rest = iana.strip_prefix("TLS_")?;
    let (kx, cipher) = rest.split_once("_WITH_")?;
    let cipher = cipher
        .replace("AES_128_GCM", "AES128-GCM")
        .replace("AES_256_GCM", "AES256-GCM")
        .replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305");
    Some(format!("{kx}-{cipher}").replace('_', "-"))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in the file".into());
    }
    Ok(certs)
}

fn read_key(path: &Path, format: u8) -> Result<PrivateKeyDer<'static>, String> {
    if format == 2 {
        let der = std::fs::read(path).map_err(|e| e.to_string())?;
        return PrivateKeyDer::try_from(der).map_err(str::to_string);
    }
    PrivateKeyDer::from_pem_file(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_names_follow_openssl() {
        assert_eq!(
            openssl_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").as_deref(),
            Some("ECDHE-RSA-AES128-GCM-SHA256")
        );
        assert_eq!(
            openssl_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256").as_deref(),
            Some("ECDHE-ECDSA-CHACHA20-POLY1305")
        );
    }

    #[test]
    fn a_cipher_list_naming_nothing_rustls_has_is_refused() {
        let options = TlsOptions {
            ciphers: Some("RC4-MD5".into()),
            ..TlsOptions::default()
        };
        assert!(provider(&options).is_err());
        let options = TlsOptions {
            ciphers: Some("ECDHE-RSA-AES256-GCM-SHA384".into()),
            ..TlsOptions::default()
        };
        let suites = provider(&options).unwrap().cipher_suites;
        assert_eq!(suites.iter().filter(|s| s.tls13().is_none()).count(), 1);
    }
}
