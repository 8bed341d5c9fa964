//! memcached's admin commands for its slab allocator, LRU and crawler, answered as memcached
//! 1.6.18 answers them (checked side by side; `slabs` as 1.6.45 does) and mapped onto tern's segments, which have one
//! class (id 1), no LRU and no crawler thread: settings tern has no use for are accepted and
//! change nothing (docs/serve.md lists them). `extstore` changes the flash tier's knobs, as
//! 1.6.45 does.

use std::io::Write as _;

use tern_admin::{Command as Cmd, Outcome};
use tern_store::{DumpCursor, FlashSettings};

use super::Ops;
use crate::state::watch::LoggedKey;

/// Items a metadump step lists under one shard's lock.
const DUMP_STEP: usize = 256;

/// An admin command's one-line answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminReply {
    /// `OK`
    Ok,
    /// `ERROR`: an unknown subcommand or bad arguments.
    Error,
    /// Another status line, as memcached words it.
    Status(&'static str),
    /// A status line with a number in it.
    Line(String),
}

/// tern's one "slab class": every item, whatever its size.
const CLASS: &[u8] = b"1";

fn number(word: &[u8]) -> Option<u64> {
    std::str::from_utf8(word).ok()?.parse().ok()
}

/// `slabs automove SETTING [VALUE]` as 1.6.45's `process_slabs_automove_command` checks it.
fn automove(setting: &[u8], value: Option<&[u8]>) -> AdminReply {
    let bad_format = AdminReply::Status("CLIENT_ERROR bad command line format");
    let ratio = |value: Option<&[u8]>| {
        value
            .and_then(|v| std::str::from_utf8(v).ok())
            .is_some_and(|v| v.trim_end().parse::<f64>().is_ok())
    };
    if b"ratio".starts_with(setting) || b"freeratio".starts_with(setting) {
        return if ratio(value) {
            AdminReply::Ok
        } else {
            AdminReply::Error
        };
    }
    if b"window".starts_with(setting) {
        return match value.and_then(tern_proto::ascii::token_u32) {
            None => bad_format,
            Some(3..=1800) => AdminReply::Ok,
            Some(_) => AdminReply::Status("CLIENT_ERROR automove window too low or too high"),
        };
    }
    match tern_proto::ascii::token_u32(setting) {
        None => bad_format,
        Some(0..=2) => AdminReply::Ok,
        Some(_) => AdminReply::Error,
    }
}

/// memcached's `safe_strtod` on a token: C's strtod reading all of it, refused on overflow or
/// underflow to 0 (its ERANGE). strtod's hexadecimal floats are refused too.
fn c_strtod(word: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(word).ok()?;
    let x: f64 = text.parse().ok()?;
    let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
    let overflow = x.is_infinite() && !mantissa.to_ascii_lowercase().contains("inf");
    let underflow = x == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    (!overflow && !underflow).then_some(x)
}

/// memcached's class ids run below this (`MAX_NUMBER_OF_SLAB_CLASSES`).
const SLAB_CLASSES: u32 = 64;

