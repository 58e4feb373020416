//! `steps`: per training step, its time and how the device spent it; steps come from
//! markers, or from the repeating op sequence when a trace has none.

use opscope_analysis::steps::{self, StepOptions};
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static STEPS: Entry<Options> = Entry {
    name: "steps",
    formats: Formats::TextJson,
    frames: &[Frame {
        name: "steps",
        path: &["sources", "[]", "steps"],
        parent: &["rank", "role", "file", "found_by.kind", "on_device"],
        unprefixed: &[],
        columns: &[
            "rank",
            "role",
            "file",
            "found_by",
            "on_device",
            "name",
            "start_ns",
            "dur_ns",
            "device_busy_ns",
            "device_idle_ns",
            "computation_ns",
            "communication_ns",
            "memory_ns",
            "kernels",
            "host_busy_ns",
            "host_computation_ns",
            "host_communication_ns",
            "host_overlap_ns",
            "host_idle_ns",
        ],
    }],
    run,
    section: Some(("Steps", crate::page::steps_section)),
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Per-step time and its breakdown, from step markers or the repeating op sequence",
    after_help = "Steps are ProfilerStep#N ranges, else user ranges named like train_step_3; \
                  a trace with neither is cut where its sequence of top-level ops repeats.\n\n\
                  Examples:\n  opscope steps trace.json.gz\n  opscope steps --ignore-markers trace.json   # check the period search against the markers\n  opscope steps --format json runs/ranks/"
)]
pub struct Options {
    /// Find steps from the repeating op sequence even where markers exist.
    #[arg(long)]
    ignore_markers: bool,
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(steps::report(
        cx,
        &StepOptions {
            ignore_markers: o.ignore_markers,
        },
    ))
}
