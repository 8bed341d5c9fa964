//! Start-up, the top layer: the process from its options to a graceful stop. It parses the
//! options into `Settings`, binds (or inherits) the sockets, daemonizes and drops privileges,
//! opens the store, starts the workers, and then waits for signals, reloads, restarts and
//! hand-overs. It may import every layer below; nothing imports it but the crate root.

pub mod run;

mod notify;
mod placement;
mod process;
mod reload;
mod restart;
mod takeover;
