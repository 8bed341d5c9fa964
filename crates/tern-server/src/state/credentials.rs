//! The users of `-Y/--auth-file` and of `-S`'s `MEMCACHED_SASL_PWDB`, and the authentication
//! counters: server-wide state the transport's gate checks passwords against and SIGHUP reloads.
//!
//! The file holds `user:password` lines, as memcached reads them; beyond memcached, the password
//! may be an argon2 hash in PHC form (`user:$argon2id$v=19$m=...`). Passwords are compared in
//! constant time; the file is read again on SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::RwLock;

use argon2::{Argon2, PasswordVerifier};
use subtle::ConstantTimeEq;

/// memcached's limits on an auth file: its size and an entry's length.
const MAX_FILE_BYTES: u64 = 64 * 1024;
const MAX_ENTRY: usize = 255;

enum Secret {
    Plain(Vec<u8>),
    /// An argon2 hash in PHC form (`$argon2id$...`).
    Hashed(String),
}

struct Entry {
    user: Vec<u8>,
    secret: Secret,
}

/// The users of `-Y`, and the `auth_cmds` / `auth_errors` counters.
pub struct AuthFile {
    pub path: PathBuf,
    entries: RwLock<Vec<Entry>>,
    pub attempts: AtomicU64,
    pub failures: AtomicU64,
}

impl AuthFile {
    pub fn load(path: &Path) -> anyhow::Result<AuthFile> {
        Ok(AuthFile {
            path: path.to_path_buf(),
            entries: RwLock::new(read(path)?),
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    /// SIGHUP: the file read again; on an error the users already loaded stay.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let entries = read(&self.path)?;
        let users = entries.len();
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries;
        Ok(users)
    }

    /// Whether `user` and `password` match an entry. Every entry is compared, each in constant
    /// time, so the time taken says nothing about which user exists or how much of a password
    /// was right (an argon2 entry costs its hash's time, whichever user names it).
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let mut matched = subtle::Choice::from(0);
        for entry in entries.iter() {
            let same_user = entry.user.ct_eq(user);
            let right = match &entry.secret {
                Secret::Plain(expected) => expected.ct_eq(password),
                Secret::Hashed(phc) if bool::from(same_user) => subtle::Choice::from(u8::from(
                    Argon2::default()
                        .verify_password(password, phc.as_str())
                        .is_ok(),
                )),
                Secret::Hashed(_) => subtle::Choice::from(0),
            };
            matched |= same_user & right;
        }
        bool::from(matched)
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<Entry>> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("-Y {shown}: {e}"))?
        .len();
    if size > MAX_FILE_BYTES {
        anyhow::bail!("-Y {shown}: the auth file is larger than {MAX_FILE_BYTES} bytes");
    }
    let text = std::fs::read(path).map_err(|e| anyhow::anyhow!("-Y {shown}: {e}"))?;
    let mut entries = Vec::new();
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        if line.len() > MAX_ENTRY {
            anyhow::bail!(
                "-Y {shown}: line {} is longer than {MAX_ENTRY} bytes",
                n + 1
            );
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            anyhow::bail!("-Y {shown}: line {} is not user:password", n + 1);
        };
        let (user, secret) = (&line[..colon], &line[colon + 1..]);
        let secret = match std::str::from_utf8(secret) {
            Ok(phc) if phc.starts_with("$argon2") => {
                if argon2::password_hash::phc::PasswordHash::new(phc).is_err() {
                    anyhow::bail!("-Y {shown}: line {}: not a valid argon2 hash", n + 1);
                }
                Secret::Hashed(phc.to_string())
            }
            _ => Secret::Plain(secret.to_vec()),
        };
        entries.push(Entry {
            user: user.to_vec(),
            secret,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use argon2::PasswordHasher;

    use super::*;

    fn file(text: &str) -> (AuthFile, PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "tern-credentials-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::write(&path, text).unwrap();
        (AuthFile::load(&path).unwrap(), path)
    }

    #[test]
    fn plain_and_argon2_entries_check_their_passwords() {
        let hash = Argon2::default()
            .hash_password(b"h4sh")
            .unwrap()
            .to_string();
        let (auth, path) = file(&format!("alice:secret\r\nbob:{hash}\n\n"));
        assert!(auth.check(b"alice", b"secret"));
        assert!(!auth.check(b"alice", b"secre"));
        assert!(!auth.check(b"alice", b"h4sh"));
        assert!(auth.check(b"bob", b"h4sh"));
        assert!(
            !auth.check(b"bob", hash.as_bytes()),
            "the hash is no password"
        );
        assert!(!auth.check(b"carol", b"secret"));
        std::fs::remove_file(path).unwrap();
    }
}
