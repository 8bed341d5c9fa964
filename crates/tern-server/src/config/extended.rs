//! memcached's extended options, `-o name[=value],...`, parsed as memcached 1.6 parses them
//! (getsubopt): comma-separated, repeatable, applied in order so a later one wins; a value
//! given to an option that takes none is ignored; an unknown option is refused. Each option
//! memcached 1.6.45 knows (its `subopts_tokens` and extstore's) is in [`OPTIONS`]: it acts,
//! does nothing (as in memcached), is ignored with a reason, or is refused. The extstore
//! options fill `Settings::flash` (`config::flash`).

use anyhow::bail;

use super::ignored::Reason;
use super::Settings;
use Effect::{Flash, Hashpower, IdleTimeout, MaxconnsFast, NoModern, Nothing, ReadBufMemLimit};
use Value::{Flag, Int, IntOrNothing, Number, OneOf, Text};

/// What an option's value must look like; memcached's own checks, so that a command line
/// memcached refuses is refused here too.
#[derive(Clone, Copy)]
enum Value {
    /// Takes no value.
    Flag,
    /// An integer within these bounds.
    Int(u64, u64),
    /// Like `Int`, or no value at all.
    IntOrNothing(u64, u64),
    /// A number above the first bound and at most the second.
    Number(f64, f64),
    OneOf(&'static [&'static str]),
    Text,
}

