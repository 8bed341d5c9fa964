use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not built yet")
}
