//! How a rank's device time divides, over all its streams at once: busy or idle,
//! computing or not (HTA's temporal breakdown), the exclusive time of each combination
//! of computation, communication and memory work, and how much communication overlaps
//! computation.

use serde::Serialize;

use super::classify::WorkClass;
use crate::intervals::IntervalSet;

/// HTA's temporal breakdown: over the span from the first device work to the last,
/// idle time (nothing running on any stream), computation time, and other busy time.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Temporal {
    pub span_ns: i64,
    pub busy_ns: i64,
    pub idle_ns: i64,
    pub compute_ns: i64,
    pub non_compute_ns: i64,
    pub idle_pct: f64,
    pub compute_pct: f64,
    pub non_compute_pct: f64,
}

/// Exclusive time of one combination of work classes running together.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Combination {
    /// The classes running, e.g. `[computation, memory]`.
    pub classes: Vec<WorkClass>,
    pub time_ns: i64,
    /// Share of the time any class runs.
    pub pct: f64,
}

impl Combination {
    /// HTA's label: `COMPUTATION overlapping MEMORY`.
    pub fn label(&self) -> String {
        let names: Vec<String> = self
            .classes
            .iter()
            .map(|c| c.name().to_ascii_uppercase())
            .collect();
        names.join(" overlapping ")
    }
}

/// The busy time of each class, in [`WorkClass::ALL`] order.
pub type ClassSets = [IntervalSet; 3];

pub fn temporal(sets: &ClassSets) -> Temporal {
    let busy = sets[0].union(&sets[1]).union(&sets[2]);
    let (Some(first), Some(last)) = (busy.spans().first(), busy.spans().last()) else {
        return Temporal::default();
    };
    let span = last.1 - first.0;
    let busy_ns = busy.total();
    let compute_ns = sets[0].total();
    let pct = |x: i64| 100.0 * x as f64 / span as f64;
    Temporal {
        span_ns: span,
        busy_ns,
        idle_ns: span - busy_ns,
        compute_ns,
        non_compute_ns: busy_ns - compute_ns,
        idle_pct: pct(span - busy_ns),
        compute_pct: pct(compute_ns),
        non_compute_pct: pct(busy_ns - compute_ns),
    }
}

/// The exclusive time of every combination that occurs, largest first.
pub fn combinations(sets: &ClassSets) -> Vec<Combination> {
    let all = sets[0].union(&sets[1]).union(&sets[2]);
    let total = all.total();
    let mut rows = Vec::new();
    for mask in 1u8..8 {
        let inside: Vec<usize> = (0..3).filter(|b| mask & (1 << b) != 0).collect();
        // A mix with a class that never ran has no time: not computed (most traces
        // have no communication, and these set operations are `gpu`'s largest cost).
        if inside.iter().any(|&b| sets[b].is_empty()) {
            continue;
        }
        let mut time = all.clone();
        for (b, set) in sets.iter().enumerate() {
            time = if inside.contains(&b) {
                time.intersection(set)
            } else {
                time.difference(set)
            };
        }
        let time_ns = time.total();
        if time_ns > 0 {
            rows.push(Combination {
                classes: inside.iter().map(|&b| WorkClass::ALL[b]).collect(),
                time_ns,
                pct: 100.0 * time_ns as f64 / total as f64,
            });
        }
    }
    rows.sort_by(|a, b| {
        b.time_ns
            .cmp(&a.time_ns)
            .then_with(|| a.classes.cmp(&b.classes))
    });
    rows
}

/// Percent of communication time during which computation also runs; `None` without
/// communication.
pub fn communication_overlap(sets: &ClassSets) -> Option<f64> {
    let comm = &sets[1];
    let total = comm.total();
    (total > 0).then(|| 100.0 * comm.intersection(&sets[0]).total() as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breakdowns_follow_their_definitions() {
        // Compute 0..10 and 20..30, communication 5..25, memory 28..40.
        let sets: ClassSets = [
            IntervalSet::from_spans(vec![(0, 10), (20, 30)]),
            IntervalSet::from_spans(vec![(5, 25)]),
            IntervalSet::from_spans(vec![(28, 40)]),
        ];
        let t = temporal(&sets);
        assert_eq!(
            (
                t.span_ns,
                t.busy_ns,
                t.idle_ns,
                t.compute_ns,
                t.non_compute_ns
            ),
            (40, 40, 0, 20, 20)
        );
        let rows: Vec<(String, i64)> = combinations(&sets)
            .iter()
            .map(|c| (c.label(), c.time_ns))
            .collect();
        // By hand: 0..5 C, 5..10 C+K, 10..20 K, 20..25 C+K, 25..28 C, 28..30 C+M, 30..40 M.
        let expected = [
            ("COMPUTATION overlapping COMMUNICATION", 10),
            ("COMMUNICATION", 10),
            ("MEMORY", 10),
            ("COMPUTATION", 8),
            ("COMPUTATION overlapping MEMORY", 2),
        ];
        let expected: Vec<(String, i64)> =
            expected.iter().map(|(l, t)| (l.to_string(), *t)).collect();
        assert_eq!(rows, expected);
        let pcts: Vec<f64> = combinations(&sets).iter().map(|c| c.pct).collect();
        assert_eq!(pcts, [25.0, 25.0, 25.0, 20.0, 5.0]);
        assert_eq!(communication_overlap(&sets), Some(50.0));
        // With a gap: 0..10 compute, 30..40 memory.
        let gap: ClassSets = [
            IntervalSet::from_spans(vec![(0, 10)]),
            IntervalSet::default(),
            IntervalSet::from_spans(vec![(30, 40)]),
        ];
        let t = temporal(&gap);
        assert_eq!(
            (t.span_ns, t.idle_ns, t.idle_pct, t.compute_pct),
            (40, 20, 50.0, 25.0)
        );
        assert_eq!(communication_overlap(&gap), None);
    }
}
