//! `opscope record -- CMD ARGS…`: runs a program with the injection environment, follows
//! its process tree, and prints where the session went and its top ops.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;

use crate::record::{self, Options};

#[derive(clap::Args)]
#[command(
    about = "Record a program with no change to its code: ITT tasks (oneDNN, PyTorch ops), NVTX ranges, and every process it starts",
    long_about = "Record a program with no change to its code.\n\n\
                  The program runs with opscope's library named as its ITT collector \
                  (INTEL_LIBITTNOTIFY64) and NVTX injection (NVTX_INJECTION64_PATH), so oneDNN \
                  primitives, PyTorch ops, NVTX ranges and any other ITT/NVTX annotations are \
                  recorded, each process into its own Perfetto file in the session directory. \
                  For Python programs, a bootstrap turns on PyTorch's ITT ops and TensorFlow's \
                  or JAX's profiler when they are imported. Every process of the tree is \
                  sampled (CPU, memory, threads), and so are the Python stacks of every \
                  thread of its Python processes, read from outside them (`--no-stacks` to \
                  leave them out): `flame`, `stats code` and `view` show them beside the \
                  ops.\n\n\
                  The session directory is a TRACE: opscope info, stats, gpu and convert read it.",
    after_help = "Examples:\n  opscope record -- python train.py --epochs 1\n  opscope record --pid 4242 -o runs/live\n  opscope record -o runs/resnet -- torchrun --nproc-per-node 2 train.py\n  opscope stats op runs/resnet"
)]
pub struct Args {
    /// Session directory [default: ./opscope-session, or -2, -3… if taken].
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Turn on the frameworks' own hooks in Python programs (the default).
    #[arg(long, overrides_with = "no_python")]
    python: bool,
    /// Leave Python programs alone (no bootstrap on PYTHONPATH).
    #[arg(long)]
    no_python: bool,
    /// Record CUDA kernels, copies and API calls through CUPTI (experimental: not yet run on a GPU).
    #[arg(long)]
    cupti: bool,
    /// Sample CPU, memory and threads of every process every N ms (0: off).
    #[arg(long, value_name = "N", default_value_t = 100)]
    sample_ms: u64,
    /// Sample the Python stacks of every thread of every Python process HZ times a
    /// second, from outside them (as `opscope attach` does; CPython 3.9 to 3.13).
    #[arg(long, value_name = "HZ", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    sample_hz: u32,
    /// Sample no stacks (neither Python nor native).
    #[arg(long)]
    no_stacks: bool,
    /// Sample Python stacks only: no native (C, C++) frames from the kernel's sampler
    /// (which needs perf_event_paranoid ≤ 1, CAP_PERFMON or root; refused, opscope says
    /// so once and keeps the Python stacks).
    #[arg(long)]
    no_native: bool,
    /// The job's name, as the agent (`opscope top`) shows it [default: SLURM_JOB_ID,
    /// TORCHELASTIC_RUN_ID, the Kubernetes pod, else the session directory].
    #[arg(long, value_name = "NAME")]
    job: Option<String>,
    /// Stream to the agent at this socket [default: the running agent, if any].
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
    /// Send to the agent only: no files (the session directory holds only the process
    /// samples). Needs a running agent.
    #[arg(long)]
    live_only: bool,
    /// Print nothing but errors when the program ends.
    #[arg(long, short)]
    quiet: bool,
    /// Record a process that is already running instead (and the processes below it):
    /// its Python stacks and its CPU, memory and threads, until it ends or Ctrl-C, as
    /// `opscope attach` samples it. Nothing is injected into it.
    #[arg(long, value_name = "PID", conflicts_with_all = ["command", "live_only", "cupti", "no_stacks"])]
    pid: Option<i32>,
    /// The program to record and its arguments, after `--`.
    #[arg(required_unless_present = "pid", last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> Result<u8> {
    let options = Options {
        output: args.output,
        python: args.python || !args.no_python,
        cupti: args.cupti,
        sample_ms: args.sample_ms,
        stacks_hz: if args.no_stacks { 0 } else { args.sample_hz },
        native: !args.no_native,
        quiet: args.quiet,
        job: args.job,
        agent: args.agent,
        live_only: args.live_only,
        command: args.command,
    };
    match args.pid {
        Some(pid) => record::run_attached(&options, pid),
        None => record::run(&options),
    }
}
