//! `run`: `tern serve` from its options to a graceful stop, in the order memcached does things
//! (signals, certificates, sockets, -d, -u, the store, the workers), and the threads beside
//! the workers: the clock, the flash tier's, the admin endpoint.

use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mio::{Poll, Waker};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use tern_store::{Clock, Config, PageKind, Store};

use crate::config::{IoEngine, ServeArgs, Settings};
use crate::startup::placement::Placement;
use crate::startup::{notify, process, reload, restart, takeover};
use crate::state::credentials::AuthFile;
use crate::state::sasl::Sasl;
use crate::state::shared::{self, Shared};
use crate::state::tls_config::Tls;
use crate::state::watch;
use crate::transport::worker::{Worker, WAKER};
use crate::transport::{net, udp, uring};

/// How often the background thread asks the store to reclaim expired items.
const RECLAIM_EVERY_SECS: u64 = 10;
/// Descriptors tern may hold beside its clients' and those open at start: per worker its poll,
/// waker and ring; for the server, the admin endpoint's clients, watchers' duplicates, files.
const SPARE_FILES_PER_WORKER: u64 = 4;
const SPARE_FILES: u64 = 32;

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if args.version {
        // As `memcached -V` prints `memcached 1.6.45`: the name, then the version `version`
        // reports.
        println!("tern {}", crate::state::VERSION);
        return Ok(ExitCode::SUCCESS);
    }
    let mut settings = Settings::from_args(&args)?;
    let log_level = init_logging(settings.verbose);
    settings.warn_ignored();
    settings.warn_exposed()?;
    settings.absolutize_paths()?;
    let taking_over = args.takeover;
    let reloader = reload::Reloader::new(args)?;

    // Before any socket is bound: a client (or a test) that sees the port open may signal at
    // once, and the default action would kill the server unsaved. Nothing is lost until `run`
    // reads them; SIGUSR1 is memcached's graceful stop. (No thread: -d's fork keeps them.)
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1, SIGHUP])
        .context("installing signal handlers")?;
    // Certificates before anything else is bound or dropped (-u), as memcached reads them.
    let tls = match settings.tls.enabled {
        true => Some(Arc::new(
            Tls::load(&settings.tls).map_err(anyhow::Error::msg)?,
        )),
        false => None,
    };
    let auth = match &settings.auth_file {
        Some(path) => Some(AuthFile::load(path)?),
        None => None,
    };
    let sasl = match settings.enable_sasl {
        true => Some(Sasl::init()?),
        false => None,
    };
    // Before any socket or the memory file: the old server's sockets come over, and its items
    // are saved once this returns.
    let mut inherited = match (taking_over, &settings.takeover_socket) {
        (false, _) => None,
        (true, Some(path)) => takeover::take_over(path)?,
        (true, None) => anyhow::bail!("--takeover needs --takeover-socket PATH"),
    };
    // Sockets first, so a port in use is reported on the terminal even with -d.
    let mut per_worker: Vec<Vec<net::Listener>> =
        (0..settings.threads).map(|_| Vec::new()).collect();
    for (addr, mode) in settings.listen_tls()? {
        let mut listeners = match &mut inherited {
            Some(inherited) => inherited.tcp(addr, settings.threads, settings.listen_backlog)?,
            None => Vec::new(),
        };
        if listeners.is_empty() {
            listeners = net::bind_tcp(addr, settings.threads, settings.listen_backlog)?;
        }
        // An old server with more workers handed over more sockets: some workers take two.
        for (i, listener) in listeners.into_iter().enumerate() {
            per_worker[i % settings.threads].push(listener.with_tls(mode));
        }
        tracing::info!("listening on {addr} ({mode:?})");
    }
    // UDP (-U) only when asked for: off by default, as a UDP port open to the world can be used
    // to reflect and amplify traffic at a spoofed source address.
    let mut udp_per_worker: Vec<Vec<mio::net::UdpSocket>> =
        (0..settings.threads).map(|_| Vec::new()).collect();
    if settings.udp_port != 0 {
        // One UDP socket per address, however many TCP ports listen on it.
        let mut udp_addrs = Vec::new();
        for addr in settings.listen_addrs()? {
            let addr = std::net::SocketAddr::new(addr.ip(), settings.udp_port);
            if !udp_addrs.contains(&addr) {
                udp_addrs.push(addr);
            }
        }
        for addr in udp_addrs {
            let mut sockets = match &mut inherited {
                Some(inherited) => inherited.udp(addr, settings.threads)?,
                None => Vec::new(),
            };
            if sockets.is_empty() {
                sockets = udp::bind(addr, settings.threads)?;
            }
            for (i, socket) in sockets.into_iter().enumerate() {
                udp_per_worker[i % settings.threads].push(socket);
            }
            tracing::info!("listening on UDP {addr}");
        }
    }
    if let Some(path) = &settings.unix_socket {
        // One listener suffices: unix clients are local and few.
        let listener = match inherited.as_mut().and_then(|i| i.unix(path)) {
            Some(listener) => listener,
            None => net::bind_unix(path, settings.unix_mask)?,
        };
        per_worker[0].push(listener);
        tracing::info!("listening on {}", path.display());
    }
    let admin_listener = match settings.admin_port {
        Some(port) => {
            // On the (first) listen address, so the endpoint is as reachable as the cache
            // (loopback when the cache is on a unix socket only).
            let ip = match settings.listen_addrs()?.first() {
                Some(addr) => addr.ip(),
                None => std::net::Ipv4Addr::LOCALHOST.into(),
            };
            let addr = std::net::SocketAddr::new(ip, port);
            match inherited.as_mut().and_then(|i| i.admin(addr)) {
                Some(listener) => Some(listener),
                // std's bind sets SO_REUSEADDR (on Unix), as `net::bind_tcp` does: a restart
                // binds at once while the previous process's connections close.
                None => Some(
                    std::net::TcpListener::bind(addr)
                        .with_context(|| format!("--admin-port {port}: cannot listen on {addr}"))?,
                ),
            }
        }
        None => None,
    };
    let took_over = inherited.is_some();
    if let Some(inherited) = inherited {
        inherited.close_unclaimed();
    }
    // Duplicates of every listening socket, for a successor's hand-over.
    let handover_sockets = match settings.takeover_socket {
        Some(_) => per_worker
            .iter()
            .flatten()
            .map(|l| l.as_fd().try_clone_to_owned())
            .chain(
                udp_per_worker
                    .iter()
                    .flatten()
                    .map(|s| s.as_fd().try_clone_to_owned()),
            )
            .chain(
                admin_listener
                    .iter()
                    .map(|l| l.as_fd().try_clone_to_owned()),
            )
            .collect::<std::io::Result<Vec<OwnedFd>>>()
            .context("--takeover-socket: duplicating the listening sockets")?,
        None => Vec::new(),
    };

    // With the sockets bound, before -d (so a refusal reaches the terminal) and before -u
    // (root may raise the hard limit), as memcached does.
    raise_file_limit(&settings)?;

    let readiness = match settings.daemon {
        true => Some(process::daemonize(settings.verbose > 0)?),
        false => None,
    };
    // As root: pidfile and memory locking first, then drop to the -u user.
    let pidfile = match &settings.pidfile {
        Some(path) => Some(process::PidFile::create(path)?),
        None => None,
    };
    if settings.lock_memory {
        process::lock_memory()?;
    }
    process::return_large_buffers_at_once();
    if let Some(user) = &settings.user {
        process::drop_privileges(user)?;
    }

    // Before the heap is mapped, so its pages come from the --numa-node node.
    let placement = Placement::plan(&settings)?;
    placement.bind_memory()?;
    let clock = Arc::new(Clock::system());
    let store_config = Config {
        heap_bytes: settings.memory_limit_mb << 20,
        max_item_size: settings.max_item_size,
        eviction: settings.effective_eviction(),
        cas_enabled: !settings.disable_cas,
        large_pages: settings.enable_largepages,
        lock_memory: settings.lock_memory,
        shards: tern_store::shards_for(settings.threads, settings.memory_limit_mb << 20),
        writers: settings.threads,
        flash: settings.flash.store_config(),
        ..Config::default()
    };
    let (store, restored) = match &settings.memory_file {
        Some(file) => {
            let (store, restored) = restart::open(store_config, clock.clone(), file)?;
            (store, Some(restored))
        }
        None => (Store::new(store_config, clock.clone())?, None),
    };
    report_heap(&store, settings.enable_largepages);
    let unix_socket = settings.unix_socket.clone();
    // After -d forked (its thread would not survive the fork).
    let offered = match &settings.takeover_socket {
        Some(path) => {
            let stop = signals.handle();
            Some(takeover::offer(path, handover_sockets, move || {
                stop.close()
            })?)
        }
        None => None,
    };
    if settings.io_engine == IoEngine::Uring {
        // Once, for every worker: a kernel without what the engine needs serves with epoll.
        if let Some(why) = uring::unavailable() {
            tracing::warn!("--io-engine=uring: {why}; the workers use epoll");
            settings.io_engine = IoEngine::Epoll;
        }
    }
    let mut shared = Shared::new(settings, store);
    shared.store.observe_evictions(watch::observe_evictions(
        shared.watchers.clone(),
        clock.clone(),
    ));
    shared.set_log_level = log_level;
    shared.restore = restored;
    shared.tls = tls;
    shared.auth = auth;
    shared.sasl = sasl;
    shared.worker_cpus = placement.worker_cpus();
    let shared = Arc::new(shared);
    // Its thread starts after -d forked (a fork keeps only the calling thread).
    let _admin = match admin_listener {
        Some(listener) => {
            let source = Arc::new(shared::ServerAdmin(shared.clone()));
            let server = tern_admin::AdminServer::from_listener(listener, source)?;
            tracing::info!("admin endpoint on http://{}", server.local_addr());
            Some(server)
        }
        None => None,
    };

    let store_has_flash = shared.store.flash_knobs().is_some();
    let mut wakers = Vec::new();
    let mut threads = Vec::new();
    for (id, (listeners, udp)) in per_worker.into_iter().zip(udp_per_worker).enumerate() {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        if store_has_flash {
            let wake = waker.clone();
            let _ = shared.workers[id].flash_waker.set(Arc::new(move || {
                // A failed wake leaves the connection to its next event.
                let _ = wake.wake();
            }));
        }
        wakers.push(waker);
        let run: Box<dyn FnOnce() + Send> = match shared.settings.io_engine {
            IoEngine::Epoll => {
                let mut worker = Worker::new(id, shared.clone(), poll, listeners)?;
                for socket in udp {
                    worker.add_udp(socket)?;
                }
                Box::new(move || worker.run())
            }
            IoEngine::Uring => {
                let mut worker = uring::UringWorker::new(id, shared.clone(), poll, listeners);
                for socket in udp {
                    worker.add_udp(socket);
                }
                Box::new(move || worker.run())
            }
        };
        // The thread inherits the main thread's affinity at spawn.
        placement.enter_worker(id)?;
        threads.push(
            std::thread::Builder::new()
                .name(format!("tern-worker-{id}"))
                .spawn(run)
                .context("starting a worker thread (with -k, its stack counts against the locked-memory limit)")?,
        );
    }
    placement.enter_background()?;
    let clock_thread = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("tern-clock".into())
            .spawn(move || tick_clock(&shared, &clock))?
    };
    // ext_threads I/O threads read flash for the workers; one more writes buffers, frees and
    // compacts pages and moves idle items, so that a read never waits behind a page's compaction.
    let flash_threads = match &shared.store.config().flash {
        Some(flash) => {
            let background = {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name("tern-flash-work".into())
                    .spawn(move || flash_work(&shared))
                    .context("starting the flash tier's thread")?
            };
            let mut threads = vec![background];
            for id in 0..flash.io_threads {
                let shared = shared.clone();
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("tern-flash-io-{id}"))
                        .spawn(move || flash_reads(&shared))
                        .context("starting a flash I/O thread")?,
                );
            }
            threads
        }
        None => Vec::new(),
    };

    // A successor tells systemd it is the service's main process now (the one that was has
    // exited or is exiting), so a hand-over can run inside one unit (docs/restart.md).
    let status = notify::serving_status(&shared.settings);
    match took_over {
        true => notify::ready_as_main(&status),
        false => notify::ready(&status),
    }
    if let Some(readiness) = readiness {
        readiness.serving();
    }

    let signal = reloader.until_stopped(&mut signals, &shared);
    let handed_over = offered.as_ref().is_some_and(takeover::Offered::handed_over);
    // After a hand-over the service goes on in the successor: STOPPING=1 would stop the unit.
    if !handed_over {
        notify::stopping();
    }
    if handed_over {
        tracing::info!("handing over: no new connections, finishing replies");
    } else {
        tracing::info!(?signal, "stopping: no new connections, finishing replies");
    }
    shared.shutdown.store(true, Ordering::SeqCst);
    for waker in &wakers {
        waker.wake()?;
    }
    for thread in threads {
        let _ = thread.join();
    }
    for thread in std::iter::once(clock_thread).chain(flash_threads) {
        thread.thread().unpark();
        let _ = thread.join();
    }
    if let Some(file) = &shared.settings.memory_file {
        restart::save(&shared.store, file)?;
    }
    // The successor serves on the unix socket now, and writes its own pidfile once told.
    if let Some(path) = unix_socket.filter(|_| !handed_over) {
        let _ = std::fs::remove_file(path);
    }
    drop(pidfile);
    if let Some(offered) = offered {
        offered.finish();
    }
    Ok(ExitCode::SUCCESS)
}

