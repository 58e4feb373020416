//! Flow binding: the events of one flow id, in time order, make a chain from a start
//! through its steps to an end, and each pair of consecutive events bound to slices
//! becomes a flow. The events that join nothing are counted here, alike for every format.

use opscope_model::RepairCounts;

/// What a flow event does to its id's chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlowRole {
    /// Starts a chain (Chrome `s`), leaving any open one.
    Start,
    /// Continues the open chain (Chrome `t`).
    Step,
    /// Continues the open chain or, with none, starts one (Perfetto's `flow_ids`).
    StartOrStep,
    /// Ends the open chain (Chrome `f`, Perfetto's `terminating_flow_ids`).
    End,
}

/// One flow event.
pub(crate) struct FlowEnd<K, L> {
    pub id: K,
    pub ts: i64,
    /// Orders events of one time: the file's order.
    pub order: u64,
    pub role: FlowRole,
    /// The slice row the event belongs to; `None` when it has none (it is counted, and
    /// its chain is broken there rather than joined around it).
    pub slice: Option<u32>,
    /// What the format keeps to name the flow.
    pub label: L,
}

/// A flow found: from slice row `from` to slice row `to`.
pub(crate) struct Link<'a, K, L> {
    pub id: &'a K,
    pub from: u32,
    pub to: u32,
    pub from_label: &'a L,
    pub to_label: &'a L,
}

/// Flow events by id, joined once the whole input is read.
pub(crate) struct FlowBinder<K, L> {
    ends: Vec<FlowEnd<K, L>>,
    /// Whether an id's one start and one end are joined even when the end comes first.
    pairs_by_role: bool,
    /// Whether `ends` is in binding order (see [`FlowBinder::sort`]).
    sorted: bool,
}

impl<K, L> Default for FlowBinder<K, L> {
    fn default() -> Self {
        FlowBinder {
            ends: Vec::new(),
            pairs_by_role: false,
            sorted: true,
        }
    }
}

/// Flow events from which sorting or placing them gets a second thread.
pub(crate) const PARALLEL_ENDS: usize = 100_000;

impl<K: Copy + Ord, L> FlowBinder<K, L> {
    /// Chains in time order only, as the Trace Event Format defines them: an end
    /// before its start joins nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// As [`Self::new`], but an id with exactly one start and one end is joined from
    /// the start to the end whichever comes first: for formats whose two ends may be
    /// stamped by clocks that disagree (a CPU's and a GPU's).
    pub fn pairs_by_role() -> Self {
        FlowBinder {
            pairs_by_role: true,
            ..Self::default()
        }
    }

    pub fn add(&mut self, end: FlowEnd<K, L>) {
        self.ends.push(end);
        self.sorted = false;
    }

    /// How many events were added and not yet bound.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Puts the events added so far in binding order. It needs no slices, so an
    /// importer can run it beside the sorting of its slices; [`FlowBinder::bind`] does it
    /// otherwise.
    pub fn sort(&mut self) {
        // Stable, so that an event naming one id twice keeps its order; at one time and
        // place an event's outgoing ids come before its terminating ones.
        opscope_model::runs::sort_runs_by_key(&mut self.ends, |e| {
            (e.id, e.ts, e.order, e.role == FlowRole::End)
        });
        self.sorted = true;
    }

    /// [`FlowBinder::sort`] for importers whose events never share a key (one flow event
    /// per `order`): in place, with no buffer of half the events beside the model (30 MiB
    /// at the peak of a 1 GB Kineto trace's load).
    pub fn sort_unique(&mut self) {
        opscope_model::runs::sort_distinct_runs_by_key(&mut self.ends, |e| {
            (e.id, e.ts, e.order, e.role == FlowRole::End)
        });
        debug_assert!(self
            .ends
            .windows(2)
            .all(|w| (w[0].id, w[0].ts, w[0].order) != (w[1].id, w[1].ts, w[1].order)));
        self.sorted = true;
    }