/// What tern does with an option.
#[derive(Clone, Copy)]
enum Effect {
    MaxconnsFast(bool),
    IdleTimeout,
    /// In megabytes, as memcached's.
    ReadBufMemLimit,
    Hashpower,
    /// `no_modern`: memcached 1.4's defaults; only its `no_maxconns_fast` means something here.
    NoModern,
    /// Does nothing in memcached 1.6 either (`modern`: "currently: nothing").
    Nothing,
    Ignored(Reason),
    Refused(&'static str),
    /// An `ssl_*` option (`config::tls`).
    Tls,
    /// An extstore option (`config::flash`).
    Flash(Ext),
}

/// The extstore options that act (`ext_io_depth` is ignored).
#[derive(Clone, Copy)]
enum Ext {
    Path,
    PageSize,
    WbufSize,
    Threads,
    ItemSize,
    ItemAge,
    LowTtl,
    RecacheRate,
    CompactUnder,
    DropUnder,
    MaxSleep,
    MaxFrag,
    DropUnread,
    /// `slab_automove_freeratio`: shown in `stats settings`, else ignored (no slab classes).
    FreeRatio,
}

struct Opt {
    name: &'static str,
    value: Value,
    effect: Effect,
}

const fn opt(name: &'static str, value: Value, effect: Effect) -> Opt {
    Opt {
        name,
        value,
        effect,
    }
}

const U32: u64 = u32::MAX as u64;
const ANY: Value = Value::Number(f64::NEG_INFINITY, f64::INFINITY);
const SLABS: Effect = Effect::Ignored(Reason::SlabClasses);
const LRU: Effect = Effect::Ignored(Reason::Lru);

const NO_PROXY: Effect = Effect::Refused("tern is a cache, not memcached's proxy");

/// Every extended option of memcached 1.6.45 (built with TLS, extstore and the proxy, and its
/// debug build's `relaxed_privileges`).
const OPTIONS: &[Opt] = &[
    opt("maxconns_fast", Flag, MaxconnsFast(true)),
    opt("no_maxconns_fast", Flag, MaxconnsFast(false)),
    opt("idle_timeout", Int(0, U32), IdleTimeout),
    opt("hashpower", Int(12, 32), Hashpower),
    opt("modern", Flag, Nothing),
    opt("no_modern", Flag, NoModern),
    opt("inline_ascii_resp", Flag, Nothing),
    opt("no_inline_ascii_resp", Flag, Nothing),
    opt("no_drop_privileges", Flag, Nothing),
    opt("slab_chunk_max", Int(1, 1024), SLABS),
    opt("slab_sizes", Text, SLABS),
    opt("slab_reassign", Flag, SLABS),
    opt("no_slab_reassign", Flag, SLABS),
    opt("slab_automove", IntOrNothing(0, 2), SLABS),
    opt("no_slab_automove", Flag, SLABS),
    opt("slab_automove_ratio", Number(0.0, 1.0), SLABS),
    opt("slab_automove_window", Int(3, 1800), SLABS),
    opt("slab_automove_freeratio", ANY, Flash(Ext::FreeRatio)),
    opt("no_chunked_items", Flag, SLABS),
    opt("track_sizes", Flag, SLABS),
    opt("lru_crawler", Flag, LRU),
    opt("no_lru_crawler", Flag, LRU),
    opt("lru_crawler_sleep", Int(0, 1_000_000), LRU),
    opt("lru_crawler_tocrawl", Int(0, U32), LRU),
    opt("lru_maintainer", Flag, LRU),
    opt("no_lru_maintainer", Flag, LRU),
    opt("hot_lru_pct", Int(1, 79), LRU),
    opt("warm_lru_pct", Int(1, 79), LRU),
    opt("hot_max_factor", Number(0.0, f64::INFINITY), LRU),
    opt("warm_max_factor", Number(0.0, f64::INFINITY), LRU),
    opt("temporary_ttl", Int(0, U32), LRU),
    opt("tail_repair_time", Int(10, U32), LRU),
    opt(
        "hash_algorithm",
        OneOf(&["jenkins", "murmur3", "xxh3"]),
        Effect::Ignored(Reason::HashTable),
    ),
    opt("no_hashexpand", Flag, Effect::Ignored(Reason::HashTable)),
    opt(
        "watcher_logbuf_size",
        Int(0, U32),
        Effect::Ignored(Reason::LogBuffers),
    ),
    opt(
        "worker_logbuf_size",
        Int(0, U32),
        Effect::Ignored(Reason::LogBuffers),
    ),
    opt("read_buf_mem_limit", Int(0, U32), ReadBufMemLimit),
    opt(
        "resp_obj_mem_limit",
        Text,
        Effect::Ignored(Reason::Deprecated),
    ),
    opt("drop_privileges", Flag, Effect::Ignored(Reason::Seccomp)),
    // memcached-debug's only (the build its own tests run, whose harness always passes it):
    // it loosens drop_privileges' seccomp filter for the tests.
    opt("relaxed_privileges", Flag, Effect::Ignored(Reason::Seccomp)),
    opt(
        "sock_cookie_id",
        Int(0, U32),
        Effect::Ignored(Reason::SocketMark),
    ),
    opt("ext_path", Text, Flash(Ext::Path)),
    opt("ext_page_size", Int(0, U32), Flash(Ext::PageSize)),
    opt("ext_wbuf_size", Int(0, U32), Flash(Ext::WbufSize)),
    opt("ext_threads", Int(0, U32), Flash(Ext::Threads)),
    opt(
        "ext_io_depth",
        Int(0, U32),
        Effect::Ignored(Reason::FlashIoDepth),
    ),
    opt("ext_item_size", Int(0, U32), Flash(Ext::ItemSize)),
    opt("ext_item_age", Int(0, U32), Flash(Ext::ItemAge)),
    opt("ext_low_ttl", Int(0, U32), Flash(Ext::LowTtl)),
    opt("ext_recache_rate", Int(0, U32), Flash(Ext::RecacheRate)),
    opt("ext_compact_under", Int(0, U32), Flash(Ext::CompactUnder)),
    opt("ext_drop_under", Int(0, U32), Flash(Ext::DropUnder)),
    opt("ext_max_sleep", Int(0, U32), Flash(Ext::MaxSleep)),
    opt("ext_max_frag", ANY, Flash(Ext::MaxFrag)),
    opt("ext_drop_unread", Flag, Flash(Ext::DropUnread)),
    opt("ssl_chain_cert", Text, Effect::Tls),
    opt("ssl_key", Text, Effect::Tls),
    opt("ssl_verify_mode", Text, Effect::Tls),
    opt("ssl_keyformat", Text, Effect::Tls),
    opt("ssl_ciphers", Text, Effect::Tls),
    opt("ssl_ca_cert", Text, Effect::Tls),
    opt("ssl_wbuf_size", Text, Effect::Tls),
    opt("ssl_session_cache", Flag, Effect::Tls),
    opt(
        "ssl_kernel_tls",
        Flag,
        Effect::Refused("kernel TLS offload is not supported: rustls encrypts in the worker"),
    ),
    opt("ssl_min_version", Text, Effect::Tls),
    opt("proxy_config", Text, NO_PROXY),
    opt("proxy_arg", Text, NO_PROXY),
    opt("proxy_uring", Flag, NO_PROXY),
    opt("proxy_memprofile", Flag, NO_PROXY),
];

/// Applies one `-o` argument (`name[=value],...`) to `settings`, left to right.
pub(super) fn apply(settings: &mut Settings, arg: &str) -> anyhow::Result<()> {
    let mut items: Vec<&str> = arg.split(',').map(str::trim).collect();
    // getsubopt stops at the end of the string, so a trailing comma (or nothing at all) is
    // accepted; an empty option between two commas is not.
    if items.last() == Some(&"") {
        items.pop();
    }
    for item in items {
        let (name, value) = match item.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (item, None),
        };
        let Some(opt) = OPTIONS.iter().find(|o| o.name == name) else {
            bail!("-o {item}: unknown extended option \"{name}\" (see tern serve --help)");
        };
        if let Effect::Refused(why) = opt.effect {
            bail!("-o {name}: {why}");
        }
        if matches!(opt.effect, Flash(Ext::Path)) && value.is_none() {
            bail!("-o ext_path: missing argument to ext_path, ie: ext_path=/d/file:5G");
        }
        let number = check(opt, value)?;
        match opt.effect {
            MaxconnsFast(on) => settings.maxconns_fast = on,
            IdleTimeout => settings.idle_timeout_secs = number.unwrap_or_default(),
            ReadBufMemLimit => settings.read_buf_mem_limit = number.unwrap_or_default() << 20,
            Hashpower => settings.hashpower = number.map(|n| n as u32),
            NoModern => {
                settings.maxconns_fast = false;
                settings.ignore(name, Reason::NoModern);
            }
            Nothing => {}
            Effect::Ignored(reason) => settings.ignore(name, reason),
            Effect::Tls => {
                settings.tls.apply(name, value)?;
            }
            Flash(ext) => apply_flash(settings, ext, value, number)?,
            Effect::Refused(_) => unreachable!("refused above"),
        }
    }
    Ok(())
}

