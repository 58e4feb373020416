//! `opscope report TRACE… -o report.html`: one self-contained HTML page of what the
//! report commands say about a trace, a section for each that has one (see
//! [`opscope_engine::page`]), with charts and a flame graph, to mail or attach to a
//! ticket. Every figure comes from the same report, written the same way, as the
//! terminal's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use opscope_model::Trace;

use crate::load;

#[derive(clap::Args)]
#[command(
    about = "Write one self-contained HTML page of the reports, with charts and a flame graph",
    long_about = "Write one HTML file that needs nothing else (no network, no other file): \
                  what the trace holds, step times as a chart, GPU time per rank as stacked \
                  bars and its breakdown per stream, the top ops and kernels, memory, and a \
                  flame graph. Its figures are those `info`, `steps`, `gpu`, `stats op`, \
                  `stats kernel` and `memory` print.",
    after_help = "Examples:\n  opscope report trace.json.gz -o report.html\n  opscope report ranks/ -o job.html\n  opscope report --live train -o now.html"
)]
pub struct Args {
    #[command(flatten)]
    inputs: load::Inputs,
    /// Where to write the page.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Rows in the top-ops and kernel tables.
    #[arg(long, default_value_t = 20, value_name = "N")]
    top: usize,
    /// Replace FILE when it exists.
    #[arg(long, short)]
    force: bool,
}

pub fn run(args: Args) -> Result<()> {
    crate::output::refuse_existing(&args.output, args.force)?;
    let trace = args.inputs.load()?;
    let of = args.inputs.live.clone().unwrap_or_else(|| {
        args.inputs
            .traces
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    });
    eprintln!(
        "{}",
        write(&trace, &of, &args.output, args.top, args.force)?
    );
    Ok(())
}

/// Writes the page of `trace` (a report of `of`) to `output`, with `top` rows in its
/// lists; the line that says what was written.
pub fn write(trace: &Trace, of: &str, output: &Path, top: usize, force: bool) -> Result<String> {
    crate::output::refuse_existing(output, force)?;
    let cx = opscope_analysis::Context::new(trace);
    let page = opscope_engine::page::page(&cx, &format!("opscope report: {of}"), top)?;
    std::fs::write(output, &page).with_context(|| format!("{}: cannot write", output.display()))?;
    Ok(format!(
        "wrote {}: {:.1} KiB",
        output.display(),
        page.len() as f64 / 1024.0
    ))
}
