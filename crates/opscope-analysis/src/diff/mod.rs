//! Two runs compared (`opscope diff`): two traces, two ranks of one, or two step
//! ranges. [`by_name`] groups as HTA's `TraceDiff.compare_traces` does (counts and
//! total durations per name); [`matched`] pairs each op with the op at the same place
//! in the call tree, and device work with its launching op, and judges each line's
//! change against the step-to-step noise ([`noise`]).

pub mod by_name;
pub mod matched;
mod noise;

use opscope_model::{SourceId, Trace};

use crate::context::Context;

pub use by_name::{Device, NameDiff};
pub use matched::{MatchedDiff, MatchedOptions, Verdict};

/// Steps `first..=last`, by number: a step marker's own number (`ProfilerStep#12` is
/// 12), else the step's place among the side's steps, from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StepRange {
    pub first: u64,
    pub last: u64,
}

impl std::str::FromStr for StepRange {
    type Err = String;

    /// `N`, `A..B` (B excluded, as Rust writes ranges), `A..=B`, `A..`, `..B`.
    fn from_str(text: &str) -> Result<StepRange, String> {
        let wrong =
            || format!("`{text}` is no step range: write N, A..B (B excluded), A..=B or A..");
        let number = |t: &str| t.trim().parse::<u64>().map_err(|_| wrong());
        let (first, last) = if let Some((a, b)) = text.split_once("..=") {
            (number(a)?, number(b)?)
        } else if let Some((a, b)) = text.split_once("..") {
            let first = if a.trim().is_empty() { 0 } else { number(a)? };
            let last = match b.trim() {
                "" => u64::MAX,
                b => number(b)?.checked_sub(1).ok_or_else(wrong)?,
            };
            (first, last)
        } else {
            let n = number(text)?;
            (n, n)
        };
        if last < first {
            return Err(format!("`{text}` holds no step"));
        }
        Ok(StepRange { first, last })
    }
}

impl StepRange {
    pub fn contains(&self, n: u64) -> bool {
        (self.first..=self.last).contains(&n)
    }
}

impl std::fmt::Display for StepRange {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match (self.first, self.last) {
            (a, b) if a == b => write!(f, "{a}"),
            (a, u64::MAX) => write!(f, "{a}.."),
            (a, b) => write!(f, "{a}..={b}"),
        }
    }
}

/// One side of a comparison: a trace, and which part of it.
pub struct Side<'a, 't> {
    pub cx: &'a Context<'t>,
    /// How the side is named in the output: the file, `rank 3`, `steps 10..20`.
    pub label: String,
    pub rank: Option<u32>,
    pub steps: Option<StepRange>,
    /// The steps of the trace's first or last span of time (a live job's first minute
    /// against its last).
    pub span: Option<Span>,
}

/// Which of a trace's steps a side takes: those that start in its first `ns` or end
/// in its last (where the steps cover less than twice `ns`, the two would share steps:
/// the first half of the steps stands against the second instead); or its slowest step
/// against all the others (a `slow-step` dump: what the slow step spent its time on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    First(i64),
    Last(i64),
    Slowest,
    AllButSlowest,
}

impl Span {
    /// Which of `steps` (start, end; in time order) the span holds, by place, and how
    /// it chose.
    pub fn select(self, steps: &[(i64, i64)]) -> (Vec<usize>, String) {
        let n = steps.len();
        let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
            return (Vec::new(), String::new());
        };
        let slowest = (0..n).max_by_key(|&k| (steps[k].1 - steps[k].0, std::cmp::Reverse(k)));
        let covered = last.1 - first.0;
        let seconds = |ns: i64| ns as f64 / 1e9;
        let halves = |ns: i64| {
            (covered < 2 * ns).then(|| {
                format!(
                    "the steps cover {:.1} s, under twice {:.1} s",
                    seconds(covered),
                    seconds(ns)
                )
            })
        };
        match self {
            Span::First(ns) => match halves(ns) {
                Some(why) => (
                    (0..n / 2).collect(),
                    format!("the first half of the steps ({why})"),
                ),
                None => (
                    (0..steps.partition_point(|s| s.0 < first.0 + ns)).collect(),
                    format!("the steps of the first {:.1} s", seconds(ns)),
                ),
            },
            Span::Last(ns) => match halves(ns) {
                Some(why) => (
                    (n / 2..n).collect(),
                    format!("the second half of the steps ({why})"),
                ),
                None => (
                    (steps.partition_point(|s| s.1 <= last.1 - ns)..n).collect(),
                    format!("the steps of the last {:.1} s", seconds(ns)),
                ),
            },
            Span::Slowest => (slowest.into_iter().collect(), "the slowest step".into()),
            Span::AllButSlowest => (
                (0..n).filter(|&k| Some(k) != slowest).collect(),
                "every step but the slowest".into(),
            ),
        }
    }
}

