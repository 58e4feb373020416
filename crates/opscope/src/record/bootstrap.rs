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

#[cfg(test)]
mod tests {
    /// The bootstrap reads its settings under the names the recorder and the CLI use
    /// (opscope_wire::env): a name changed on one side only fails here.
    #[test]
    fn the_bootstrap_reads_only_the_contracts_names() {
        let names = regex::Regex::new(r"OPSCOPE_[A-Z0-9_]+").unwrap();
        let read: Vec<&str> = names
            .find_iter(super::SITECUSTOMIZE)
            .map(|m| m.as_str())
            .collect();
        assert!(read.len() >= 3, "{read:?}");
        for name in read {
            assert!(
                opscope_wire::env::ALL.contains(&name),
                "sitecustomize.py reads {name}, which opscope_wire::env does not define"
            );
        }
    }
}
