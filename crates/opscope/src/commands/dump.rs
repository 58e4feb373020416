//! `opscope dump JOB -o DIR`: the agent's flight recorder of a job, written as a
//! session directory that every command reads.

use std::path::PathBuf;

use anyhow::{bail, Result};

use opscope_agent::client::AgentAddress;
use opscope_agent::{dump, triggers};

#[derive(clap::Args)]
#[command(
    about = "Write a running job's last minute (the agent's flight recorder) as a session directory",
    after_help = "Examples:\n  opscope dump 4242 -o hang-4242\n  opscope dump train --last 30s -o slow && opscope steps slow"
)]
pub struct Args {
    /// The job, as `opscope top` names it.
    job: String,
    /// The directory to write (new or empty).
    #[arg(short, long, value_name = "DIR")]
    output: PathBuf,
    /// Only the last DURATION (e.g. 30s) [default: all the agent holds].
    #[arg(long, value_name = "DURATION", value_parser = triggers::parse_duration)]
    last: Option<std::time::Duration>,
    #[command(flatten)]
    agent: AgentAddress,
}

pub fn run(args: Args) -> Result<()> {
    let last_ns = args.last.map(|d| d.as_nanos() as u64);
    let (files, meta) = args.agent.dump(&args.job, last_ns)?;
    if files.is_empty() {
        // An empty session directory would only be refused by every command later.
        bail!(
            "job `{}`: the agent holds nothing of it{} (the flight recorder keeps each job's \
             last --window, 60 s by default, and less when its --memory is full); nothing written",
            meta.job,
            if last_ns.is_some() {
                " in that span"
            } else {
                " any more"
            }
        );
    }
    dump::write_session(&args.output, &files, &meta)?;
    let bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
    eprintln!(
        "opscope: job {}: {} processes, {:.1} MiB ({:.0} s held) written to {}",
        meta.job,
        files.len(),
        bytes as f64 / (1 << 20) as f64,
        meta.last_s.unwrap_or(meta.held_s).min(meta.held_s),
        args.output.display()
    );
    Ok(())
}
