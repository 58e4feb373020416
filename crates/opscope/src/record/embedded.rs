//! The injected library carried inside the `opscope` binary (see `build.rs`): an
//! installed `opscope` writes it once into the user's cache, under a name made of its
//! checksum, and injects that file.

use std::path::PathBuf;

use anyhow::{Context, Result};

#[cfg(opscope_embedded_record)]
static LIBRARY: &[u8] = include_bytes!(env!("OPSCOPE_EMBEDDED_RECORD"));
#[cfg(not(opscope_embedded_record))]
static LIBRARY: &[u8] = &[];

/// The carried library's path in the cache (written there first when missing), or
/// `None` when this binary carries none.
pub fn library() -> Option<Result<PathBuf>> {
    (!LIBRARY.is_empty()).then(|| write_once(LIBRARY))
}

/// Where the cache is: `$XDG_CACHE_HOME/opscope/lib`, or `~/.cache/opscope/lib`.
fn cache_dir() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .context("neither XDG_CACHE_HOME nor HOME is set: no place to put the injected library")?;
    Ok(base.join("opscope").join("lib"))
}

fn write_once(bytes: &[u8]) -> Result<PathBuf> {
    // One directory per library content: two opscope versions side by side never
    // replace each other's library while a program has it loaded.
    let dir = cache_dir()?.join(format!("{:08x}-{}", crc32fast::hash(bytes), bytes.len()));
    let path = dir.join(super::LIBRARY);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    // Written aside and renamed: a second opscope starting meanwhile never loads a
    // half-written library.
    let partial = dir.join(format!(".{}.{}", super::LIBRARY, std::process::id()));
    std::fs::write(&partial, bytes)
        .with_context(|| format!("{}: cannot write the injected library", partial.display()))?;
    std::fs::rename(&partial, &path)
        .with_context(|| format!("{}: cannot write the injected library", path.display()))?;
    Ok(path)
}
