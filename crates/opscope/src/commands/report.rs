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
    after_help = "Examples:\n  opscope report trace.json.gz -o report.html\n  opscope report ranks/ -o job.html\n  opscope report after/ --against before/ -o change.html\n  opscope report --live train -o now.html"
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
    /// Compare with this trace (an earlier run): a section of what changed, step by
    /// step and line by line, as `opscope diff BEFORE TRACE` says it.
    #[arg(long, value_name = "BEFORE", num_args = 1.., conflicts_with = "live")]
    against: Vec<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    crate::output::refuse_existing(&args.output, args.force)?;
    let trace = args.inputs.load()?;
    let of = args
        .inputs
        .live
        .clone()
        .unwrap_or_else(|| shown(&args.inputs.traces));
    if !args.against.is_empty() {
        let before = opscope_engine::load::load(&args.against, &args.inputs.options())?;
        let against = shown(&args.against);
        // A comparison that cannot be made (a side without steps) is said in its
        // section; the report is written all the same.
        let content = match crate::commands::diff::matched_default(
            &before,
            &trace,
            [against.clone(), of.clone()],
        ) {
            Ok(diff) => opscope_engine::diff_page::matched_body(&diff, 3),
            Err(e) => {
                eprintln!("opscope: warning: no comparison with {against}: {e:#}");
                format!(
                    "<p>No comparison: {}</p>",
                    opscope_engine::html::escape(&format!("{e:#}"))
                )
            }
        };
        let section = (format!("Before and after: {against} → {of}"), content);
        eprintln!(
            "{}",
            write_with(&trace, &of, &args.output, args.top, args.force, &[section])?
        );
        return Ok(());
    }
    eprintln!(
        "{}",
        write(&trace, &of, &args.output, args.top, args.force)?
    );
    Ok(())
}

fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes the page of `trace` (a report of `of`) to `output`, with `top` rows in its
/// lists; the line that says what was written.
pub fn write(trace: &Trace, of: &str, output: &Path, top: usize, force: bool) -> Result<String> {
    write_with(trace, of, output, top, force, &[])
}

/// [`write`], with `open` sections shown whole after the verdict.
fn write_with(
    trace: &Trace,
    of: &str,
    output: &Path,
    top: usize,
    force: bool,
    open: &[(String, String)],
) -> Result<String> {
    crate::output::refuse_existing(output, force)?;
    let cx = opscope_analysis::Context::new(trace);
    let page = opscope_engine::page::page_with(&cx, &format!("opscope report: {of}"), top, open)?;
    std::fs::write(output, &page).with_context(|| format!("{}: cannot write", output.display()))?;
    Ok(format!(
        "wrote {}: {:.1} KiB",
        output.display(),
        page.len() as f64 / 1024.0
    ))
}