/// Sets an extstore option, its value checked already (`number`: an integer one's).
fn apply_flash(
    settings: &mut Settings,
    ext: Ext,
    value: Option<&str>,
    number: Option<u64>,
) -> anyhow::Result<()> {
    // `check` took the value within 0..=u32::MAX, or as a float.
    let int = number.unwrap_or_default() as u32;
    let float = || {
        value
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_default()
    };
    let flash = &mut settings.flash;
    let knobs = &mut flash.knobs;
    match ext {
        Ext::Path => {
            if flash.add_path(value.unwrap_or_default())?.is_some() {
                settings.ignore("ext_path's bucket", Reason::FlashBucket);
            }
        }
        Ext::PageSize => flash.page_size_mb = int,
        Ext::WbufSize => flash.wbuf_size_mb = int,
        Ext::Threads => flash.threads = int,
        Ext::ItemSize => knobs.item_size = int,
        Ext::ItemAge => knobs.item_age = int,
        Ext::LowTtl => knobs.low_ttl = int,
        Ext::RecacheRate => knobs.recache_rate = int,
        Ext::CompactUnder => knobs.compact_under = int,
        Ext::DropUnder => knobs.drop_under = int,
        Ext::MaxSleep => knobs.max_sleep_us = int,
        Ext::MaxFrag => knobs.max_frag = float(),
        Ext::DropUnread => knobs.drop_unread = true,
        Ext::FreeRatio => settings.set_slab_automove_freeratio(float()),
    }
    Ok(())
}

