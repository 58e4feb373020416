//! Builds the injected library (`opscope-record`, a cdylib) so that the `opscope`
//! binary can carry it: `cargo install --path crates/opscope` then gives an `opscope`
//! whose `record` works with nothing copied beside it. Cargo cannot depend on another
//! package's cdylib, so this runs a second cargo, with a target directory of its own,
//! on the library's manifest in this workspace. Built outside the workspace (a
//! packaged crate), there is nothing to embed and `record` looks for the library on
//! disk only.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let record = manifest_dir.join("../opscope-record");
    println!("cargo::rustc-check-cfg=cfg(opscope_embedded_record)");
    println!("cargo::rerun-if-env-changed=OPSCOPE_NO_EMBED");
    if !record.join("Cargo.toml").is_file() || std::env::var_os("OPSCOPE_NO_EMBED").is_some() {
        return;
    }
    for watched in ["Cargo.toml", "src", "../../Cargo.lock"] {
        println!("cargo::rerun-if-changed={}", record.join(watched).display());
    }
    match build_library(&record, &out_dir) {
        Ok(library) => {
            println!("cargo::rustc-cfg=opscope_embedded_record");
            println!(
                "cargo::rustc-env=OPSCOPE_EMBEDDED_RECORD={}",
                library.display()
            );
        }
        // Not fatal: `record` then finds the library on disk, as the workspace build
        // puts it beside the binary, and says how to get it when it cannot.
        Err(e) => println!("cargo::warning=the injected library is not embedded: {e}"),
    }
}

/// Runs `cargo build --release` on the library into `out_dir` and returns its path.
fn build_library(record: &Path, out_dir: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out_dir.join("record-target");
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--lib")
        .arg("--release")
        .arg("--manifest-path")
        .arg(record.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // The library is loaded into other programs: no debug info to carry, only
        // its symbols (the collectors find its entry points by name).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    // The outer build's settings for this package are not the library's.
    for name in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        // `cargo clippy` lints through these: the library is linted on its own.
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
    ] {
        command.env_remove(name);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo build of opscope-record failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let library = target_dir.join("release/libopscope_record.so");
    if !library.is_file() {
        return Err(format!("{} was not built", library.display()));
    }
    Ok(library)
}
