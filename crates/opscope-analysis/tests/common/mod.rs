//! What the peer-comparison tests share: the shared data folder and trace loading.

// Each test binary compiles its own copy and uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use opscope_model::Trace;

/// The shared data folder (`OPSCOPE_SHARED`, or `../shared` beside the repository).
/// Missing data fails under CI and skips, saying so, elsewhere.
pub fn shared() -> Option<PathBuf> {
    let shared = std::env::var_os("OPSCOPE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    if shared.join("peer-outputs").is_dir() {
        return Some(shared);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but the shared data is missing at {}",
        shared.display()
    );
    eprintln!(
        "skipping: no shared data at {} (set OPSCOPE_SHARED)",
        shared.display()
    );
    None
}

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
