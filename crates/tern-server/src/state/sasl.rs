//! `-S`: Cyrus SASL (libsasl2, the library memcached uses), set up as memcached's `sasl_defs.c`
//! sets it up: `sasl_server_init` once for the application "memcached" (so its configuration is
//! `memcached.conf` in the directory `SASL_CONF_PATH` names, else in `/etc/sasl` or `/etc/sasl2`,
//! else libsasl2's default: `mech_list`, `sasldb_path`), and one SASL connection per client connection, made on its
//! first SASL request with the host's name as the users' realm (the realm `saslpasswd2` gives
//! users by default). With `MEMCACHED_SASL_PWDB` set, its `user:password` file is checked first
//! for PLAIN, as memcached's `--enable-sasl-pwdb` build does, and the sasldb after.
//!
//! All of tern's `unsafe` for SASL is in this module, behind [`Sasl`] and [`SaslConn`].

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::Path;
use std::ptr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock, RwLock};

use sasl2_sys::prelude as sys;

use crate::state::credentials::AuthFile;

/// The SASL application name: memcached's, so its configuration files serve tern unchanged.
const APP: &CStr = c"memcached";

/// The users of `MEMCACHED_SASL_PWDB`, read by the checkpass callback (libsasl2 keeps the
/// callbacks for the process's life, so what they read is process-wide too).
static PWDB: RwLock<Option<Arc<AuthFile>>> = RwLock::new(None);
/// `sasl_server_init`'s result: called once per process.
static INIT: OnceLock<Result<(), String>> = OnceLock::new();

/// `-S`'s server-wide state: the pwdb users, and the `auth_cmds` / `auth_errors` counters.
pub struct Sasl {
    /// `MEMCACHED_SASL_PWDB`'s users, when it is set (SIGHUP reads the file again).
    pub pwdb: Option<Arc<AuthFile>>,
    pub attempts: AtomicU64,
    pub failures: AtomicU64,
    /// The users' realm: this host's name, as memcached passes it.
    realm: Option<CString>,
}

/// What a SASL request came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Authenticated,
    /// The mechanism needs another step: the server's challenge.
    Continue(Vec<u8>),
    Failed,
}

impl Sasl {
    /// `sasl_server_init` (once per process) and `MEMCACHED_SASL_PWDB`'s users.
    pub fn init() -> anyhow::Result<Sasl> {
        let pwdb = match std::env::var_os("MEMCACHED_SASL_PWDB") {
            Some(path) => Some(Arc::new(AuthFile::load(Path::new(&path))?)),
            None => None,
        };
        *PWDB.write().unwrap_or_else(|e| e.into_inner()) = pwdb.clone();
        INIT.get_or_init(server_init)
            .clone()
            .map_err(anyhow::Error::msg)?;
        let realm = rustix::system::uname().nodename().to_bytes().to_vec();
        Ok(Sasl {
            pwdb,
            attempts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            realm: CString::new(realm).ok().filter(|r| !r.is_empty()),
        })
    }

    /// A connection's SASL state (`sasl_server_new`), or `None` where libsasl2 refuses one.
    pub fn conn(&self) -> Option<SaslConn> {
        let realm = self.realm.as_ref().map_or(ptr::null(), |r| r.as_ptr());
        let mut conn = ptr::null_mut();
        // SAFETY: `sasl_server_init` succeeded (a `Sasl` exists only then); every string is
        // NUL-terminated and outlives the call (libsasl2 copies them); `conn` is written only on
        // success, and then owned by the returned `SaslConn`.
        let result = unsafe {
            sys::sasl_server_new(
                APP.as_ptr(),
                ptr::null(),
                realm,
                ptr::null(),
                ptr::null(),
                ptr::null(),
                0,
                &mut conn,
            )
        };
        (result == sys::SASL_OK && !conn.is_null()).then_some(SaslConn {
            conn,
            started: false,
        })
    }
}

