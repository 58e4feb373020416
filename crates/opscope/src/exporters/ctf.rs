//! A CTF 1.8 trace directory (metadata and one stream file per track) for babeltrace2
//! and Trace Compass, written by `opscope-formats`' CTF exporter. Only a directory that
//! holds a CTF trace and nothing else is ever replaced.

use std::path::Path;

use anyhow::{bail, Context, Result};
use opscope_model::Trace;

use super::{write_dir, ExportOptions, Exporter, Writes};

pub const CTF: Exporter = Exporter {
    name: "ctf",
    about: "a CTF 1.8 trace: the output is a directory (metadata and one stream file per track)",
    extensions: &[".ctf"],
    writes: Writes::Directory { check, write },
};

fn check(dir: &Path, options: &ExportOptions) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let shown = dir.display();
    if !options.force {
        bail!("{shown}: already exists; pass --force to replace it");
    }
    if !is_ctf_trace(dir) {
        bail!(
            "{shown}: already exists and is not a CTF trace directory (a `metadata` file and \
             its stream files, nothing else): it is not replaced, even with --force"
        );
    }
    Ok(())
}

/// Whether `dir` is a directory holding a CTF trace and nothing else: a `metadata` file
/// that says so, and plain files beside it. Only such a directory is replaced.
fn is_ctf_trace(dir: &Path) -> bool {
    let metadata = std::fs::read(dir.join("metadata")).unwrap_or_default();
    // TSDL text starts with its version comment; packetised metadata with its magic.
    let ctf =
        metadata.starts_with(b"/* CTF") || metadata.starts_with(&0x75D1_1D57u32.to_le_bytes());
    let only_files = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .into_iter()
            .all(|e| e.and_then(|e| e.file_type()).is_ok_and(|t| t.is_file()))
    });
    ctf && only_files
}

/// Writes into a partial directory beside `dir` first, renamed into place at the end, so
/// a failure never leaves half a trace under the requested name. An existing trace
/// (which [`check`] let through) is moved aside once the new one is whole, and removed
/// once the new one is in its place.
fn write(trace: &Trace, dir: &Path, options: &ExportOptions) -> Result<String> {
    let old = (options.force && dir.exists()).then(|| {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        dir.with_file_name(format!(".{name}.replaced-{}", std::process::id()))
    });
    write_dir(dir, |partial| {
        opscope_formats::ctf::export::export(trace, &mut |name, bytes| {
            std::fs::write(partial.join(name), bytes)
        })?;
        if let Some(old) = &old {
            std::fs::rename(dir, old)
                .with_context(|| format!("{}: cannot move the old trace aside", dir.display()))?;
        }
        Ok(())
    })
    .inspect_err(|_| {
        // The new trace did not take its place: the old one goes back.
        if let Some(old) = &old {
            let _ = std::fs::rename(old, dir);
        }
    })?;
    if let Some(old) = &old {
        std::fs::remove_dir_all(old)
            .with_context(|| format!("{}: cannot remove the replaced trace", old.display()))?;
    }
    let stacks = match trace.samples.len() {
        0 => String::new(),
        n => format!(
            ", {n} stack samples left out (no place for them in CTF: write .pftrace, .parquet \
             or .speedscope.json to keep them)"
        ),
    };
    Ok(format!(
        "{} slices (a begin and an end event each), {} instants, {} counter samples{stacks}",
        trace.slices.len(),
        trace.instants.len(),
        trace.counters.len()
    ))
}
