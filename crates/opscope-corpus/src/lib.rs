//! Where the tests of every crate find the shared corpus: real traces (`traces/`) and
//! what the peer tools say about them (`peer-outputs/`), in `../shared` beside the
//! repository or in `$OPSCOPE_SHARED`. Off CI a missing corpus skips the test, saying
//! why; on CI (`$CI` set) it fails, so that no check passes by not running. Also the
//! graph of a crate's files that the architecture tests check ([`architecture`]).

#![forbid(unsafe_code)]

pub mod architecture;

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
    skip(&format!(
        "no shared traces at {} (set OPSCOPE_SHARED)",
        shared.display()
    ));
    None
}

/// Says that the running test skips (part of) its check, and why: on stderr, and as a
/// line (`test name: reason`) in `$OPSCOPE_SKIP_LOG` when set, which `.ci/run` counts
/// and prints after the tests, since cargo's summary counts a skipped test as passed.
pub fn skip(reason: &str) {
    eprintln!("skipping: {reason}");
    let Some(log) = std::env::var_os("OPSCOPE_SKIP_LOG") else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!("{test}: {reason}\n");
    // One write of a short line to a file opened for appending: lines of tests running
    // at once do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "(cannot note the skip in {}: {e})",
            Path::new(&log).display()
        );
    }
}

/// The shared traces (`traces/` of [`shared`]).
pub fn traces() -> Option<PathBuf> {
    shared().map(|s| s.join("traces"))
}
