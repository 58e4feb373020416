//! `info`: what a trace holds — files and their format, ranks, hosts, processes,
//! devices, tracks, time span, events per kind, and what was repaired or not understood
//! on the way in.

use opscope_analysis::summary::summarize;
use opscope_analysis::Context;
use serde::Deserialize;

use super::{boxed, Entry, Error, Formats, Output};

pub static INFO: Entry<Options> = Entry {
    name: "info",
    formats: Formats::TextJson,
    frames: &[],
    run,
    section: Some(("What the trace holds", section)),
    timeline: None,
    check: None,
};

#[derive(clap::Args, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
#[command(
    about = "Show what is in a trace: files, ranks, devices, tracks, events per kind, repairs",
    after_help = "Examples:\n  opscope info trace.json.gz\n  opscope info runs/ranks/            # a directory of per-rank files\n  opscope info --format json trace.json | jq .slices"
)]
pub struct Options {}

fn run(cx: &Context, _: &Options) -> Result<Box<dyn Output>, Error> {
    boxed(summarize(cx))
}

fn section(cx: &Context, _top: usize) -> Result<String, Error> {
    Ok(crate::html::report(
        &opscope_analysis::report::Reported::report(&summarize(cx)),
    ))
}