fn server_init() -> Result<(), String> {
    let mut callbacks = vec![
        callback(
            sys::SASL_CB_SERVER_USERDB_CHECKPASS,
            unsafe_fn_ptr(checkpass as *const ()),
        ),
        callback(sys::SASL_CB_LOG, unsafe_fn_ptr(log as *const ())),
    ];
    // memcached's rule for the configuration directory; where it finds none, libsasl2's own
    // default (which memcached without MEMCACHED_SASL_PWDB gets too) rather than a refusal.
    if CONF_DIR.get_or_init(conf_dir).is_some() {
        callbacks.push(callback(
            sys::SASL_CB_GETCONFPATH,
            unsafe_fn_ptr(getconfpath as *const ()),
        ));
    }
    callbacks.push(sys::sasl_callback_t {
        id: sys::SASL_CB_LIST_END,
        proc_: None,
        context: ptr::null_mut(),
    });
    // libsasl2 keeps the callback list for the process's life: leaked once, here.
    let callbacks: &'static [sys::sasl_callback_t] = callbacks.leak();
    // SAFETY: the callback list is terminated and 'static, each entry's function has the
    // signature libsasl2 calls its id with; the application name is NUL-terminated.
    let result = unsafe { sys::sasl_server_init(callbacks.as_ptr(), APP.as_ptr()) };
    if result == sys::SASL_OK {
        Ok(())
    } else {
        Err(format!(
            "-S: initializing SASL failed (libsasl2 error {result})"
        ))
    }
}

/// Where `memcached.conf` is read from: `SASL_CONF_PATH`, else the first of memcached's
/// locations present.
static CONF_DIR: OnceLock<Option<CString>> = OnceLock::new();

fn conf_dir() -> Option<CString> {
    let chosen = match std::env::var_os("SASL_CONF_PATH") {
        Some(dir) => Some(dir.into_encoded_bytes()),
        None => [
            ("/etc/sasl/memcached.conf", "/etc/sasl"),
            ("/etc/sasl2/memcached.conf", "/etc/sasl2"),
        ]
        .into_iter()
        .find(|(file, _)| Path::new(file).exists())
        .map(|(_, dir)| dir.as_bytes().to_vec()),
    };
    chosen.and_then(|p| CString::new(p).ok())
}

fn callback(id: std::ffi::c_ulong, proc_: unsafe extern "C" fn() -> c_int) -> sys::sasl_callback_t {
    sys::sasl_callback_t {
        id,
        proc_: Some(proc_),
        context: ptr::null_mut(),
    }
}

/// libsasl2's callback list stores every callback as `int (*)(void)`, cast back by id.
fn unsafe_fn_ptr(f: *const ()) -> unsafe extern "C" fn() -> c_int {
    // SAFETY: `f` is one of this module's `extern "C"` callbacks; libsasl2 casts it back to the
    // signature its id names before calling it, as C's sasl_callback_ft is used.
    unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn() -> c_int>(f) }
}

/// `SASL_CB_GETCONFPATH`: [`CONF_DIR`] (registered only when there is one).
extern "C" fn getconfpath(_context: *mut c_void, path: *mut *const c_char) -> c_int {
    match CONF_DIR.get().and_then(Option::as_ref) {
        Some(dir) => {
            // SAFETY: libsasl2 passes a valid out-pointer; the string is 'static.
            unsafe { *path = dir.as_ptr() };
            sys::SASL_OK
        }
        None => sys::SASL_FAIL,
    }
}

/// `SASL_CB_LOG`: libsasl2's messages, as tracing events.
extern "C" fn log(_context: *mut c_void, level: c_int, message: *const c_char) -> c_int {
    if !message.is_null() {
        // SAFETY: libsasl2 passes a NUL-terminated message, valid for this call.
        let message = unsafe { CStr::from_ptr(message) }.to_string_lossy();
        match level {
            sys::SASL_LOG_ERR => tracing::error!("SASL: {message}"),
            sys::SASL_LOG_FAIL | sys::SASL_LOG_WARN => tracing::info!("SASL: {message}"),
            _ => tracing::debug!("SASL: {message}"),
        }
    }
    sys::SASL_OK
}

/// `SASL_CB_SERVER_USERDB_CHECKPASS`: PLAIN's password against `MEMCACHED_SASL_PWDB` first. A
/// miss falls through to libsasl2's own check (the sasldb). libsasl2 hands over the user with
/// the realm appended (`alice@host`); the file names users as memcached documents them, bare,
/// so either form matches.
extern "C" fn checkpass(
    _conn: *mut sys::sasl_conn_t,
    _context: *mut c_void,
    user: *const c_char,
    pass: *const c_char,
    passlen: c_uint,
    _propctx: *mut sys::propctx,
) -> c_int {
    let pwdb = PWDB.read().unwrap_or_else(|e| e.into_inner());
    let Some(pwdb) = pwdb.as_ref() else {
        return sys::SASL_NOUSER;
    };
    if user.is_null() || pass.is_null() {
        return sys::SASL_NOAUTHZ;
    }
    // SAFETY: libsasl2 passes a NUL-terminated user and `passlen` bytes of password, both valid
    // for this call.
    let (user, pass) = unsafe {
        (
            CStr::from_ptr(user).to_bytes(),
            std::slice::from_raw_parts(pass.cast::<u8>(), passlen as usize),
        )
    };
    let bare = user
        .iter()
        .rposition(|&b| b == b'@')
        .map_or(user, |at| &user[..at]);
    if pwdb.check(user, pass) || pwdb.check(bare, pass) {
        sys::SASL_OK
    } else {
        sys::SASL_NOAUTHZ
    }
}

