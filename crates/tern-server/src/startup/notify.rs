//! systemd's readiness protocol (sd_notify(3)). Under `Type=notify` the service manager holds
//! back the units ordered after tern until tern says READY=1, and `systemctl status` shows the
//! last STATUS= line. Started by anything else (no NOTIFY_SOCKET) every call does nothing.

use sd_notify::NotifyState;

use crate::config::Settings;

/// The STATUS= line while serving: where, and with how much.
pub fn serving_status(settings: &Settings) -> String {
    let addrs = match settings.listen_addrs() {
        Ok(addrs) => addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        Err(_) => settings.listen.join(", "),
    };
    format!(
        "serving on {addrs} with {} workers, {} MiB of items, at most {} connections",
        settings.threads, settings.memory_limit_mb, settings.conn_limit
    )
}

/// The workers run and the listeners are open: connections are accepted from now on.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// As [`ready`], from a process that took over from another (`--takeover`): it is the
/// service's main process now (MAINPID=, which systemd accepts from any process of the unit
/// under `NotifyAccess=all`), so a hand-over can run inside one unit (docs/restart.md).
pub fn ready_as_main(status: &str) {
    let pid = NotifyState::MainPid(std::process::id());
    send(&[pid, NotifyState::Ready, NotifyState::Status(status)]);
}

/// A SIGHUP is being handled; systemd shows the unit as reloading until the next [`ready`].
pub fn reloading() {
    // systemd 253+ wants the monotonic time with RELOADING=1 to tell this reload from a
    // later one; older ones ignore the field.
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// SIGTERM or SIGINT arrived: finishing in-flight replies, then exiting.
pub fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: no new connections, finishing replies"),
    ]);
}

fn send(states: &[NotifyState]) {
    // A lost notification must not stop the cache: systemd then reports the start as timed out,
    // which names the problem better than a server that refused to run.
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {err}");
    }
}
