//! Kineto ranks claimed twice: two files that say they are one rank (Kineto's
//! `distributedInfo`) are most often one run read twice or two runs in one directory,
//! and their numbers would be added up as one rank's, so the model says so.

use opscope_model::{SourceId, Trace};

/// Two files that claim one rank (Kineto's `distributedInfo`) are most often one run
/// read twice (a copy) or two runs in one directory: either way their numbers would be
/// added up as one rank's.
pub(super) fn run(trace: &mut Trace) {
    let mut by_rank: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (i, source) in trace.sources.iter().enumerate() {
        if let Some(rank) = source.rank {
            by_rank.entry(rank).or_default().push(i);
        }
    }
    for (rank, sources) in by_rank {
        if let [first, rest @ ..] = &sources[..] {
            for &other in rest {
                let warning = format!(
                    "{} and {} both claim rank {rank} (a copy of one file, or two runs in one directory?)",
                    trace.sources[*first].path, trace.sources[other].path
                );
                trace.warnings.push((SourceId(other as u32), warning));
            }
        }
    }
}
