//! `opscope steps`: per training step, its time and how the device spent it; steps come
//! from markers, or from the repeating op sequence when a trace has none.

use anyhow::Result;
use opscope_analysis::steps::{self, StepOptions};

use crate::load;
use crate::output::{self, TextOrJson};

#[derive(clap::Args)]
#[command(
    about = "Per-step time and its breakdown, from step markers or the repeating op sequence",
    after_help = "Steps are ProfilerStep#N ranges, else user ranges named like train_step_3; \
                  a trace with neither is cut where its sequence of top-level ops repeats.\n\n\
                  Examples:\n  opscope steps trace.json.gz\n  opscope steps --ignore-markers trace.json   # check the period search against the markers\n  opscope steps --format json runs/ranks/"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Find steps from the repeating op sequence even where markers exist.
    #[arg(long)]
    ignore_markers: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let trace = args.inputs.load()?;
    let report = steps::report(
        &opscope_analysis::Context::new(&trace),
        &StepOptions {
            ignore_markers: args.ignore_markers,
        },
    );
    output::print(args.format, &report)
}