/// One client connection's SASL state; disposed of when the connection goes.
pub struct SaslConn {
    conn: *mut sys::sasl_conn_t,
    /// Whether `sasl_server_start` began an exchange a step may continue.
    started: bool,
}

// SAFETY: a sasl_conn_t belongs to one client connection, used by one thread at a time (the
// worker serving it; `&mut self` for every call); libsasl2 keeps no thread-local state for it.
unsafe impl Send for SaslConn {}

impl SaslConn {
    /// `sasl_listmech`: the mechanisms offered, space-separated, as memcached lists them.
    pub fn mechanisms(&mut self) -> Option<Vec<u8>> {
        let mut list: *const c_char = ptr::null();
        let mut len: c_uint = 0;
        let empty = c"".as_ptr();
        // SAFETY: `self.conn` is a live sasl_conn_t; the prefix/separator/suffix strings are
        // NUL-terminated; on success `list` points at `len` bytes libsasl2 owns until the next
        // call on this conn, copied out before then.
        let result = unsafe {
            sys::sasl_listmech(
                self.conn,
                ptr::null(),
                empty,
                c" ".as_ptr(),
                empty,
                &mut list,
                &mut len,
                ptr::null_mut(),
            )
        };
        (result == sys::SASL_OK && !list.is_null()).then(|| unsafe_copy(list, len))
    }

    /// `sasl_server_start` with mechanism `mech` and the client's first message.
    pub fn start(&mut self, mech: &[u8], input: &[u8]) -> Outcome {
        let Ok(mech) = CString::new(mech) else {
            self.started = false;
            return Outcome::Failed;
        };
        let Some((data, len)) = client_data(input) else {
            return Outcome::Failed;
        };
        let (mut out, mut outlen): (*const c_char, c_uint) = (ptr::null(), 0);
        // SAFETY: `self.conn` is live; `mech` is NUL-terminated; `data` is `len` bytes or null
        // with 0; the outputs are valid out-pointers, read before the next call on this conn.
        let result = unsafe {
            sys::sasl_server_start(self.conn, mech.as_ptr(), data, len, &mut out, &mut outlen)
        };
        self.started = result == sys::SASL_OK || result == sys::SASL_CONTINUE;
        outcome(result, out, outlen)
    }

    /// `sasl_server_step`: the client's next message; fails where no exchange was started.
    pub fn step(&mut self, input: &[u8]) -> Outcome {
        if !self.started {
            return Outcome::Failed;
        }
        let Some((data, len)) = client_data(input) else {
            return Outcome::Failed;
        };
        let (mut out, mut outlen): (*const c_char, c_uint) = (ptr::null(), 0);
        // SAFETY: as in `start`.
        let result = unsafe { sys::sasl_server_step(self.conn, data, len, &mut out, &mut outlen) };
        outcome(result, out, outlen)
    }
}

fn outcome(result: c_int, out: *const c_char, outlen: c_uint) -> Outcome {
    match result {
        r if r == sys::SASL_OK => Outcome::Authenticated,
        r if r == sys::SASL_CONTINUE => Outcome::Continue(unsafe_copy(out, outlen)),
        _ => Outcome::Failed,
    }
}

/// Copies `len` bytes libsasl2 returned (none where it returned a null pointer).
fn unsafe_copy(data: *const c_char, len: c_uint) -> Vec<u8> {
    if data.is_null() {
        return Vec::new();
    }
    // SAFETY: libsasl2 returned `data` with `len` bytes, valid until the next call on the conn,
    // which cannot happen before this copy (the caller holds `&mut SaslConn`).
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len as usize) }.to_vec()
}

impl Drop for SaslConn {
    fn drop(&mut self) {
        // SAFETY: `self.conn` came from `sasl_server_new` and is disposed of once, here.
        unsafe { sys::sasl_dispose(&mut self.conn) };
    }
}

/// The client's message as libsasl2 takes it: a pointer and a length, no data being a null
/// pointer (as memcached passes it); `None` past what a `c_uint` counts.
fn client_data(input: &[u8]) -> Option<(*const c_char, c_uint)> {
    let len = c_uint::try_from(input.len()).ok()?;
    let data = if input.is_empty() {
        ptr::null()
    } else {
        input.as_ptr().cast()
    };
    Some((data, len))
}
