//! The `stats` family as data, for the text and binary protocols alike.

use std::sync::atomic::Ordering;

use tern_admin::stats_text::{self, StatLines};

use tern_admin::{Command as Cmd, Outcome};

use super::Ops;

/// A `stats` request's answer.
#[derive(Debug)]
pub enum StatsReply {
    Lines(StatLines),
    /// `stats reset` ran.
    Reset,
    /// `stats detail on|off` ran.
    Done,
    /// `stats detail dump`: memcached's `PREFIX ...` lines and `END`, sent as they are over text
    /// and as one `detailed` statistic over binary.
    Detail(Vec<u8>),
}

/// Why a `stats` request got no statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsError {
    /// No such group (memcached's `ERROR`).
    Unknown,
    /// The group exists but its argument is not valid.
    BadArgument,
    /// `stats detail` without `on`, `off` or `dump`.
    DetailUsage,
}

impl Ops<'_> {
    /// The `stats` family as memcached 1.6 answers it, plus tern's `stats segments` and `stats
    /// hotkeys [N]`: `words` are the group and its arguments (none for general statistics).
    pub fn stats(&self, words: &[&[u8]]) -> Result<StatsReply, StatsError> {
        let reply = self.stats_group(words);
        self.record(
            Cmd::Stats,
            if reply.is_ok() {
                Outcome::Hit
            } else {
                Outcome::Error
            },
        );
        reply
    }

    fn stats_group(&self, words: &[&[u8]]) -> Result<StatsReply, StatsError> {
        let shared = self.shared;
        let lines = StatsReply::Lines;
        Ok(match words {
            [] => lines(stats_text::stats_general(&shared.stats_snapshot())),
            [b"reset"] => {
                shared.reset_stats();
                shared.prefix_stats.clear();
                StatsReply::Reset
            }
            [b"detail", setting] => match *setting {
                b"on" | b"off" => {
                    let on = *setting == b"on";
                    shared.prefix_stats.enabled.store(on, Ordering::Relaxed);
                    StatsReply::Done
                }
                b"dump" => StatsReply::Detail(shared.prefix_stats.dump()),
                _ => return Err(StatsError::DetailUsage),
            },
            [b"detail", ..] => return Err(StatsError::DetailUsage),
            // tern keeps no item-size histogram (memcached's without -o track_sizes).
            [b"sizes"] => lines(vec![("sizes_status".into(), "disabled".into())]),
            [b"settings"] => lines(shared.settings_stats()),
            [b"items"] => lines(stats_text::stats_items(&shared.stats_snapshot())),
            [b"slabs"] => lines(stats_text::stats_slabs(&shared.stats_snapshot())),
            [b"segments"] => lines(stats_text::stats_segments(
                &shared.stats_snapshot().store.segments,
            )),
            [b"conns"] => {
                let asker = self.worker.serving_fd.load(Ordering::Relaxed);
                lines(stats_text::stats_conns(&shared.conns(asker)))
            }
            [b"hotkeys", count @ ..] => {
                let count = match count {
                    [] => stats_text::DEFAULT_HOT_KEYS,
                    [n] => std::str::from_utf8(n)
                        .ok()
                        .and_then(|n| n.parse().ok())
                        .ok_or(StatsError::BadArgument)?,
                    _ => return Err(StatsError::BadArgument),
                };
                lines(stats_text::stats_hotkeys(&shared.hot_keys.top(count)))
            }
            _ => return Err(StatsError::Unknown),
        })
    }
}
