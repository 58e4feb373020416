//! What the peer-comparison tests share: the shared data folder and trace loading.

// Each test binary compiles its own copy and uses part of it.
#![allow(dead_code)]

use std::path::Path;

use opscope_model::Trace;

pub use opscope_corpus::shared;

/// One trace file (gzip or not) into a new trace.
pub fn load(path: &Path) -> Trace {
    let mut trace = Trace::new();
    load_into(path, &mut trace);
    trace
}

pub fn load_into(path: &Path, trace: &mut Trace) {
    let raw = std::fs::read(path).unwrap();
    let shown = path.display().to_string();
    let bytes = opscope_formats::input::decompress_if_gzip(&raw, &shown).unwrap();
    opscope_formats::import_bytes(&bytes, &shown, trace).unwrap();
}