/// The sources a side reads: those of `rank`, else of the trace's lowest rank (as HTA
/// takes the first rank), else every source.
fn sources_of(trace: &Trace, rank: Option<u32>) -> Result<Vec<SourceId>, String> {
    let ranks = ranks_of(trace);
    let wanted = match rank {
        Some(r) if !ranks.contains(&r) => {
            return Err(match ranks.is_empty() {
                true => format!("no rank {r}: the trace names no ranks"),
                false => format!("no rank {r}: the trace has ranks {ranks:?}"),
            })
        }
        Some(r) => Some(r),
        None => ranks.first().copied(),
    };
    Ok((0..trace.sources.len())
        .filter(|&i| wanted.is_none() || trace.sources[i].rank == wanted)
        .map(|i| SourceId(i as u32))
        .collect())
}

/// The ranks of the trace, in order.
fn ranks_of(trace: &Trace) -> Vec<u32> {
    let mut r: Vec<u32> = trace.sources.iter().filter_map(|s| s.rank).collect();
    r.sort_unstable();
    r.dedup();
    r
}

/// The ranks matched one by one: where neither side names a rank and both traces hold
/// several, those they share (a job of 8 ranks against a job of 8); none otherwise.
fn common_ranks(a: &Side, b: &Side) -> Vec<u32> {
    if a.rank.is_some() || b.rank.is_some() {
        return Vec::new();
    }
    let theirs = ranks_of(b.cx.trace());
    let shared: Vec<u32> = ranks_of(a.cx.trace())
        .into_iter()
        .filter(|r| theirs.contains(r))
        .collect();
    match shared.len() {
        0 | 1 => Vec::new(),
        _ => shared,
    }
}

/// A step's number from its name (`ProfilerStep#12`, `train_step_3`), if it ends in
/// one.
fn number_in_name(name: &str) -> Option<u64> {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    (digits > 0)
        .then(|| name[name.len() - digits..].parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_ranges_read_as_rust_writes_them() {
        let r = |t: &str| t.parse::<StepRange>();
        assert_eq!(
            r("10..20"),
            Ok(StepRange {
                first: 10,
                last: 19
            })
        );
        assert_eq!(
            r("10..=20"),
            Ok(StepRange {
                first: 10,
                last: 20
            })
        );
        assert_eq!(r("7"), Ok(StepRange { first: 7, last: 7 }));
        assert_eq!(r("..3"), Ok(StepRange { first: 0, last: 2 }));
        assert_eq!(
            r("5.."),
            Ok(StepRange {
                first: 5,
                last: u64::MAX
            })
        );
        assert!(r("5..5").is_err(), "an empty range");
        assert!(r("..0").is_err());
        assert!(r("a..b").is_err());
        assert!(r("").is_err());
        assert_eq!(r("5..").unwrap().to_string(), "5..");
        assert!(r("5..").unwrap().contains(1 << 40));
    }

    #[test]
    fn a_span_takes_the_first_or_last_steps_halves_or_the_slowest() {
        // Ten steps of 1 s.
        let steps: Vec<(i64, i64)> = (0..10).map(|k| (k * 1_000, k * 1_000 + 1_000)).collect();
        let places = |r: std::ops::Range<usize>| r.collect::<Vec<usize>>();
        assert_eq!(Span::First(3_000).select(&steps).0, places(0..3));
        assert_eq!(Span::Last(3_000).select(&steps).0, places(7..10));
        let (first, why) = Span::First(6_000).select(&steps);
        assert_eq!(first, places(0..5));
        assert!(why.contains("first half"), "{why}");
        assert_eq!(Span::Last(6_000).select(&steps).0, places(5..10));
        assert_eq!(Span::Last(6_000).select(&[]).0, places(0..0));
        // Step 4 takes 3 s.
        let mut slow = steps.clone();
        slow[4].1 += 2_000;
        for s in &mut slow[5..] {
            s.0 += 2_000;
            s.1 += 2_000;
        }
        assert_eq!(Span::Slowest.select(&slow).0, vec![4]);
        assert_eq!(
            Span::AllButSlowest.select(&slow).0,
            vec![0, 1, 2, 3, 5, 6, 7, 8, 9]
        );
    }

    #[test]
    fn step_numbers_come_from_the_end_of_the_name() {
        assert_eq!(number_in_name("ProfilerStep#1009"), Some(1009));
        assert_eq!(number_in_name("train_step_3"), Some(3));
        assert_eq!(number_in_name("step"), None);
    }
}
