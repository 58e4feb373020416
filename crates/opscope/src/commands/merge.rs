//! `opscope merge TRACE… -o OUT`: puts the traces of many hosts on one clock, says
//! each host's correction and its error bound, and writes the result as `convert`
//! would.

use anyhow::Result;
use opscope_analysis::clock_merge::{merge_clocks, MergeOptions};

use super::convert;

#[derive(clap::Args)]
#[command(
    about = "Put traces of many hosts on one clock, with error bounds, and write them as one",
    long_about = "Put the traces of many hosts on one clock: each clock domain (a host the \
                  trace names, else a file) is corrected to the reference domain's clock \
                  (the one with the lowest rank) by an offset and a drift, fitted so that \
                  no rank leaves a collective (all-reduce, all-gather, reduce-scatter, \
                  broadcast, all-to-all, barrier; send/receive in a job of two ranks) \
                  before the last rank entered it, by the convex-hull method. Each \
                  correction comes with its error bound: every correction that keeps those \
                  constraints lies within it. Constraints that conflict are said, with by \
                  how much.\n\n\
                  Every command does this on its own for a directory of several hosts; \
                  merge shows the corrections (--clock-per-file also for files of one \
                  host) and writes the merged trace in any format convert writes.",
    after_help = "Examples:\n  \
                  opscope merge hosts/ -o job.pftrace\n  \
                  opscope merge --clock-per-file ranks/ -o job.parquet --format json"
)]
#[group(skip)]
pub struct Args {
    #[command(flatten)]
    convert: convert::Args,
    /// A clock domain per file, whatever hosts the files name.
    #[arg(long)]
    clock_per_file: bool,
    /// How the corrections are printed (on standard output).
    #[arg(long, value_enum, default_value_t)]
    format: crate::output::TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let options = MergeOptions {
        clock_per_file: args.clock_per_file,
    };
    let format = args.format;
    convert::run_with(args.convert, |trace| {
        let report = merge_clocks(trace, &options);
        for warning in report.warnings() {
            eprintln!("opscope: warning: {warning}");
        }
        crate::output::print(format, &report)?;
        Ok(true)
    })
}
