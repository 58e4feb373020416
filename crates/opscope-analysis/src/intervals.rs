//! Sets of time intervals: the busy time of a stream or of a whole device, and the
//! overlap of one kind of work with another, computed by merging sorted spans.

/// Disjoint, sorted, non-empty half-open intervals `[start, end)` in nanoseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntervalSet {
    spans: Vec<(i64, i64)>,
}

impl IntervalSet {
    /// The union of `spans`, in any order; empty spans are ignored.
    pub fn from_spans(mut spans: Vec<(i64, i64)>) -> IntervalSet {
        spans.retain(|&(a, b)| b > a);
        // Stable sort finds the sorted runs spans usually come in (a stream's, a
        // thread's) and merges them: several times quicker here than quicksort.
        spans.sort();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(spans.len());
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        IntervalSet { spans: merged }
    }

    pub fn spans(&self) -> &[(i64, i64)] {
        &self.spans
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The part of the set within `[start, end)`, found by binary search.
    pub fn clipped(&self, start: i64, end: i64) -> IntervalSet {
        let from = self.spans.partition_point(|s| s.1 <= start);
        let spans = self.spans[from..]
            .iter()
            .take_while(|s| s.0 < end)
            .map(|&(a, b)| (a.max(start), b.min(end)))
            .filter(|(a, b)| a < b)
            .collect();
        IntervalSet { spans }
    }

    /// Total covered time.
    pub fn total(&self) -> i64 {
        self.spans.iter().map(|(a, b)| b - a).sum()
    }

    /// Time covered by both sets.
    pub fn intersection(&self, other: &IntervalSet) -> IntervalSet {
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::new();
        while i < self.spans.len() && j < other.spans.len() {
            let (a1, b1) = self.spans[i];
            let (a2, b2) = other.spans[j];
            let (a, b) = (a1.max(a2), b1.min(b2));
            if a < b {
                out.push((a, b));
            }
            if b1 < b2 {
                i += 1;
            } else {
                j += 1;
            }
        }
        IntervalSet { spans: out }
    }

    /// Time covered by either set.
    pub fn union(&self, other: &IntervalSet) -> IntervalSet {
        let mut all = self.spans.clone();
        all.extend_from_slice(&other.spans);
        IntervalSet::from_spans(all)
    }

    /// Time covered by this set and not by `other`.
    pub fn difference(&self, other: &IntervalSet) -> IntervalSet {
        let mut out = Vec::new();
        let mut j = 0;
        for &(a, b) in &self.spans {
            let mut start = a;
            while j < other.spans.len() && other.spans[j].1 <= start {
                j += 1;
            }
            let mut k = j;
            while k < other.spans.len() && other.spans[k].0 < b {
                let (c, d) = other.spans[k];
                if c > start {
                    out.push((start, c));
                }
                start = start.max(d);
                if start >= b {
                    break;
                }
                k += 1;
            }
            if start < b {
                out.push((start, b));
            }
        }
        IntervalSet { spans: out }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The set as a bitmap over `0..64`, the brute-force reference.
    fn bitmap(spans: &[(i64, i64)]) -> u64 {
        spans
            .iter()
            .flat_map(|&(a, b)| a.max(0)..b.min(64))
            .fold(0, |m, t| m | (1 << t))
    }

    fn spans() -> impl Strategy<Value = Vec<(i64, i64)>> {
        prop::collection::vec(
            (0i64..64, 0i64..20).prop_map(|(a, len)| (a, (a + len).min(64))),
            0..12,
        )
    }

    proptest! {
        #[test]
        fn set_operations_match_a_bitmap(x in spans(), y in spans()) {
            let (a, b) = (IntervalSet::from_spans(x.clone()), IntervalSet::from_spans(y.clone()));
            let (bx, by) = (bitmap(&x), bitmap(&y));
            prop_assert_eq!(bitmap(a.spans()), bx);
            prop_assert_eq!(a.total(), bx.count_ones() as i64);
            prop_assert_eq!(bitmap(a.intersection(&b).spans()), bx & by);
            prop_assert_eq!(bitmap(a.union(&b).spans()), bx | by);
            prop_assert_eq!(bitmap(a.difference(&b).spans()), bx & !by);
            // Results stay disjoint, sorted and non-empty.
            for set in [a.intersection(&b), a.union(&b), a.difference(&b)] {
                prop_assert!(set.spans().windows(2).all(|w| w[0].1 < w[1].0));
                prop_assert!(set.spans().iter().all(|(s, e)| s < e));
            }
        }
    }
}
