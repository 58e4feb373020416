//! The exporters of whole traces as one file: Perfetto protobuf, Chrome trace JSON and
//! speedscope's JSON, each in `opscope-formats`.

use std::io::Write;

use anyhow::Result;
use opscope_model::Trace;

use super::{ExportOptions, Exporter, Writes};

pub const PERFETTO: Exporter = Exporter {
    name: "perfetto",
    about: "Perfetto protobuf (.pftrace): the main viewer format",
    extensions: &[".pftrace", ".perfetto-trace", ".pb"],
    writes: Writes::Stream(perfetto),
};

pub const JSON: Exporter = Exporter {
    name: "json",
    about: "Chrome trace JSON (.json, or .json.gz to compress): chrome://tracing, TensorBoard, HTA",
    extensions: &[".json", ".json.gz"],
    writes: Writes::Stream(json),
};

pub const SPEEDSCOPE: Exporter = Exporter {
    name: "speedscope",
    about: "speedscope's JSON (.speedscope.json): each thread and stream as a timeline",
    extensions: &[".speedscope.json"],
    writes: Writes::Stream(speedscope),
};

fn perfetto(trace: &Trace, _: &ExportOptions, out: &mut dyn Write) -> Result<String> {
    opscope_formats::perfetto::export(trace, &mut &mut *out)?;
    Ok(counts(trace, true))
}

fn json(trace: &Trace, _: &ExportOptions, out: &mut dyn Write) -> Result<String> {
    opscope_formats::chrome::export(trace, &mut &mut *out)?;
    Ok(counts(trace, false))
}

fn speedscope(trace: &Trace, _: &ExportOptions, out: &mut dyn Write) -> Result<String> {
    opscope_formats::speedscope::export(trace, "opscope", &mut &mut *out)?;
    Ok(counts(trace, true))
}

/// What was written; sampled stacks a format has no place for are said to be left
/// out, so that nobody loses them unknowingly.
fn counts(trace: &Trace, carries_stacks: bool) -> String {
    let stacks = match (trace.samples.len(), carries_stacks) {
        (0, _) => String::new(),
        (n, true) => format!(", {n} stack samples"),
        (n, false) => format!(
            ", {n} stack samples left out (no place for them in this format: write .pftrace, \
             .parquet or .speedscope.json to keep them)"
        ),
    };
    format!(
        "{} slices, {} instants, {} counter samples, {} flows{stacks}",
        trace.slices.len(),
        trace.instants.len(),
        trace.counters.len(),
        trace.flows.len()
    )
}
