//! Collapsed stacks (`a;b;c NS` lines) for any flame-graph tool: ops under the ops they
//! sit in, by self time, and kernels under their launching ops, by device time.

use std::io::Write;

use anyhow::Result;
use opscope_analysis::flame::{folded, FlameOptions};
use opscope_model::Trace;

use super::{ExportOptions, Exporter, Writes};

pub const FOLDED: Exporter = Exporter {
    name: "folded",
    about: "collapsed stacks (`a;b;c NS` lines) for any flame-graph tool: ops under the ops \
            they sit in, by self time, and kernels under their launching ops, by device time",
    extensions: &[".folded", ".folded.gz"],
    writes: Writes::Stream(write),
};

fn write(trace: &Trace, options: &ExportOptions, out: &mut dyn Write) -> Result<String> {
    let stacks = stacks(trace, options);
    for (stack, ns) in &stacks {
        writeln!(out, "{stack} {ns}")?;
    }
    Ok(stacks_line(&stacks))
}

/// The trace's collapsed stacks, with device work where `options` asks for it.
pub fn stacks(trace: &Trace, options: &ExportOptions) -> Vec<(String, u64)> {
    let cx = opscope_analysis::Context::new(trace);
    folded(
        &cx,
        FlameOptions {
            device: options.device,
            wall: options.wall,
        },
    )
}

/// What a set of stacks holds, as the line after writing them says it.
pub fn stacks_line(stacks: &[(String, u64)]) -> String {
    let total: u64 = stacks.iter().map(|(_, ns)| ns).sum();
    format!(
        "{} stacks, {:.3} s in all",
        stacks.len(),
        total as f64 / 1e9
    )
}
