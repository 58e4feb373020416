//! `opscope gpu`: per rank, device and stream — busy and idle time, computation,
//! communication and memory work and their overlap, why streams sat idle, launch
//! latency, queue depth and copy bandwidth.

use anyhow::{Context, Result};
use opscope_analysis::gpu::{self, GpuOptions};
use opscope_analysis::window::Window;

use crate::load;
use crate::output::{self, TextOrJson};

#[derive(clap::Args)]
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
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
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
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
}

pub fn run(args: Args) -> Result<()> {
    let communication_kernels = args
        .comm_kernels
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .context("--comm-kernels: not a valid regex")?;
    let trace = args.inputs.load()?;
    let options = GpuOptions {
        window: if args.exclude_last_step {
            Window::BeforeLastStep
        } else if args.before_last_step {
            Window::BeforeLastStepByStart
        } else {
            Window::Whole
        },
        kernel_wait_threshold_ns: (args.kernel_wait_us * 1000.0).round() as i64,
        communication_kernels,
        ..GpuOptions::default()
    };
    let report = gpu::analyze(&opscope_analysis::Context::new(&trace), &options);
    output::print(args.format, &report)
}
