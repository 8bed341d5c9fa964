//! TLS options as memcached reads them: `-Z`, the `-o ssl_*` options, the per-listener `notls:`
//! and `mtls:` prefixes of `-l`, and their TOML keys. The certificates are loaded by
//! `crate::tls` at start-up and on `refresh_certs`.

use std::path::PathBuf;

use anyhow::bail;

/// The oldest TLS version a client may use (`-o ssl_min_version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsVersion {
    #[default]
    Tls12,
    Tls13,
}

impl TlsVersion {
    pub fn parse(text: &str) -> anyhow::Result<TlsVersion> {
        Ok(match text {
            // memcached 1.6 takes the number: 0 tlsv1.0 ... 3 tlsv1.3.
            "tlsv1.2" | "2" => TlsVersion::Tls12,
            "tlsv1.3" | "3" => TlsVersion::Tls13,
            "tlsv1" | "tlsv1.0" | "tlsv1.1" | "0" | "1" => {
                bail!("ssl_min_version={text}: tern speaks TLS 1.2 and 1.3 only (tlsv1.2, tlsv1.3)")
            }
            _ => bail!("ssl_min_version={text}: expected 2 (tlsv1.2) or 3 (tlsv1.3)"),
        })
    }

    /// memcached's spelling, for `stats settings`.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "tlsv1.2",
            TlsVersion::Tls13 => "tlsv1.3",
        }
    }
}

/// A listener's TLS mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenTls {
    Plain,
    /// TLS with `ssl_verify_mode`'s client-certificate rule.
    Tls,
    /// TLS with a client certificate required (`mtls:`), whatever `ssl_verify_mode` says.
    Mutual,
}

/// `-Z` and the `-o ssl_*` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    pub enabled: bool,
    pub chain_cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca_cert: Option<PathBuf>,
    /// memcached's 0 (none), 1 (request a client certificate), 2 (require one), 3 (require one,
    /// checked once: the same as 2 for tern, which does not renegotiate).
    pub verify_mode: u8,
    /// memcached's `SSL_FILETYPE_*`: 1 PEM, 2 DER (ASN.1).
    pub keyformat: u8,
    /// OpenSSL cipher names (or IANA ones) for TLS 1.2, separated by ':'; TLS 1.3's suites are
    /// always offered, as with OpenSSL's cipher list.
    pub ciphers: Option<String>,
    pub min_version: TlsVersion,
    pub session_cache: bool,
    /// Bytes of encrypted output a connection buffers before the socket takes them.
    pub wbuf_size: usize,
    /// A client that has not finished its handshake after this many seconds is dropped.
    pub handshake_timeout_secs: u64,
}

impl Default for TlsOptions {
    fn default() -> TlsOptions {
        TlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            ca_cert: None,
            verify_mode: 0,
            keyformat: 1,
            ciphers: None,
            min_version: TlsVersion::Tls12,
            session_cache: false,
            wbuf_size: 16 * 1024,
            handshake_timeout_secs: 10,
        }
    }
}

