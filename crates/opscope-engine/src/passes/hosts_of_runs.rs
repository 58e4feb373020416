//! Hosts of one TensorBoard profile run become ranks: a run directory with several
//! `<host>.xplane.pb` files is one multi-host job, numbered in the order of the names.

use std::path::{Path, PathBuf};

use opscope_formats::registry;
use opscope_model::Trace;

/// A TensorBoard profile run (`plugins/profile/<run>/<host>.xplane.pb`) with several
/// hosts is one multi-host job: its hosts become ranks 0…n-1, in the order of their
/// file names, so that per-rank views and summaries cover them.
pub(super) fn run(trace: &mut Trace) {
    let mut runs: std::collections::BTreeMap<PathBuf, Vec<usize>> = Default::default();
    for (i, source) in trace.sources.iter().enumerate() {
        if source.format == registry::Importer::name(&opscope_formats::xplane::XPlaneFormat)
            && source.rank.is_none()
        {
            let dir = Path::new(&source.path).parent().unwrap_or(Path::new(""));
            runs.entry(dir.to_path_buf()).or_default().push(i);
        }
    }
    for (_, mut sources) in runs.into_iter().filter(|(_, s)| s.len() > 1) {
        sources.sort_by(|&a, &b| trace.sources[a].path.cmp(&trace.sources[b].path));
        let world = sources.len() as u32;
        for (rank, &i) in sources.iter().enumerate() {
            trace.sources[i].rank = Some(rank as u32);
            trace.sources[i].world_size = Some(world);
        }
    }
}
