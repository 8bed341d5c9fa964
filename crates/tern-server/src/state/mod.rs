//! State: what every worker shares and the server shows about itself. [`shared::Shared`] (the
//! settings, the store, each worker's counters), `stats conns`' tables, `stats detail`, `watch`,
//! and what the connections of `-Z`, `-Y` and `-S` are checked against: the TLS configurations
//! and the users. Only `config` is below it: it must not import `ops`, `wire`, `transport` or
//! `startup` (the transport hands it sockets' addresses as plain values).

pub mod conn_table;
pub mod credentials;
pub mod prefix_stats;
pub mod recording;
pub mod shared;
pub mod tls_config;
pub mod watch;