    /// Sets the slice of every event added so far, for formats whose flow events name
    /// a place (a track and time) that only the sorted slices resolve.
    /// `slice` is given a state of each thread's own (`state()`), for look-ups that
    /// carry something from one event to the next.
    pub fn place<S>(
        &mut self,
        state: impl Fn() -> S + Sync,
        slice: impl Fn(&FlowEnd<K, L>, &mut S) -> Option<u32> + Sync,
    ) where
        K: Send,
        L: Send,
    {
        let place = |ends: &mut [FlowEnd<K, L>]| {
            let mut state = state();
            for e in ends {
                e.slice = slice(e, &mut state);
            }
        };
        if self.ends.len() < PARALLEL_ENDS {
            place(&mut self.ends);
            return;
        }
        // Each look-up is a search of its track's slices that misses the cache: on two
        // cores, halves at once.
        let half = self.ends.len() / 2;
        let (first, second) = self.ends.split_at_mut(half);
        std::thread::scope(|scope| {
            scope.spawn(|| place(first));
            place(second);
        });
    }

    /// Joins the events added so far, calling `flow` for each flow in id and time
    /// order, and counts in `repairs.unbound_flow_events` each event that joins
    /// nothing: one with no slice, a step or end with no chain open, a start that
    /// nothing continues.
    pub fn bind(&mut self, repairs: &mut RepairCounts, mut flow: impl FnMut(Link<'_, K, L>)) {
        if !self.sorted {
            self.sort();
        }
        let ends = std::mem::take(&mut self.ends);
        for chain in ends.chunk_by(|a, b| a.id == b.id) {
            repairs.unbound_flow_events += bind_chain(chain, self.pairs_by_role, &mut flow);
        }
    }
}

/// Joins the events of one id; returns how many join nothing.
fn bind_chain<K, L>(
    events: &[FlowEnd<K, L>],
    pairs_by_role: bool,
    flow: &mut impl FnMut(Link<'_, K, L>),
) -> u64 {
    let mut join = |from: &FlowEnd<K, L>, to: &FlowEnd<K, L>| {
        if let (Some(a), Some(b)) = (from.slice, to.slice) {
            flow(Link {
                id: &to.id,
                from: a,
                to: b,
                from_label: &from.label,
                to_label: &to.label,
            });
        }
    };
    // One start and one end whose clocks disagree: their roles say the direction.
    if let ([end, start], true) = (events, pairs_by_role) {
        if end.role == FlowRole::End
            && matches!(start.role, FlowRole::Start | FlowRole::StartOrStep)
        {
            join(start, end);
            return u64::from(start.slice.is_none()) + u64::from(end.slice.is_none());
        }
    }
    // A start nothing continued (one with no slice is counted already).
    let lone = |open: Option<&FlowEnd<K, L>>, joined: bool| {
        u64::from(!joined && open.is_some_and(|o| o.slice.is_some()))
    };
    let mut dropped = 0;
    let mut open: Option<&FlowEnd<K, L>> = None;
    let mut joined = false;
    for e in events {
        dropped += u64::from(e.slice.is_none());
        match (e.role, open) {
            (FlowRole::Start, _) | (FlowRole::StartOrStep, None) => {
                dropped += lone(open, joined);
                open = Some(e);
                joined = false;
            }
            (FlowRole::Step | FlowRole::StartOrStep | FlowRole::End, Some(from)) => {
                join(from, e);
                joined = true;
                open = (e.role != FlowRole::End).then_some(e);
            }
            (FlowRole::Step | FlowRole::End, None) => {
                dropped += u64::from(e.slice.is_some());
            }
        }
    }
    dropped + lone(open, joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use FlowRole::*;

    type Event = (u32, i64, FlowRole, Option<u32>);

    /// The flows and the count of events joining nothing, for events given as (id,
    /// time, role, slice) in file order.
    fn bind(events: &[Event]) -> (Vec<(u32, u32)>, u64) {
        bind_with(FlowBinder::new(), events)
    }

    fn bind_with(mut binder: FlowBinder<u32, ()>, events: &[Event]) -> (Vec<(u32, u32)>, u64) {
        for (order, &(id, ts, role, slice)) in events.iter().enumerate() {
            binder.add(FlowEnd {
                id,
                ts,
                order: order as u64,
                role,
                slice,
                label: (),
            });
        }
        let mut repairs = RepairCounts::default();
        let mut flows = Vec::new();
        binder.bind(&mut repairs, |l| flows.push((l.from, l.to)));
        (flows, repairs.unbound_flow_events)
    }

    #[test]
    fn chains_join_their_consecutive_events() {
        let chain = [
            (7, 30, End, Some(3)),
            (7, 10, Start, Some(1)),
            (7, 20, Step, Some(2)),
        ];
        assert_eq!(bind(&chain), (vec![(1, 2), (2, 3)], 0));
        // Ids without an end continue while their events come, and ids are apart.
        let open = [
            (1, 10, StartOrStep, Some(1)),
            (2, 11, StartOrStep, Some(5)),
            (1, 12, StartOrStep, Some(2)),
            (2, 13, End, Some(6)),
        ];
        assert_eq!(bind(&open), (vec![(1, 2), (5, 6)], 0));
    }

    #[test]
    fn events_that_join_nothing_are_counted_once() {
        // An end or step with nothing open, and a start nothing continues.
        assert_eq!(bind(&[(1, 5, End, Some(1))]), (vec![], 1));
        assert_eq!(bind(&[(1, 5, Step, Some(1))]), (vec![], 1));
        assert_eq!(bind(&[(1, 5, Start, Some(1))]), (vec![], 1));
        assert_eq!(bind(&[(1, 5, StartOrStep, Some(1))]), (vec![], 1));
        // A start left for another: it is dropped, the second one joins.
        let restarted = [
            (1, 1, Start, Some(1)),
            (1, 2, Start, Some(2)),
            (1, 3, End, Some(3)),
        ];
        assert_eq!(bind(&restarted), (vec![(2, 3)], 1));
        // An end after the chain ended.
        let late = [
            (1, 1, Start, Some(1)),
            (1, 2, End, Some(2)),
            (1, 3, End, Some(3)),
        ];
        assert_eq!(bind(&late), (vec![(1, 2)], 1));
    }

    #[test]
    fn an_event_with_no_slice_breaks_its_chain_and_is_the_one_counted() {
        // Its partner did join a chain: only the unbound event counts, and no flow is
        // made around it.
        assert_eq!(
            bind(&[(1, 1, Start, None), (1, 2, End, Some(2))]),
            (vec![], 1)
        );
        assert_eq!(
            bind(&[(1, 1, Start, Some(1)), (1, 2, End, None)]),
            (vec![], 1)
        );
        let hole = [
            (1, 1, StartOrStep, Some(1)),
            (1, 2, StartOrStep, None),
            (1, 3, End, Some(3)),
        ];
        assert_eq!(bind(&hole), (vec![], 1));
        // Counted once even when it also has nothing open.
        assert_eq!(bind(&[(1, 1, End, None)]), (vec![], 1));
    }

    #[test]
    fn an_end_before_its_start_joins_nothing_unless_pairs_go_by_role() {
        let reversed = [(1, 9, Start, Some(1)), (1, 5, End, Some(2))];
        assert_eq!(bind(&reversed), (vec![], 2));
        let by_role = || FlowBinder::pairs_by_role();
        assert_eq!(bind_with(by_role(), &reversed), (vec![(1, 2)], 0));
        // Equal times: the file put the end first.
        let tied = [(1, 5, End, Some(2)), (1, 5, StartOrStep, Some(1))];
        assert_eq!(bind(&tied), (vec![], 2));
        assert_eq!(bind_with(by_role(), &tied), (vec![(1, 2)], 0));
        // A step has no direction of its own to go by, and longer chains go by time.
        let step = [(1, 9, Start, Some(1)), (1, 5, Step, Some(2))];
        assert_eq!(bind_with(by_role(), &step), (vec![], 2));
        let three = [
            (1, 9, StartOrStep, Some(1)),
            (1, 5, End, Some(2)),
            (1, 6, End, Some(3)),
        ];
        assert_eq!(bind_with(by_role(), &three), (vec![], 3));
    }
}
