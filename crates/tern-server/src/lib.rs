//! tern's server: `tern serve`. Its folders are its layers, top to bottom; a module imports only
//! from its own layer or a layer below (docs/ARCHITECTURE.md follows a request through them):
//! - `startup`: `run` (the process from options to a graceful stop), daemonizing, placement,
//!   systemd's readiness, SIGHUP, `-e` restarts and the live hand-over;
//! - `transport`: listening sockets and client streams, the epoll and io_uring worker loops, a
//!   connection's buffers and its authentication gate, TLS sessions, UDP;
//! - `wire`: the text, meta and binary formats, translating requests to operations;
//! - `ops`: the operations layer, what a request means in every wire format;
//! - `state`: what every worker shares: the store and settings, counters, `stats conns`'
//!   tables, `watch`, the TLS configurations and the users of `-Y` / `-S`;
//! - `config`: the options' data ([`Settings`]), read by every layer.

mod config;
mod ops;
mod startup;
mod state;
mod transport;
mod wire;

pub use config::{ServeArgs, Settings};
pub use startup::run::run;
pub use state::{MEMCACHED_RELEASE, VERSION, VERSION_REPLY};