/// Raises `RLIMIT_NOFILE` to what `-c` clients need beside the descriptors tern holds itself:
/// the soft limit, and the hard one too where the process may (root with CAP_SYS_RESOURCE).
/// memcached 1.6.45 sets both to `-c` and refuses to start where it cannot; tern refuses too
/// when the hard limit is below `-c`, and where it holds `-c` but not tern's own descriptors,
/// says so and serves: clients past the limit wait in the backlog until a descriptor frees.
fn raise_file_limit(settings: &Settings) -> anyhow::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error()).context("reading the open files limit");
    }
    let open = std::fs::read_dir("/proc/self/fd").map_or(SPARE_FILES, |d| d.count() as u64);
    let conns = settings.conn_limit as u64;
    let needed = conns
        .saturating_add(open)
        .saturating_add(settings.threads as u64 * SPARE_FILES_PER_WORKER)
        .saturating_add(SPARE_FILES);
    let (soft, hard) = (limit.rlim_cur, limit.rlim_max);
    if soft >= needed {
        return Ok(());
    }
    let set = |soft: u64, hard: u64| {
        let limit = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct passed, nothing else.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
    };
    if set(needed, hard.max(needed)) {
        tracing::info!("open files limit raised from {soft} to {needed} for -c {conns}");
        return Ok(());
    }
    if hard < conns {
        anyhow::bail!(
            "failed to set rlimit for open files: -c {conns} needs {needed} descriptors and the \
             hard limit is {hard}. Try starting as root or requesting smaller maxconns value."
        );
    }
    // The soft limit may always go up to the hard one.
    let now = if set(hard, hard) { hard } else { soft };
    tracing::warn!(
        "open files limited to {now} (hard limit {hard}): -c {conns} needs {needed} descriptors; \
         past the limit, new clients wait in the backlog until a descriptor frees"
    );
    Ok(())
}