/// `extstore SETTING VALUE` as 1.6.45's `process_extstore_command` runs it on `knobs`: the
/// knobs after it, and whether it answers `OK` (else `ERROR`). `words` follow `extstore`, a
/// final `noreply` included (memcached counts it). A setting matches every name it starts
/// (memcached compares the typed word's length), the first in memcached's order winning;
/// `free_memchunks CLASS LIMIT` is deprecated and accepted.
fn extstore_change(words: &[&[u8]], mut knobs: FlashSettings) -> (FlashSettings, bool) {
    let [setting, value, rest @ ..] = words else {
        return (knobs, false);
    };
    let is = |name: &[u8]| name.starts_with(setting);
    if is(b"free_memchunks") && !rest.is_empty() {
        let class = tern_proto::ascii::token_u32(value);
        let limit = tern_proto::ascii::token_u32(rest[0]);
        let ok = limit.is_some() && class.is_some_and(|c| c < SLAB_CLASSES);
        return (knobs, ok);
    }
    let number = tern_proto::ascii::token_u32(value);
    let field = if is(b"item_size") {
        &mut knobs.item_size
    } else if is(b"item_age") {
        &mut knobs.item_age
    } else if is(b"low_ttl") {
        &mut knobs.low_ttl
    } else if is(b"recache_rate") {
        &mut knobs.recache_rate
    } else if is(b"compact_under") {
        &mut knobs.compact_under
    } else if is(b"drop_under") {
        &mut knobs.drop_under
    } else if is(b"max_sleep") {
        &mut knobs.max_sleep_us
    } else if is(b"max_frag") {
        // memcached copies at most 31 bytes of the token; safe_strtod zeroes its output first,
        // so a value it cannot read leaves max_frag at 0.
        if value.len() > 31 {
            return (knobs, false);
        }
        let frag = c_strtod(value);
        knobs.max_frag = frag.unwrap_or(0.0);
        return (knobs, frag.is_some());
    } else if is(b"drop_unread") {
        if let Some(n) = number {
            knobs.drop_unread = n != 0;
        }
        return (knobs, number.is_some());
    } else {
        return (knobs, false);
    };
    if let Some(n) = number {
        *field = n;
    }
    (knobs, number.is_some())
}

