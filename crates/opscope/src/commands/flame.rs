//! `opscope flame TRACE -o flame.svg`: a flame graph of where the time goes (ops under
//! the ops they sit in by CPU self time, Python call frames where the trace has them,
//! kernels under their launching ops), written by the SVG exporter (`convert --to svg`
//! writes the same).

use std::path::{Path, PathBuf};

use anyhow::Result;
use opscope_model::Trace;

use crate::exporters::{self, ExportOptions};
use crate::load;

#[derive(clap::Args)]
#[command(
    about = "Draw a flame graph (SVG) of op nesting by CPU time, with kernels under their ops",
    long_about = "Draw a flame graph as an SVG: each host op (and Python frame, where the \
                  trace has them) under the ops it sits in on its thread, as wide as its CPU \
                  self time; each kernel, copy and set under the op that launched it, as wide \
                  as its device time, with its kind in brackets. Under every process, one \
                  frame per thread. Where the trace has sampled stacks (`opscope record`, \
                  `opscope attach`), each sample's Python frames come first, then the ops \
                  open at that moment, as wide as the time it stands for; kernels go under \
                  their op under the stack sampled while it ran. The SVG is interactive in a browser (click to zoom, \
                  search with Ctrl-F).\n\n\
                  `opscope convert --to folded` writes the same stacks as text for other \
                  flame-graph tools.",
    after_help = "Examples:\n  opscope flame trace.json.gz -o flame.svg\n  opscope flame --cpu-only runs/r1 -o cpu.svg\n  opscope flame --wall opscope-attach-4242 -o wall.svg"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Where to write the SVG.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Leave device work (kernels, copies, sets) out: CPU time only.
    #[arg(long)]
    cpu_only: bool,
    /// With sampled stacks (`opscope record`, `opscope attach`): count the samples of
    /// idle threads too, for wall time (waits on locks, I/O, the GPU). By default only
    /// threads that ran are counted, for CPU time, as py-spy does.
    #[arg(long)]
    wall: bool,
    /// The graph's title.
    #[arg(long, default_value = TITLE)]
    title: String,
    /// Replace FILE when it exists.
    #[arg(long, short)]
    force: bool,
}

/// The graph's title unless told another.
pub const TITLE: &str = "opscope: where the time goes";

pub fn run(args: Args) -> Result<()> {
    check(&args.output, args.force)?;
    let trace = args.inputs.load()?;
    let options = ExportOptions {
        device: !args.cpu_only,
        wall: args.wall,
        title: args.title,
        force: args.force,
    };
    let said = write(&trace, &args.output, &options)?;
    eprintln!("{said}");
    Ok(())
}

/// Whether `output` may be written (before a trace is read).
fn check(output: &Path, force: bool) -> Result<()> {
    let svg = exporters::by_name("svg").expect("the SVG exporter is in the table");
    svg.check(
        output,
        &ExportOptions {
            force,
            ..Default::default()
        },
    )
}

/// Writes the graph of `trace` to `output`; the line that says what was written.
pub fn write(trace: &Trace, output: &Path, options: &ExportOptions) -> Result<String> {
    let svg = exporters::by_name("svg").expect("the SVG exporter is in the table");
    svg.check(output, options)?;
    let said = svg.write(trace, output, options)?;
    Ok(format!("wrote {}: {said}", output.display()))
}
