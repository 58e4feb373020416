//! When `opscope record` stood aside for a profiler the program ran itself (the
//! bootstrap's `opscope stood aside for …` ranges): the steps in that time have their
//! ops in the program's profile, so what opscope saw of them is no step's breakdown.

use opscope_model::Trace;

use crate::correlate;
use crate::intervals::IntervalSet;

/// How `opscope record`'s Python bootstrap names the time in which it stood aside for
/// a profiler the program ran itself: this, then what it stood aside for.
pub const ASIDE_MARK: &str = "opscope stood aside for ";

/// A source's time aside.
#[derive(Clone, Debug, Default)]
pub struct Aside {
    pub times: IntervalSet,
    /// What opscope stood aside for (`a PyTorch profiler`), in the order first seen.
    pub what: Vec<String>,
}

/// Per source (by index), when `opscope record` stood aside for the program's own
/// profiler.
pub fn of_sources(trace: &Trace) -> Vec<Aside> {
    let mut spans: Vec<Vec<(i64, i64)>> = vec![Vec::new(); trace.sources.len()];
    let mut found: Vec<Aside> = vec![Aside::default(); trace.sources.len()];
    if let Some(category) = trace.strings.find("opscope") {
        let s = &trace.slices;
        for i in (0..s.len()).filter(|&i| s.category[i] == category) {
            let (Some(what), Some(src)) = (
                trace.str(s.name[i]).strip_prefix(ASIDE_MARK),
                correlate::source_of(trace, i),
            ) else {
                continue;
            };
            spans[src.index()].push((s.ts[i], s.end(i)));
            let whats = &mut found[src.index()].what;
            if !whats.iter().any(|w| w == what) {
                whats.push(what.to_string());
            }
        }
    }
    for (aside, spans) in found.iter_mut().zip(spans) {
        aside.times = IntervalSet::from_spans(spans);
    }
    found
}