impl Ops<'_> {
    fn admin_reply(&self, reply: AdminReply) -> AdminReply {
        let outcome = match &reply {
            AdminReply::Error => Outcome::Error,
            _ => Outcome::Hit,
        };
        self.record(Cmd::Admin, outcome);
        reply
    }

    /// `refresh_certs`: the TLS certificate, key and CA files read again for new connections;
    /// memcached's error lines when TLS is off or a file does not load.
    pub fn refresh_certs(&self) -> AdminReply {
        let reply = match &self.shared.tls {
            None => AdminReply::Status("Error TLS not enabled"),
            Some(tls) => match tls.refresh() {
                Ok(()) => AdminReply::Ok,
                Err(line) => {
                    tracing::warn!("refresh_certs: {line}");
                    AdminReply::Line(line)
                }
            },
        };
        self.admin_reply(reply)
    }

    /// `extstore SETTING VALUE`: one of the flash tier's knobs changed (see
    /// [`extstore_change`]). Without a flash tier, `ERROR`, as from a memcached built without
    /// extstore.
    pub fn extstore(&self, words: &[&[u8]]) -> AdminReply {
        let reply = match self.shared.store.flash_knobs() {
            None => AdminReply::Error,
            Some(knobs) => {
                let before = knobs.get();
                let (after, ok) = extstore_change(words, before);
                if after != before {
                    knobs.set(&after);
                }
                if ok {
                    AdminReply::Ok
                } else {
                    AdminReply::Error
                }
            }
        };
        self.admin_reply(reply)
    }

    /// `lru_crawler crawl|enable|disable|sleep|tocrawl ...` (`metadump` streams: see
    /// [`Ops::metadump`]). tern reclaims expired items by whole segments, so a crawl has
    /// nothing to do; the crawler's settings are accepted.
    pub fn lru_crawler(&self, words: &[&[u8]]) -> AdminReply {
        let reply = match words {
            [b"crawl", classes] => {
                let known = classes
                    .split(|&b| b == b',')
                    .all(|class| class == b"all" || class == CLASS);
                if known {
                    AdminReply::Ok
                } else {
                    AdminReply::Status("BADCLASS invalid class id")
                }
            }
            [b"enable" | b"disable"] => AdminReply::Ok,
            [b"sleep" | b"tocrawl", n] if number(n).is_some() => AdminReply::Ok,
            _ => AdminReply::Error,
        };
        self.admin_reply(reply)
    }

    /// `lru_crawler metadump all|hash|CLASSES`: whether the dump lists tern's items (its one
    /// class is asked for) or is empty, or why it is refused.
    pub fn metadump(&self, classes: &[&[u8]]) -> Result<bool, AdminReply> {
        let reply = if self.shared.settings.dumping_disabled {
            Err(AdminReply::Status("ERROR metadump not allowed"))
        } else {
            match classes {
                [b"all" | b"hash"] => Ok(true),
                [list] if list.split(|&b| b == b',').all(|c| number(c).is_some()) => {
                    Ok(list.split(|&b| b == b',').any(|c| c == CLASS))
                }
                _ => Err(AdminReply::Error),
            }
        };
        self.admin_reply(match &reply {
            Ok(_) => AdminReply::Ok,
            Err(error) => error.clone(),
        });
        reply
    }

    /// One step of a metadump: memcached's line per live item (newest memcached's fields:
    /// `flags=` last), from `cursor` on; where to go on, or `None` when every item is listed.
    pub fn metadump_step(&self, cursor: DumpCursor, out: &mut Vec<u8>) -> Option<DumpCursor> {
        self.shared.store.dump(cursor, DUMP_STEP, |item| {
            let exp = item.expiry.deadline().map_or(-1, i64::from);
            let _ = writeln!(
                out,
                "key={} exp={exp} la={} cas={} fetch={} cls=1 size={} flags={}",
                LoggedKey(item.key),
                item.last_access,
                item.cas,
                if item.fetched { "yes" } else { "no" },
                item.size,
                item.flags
            );
        })
    }

    /// `watch [KIND...]`: the kinds to stream (see `watch.rs`), or why not.
    pub fn watch(&self, words: &[&[u8]]) -> Result<u8, AdminReply> {
        let kinds = if self.shared.settings.watch_disabled {
            Err(AdminReply::Status(
                "CLIENT_ERROR watch commands not allowed",
            ))
        } else {
            crate::state::watch::parse_kinds(words).ok_or(AdminReply::Error)
        };
        self.admin_reply(match &kinds {
            Ok(_) => AdminReply::Ok,
            Err(error) => error.clone(),
        });
        kinds
    }

    /// `cache_memlimit <megabytes>`: the item memory's new limit, down (evicting to it and
    /// giving the pages back) or up, past `-m` too (the store opens more of the heap it
    /// reserved at start). Checked in 1.6.45's order, with its lines; words after the number
    /// are ignored, as in 1.6.45. A heap that cannot grow (a memory file's, MAP_HUGETLB pages')
    /// answers a raise past it as 1.6.45 answers any change it cannot make.
    pub fn cache_memlimit(&self, words: &[&[u8]]) -> AdminReply {
        let reply = match words.first().map(|mb| tern_proto::ascii::token_u32(mb)) {
            None | Some(None) => AdminReply::Error,
            Some(Some(0..8)) => {
                AdminReply::Status("MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m")
            }
            Some(Some(1_000_000_001..)) => {
                AdminReply::Status("MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes")
            }
            Some(Some(mb)) => match self.shared.store.set_memory_limit((mb as usize) << 20) {
                Ok(()) => AdminReply::Ok,
                // tern's own floor, above 8 MB with many shards or a large -I.
                Err(tern_store::MemoryLimitError::TooSmall { min }) => AdminReply::Line(format!(
                    "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than {}m",
                    min.div_ceil(1 << 20)
                )),
                Err(e) => {
                    tracing::warn!("cache_memlimit {mb}: {e}");
                    AdminReply::Status("MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust")
                }
            },
        };
        self.admin_reply(reply)
    }

    /// `slabs automove 0|1|2|ratio R|freeratio R|window N` (accepted: tern moves no pages
    /// between classes) and `slabs reassign SRC DST` (one class: nothing to move), answered as
    /// memcached 1.6.45 answers them: a subcommand matches any command it starts with (its
    /// `strncmp` compares the typed word's length), a number that does not parse is a bad
    /// command line. 1.6.45's `do_slabs_reassign` checks, in order: the same class twice
    /// (`SAME`), a class it does not have (`BADCLASS`: tern has memcached's global page pool,
    /// 0, and its one class; `-1`, "pick one", finds none with pages to spare), then a source
    /// with fewer than two pages (`NOSPARE`: tern moves none).
    pub fn slabs(&self, words: &[&[u8]]) -> AdminReply {
        let is = |word: &[u8], name: &[u8]| name.starts_with(word);
        let reply = match words {
            [sub, src, dst] if is(sub, b"reassign") => {
                match (
                    tern_proto::ascii::token_i32(src),
                    tern_proto::ascii::token_i32(dst),
                ) {
                    (Some(src), Some(dst)) if src == dst => {
                        AdminReply::Status("SAME src and dst class are identical")
                    }
                    (Some(0 | 1), Some(0 | 1)) => {
                        AdminReply::Status("NOSPARE source class has no spare pages")
                    }
                    (Some(_), Some(_)) => {
                        AdminReply::Status("BADCLASS invalid src or dst class id")
                    }
                    _ => AdminReply::Status("CLIENT_ERROR bad command line format"),
                }
            }
            [sub, setting, rest @ ..] if is(sub, b"automove") => {
                automove(setting, rest.first().copied())
            }
            _ => AdminReply::Error,
        };
        self.admin_reply(reply)
    }

    /// `lru mode flat|segmented`, `lru temp_ttl N`, `lru tune HOT WARM HOT_FACTOR WARM_FACTOR`:
    /// accepted; tern's eviction is by segment (`--eviction`).
    pub fn lru(&self, words: &[&[u8]]) -> AdminReply {
        let float = |w: &[u8]| {
            std::str::from_utf8(w)
                .ok()
                .and_then(|w| w.parse::<f64>().ok())
                .is_some()
        };
        let reply = match words {
            [b"mode", b"flat" | b"segmented"] => AdminReply::Ok,
            [b"temp_ttl", ttl] if number(ttl).is_some() => AdminReply::Ok,
            [b"tune", hot, warm, hot_factor, warm_factor]
                if number(hot).is_some()
                    && number(warm).is_some()
                    && float(hot_factor)
                    && float(warm_factor) =>
            {
                AdminReply::Ok
            }
            _ => AdminReply::Error,
        };
        self.admin_reply(reply)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tern_store::{Clock, Config, Store};

    use super::*;
    use crate::config::Settings;
    use crate::state::shared::Shared;

    fn shared() -> Shared {
        let store = Store::new(Config::default(), Arc::new(Clock::manual(1_700_000_000))).unwrap();
        Shared::new(Settings::default(), store)
    }

    #[test]
    fn answers_as_memcached_does() {
        let shared = shared();
        let ops = Ops::new(&shared, 0);
        let words = |line: &'static str| -> Vec<&'static [u8]> {
            line.split(' ').map(str::as_bytes).collect()
        };
        assert_eq!(ops.lru_crawler(&words("crawl all")), AdminReply::Ok);
        assert_eq!(ops.lru_crawler(&words("crawl 1")), AdminReply::Ok);
        assert_eq!(
            ops.lru_crawler(&words("crawl 99")),
            AdminReply::Status("BADCLASS invalid class id")
        );
        assert_eq!(ops.lru_crawler(&words("sleep x")), AdminReply::Error);
        assert_eq!(ops.lru_crawler(&[]), AdminReply::Error);
        assert_eq!(ops.slabs(&words("automove 3")), AdminReply::Error);
        // 1.6.45's answers.
        let bad_format = AdminReply::Status("CLIENT_ERROR bad command line format");
        assert_eq!(ops.slabs(&words("automove invalid")), bad_format);
        assert_eq!(ops.slabs(&words("reassign x 1")), bad_format);
        assert_eq!(ops.slabs(&words("a 1")), AdminReply::Ok);
        assert_eq!(ops.slabs(&words("automove r 1.5")), AdminReply::Ok);
        assert_eq!(ops.slabs(&words("automove ratio x")), AdminReply::Error);
        assert_eq!(ops.slabs(&words("automove ratio")), AdminReply::Error);
        assert_eq!(ops.slabs(&words("automove window 10")), AdminReply::Ok);
        assert_eq!(
            ops.slabs(&words("automove window 1")),
            AdminReply::Status("CLIENT_ERROR automove window too low or too high")
        );
        assert_eq!(ops.slabs(&words("automove")), AdminReply::Error);
        assert_eq!(
            ops.slabs(&words("reassign 1 1")),
            AdminReply::Status("SAME src and dst class are identical")
        );
        assert_eq!(
            ops.slabs(&words("reassign 0 1")),
            AdminReply::Status("NOSPARE source class has no spare pages")
        );
        assert_eq!(
            ops.slabs(&words("reassign -1 1")),
            AdminReply::Status("BADCLASS invalid src or dst class id")
        );
        assert_eq!(ops.lru(&words("tune 10 20 0.1 2")), AdminReply::Ok);
        assert_eq!(ops.lru(&words("mode bogus")), AdminReply::Error);
        // Without a flash tier.
        assert_eq!(ops.extstore(&words("item_size 100")), AdminReply::Error);
    }

    /// `line` run on `knobs`, which it changes; whether it answers `OK`.
    fn run(knobs: &mut FlashSettings, line: &str) -> bool {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (after, ok) = extstore_change(&words[1..], *knobs);
        *knobs = after;
        ok
    }

    /// memcached 1.6.45's answers, run with ext_path on 2026-11-26, each on the knobs the one
    /// before left.
    #[test]
    fn extstore_as_memcached_runs_it() {
        let k = &mut FlashSettings::default();
        for (line, ok) in [
            ("extstore", false),
            ("extstore item_size", false),
            ("extstore item_size -1", false),
            ("extstore item_size 4294967296", false),
            ("extstore item_size 12abc", false),
            ("extstore bogus 1", false),
            ("extstore free_memchunks 1", false),
            ("extstore free_memchunks 64 2", false),
            ("extstore free_memchunks 63 2", true),
            ("extstore f 1 2", true),
            ("extstore item_age 4294967295", true),
        ] {
            assert_eq!(run(k, line), ok, "{line}");
        }
        assert_eq!(*k, FlashSettings::default(), "nothing changed");
        for (line, item_size) in [
            ("extstore item_size 100", 100),
            ("extstore item 101", 101),
            ("extstore i 102", 102),
            ("extstore item_size 5 6", 5),
        ] {
            assert!(run(k, line), "{line}");
            assert_eq!(k.item_size, item_size, "{line}");
        }
        for line in [
            "extstore max 5",
            "extstore drop 7",
            "extstore low_ttl 9",
            "extstore recache_rate 3",
            "extstore compact_under 4",
            "extstore item_age 8",
            "extstore drop_unread 5",
        ] {
            assert!(run(k, line), "{line}");
        }
        assert_eq!(
            (k.max_sleep_us, k.drop_under, k.low_ttl, k.recache_rate),
            (5, 7, 9, 3)
        );
        assert_eq!((k.compact_under, k.item_age, k.drop_unread), (4, 8, true));
        assert!(run(k, "extstore drop_unread 0") && !k.drop_unread);
        for (line, frag) in [
            ("extstore max_frag 0.5", 0.5),
            ("extstore max_frag 1e1", 10.0),
            ("extstore max_frag -1", -1.0),
            ("extstore max_frag inf", f64::INFINITY),
        ] {
            assert!(run(k, line), "{line}");
            assert_eq!(k.max_frag, frag, "{line}");
        }
        assert!(run(k, "extstore max_frag nan") && k.max_frag.is_nan());
        // A value strtod cannot read leaves 0 behind, and ERROR.
        for line in ["extstore max_frag abc", "extstore max_frag 1e999"] {
            run(k, "extstore max_frag 0.5");
            assert!(!run(k, line), "{line}");
            assert_eq!(k.max_frag, 0.0, "{line}");
        }
        // Longer than memcached copies: ERROR, nothing changed.
        run(k, "extstore max_frag 0.5");
        assert!(!run(k, &format!("extstore max_frag 0.{}", "5".repeat(31))));
        assert_eq!(k.max_frag, 0.5);
    }
}
