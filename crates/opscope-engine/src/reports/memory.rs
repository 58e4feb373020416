//! `memory`: per device and allocator, bytes in use over time — the peak, what was live
//! at it, the ops that allocate most, and growth from step to step.

use opscope_analysis::memory::{memory_report, MemoryOptions};
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Output};

pub static MEMORY: Entry<Options> = Entry {
    name: "memory",
    formats: Formats::TextJson,
    frames: &[],
    run,
    section: Some(("Memory", crate::page::memory_section)),
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Memory per device and allocator: peak, what was live at it, top allocating ops, growth per step",
    after_help = "Reads PyTorch's [memory] events (profile_memory=True) and TensorFlow \
                  timelines' allocator counters; without them, the resident memory \
                  `opscope record` sampled per process.\n\nExamples:\n  opscope memory trace.json.gz\n  opscope memory --top 20 --format json trace.json"
)]
pub struct Options {
    /// Rows in the top-ops and live-at-peak lists.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options { top: 10 }
    }
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(memory_report(cx, &MemoryOptions { top: o.top }))
}
