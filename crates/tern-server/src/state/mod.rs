//! State: what every worker shares and the server shows about itself. [`shared::Shared`] (the
//! settings, the store, each worker's counters), `stats conns`' tables, `stats detail`, `watch`,
//! the flash tier's `stats` lines,
//! and what the connections of `-Z`, `-Y` and `-S` are checked against: the TLS configurations
//! and the users. Only `config` is below it: it must not import `ops`, `wire`, `transport` or
//! `startup` (the transport hands it sockets' addresses as plain values).

/// The memcached release whose protocol and replies tern follows (its reference: memcached's
/// newest release). A macro, so that `concat!` can build the strings below from it.
macro_rules! memcached_release {
    () => {
        "1.6.45"
    };
}
/// tern's version wherever one is reported (`version`, `stats`' `version`, the binary protocol's
/// version, the admin endpoint's `/version`, `tern serve -V`): the memcached release tern
/// follows, then tern's own, so clients that gate features on the server's version see that
/// memcached.
macro_rules! version {
    () => {
        concat!(memcached_release!(), "-tern-", env!("CARGO_PKG_VERSION"))
    };
}
pub const MEMCACHED_RELEASE: &str = memcached_release!();
pub const VERSION: &str = version!();
/// The text protocol's answer to `version`.
pub const VERSION_REPLY: &str = concat!("VERSION ", version!(), "\r\n");

pub mod conn_table;
pub mod credentials;
pub mod flash;
pub mod prefix_stats;
pub mod read_budget;
pub mod recording;
pub mod sasl;
pub mod shared;
pub mod tls_config;
pub mod watch;
