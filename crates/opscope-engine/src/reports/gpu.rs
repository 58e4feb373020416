//! `gpu`: per rank, device and stream — busy and idle time, computation, communication
//! and memory work and their overlap, why streams sat idle, launch latency, queue
//! depth and copy bandwidth.

use opscope_analysis::gpu::{self, GpuOptions};
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Frame, Output};

pub static GPU: Entry<Options> = Entry {
    name: "gpu",
    formats: Formats::TextJson,
    frames: &[
        Frame {
            name: "ranks",
            path: &["ranks"],
            parent: &[],
            unprefixed: &["temporal"],
            columns: &[
                "rank",
                "device",
                "file",
                "span_ns",
                "busy_ns",
                "idle_ns",
                "compute_ns",
                "non_compute_ns",
                "idle_pct",
                "compute_pct",
                "non_compute_pct",
                "communication_overlap_pct",
            ],
        },
        Frame {
            name: "streams",
            path: &["ranks", "[]", "streams"],
            parent: &["rank", "file"],
            unprefixed: &[],
            columns: &[
                "rank",
                "file",
                "device",
                "stream",
                "stream_id",
                "work",
                "busy_ns",
            ],
        },
        Frame {
            name: "kernel_types",
            path: &["ranks", "[]", "combinations"],
            parent: &["rank", "device"],
            unprefixed: &[],
            columns: &["rank", "device", "classes", "time_ns", "pct"],
        },
    ],
    run,
    section: Some(("GPU time", crate::page::gpu_section)),
    timeline: None,
    check: Some(|o| options(o).map(|_| ())),
};

#[derive(clap::Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Where GPU time goes: busy/idle, compute/communication/memory, idle causes per stream",
    long_about = "Where GPU time goes, per rank, device and stream.\n\n\
        Temporal breakdown: over the span from the first to the last device work, the time \
        no stream runs anything (idle), the time some computation runs, and other busy time \
        (communication or memory only). Combinations: exclusive time of each mix of \
        computation, communication and memory work. Communication kernels are recognised by \
        name (NCCL, RCCL, MSCCL, DeepEP, NVSHMEM, gloo, custom all-reduce kernels and \
        collective names).\n\n\
        Idle breakdown per stream (HTA's definitions): a gap before work whose launch came \
        after the stream went idle is host wait; a shorter gap than --kernel-wait-us is \
        kernel wait; the rest is other.",
    after_help = "Examples:\n  opscope gpu trace.json.gz\n  opscope gpu runs/ranks/ --format json\n  opscope gpu --exclude-last-step trace.json   # as HTA does by default"
)]
pub struct Options {
    /// Leave out the last profiler step (often cut short when profiling stops) and the
    /// work launched in it, as HTA does by default: also device work whose launch is not
    /// in the trace (launched before recording began).
    #[arg(long, conflicts_with = "before_last_step")]
    exclude_last_step: bool,
    /// Leave out the last profiler step and the work launched in it, but keep device
    /// work whose launch is not in the trace when it starts before the last step.
    #[arg(long)]
    before_last_step: bool,
    /// Gaps shorter than this (µs) between work launched in time are kernel wait.
    #[arg(long, default_value_t = 30.0, value_name = "US")]
    kernel_wait_us: f64,
    /// Also count kernels whose name matches this regex as communication (opscope knows
    /// NCCL, RCCL, MSCCL++, DeepEP, NVSHMEM, gloo and custom all-reduce kernels, and any
    /// kernel a collective op launched).
    #[arg(long, value_name = "REGEX")]
    comm_kernels: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            exclude_last_step: false,
            before_last_step: false,
            kernel_wait_us: 30.0,
            comm_kernels: None,
        }
    }
}

fn run(cx: &Context, o: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(gpu::analyze(cx, &options(o)?))
}

fn options(o: &Options) -> Result<GpuOptions, Error> {
    if o.exclude_last_step && o.before_last_step {
        return Err(Error::options(
            "--exclude-last-step and --before-last-step: give one",
        ));
    }
    Ok(GpuOptions {
        window: if o.exclude_last_step {
            Window::BeforeLastStep
        } else if o.before_last_step {
            Window::BeforeLastStepByStart
        } else {
            Window::Whole
        },
        kernel_wait_threshold_ns: (o.kernel_wait_us * 1000.0).round() as i64,
        communication_kernels: super::regex("comm-kernels", o.comm_kernels.as_deref())?,
        ..GpuOptions::default()
    })
}