/// Says at start how the item heap's pages are backed, so a `-L` that got no huge pages is
/// never silent.
fn report_heap(store: &Store, large_pages: bool) {
    let mib = store.config().heap_bytes >> 20;
    let pages = match store.page_kind() {
        PageKind::HugeTlb => "explicit huge pages (MAP_HUGETLB)",
        PageKind::TransparentHuge => "transparent huge pages (madvise)",
        PageKind::Normal => "normal pages",
    };
    if large_pages && store.page_kind() == PageKind::Normal {
        tracing::warn!(
            "-L: no huge pages could be had (no hugetlb pool and transparent huge pages refused); \
             the {mib} MiB item heap uses normal pages"
        );
    } else {
        tracing::info!("item heap: {mib} MiB in {pages}");
    }
}

/// Ticks the store's clock each second and reclaims expired items every few seconds.
fn tick_clock(shared: &Shared, clock: &Clock) {
    let mut ticks = 0u64;
    while !shared.shutdown.load(Ordering::SeqCst) {
        std::thread::park_timeout(Duration::from_secs(1));
        clock.tick();
        ticks += 1;
        if ticks % RECLAIM_EVERY_SECS == 0 {
            shared.store.reclaim_expired();
        }
    }
}

/// The flash tier's background thread: the store's work for it, pass after pass, resting as
/// long as each pass says (woken early at shutdown).
fn flash_work(shared: &Shared) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        let rest = shared.store.flash_work();
        std::thread::park_timeout(rest);
    }
}

/// A flash I/O thread: reads what deferred requests need, as they ask (it stops within the
/// wait once the workers have stopped).
fn flash_reads(shared: &Shared) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        shared.store.serve_flash_reads(Duration::from_millis(50));
    }
}

/// Quiet by default (warnings and errors); -v info, -vv debug, -vvv trace. Returns the setter
/// the `verbosity` command uses to change the level while running.
fn init_logging(verbose: u8) -> Option<shared::LogLevelSetter> {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::prelude::*;
    let level = |verbose: u32| match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        2 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(level(u32::from(verbose)));
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .try_init()
        .is_ok();
    installed.then(|| {
        Box::new(move |verbose: u32| {
            let _ = handle.modify(|filter| *filter = level(verbose));
        }) as shared::LogLevelSetter
    })
}
