//! `tern`: one binary, one subcommand per tool.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
// `serve` has its own `-V` (memcached's flag), so the version flag is not propagated.
#[command(name = "tern", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
// Parsed once at start; the size of the largest option set does not matter.
#[allow(clippy::large_enum_variant)]
enum Command {
    // The argument structs' own `about` and `long_about` describe serve and top (in --help and
    // their man pages); a doc comment here would replace them.
    Serve(tern_server::ServeArgs),
    /// Measure a memcached-compatible server: throughput at a tail-latency SLO.
    Bench(tern_bench::BenchArgs),
    /// Inspect the machine's topology, check its tuning, and plan a pinned layout.
    Tune(tern_tune::TuneArgs),
    Top(tern_top::TopArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (tern.1, tern-serve.1, ...) into DIR; the Debian package runs it.
    #[command(hide = true)]
    Man {
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Serve(args) => tern_server::run(args),
        Command::Bench(args) => tern_bench::run(args),
        Command::Tune(args) => tern_tune::run(args),
        Command::Top(args) => tern_top::run(args),
        Command::Completions { shell } => {
            // Into memory first: clap_complete panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tern", &mut script);
            std::io::stdout()
                .write_all(&script)
                .map(|()| ExitCode::SUCCESS)
                .context("writing the completion script")
        }
        Command::Man { dir } => write_man_pages(&dir).map(|()| ExitCode::SUCCESS),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tern: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// One page per command and subcommand, named as man looks them up (`tern-tune-plan.1`); the
/// hidden `man` and clap's `help` get none.
fn write_man_pages(dir: &Path) -> anyhow::Result<()> {
    fn write(cmd: &clap::Command, dir: &Path) -> std::io::Result<()> {
        let source = format!("tern {}", env!("CARGO_PKG_VERSION"));
        clap_mangen::Man::new(cmd.clone())
            .source(source)
            .generate_to(dir)?;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(sub, dir)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Built first, so each subcommand knows its full name (`tern tune plan`).
    let mut cli = Cli::command().disable_help_subcommand(true);
    cli.build();
    write(&cli, dir).with_context(|| format!("writing man pages into {}", dir.display()))
}
