//! Where the tests of every crate find the shared corpus: real traces (`traces/`) and
//! what the peer tools say about them (`peer-outputs/`), in `../shared` beside the
//! repository or in `$OPSCOPE_SHARED`. Off CI a missing corpus skips the test, saying
//! why; on CI (`$CI` set) it fails, so that no check passes by not running.

use std::path::{Path, PathBuf};

/// The shared folder, or `None` (after saying why) when it is missing off CI.
pub fn shared() -> Option<PathBuf> {
    let shared = std::env::var_os("OPSCOPE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    if shared.join("traces").is_dir() {
        return Some(shared);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but the shared traces are missing at {}",
        shared.display()
    );
    eprintln!(
        "skipping: no shared traces at {} (set OPSCOPE_SHARED)",
        shared.display()
    );
    None
}

/// The shared traces (`traces/` of [`shared`]).
pub fn traces() -> Option<PathBuf> {
    shared().map(|s| s.join("traces"))
}
