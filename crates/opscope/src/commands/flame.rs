//! `opscope flame TRACE -o flame.svg`: a flame graph (inferno, as cargo-flamegraph
//! draws them) of where the time goes: ops under the ops they sit in by CPU self time,
//! Python call frames where the trace has them, kernels under their launching ops.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use opscope_analysis::flame::{folded, FlameOptions};

use crate::load;

#[derive(clap::Args)]
#[command(
    about = "Draw a flame graph (SVG) of op nesting by CPU time, with kernels under their ops",
    long_about = "Draw a flame graph as an SVG: each host op (and Python frame, where the \
                  trace has them) under the ops it sits in on its thread, as wide as its CPU \
                  self time; each kernel, copy and set under the op that launched it, as wide \
                  as its device time, with its kind in brackets. Under every process, one \
                  frame per thread. The SVG is interactive in a browser (click to zoom, \
                  search with Ctrl-F).\n\n\
                  `opscope convert --to folded` writes the same stacks as text for other \
                  flame-graph tools.",
    after_help = "Examples:\n  opscope flame trace.json.gz -o flame.svg\n  opscope flame --cpu-only runs/r1 -o cpu.svg"
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
    /// The graph's title.
    #[arg(long, default_value = "opscope: where the time goes")]
    title: String,
    /// Replace FILE when it exists.
    #[arg(long, short)]
    force: bool,
}

pub fn run(args: Args) -> Result<()> {
    crate::output::refuse_existing(&args.output, args.force)?;
    let trace = args.inputs.load()?;
    let cx = opscope_analysis::Context::new(&trace);
    let stacks = folded(
        &cx,
        FlameOptions {
            device: !args.cpu_only,
        },
    );
    if stacks.is_empty() {
        bail!("no host slices on threads, nothing to draw");
    }
    let lines: Vec<String> = stacks.iter().map(|(s, ns)| format!("{s} {ns}")).collect();
    let mut options = inferno::flamegraph::Options::default();
    options.title = args.title.clone();
    options.subtitle = Some(if args.cpu_only {
        "width: CPU self time".to_string()
    } else {
        "width: CPU self time of ops; [kernel], [memcpy], [memset]: device time under the op that launched them".to_string()
    });
    options.count_name = "ns".to_string();
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("{}: cannot create", args.output.display()))?;
    let mut out = BufWriter::new(file);
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
        .with_context(|| format!("{}: cannot draw the flame graph", args.output.display()))?;
    out.flush()?;
    let total: u64 = stacks.iter().map(|(_, ns)| ns).sum();
    eprintln!(
        "wrote {}: {} stacks, {:.3} s in all",
        args.output.display(),
        stacks.len(),
        total as f64 / 1e9
    );
    Ok(())
}