/// Checks `value` against what `opt` takes; returns it when it is an integer.
fn check(opt: &Opt, value: Option<&str>) -> anyhow::Result<Option<u64>> {
    let name = opt.name;
    let Some(text) = value else {
        return match opt.value {
            Flag | IntOrNothing(..) => Ok(None),
            _ => bail!("-o {name}: needs a value ({name}=...)"),
        };
    };
    match opt.value {
        Flag | Text => Ok(None),
        Int(low, high) | IntOrNothing(low, high) => match text.parse::<u64>() {
            Ok(n) if (low..=high).contains(&n) => Ok(Some(n)),
            _ => bail!("-o {name}={text}: expected a whole number from {low} to {high}"),
        },
        Number(above, at_most) => match text.parse::<f64>() {
            Ok(x) if x > above && x <= at_most => Ok(None),
            _ if at_most.is_finite() => {
                bail!("-o {name}={text}: expected a number above {above}, at most {at_most}")
            }
            _ if above.is_finite() => bail!("-o {name}={text}: expected a number above {above}"),
            _ => bail!("-o {name}={text}: expected a number"),
        },
        OneOf(words) if words.contains(&text) => Ok(None),
        OneOf(words) => bail!("-o {name}={text}: expected one of {}", words.join(", ")),
    }
}

/// `-o`'s long help, made from [`OPTIONS`] so that it names every option.
pub(super) fn help() -> String {
    let ignored = groups(
        |e| match e {
            Effect::Ignored(reason) => Some(reason),
            _ => None,
        },
        Reason::why,
    );
    let refused = groups(
        |e| match e {
            Effect::Refused(why) => Some(why),
            _ => None,
        },
        |why| why,
    );
    format!(
        "memcached's extended options: comma-separated, repeatable (-o modern,idle_timeout=60), \
         applied in order. Unknown options are refused, as memcached refuses them.\n\
         Acting: maxconns_fast, no_maxconns_fast (also --maxconns-fast), idle_timeout=SECS (also \
         --idle-timeout), read_buf_mem_limit=MB (also --read-buf-mem-limit), hashpower=12..32 (also --hashpower; shown in `stats settings`, the \
         index grows by itself), no_modern (its no_maxconns_fast part), {} (with -Z), {} (the \
         flash tier, memcached's extstore, on with ext_path=FILE:SIZE: see the --ext-* flags), \
         slab_automove_freeratio=N (also --slab-automove-freeratio; shown in `stats settings` \
         with a flash tier, and named in the warning: tern has no slab classes).\n\
         Doing nothing, as in memcached 1.6: {}.\n\
         Accepted and ignored, named in a start-up warning:\n{ignored}\n\
         Refused:\n{refused}",
        spelled(|e| matches!(e, Effect::Tls)),
        spelled(|e| matches!(e, Flash(ext) if !matches!(ext, Ext::FreeRatio))),
        spelled(|e| matches!(e, Nothing)),
    )
}

/// The options `key` gives a key, a line of them for each key (in the table's order), each
/// followed by `why` of its key.
fn groups<K: Copy + PartialEq>(
    key: impl Fn(Effect) -> Option<K>,
    why: impl Fn(K) -> &'static str,
) -> String {
    let mut keys: Vec<K> = Vec::new();
    for k in OPTIONS.iter().filter_map(|o| key(o.effect)) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.iter()
        .map(|&k| {
            let list = spelled(|e| key(e) == Some(k));
            format!("  {list}\n      ({})", why(k))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The options whose effect `keep` takes, as they are written (`name`, `name=N`, ...).
fn spelled(keep: impl Fn(Effect) -> bool) -> String {
    OPTIONS
        .iter()
        .filter(|o| keep(o.effect))
        .map(|o| match o.value {
            Flag => o.name.to_string(),
            IntOrNothing(..) => format!("{}[=N]", o.name),
            Int(..) | Number(..) => format!("{}=N", o.name),
            OneOf(words) => format!("{}={}", o.name, words.join("|")),
            Text => format!("{}=...", o.name),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
