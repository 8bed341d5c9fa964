//! The `stats` family as data, for the text and binary protocols alike.

use std::sync::atomic::Ordering;

use tern_admin::stats_text::{self, StatLines};

use tern_admin::{Command as Cmd, Outcome};

use super::Ops;
use crate::state::flash;

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
    /// `stats cachedump`: memcached's `ITEM ...` lines and `END` (text only).
    Cachedump(Vec<u8>),
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
    /// `stats cachedump` without a class and a limit.
    CachedumpUsage,
    /// `stats cachedump` of a class that cannot exist.
    IllegalClass,
    /// `stats cachedump` with `-X`.
    DumpingDisabled,
}

/// memcached's cap on a cachedump reply.
const CACHEDUMP_BYTES: usize = 2 << 20;

impl Ops<'_> {
    /// The `stats` family as memcached 1.6 answers it (`stats extstore` with a flash tier),
    /// plus tern's `stats segments` and `stats hotkeys [N]`: `words` are the group and its
    /// arguments (none for general statistics).
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
            [] => {
                let mut general = stats_text::stats_general(&shared.stats_snapshot());
                // Where memcached 1.6.45 prints them: the authentication counters after
                // `store_no_memory`, a flash tier's after `get_flushed` and `log_watchers`,
                // the TLS lines after those.
                let (auth, tls): (Vec<_>, Vec<_>) = shared
                    .security_stats()
                    .into_iter()
                    .partition(|(name, _)| name.starts_with("auth_"));
                insert_after(&mut general, "store_no_memory", auth);
                let mut before_tls = "log_watchers".to_string();
                if let Some(stats) = shared.store.flash_stats() {
                    insert_after(&mut general, "get_flushed", flash::get_lines(&stats));
                    let storage = flash::storage_lines(&stats);
                    before_tls = storage.last().map_or(before_tls, |(name, _)| name.clone());
                    insert_after(&mut general, "log_watchers", storage);
                }
                insert_after(&mut general, &before_tls, tls);
                lines(general)
            }
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
            [b"cachedump", rest @ ..] => self.cachedump(rest)?,
            // tern keeps no item-size histogram (memcached's without -o track_sizes).
            [b"sizes"] => lines(vec![("sizes_status".into(), "disabled".into())]),
            [b"settings"] => lines(shared.settings_stats()),
            // Without a flash tier, memcached built without extstore's answer.
            [b"extstore"] if shared.store.flash_knobs().is_some() => {
                lines(flash::page_lines(&shared.store.flash_pages()))
            }
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

    /// `stats cachedump CLASS LIMIT`: memcached's `ITEM key [N b; T s]` lines for up to LIMIT
    /// items (0: as many as fit memcached's 2 MB reply) of class 1, tern's only one.
    fn cachedump(&self, words: &[&[u8]]) -> Result<StatsReply, StatsError> {
        if self.shared.settings.dumping_disabled {
            return Err(StatsError::DumpingDisabled);
        }
        let number = |w: &[u8]| std::str::from_utf8(w).ok()?.parse::<usize>().ok();
        let (class, limit) = match words {
            [class, limit] => (number(class), number(limit)),
            _ => return Err(StatsError::CachedumpUsage),
        };
        let (Some(class), Some(limit)) = (class, limit) else {
            return Err(StatsError::CachedumpUsage);
        };
        // memcached's class ids run 1..=63.
        if !(1..64).contains(&class) {
            return Err(StatsError::IllegalClass);
        }
        let mut out = Vec::new();
        let mut listed = 0;
        let mut cursor = (class == 1).then(tern_store::DumpCursor::default);
        let wanted = |listed: usize| limit == 0 || listed < limit;
        while let Some(from) = cursor.filter(|_| wanted(listed)) {
            cursor = self.shared.store.dump(from, 256, |item| {
                let line_room = out.len() + item.key.len() + 48 < CACHEDUMP_BYTES;
                if wanted(listed) && line_room {
                    out.extend_from_slice(b"ITEM ");
                    out.extend_from_slice(item.key);
                    let exp = item.expiry.deadline().unwrap_or(0);
                    out.extend_from_slice(
                        format!(" [{} b; {exp} s]\r\n", item.value_len).as_bytes(),
                    );
                    listed += 1;
                }
            });
            if out.len() + 300 >= CACHEDUMP_BYTES {
                break;
            }
        }
        out.extend_from_slice(b"END\r\n");
        Ok(StatsReply::Cachedump(out))
    }
}

/// Puts `more` after the line named `name` (at the end if there is none).
fn insert_after(lines: &mut StatLines, name: &str, more: StatLines) {
    let at = lines
        .iter()
        .position(|(n, _)| n == name)
        .map_or(lines.len(), |i| i + 1);
    lines.splice(at..at, more);
}
