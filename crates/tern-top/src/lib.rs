//! `tern top`: a live terminal view of one or several cache servers, tern or memcached, as htop
//! is of processes. Modules: `source` reads a server (`stats` over its TCP port; tern's admin
//! endpoint for latency and hot keys), `model` turns samples into rates and history, `ui` draws a
//! frame and maps keys; this file runs the terminal.

pub mod model;
pub mod source;
pub mod ui;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::DefaultTerminal;

use crate::model::ServerModel;
use crate::source::{Admin, Source};
use crate::ui::{Action, App};

#[derive(clap::Args, Debug)]
#[command(
    about = "Watch tern or memcached servers live: ops/s, hit ratio, connections, memory, latency, hot keys",
    long_about = "Watch one or several tern or memcached servers live: ops/s by command, hit \
                  ratio, connections, memory and evictions with per-interval sparklines, from \
                  `stats` over each server's own port. For tern with an admin endpoint \
                  (--admin-port, found by itself through `stats settings`) also get and set \
                  latency percentiles over the last interval and the current hot keys.\n\n\
                  Keys: q quit, p or space pause, s/S sort the servers, Tab or arrows switch \
                  server, + and - double or halve the interval."
)]
pub struct TopArgs {
    /// Servers to watch [default: 127.0.0.1:11211].
    #[arg(value_name = "HOST:PORT")]
    pub servers: Vec<String>,
    /// Time between samples, e.g. 1s, 500ms.
    #[arg(short = 'i', long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// tern's admin endpoint port of each server, in the order of the servers (0: none), on the
    /// server's host. Without it tern top asks each server's `stats settings` for `admin_port`.
    #[arg(long = "admin-port", value_name = "PORT", value_delimiter = ',')]
    pub admin_ports: Vec<u16>,
    /// Read `stats` only, never an admin endpoint (no latency, no hot keys).
    #[arg(long, conflicts_with = "admin_ports")]
    pub stats_only: bool,
    /// How many hot keys to show.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub hot_keys: usize,
}

const DEFAULT_SERVER: &str = "127.0.0.1:11211";

pub fn run(args: TopArgs) -> anyhow::Result<ExitCode> {
    let mut sources = sources(&args)?;
    let models = sources.iter().map(|s| ServerModel::new(s.addr())).collect();
    let mut app = App::new(models, args.interval);
    // Sets a panic hook that restores the terminal too.
    let mut terminal =
        ratatui::try_init().context("tern top needs a terminal (raw mode, alternate screen)")?;
    let outcome = watch(&mut terminal, &mut app, &mut sources);
    ratatui::restore();
    outcome.map(|()| ExitCode::SUCCESS)
}

fn sources(args: &TopArgs) -> anyhow::Result<Vec<Source>> {
    if args.interval.is_zero() {
        bail!("--interval must be more than zero");
    }
    let servers = if args.servers.is_empty() {
        vec![DEFAULT_SERVER.to_string()]
    } else {
        args.servers.clone()
    };
    if !args.admin_ports.is_empty() && args.admin_ports.len() != servers.len() {
        bail!(
            "--admin-port: {} ports for {} servers; give one per server, 0 for none",
            args.admin_ports.len(),
            servers.len()
        );
    }
    // A sample waits for each server in turn: a stuck one may hold the view up this long.
    let timeout = args.interval.min(Duration::from_secs(1));
    Ok(servers
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let admin = match args.admin_ports.get(i) {
                _ if args.stats_only => Admin::Off,
                Some(0) => Admin::Off,
                Some(&port) => Admin::Port(port),
                None => Admin::Discover,
            };
            Source::new(addr, admin, args.hot_keys, timeout)
        })
        .collect())
}

/// Samples every interval and redraws, until a key says quit.
fn watch(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    sources: &mut [Source],
) -> anyhow::Result<()> {
    let mut last_sampled: Vec<Option<Instant>> = vec![None; sources.len()];
    let mut next_sample = Instant::now();
    loop {
        if !app.paused && Instant::now() >= next_sample {
            for ((source, model), last) in sources
                .iter_mut()
                .zip(app.servers.iter_mut())
                .zip(last_sampled.iter_mut())
            {
                match source.sample() {
                    Ok(sample) => {
                        let now = Instant::now();
                        let elapsed = last.map_or(Duration::ZERO, |t| now - t);
                        *last = Some(now);
                        model.push(sample, elapsed);
                    }
                    Err(err) => model.failed(format!("{err:#}")),
                }
            }
            next_sample = Instant::now() + app.interval;
        }
        terminal.draw(|frame| ui::draw(frame, app))?;
        let wait = if app.paused {
            Duration::from_secs(3600)
        } else {
            next_sample.saturating_duration_since(Instant::now())
        };
        if !event::poll(wait)? {
            continue;
        }
        // A resize needs nothing but the redraw at the top of the loop.
        if let Event::Key(key) = event::read()? {
            if key.kind != KeyEventKind::Press {
                continue;
            }
            match app.handle_key(key) {
                Action::Quit => return Ok(()),
                Action::Resume => {
                    for model in &mut app.servers {
                        model.forget_baseline();
                    }
                    next_sample = Instant::now();
                }
                Action::Reschedule => next_sample = Instant::now() + app.interval,
                Action::Continue => {}
            }
        }
    }
}
