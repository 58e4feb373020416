//! `critical-path`: the longest chain of dependent host and device work in a step and
//! what bounds it, as HolisticTraceAnalysis's critical path analysis finds it.

use opscope_analysis::critical_path::{self, CriticalPathOptions};
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static CRITICAL_PATH: Entry<Options> = Entry {
    name: "critical-path",
    formats: Formats::TextJson,
    frames: &[
        Frame {
            name: "summary",
            path: &["summary"],
            parent: &["file", "rank"],
            unprefixed: &[],
            columns: &["file", "rank", "bound_by", "time_ns", "pct"],
        },
        Frame {
            name: "edges",
            path: &["edges"],
            parent: &["file", "rank"],
            unprefixed: &[],
            columns: &["file", "rank", "kind", "duration_ns", "bound_by"],
        },
    ],
    run,
    section: None,
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "The critical path of a step: the longest chain of dependent host and device work, and what bounds it",
    long_about = "The critical path of a step, as HolisticTraceAnalysis's critical path \
        analysis builds it: a graph of host ops and runtime calls (along each thread's call \
        stacks), kernel launches (when the stream was idle), kernels one after another on a \
        stream, and synchronisations (stream, device and event syncs, stream waits), whose \
        longest path bounds the step. Each edge of the path is attributed to an event and \
        said to be bound by the host, device computation or communication, kernel launch \
        or kernel-to-kernel overhead.",
    after_help = "Examples:\n  opscope critical-path trace.json.gz                  # the first ProfilerStep\n  opscope critical-path --step 3 trace.json.gz\n  opscope critical-path --annotation 'forward' --instance 1 trace.json.gz\n  opscope critical-path --annotation '' trace.json.gz  # the whole trace"
)]
pub struct Options {
    /// The rank to analyse (default: the first).
    #[arg(long, value_name = "N")]
    rank: Option<u32>,
    /// The window: an instance of the events whose name contains this (HTA's
    /// `annotation`); empty for the whole trace. Where no event holds `ProfilerStep`
    /// (a recording, XPlane, a program without torch.profiler), the steps
    /// `opscope steps` finds stand for it.
    #[arg(long, default_value = "ProfilerStep", value_name = "TEXT")]
    annotation: String,
    /// Which instance of the annotation, from 0 in start order.
    #[arg(long, default_value_t = 0, value_name = "K")]
    instance: usize,
    /// The step ProfilerStep#N (sets the annotation to that step's marker), or where
    /// no ProfilerStep is, the step numbered N that `opscope steps` finds
    /// (`train_step_N`, `step N`).
    #[arg(long, value_name = "N", conflicts_with_all = ["annotation", "instance"])]
    step: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            rank: None,
            annotation: "ProfilerStep".to_string(),
            instance: 0,
            step: None,
        }
    }
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    let (annotation, instance) = match o.step {
        Some(n) => (format!("ProfilerStep#{n}"), 0),
        None => (o.annotation.clone(), o.instance),
    };
    let path = critical_path::critical_path(
        cx,
        &CriticalPathOptions {
            rank: o.rank,
            annotation,
            instance,
        },
    )
    .map_err(|e| Error::options(format!("critical-path: {e}")))?;
    boxed(path)
}
