//! SIGHUP (systemd's `ExecReload`): re-read what can change while serving. Today that is the log
//! level, `verbose` in the `--config` file (a `-v` on the command line still wins, as at start);
//! every other key needs a restart, and a reload that finds one changed says so.

use std::sync::atomic::Ordering;

use anyhow::Context;
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;

use crate::config::{ServeArgs, Settings};
use crate::startup::notify;
use crate::state::shared::Shared;

/// The command line the server started with, to merge the file with again on each SIGHUP.
pub struct Reloader {
    args: ServeArgs,
}

impl Reloader {
    pub fn new(mut args: ServeArgs) -> anyhow::Result<Reloader> {
        // Absolute, so the file is found again after -d changed the directory to /.
        if let Some(path) = &mut args.config {
            if path.is_relative() {
                *path = std::env::current_dir()?.join(&*path);
            }
        }
        Ok(Reloader { args })
    }

    /// Blocks until SIGINT or SIGTERM and returns it, reloading on each SIGHUP meanwhile.
    pub fn until_stopped(&self, signals: &mut Signals, shared: &Shared) -> Option<i32> {
        for signal in signals.forever() {
            if signal != SIGHUP {
                return Some(signal);
            }
            notify::reloading();
            let pwdb = shared.sasl.as_ref().and_then(|s| s.pwdb.as_deref());
            for auth in [shared.auth.as_ref(), pwdb].into_iter().flatten() {
                match auth.reload() {
                    Ok(users) => {
                        tracing::info!("SIGHUP: re-read {}: {users} users", auth.path.display())
                    }
                    Err(err) => tracing::warn!("SIGHUP: {err:#}; the users loaded before stay"),
                }
            }
            let outcome = match self.reload(shared) {
                Ok(outcome) => {
                    tracing::info!("SIGHUP: {outcome}");
                    outcome
                }
                Err(err) => {
                    tracing::warn!("SIGHUP: {err:#}; the running settings are kept");
                    format!("reload failed, running settings kept: {err:#}")
                }
            };
            notify::ready(&format!(
                "{}; {outcome}",
                notify::serving_status(&shared.settings)
            ));
        }
        None
    }

    /// Applies the file's log level; returns what was done.
    fn reload(&self, shared: &Shared) -> anyhow::Result<String> {
        let Some(path) = &self.args.config else {
            return Ok("no --config file to re-read".to_string());
        };
        let mut new = Settings::from_args(&self.args)?;
        new.absolutize_paths()
            .context("resolving the file's relative paths")?;
        let level = u32::from(new.verbose);
        shared.verbosity.store(level, Ordering::Relaxed);
        if let Some(set_log_level) = &shared.set_log_level {
            set_log_level(level);
        }
        let mut outcome = format!("re-read {}: verbosity {level}", path.display());
        let others_changed = Settings {
            verbose: shared.settings.verbose,
            ..new
        } != shared.settings;
        if others_changed {
            tracing::warn!(
                "SIGHUP: {} changes settings other than `verbose`; those take effect at the next \
                 restart",
                path.display()
            );
            outcome.push_str(" (other changes need a restart)");
        }
        Ok(outcome)
    }
}
