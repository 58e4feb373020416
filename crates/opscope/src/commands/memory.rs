//! `opscope memory`: per device and allocator, bytes in use over time — the peak, what
//! was live at it, the ops that allocate most, and growth from step to step.

use anyhow::Result;
use opscope_analysis::memory::{self, MemoryOptions};

use crate::load;
use crate::output::{self, TextOrJson};

#[derive(clap::Args)]
#[command(
    about = "Memory per device and allocator: peak, what was live at it, top allocating ops, growth per step",
    after_help = "Reads PyTorch's [memory] events (profile_memory=True) and TensorFlow \
                  timelines' allocator counters; without them, the resident memory \
                  `opscope record` sampled per process.\n\nExamples:\n  opscope memory trace.json.gz\n  opscope memory --top 20 --format json trace.json"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Rows in the top-ops and live-at-peak lists.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let trace = args.inputs.load()?;
    let report = memory::memory_report(
        &opscope_analysis::Context::new(&trace),
        &MemoryOptions { top: args.top },
    );
    output::print(args.format, &report)
}
