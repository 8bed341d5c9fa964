use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct TuneArgs {}

pub fn run(_args: TuneArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not built yet")
}
