//! Where the tests find the shared corpus of real traces (`../shared` beside the
//! repository, or `$OPSCOPE_SHARED`). Off CI a missing corpus skips with a reason; on CI
//! it fails.

use std::path::{Path, PathBuf};

/// The shared folder, or `None` (after saying why) when it is missing off CI.
pub(crate) fn shared() -> Option<PathBuf> {
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
