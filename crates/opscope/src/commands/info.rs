//! `opscope info`: what a trace holds — files and their format, ranks, hosts, processes,
//! devices, tracks, time span, events per kind, and what was repaired or not
//! understood on the way in.

use anyhow::Result;
use opscope_analysis::summary::summarize;

use crate::load;
use crate::output::{self, TextOrJson};

#[derive(clap::Args)]
#[command(
    about = "Show what is in a trace: files, ranks, devices, tracks, events per kind, repairs",
    after_help = "Examples:\n  opscope info trace.json.gz\n  opscope info runs/ranks/            # a directory of per-rank files\n  opscope info --format json trace.json | jq .slices"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let trace = args.inputs.load()?;
    let summary = summarize(&opscope_analysis::Context::new(&trace));
    output::print(args.format, &summary)
}
