//! The Python bootstrap: a `sitecustomize` module put first on `PYTHONPATH`, which runs
//! any `sitecustomize` it shadows and turns on the frameworks' own hooks when they are
//! imported (see `sitecustomize.py`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

/// Writes the bootstrap into the session and returns the directory to put on
/// `PYTHONPATH`.
pub fn install(session: &Path) -> Result<PathBuf> {
    let dir = session.join(".opscope").join("python");
    std::fs::create_dir_all(&dir).with_context(|| format!("{}: cannot create", dir.display()))?;
    let file = dir.join("sitecustomize.py");
    std::fs::write(&file, SITECUSTOMIZE)
        .with_context(|| format!("{}: cannot write", file.display()))?;
    Ok(dir)
}
