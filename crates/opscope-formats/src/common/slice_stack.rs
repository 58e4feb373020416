//! Begin/end matching: per lane, the slices begun and not yet ended, innermost last.
//! An end with nothing to close and a begin never ended are counted here, so that every
//! format that pairs begins with ends repairs them alike.

use std::hash::Hash;

use hashbrown::HashMap;
use opscope_model::RepairCounts;

/// The open slices of each lane (a thread track, an async lane…), each with what its
/// format needs to close it (`P`).
pub(crate) struct SliceStack<K, P> {
    lanes: HashMap<K, Vec<P>>,
}

impl<K, P> Default for SliceStack<K, P> {
    fn default() -> Self {
        SliceStack {
            lanes: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, P> SliceStack<K, P> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn begin(&mut self, lane: K, open: P) {
        self.lanes.entry(lane).or_default().push(open);
    }

    /// How many slices of `lane` are open.
    pub fn depth(&self, lane: K) -> usize {
        self.lanes.get(&lane).map_or(0, Vec::len)
    }

    /// Ends the innermost open slice of `lane`. With none open the end is dropped and
    /// counted as an unmatched end.
    pub fn end(&mut self, lane: K, repairs: &mut RepairCounts) -> Option<P> {
        self.close(lane, repairs, |stack| stack.len().checked_sub(1))
    }

    /// Ends the innermost open slice of `lane` that `accept` takes (an end that names
    /// what it closes), leaving those inside it open. With none, as [`Self::end`].
    pub fn end_where(
        &mut self,
        lane: K,
        repairs: &mut RepairCounts,
        accept: impl FnMut(&P) -> bool,
    ) -> Option<P> {
        self.close(lane, repairs, |stack| stack.iter().rposition(accept))
    }

    /// Ends the innermost open slice of `lane` that `prefer` takes, else the innermost
    /// one: an end whose name is only a hint.
    pub fn end_preferring(
        &mut self,
        lane: K,
        repairs: &mut RepairCounts,
        prefer: impl FnMut(&P) -> bool,
    ) -> Option<P> {
        self.close(lane, repairs, |stack| {
            stack
                .iter()
                .rposition(prefer)
                .or(stack.len().checked_sub(1))
        })
    }

    /// Removes the open slice of `lane` that `pick` points at; with none, counts an
    /// unmatched end.
    fn close(
        &mut self,
        lane: K,
        repairs: &mut RepairCounts,
        pick: impl FnOnce(&[P]) -> Option<usize>,
    ) -> Option<P> {
        let closed = self.lanes.get_mut(&lane).and_then(|stack| {
            let at = pick(stack)?;
            Some(stack.remove(at))
        });
        if closed.is_none() {
            repairs.unmatched_ends += 1;
        }
        closed
    }

    /// At the end of the input: hands back every slice still open, each counted as an
    /// unmatched begin, for the caller to close at its trace's end. Lanes come in key
    /// order (the same every run) and each lane's slices outermost first.
    pub fn finish(&mut self, repairs: &mut RepairCounts) -> Vec<(K, Vec<P>)>
    where
        K: Ord,
    {
        let mut open: Vec<(K, Vec<P>)> = self
            .lanes
            .drain()
            .filter(|(_, stack)| !stack.is_empty())
            .collect();
        open.sort_unstable_by_key(|(lane, _)| *lane);
        repairs.unmatched_begins += open.iter().map(|(_, s)| s.len() as u64).sum::<u64>();
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_close_the_innermost_and_count_what_has_no_partner() {
        let mut r = RepairCounts::default();
        let mut s = SliceStack::new();
        s.begin(1, "outer");
        s.begin(1, "inner");
        s.begin(2, "other lane");
        assert_eq!(s.end(1, &mut r), Some("inner"));
        assert_eq!(s.end(3, &mut r), None);
        assert_eq!(r.unmatched_ends, 1);
        let open = s.finish(&mut r);
        assert_eq!(open, vec![(1, vec!["outer"]), (2, vec!["other lane"])]);
        assert_eq!(r.unmatched_begins, 2);
        assert!(s.finish(&mut r).is_empty());
    }

    #[test]
    fn an_end_may_name_what_it_closes() {
        let mut r = RepairCounts::default();
        let mut s = SliceStack::new();
        for name in ["a", "b", "c"] {
            s.begin((), name);
        }
        // Closes `a`, leaving `b` and `c` open inside where it was.
        assert_eq!(s.end_where((), &mut r, |&n| n == "a"), Some("a"));
        assert_eq!(s.end_where((), &mut r, |&n| n == "a"), None);
        assert_eq!(r.unmatched_ends, 1);
        // A name that matches nothing still closes the innermost when it is a hint.
        assert_eq!(s.end_preferring((), &mut r, |&n| n == "b"), Some("b"));
        assert_eq!(s.end_preferring((), &mut r, |&n| n == "zz"), Some("c"));
        assert_eq!(s.end_preferring((), &mut r, |_| true), None);
        assert_eq!(r.unmatched_ends, 2);
        assert_eq!(r.unmatched_begins, 0);
    }
}
