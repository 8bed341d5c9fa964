//! `tern`: one binary, one subcommand per tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Run the memcached-compatible cache server.
    Serve(tern_server::ServeArgs),
    /// Measure a memcached-compatible server: throughput at a tail-latency SLO.
    Bench(tern_bench::BenchArgs),
    /// Inspect the machine's topology, check its tuning, and plan a pinned layout.
    Tune(tern_tune::TuneArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Serve(args) => tern_server::run(args),
        Command::Bench(args) => tern_bench::run(args),
        Command::Tune(args) => tern_tune::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("tern: {err:#}");
            ExitCode::FAILURE
        }
    }
}