impl TlsOptions {
    /// One `-o ssl_*` option; false when `name` is not one.
    pub fn apply(&mut self, name: &str, value: Option<&str>) -> anyhow::Result<bool> {
        let text = || match value {
            Some(v) => Ok(v),
            None => Err(anyhow::anyhow!("-o {name}: needs a value ({name}=...)")),
        };
        match name {
            "ssl_chain_cert" => self.chain_cert = Some(text()?.into()),
            "ssl_key" => self.key = Some(text()?.into()),
            "ssl_ca_cert" => self.ca_cert = Some(text()?.into()),
            "ssl_verify_mode" => self.verify_mode = parse_verify_mode(text()?)?,
            "ssl_keyformat" => self.keyformat = parse_keyformat(text()?)?,
            "ssl_ciphers" => self.ciphers = Some(text()?.to_string()),
            "ssl_min_version" => self.min_version = TlsVersion::parse(text()?)?,
            "ssl_session_cache" => self.session_cache = true,
            "ssl_wbuf_size" => self.wbuf_size = parse_wbuf_kb(text()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// What must hold before the certificates are read.
    pub fn validate(&self, listeners: &[ListenTls]) -> anyhow::Result<()> {
        let wants_tls = listeners.iter().any(|l| *l != ListenTls::Plain);
        if !self.enabled {
            if wants_tls {
                bail!("-l mtls:...: a TLS listener needs -Z/--enable-ssl");
            }
            return Ok(());
        }
        if self.chain_cert.is_none() {
            bail!("-Z: no certificate chain: give -o ssl_chain_cert=FILE (and ssl_key=FILE)");
        }
        let verifies = self.verify_mode > 0 || listeners.contains(&ListenTls::Mutual);
        if verifies && self.ca_cert.is_none() {
            // memcached 1.6.45 starts so (`t/ssl_ports.t`); no client certificate is trusted.
            tracing::warn!(
                "-Z: client certificates (ssl_verify_mode > 0 or an mtls: listener) are checked \
                 against -o ssl_ca_cert=FILE, which is missing: every certificate is refused"
            );
        }
        if self.handshake_timeout_secs == 0 {
            bail!("--tls-handshake-timeout: at least 1 second");
        }
        Ok(())
    }
}

pub fn parse_verify_mode(text: &str) -> anyhow::Result<u8> {
    match text.parse::<u8>() {
        Ok(mode @ 0..=3) => Ok(mode),
        _ => {
            bail!("ssl_verify_mode={text}: expected 0 (none), 1 (request), 2 (require) or 3 (once)")
        }
    }
}

pub fn parse_keyformat(text: &str) -> anyhow::Result<u8> {
    match text {
        "1" | "PEM" | "pem" => Ok(1),
        "2" | "DER" | "der" | "ASN1" => Ok(2),
        _ => bail!("ssl_keyformat={text}: expected PEM (1) or DER (2)"),
    }
}

pub fn parse_wbuf_kb(text: &str) -> anyhow::Result<usize> {
    match text.parse::<usize>() {
        Ok(kb @ 1..=65536) => Ok(kb * 1024),
        _ => bail!("ssl_wbuf_size={text}: expected kilobytes, 1 to 65536"),
    }
}

impl super::Settings {
    /// The listen addresses anyone on the network may reach and talk to: not loopback, not
    /// TLS, with no `-Y` password (docs/hardening.md).
    pub fn exposed_addrs(&self) -> anyhow::Result<Vec<std::net::SocketAddr>> {
        if self.auth_file.is_some() || self.enable_sasl {
            return Ok(Vec::new());
        }
        Ok(self
            .listen_tls()?
            .into_iter()
            .filter(|(addr, mode)| *mode == ListenTls::Plain && !addr.ip().is_loopback())
            .map(|(addr, _)| addr)
            .collect())
    }

    /// The start-up warning for [`Settings::exposed_addrs`], if any.
    pub fn warn_exposed(&self) -> anyhow::Result<()> {
        let exposed = self.exposed_addrs()?;
        if !exposed.is_empty() {
            let list: Vec<String> = exposed.iter().map(|a| a.to_string()).collect();
            tracing::warn!(
                "listening on {} without TLS or authentication: anyone who can reach it can read \
                 and overwrite every item; use -l 127.0.0.1, -Z or -Y (see docs/hardening.md)",
                list.join(", ")
            );
        }
        Ok(())
    }
}

/// A `-l` entry's TLS prefix, and the address without it.
pub fn split_listen_prefix(spec: &str, tls_enabled: bool) -> (ListenTls, &str) {
    if let Some(rest) = spec.strip_prefix("notls:") {
        (ListenTls::Plain, rest)
    } else if let Some(rest) = spec.strip_prefix("mtls:") {
        (ListenTls::Mutual, rest)
    } else if tls_enabled {
        (ListenTls::Tls, spec)
    } else {
        (ListenTls::Plain, spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_prefixes_pick_the_mode() {
        assert_eq!(
            split_listen_prefix("notls:127.0.0.1:1", true),
            (ListenTls::Plain, "127.0.0.1:1")
        );
        assert_eq!(
            split_listen_prefix("mtls:127.0.0.1:1", true),
            (ListenTls::Mutual, "127.0.0.1:1")
        );
        assert_eq!(split_listen_prefix("::1", true), (ListenTls::Tls, "::1"));
        assert_eq!(split_listen_prefix("::1", false), (ListenTls::Plain, "::1"));
    }

    #[test]
    fn plain_non_loopback_listeners_without_a_password_are_exposed() {
        let settings = |listen: &[&str], tls: bool, auth: bool| super::super::Settings {
            listen: listen.iter().map(|s| s.to_string()).collect(),
            tls: TlsOptions {
                enabled: tls,
                ..TlsOptions::default()
            },
            auth_file: auth.then(|| "users".into()),
            ..super::super::Settings::default()
        };
        let exposed = |s: super::super::Settings| s.exposed_addrs().unwrap().len();
        assert_eq!(
            exposed(settings(&[], false, false)),
            1,
            "0.0.0.0 by default"
        );
        assert_eq!(exposed(settings(&["127.0.0.1", "::1"], false, false)), 0);
        assert_eq!(exposed(settings(&["0.0.0.0"], true, false)), 0);
        assert_eq!(exposed(settings(&["notls:0.0.0.0:1"], true, false)), 1);
        assert_eq!(exposed(settings(&["0.0.0.0"], false, true)), 0);
    }

    #[test]
    fn options_are_checked_as_memcached_checks_them() {
        let mut t = TlsOptions::default();
        assert!(t.apply("ssl_verify_mode", Some("2")).unwrap());
        assert!(t.apply("ssl_verify_mode", Some("4")).is_err());
        assert!(t.apply("ssl_min_version", Some("tlsv1.1")).is_err());
        assert!(t.apply("ssl_wbuf_size", Some("32")).unwrap());
        assert_eq!(t.wbuf_size, 32 * 1024);
        assert!(!t.apply("idle_timeout", Some("1")).unwrap());
        t.enabled = true;
        assert!(t.validate(&[ListenTls::Tls]).is_err(), "no certificate");
        t.chain_cert = Some("c.pem".into());
        // memcached 1.6.45 starts with client certificates asked for and no CA to check them.
        t.validate(&[ListenTls::Tls, ListenTls::Mutual]).unwrap();
        t.ca_cert = Some("ca.pem".into());
        t.validate(&[ListenTls::Tls]).unwrap();
    }
}
