//! memcached options tern accepts but does not act on, and why: a memcached command line or
//! memcached.conf must start tern unchanged, yet nothing asked for may be dropped silently, so
//! each is named once in one start-up warning.

/// Why an accepted memcached option does nothing in tern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    SlabClasses,
    Lru,
    HashTable,
    NoModern,
    LogBuffers,
    Deprecated,
    FlashIoDepth,
    FlashBucket,
    Seccomp,
    SocketMark,
    NapiIds,
    CoreLimit,
    ConfSkipped,
    ConfLogfile,
}

impl Reason {
    pub fn why(self) -> &'static str {
        match self {
            Reason::SlabClasses => "tern has no slab classes: items of every size share segments",
            Reason::Lru => {
                "tern has no LRU: it evicts whole segments, as --eviction says, and reclaims \
                 expired items in the background"
            }
            Reason::HashTable => "tern's index sizes and hashes itself",
            Reason::NoModern => {
                "only its no_maxconns_fast part applies: tern has no 1.4-era slab, LRU or hash \
                 defaults"
            }
            Reason::LogBuffers => "tern sizes its log buffers itself",
            Reason::Deprecated => "memcached no longer uses it either",
            Reason::FlashIoDepth => {
                "tern's flash tier takes no I/O depth: its ext_threads threads do the I/O"
            }
            Reason::FlashBucket => {
                "tern's flash files form one pool of pages: a file takes no bucket of its own"
            }
            Reason::Seccomp => "tern installs no seccomp filter",
            Reason::SocketMark => "tern sets no SO_MARK on its sockets",
            Reason::NapiIds => {
                "the kernel spreads connections over the workers' SO_REUSEPORT sockets: place \
                 the workers with --pin"
            }
            Reason::CoreLimit => {
                "tern leaves the core-file size limit as it finds it: set LimitCORE= or ulimit -c"
            }
            Reason::ConfSkipped => {
                "Debian's start scripts skip these lines too: the service manager runs the \
                 server in the foreground, while -d on the command line still forks"
            }
            Reason::ConfLogfile => {
                "tern logs to stderr, which is the journal under systemd, where Debian's \
                 memcached.service ignores logfile too; redirect stderr to keep a file"
            }
        }
    }
}

/// One accepted option that does nothing: `-f`, `slab_chunk_max`, `-d in memcached.conf`...
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    pub name: String,
    pub reason: Reason,
}

/// The start-up warning: every ignored option once, grouped by reason in the order they came.
pub fn summary(ignored: &[Ignored]) -> Option<String> {
    let mut groups: Vec<(Reason, Vec<&str>)> = Vec::new();
    for item in ignored {
        match groups.iter_mut().find(|(reason, _)| *reason == item.reason) {
            Some((_, names)) if names.contains(&item.name.as_str()) => {}
            Some((_, names)) => names.push(&item.name),
            None => groups.push((item.reason, vec![&item.name])),
        }
    }
    if groups.is_empty() {
        return None;
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(reason, names)| format!("{} ({})", names.join(", "), reason.why()))
        .collect();
    Some(format!(
        "memcached options accepted and ignored: {}",
        parts.join("; ")
    ))
}
