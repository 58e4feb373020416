//! A flame graph as an SVG (inferno, as cargo-flamegraph draws them) of the stacks the
//! folded exporter writes: interactive in a browser (click to zoom, Ctrl-F to search).

use std::io::Write;

use anyhow::{bail, Context, Result};
use opscope_model::Trace;

use super::{ExportOptions, Exporter, Writes};

pub const SVG: Exporter = Exporter {
    name: "svg",
    about: "a flame graph (SVG, interactive in a browser) of the folded stacks",
    extensions: &[".svg"],
    writes: Writes::Stream(write),
};

fn write(trace: &Trace, options: &ExportOptions, out: &mut dyn Write) -> Result<String> {
    let stacks = super::folded::stacks(trace, options);
    if stacks.is_empty() {
        bail!("no host slices on threads, nothing to draw");
    }
    let lines: Vec<String> = stacks.iter().map(|(s, ns)| format!("{s} {ns}")).collect();
    let mut graph = inferno::flamegraph::Options::default();
    graph.title = options.title.clone();
    graph.subtitle = Some(if options.device {
        "width: CPU self time of ops; [kernel], [memcpy], [memset]: device time under the op that launched them".to_string()
    } else {
        "width: CPU self time".to_string()
    });
    graph.count_name = "ns".to_string();
    // Colours from the frames' names, not from a random generator: the same graph for
    // the same trace, however many were drawn before in the process.
    graph.deterministic = true;
    inferno::flamegraph::from_lines(&mut graph, lines.iter().map(String::as_str), out)
        .context("cannot draw the flame graph")?;
    Ok(super::folded::stacks_line(&stacks))
}
