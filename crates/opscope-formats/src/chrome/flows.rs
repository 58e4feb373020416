//! Chrome flow events (`s`, `t`, `f`) kept apart by category and by the kind of their
//! id until they are bound. Within one such group a Kineto trace's events come nearly
//! in id order, so sorting them for binding has little to do; across groups (`ac2g`
//! launches, `fwdbwd` autograd links) they interleave all through the file.

use hashbrown::HashMap;

use opscope_model::{ProcessId, RepairCounts, StrId, TrackId};

use super::builder::IdKey;
use crate::common::flow_binder::Link;
use crate::common::{FlowBinder, FlowEnd};

/// Events with the same key form one flow chain: category, id, and the process of a
/// process-local id.
pub(super) type FlowKey = (StrId, IdKey, Option<ProcessId>);

/// Where a flow event binds, once the slices are sorted, and its name.
pub(super) struct FlowPlace {
    pub track: TrackId,
    /// `bp: "e"`: bind to the enclosing slice rather than the next one.
    pub enclosing: bool,
    pub name: StrId,
}

/// A group's category, and whether its ids are strings: the start of every key of the
/// group, so that binding the groups in this order binds the chains in key order.
type Group = (StrId, bool);

type Binder = FlowBinder<FlowKey, FlowPlace>;

/// The flow events of one file, by group.
#[derive(Default)]
pub(super) struct FlowGroups {
    groups: Vec<(Group, Binder)>,
    /// Each group's place in `groups`.
    index: HashMap<Group, usize>,
    /// The group of the last event added: runs of one group are the norm.
    last: usize,
}

impl FlowGroups {
    pub fn add(&mut self, end: FlowEnd<FlowKey, FlowPlace>) {
        let group = (end.id.0, matches!(end.id.1, IdKey::Str(_)));
        if self.groups.get(self.last).map(|(g, _)| *g) != Some(group) {
            let next = self.groups.len();
            self.last = *self.index.entry(group).or_insert(next);
            if self.last == next {
                self.groups.push((group, Binder::new()));
            }
        }
        self.groups[self.last].1.add(end);
    }

    /// How many events were added.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|(_, b)| b.len()).sum()
    }

    /// [`FlowBinder::sort_unique`] of every group.
    pub fn sort_unique(&mut self) {
        for (_, binder) in &mut self.groups {
            binder.sort_unique();
        }
    }

    /// [`FlowBinder::place`] of every group.
    pub fn place<S>(
        &mut self,
        state: impl Fn() -> S + Sync,
        slice: impl Fn(&FlowEnd<FlowKey, FlowPlace>, &mut S) -> Option<u32> + Sync,
    ) {
        for (_, binder) in &mut self.groups {
            binder.place(&state, &slice);
        }
    }

    /// [`FlowBinder::bind`] of every group, the groups in key order: the flows come in
    /// the order of their keys, as from one binder of all events.
    pub fn bind(
        &mut self,
        repairs: &mut RepairCounts,
        mut flow: impl FnMut(Link<'_, FlowKey, FlowPlace>),
    ) {
        self.groups.sort_by_key(|(group, _)| *group);
        self.index = (self.groups.iter().enumerate())
            .map(|(i, (group, _))| (*group, i))
            .collect();
        for (_, binder) in &mut self.groups {
            binder.bind(repairs, &mut flow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::FlowRole;

    /// Flow events of three categories, numeric and string ids and process-local ones,
    /// interleaved as a generator has them, nearly in id order within a category.
    fn events(seed: u64, count: usize) -> Vec<FlowEnd<FlowKey, FlowPlace>> {
        let mut state = seed;
        let mut next = move |below: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % below
        };
        (0..count)
            .map(|i| {
                let category = StrId(next(3) as u32 + 1);
                let near = (i as u64 / 4 + next(5)) as i64;
                let id = match next(4) {
                    0 => IdKey::Str(near as u32 % 7),
                    _ => IdKey::Int(near - 3),
                };
                let process = (next(5) == 0).then(|| ProcessId(next(2) as u32));
                let role = [FlowRole::Start, FlowRole::Step, FlowRole::End][next(3) as usize];
                FlowEnd {
                    id: (category, id, process),
                    ts: next(50) as i64,
                    order: i as u64,
                    role,
                    slice: (next(9) != 0).then_some(i as u32),
                    label: FlowPlace {
                        track: TrackId(0),
                        enclosing: false,
                        name: StrId(0),
                    },
                }
            })
            .collect()
    }

    type Links = (Vec<(u32, u32, FlowKey)>, u64);

    fn links(bind: impl FnOnce(&mut RepairCounts, &mut dyn FnMut(u32, u32, FlowKey))) -> Links {
        let mut repairs = RepairCounts::default();
        let mut found = Vec::new();
        bind(&mut repairs, &mut |from, to, id| found.push((from, to, id)));
        (found, repairs.unbound_flow_events)
    }

    /// Grouped, sorted apart and bound group by group, the flows are those of one binder
    /// of all events, in the same order.
    #[test]
    fn groups_bind_as_one_binder_of_all_events() {
        for seed in 1..60 {
            let count = (seed as usize * 37) % 700;
            let expected = links(|repairs, push| {
                let mut all = Binder::new();
                for e in events(seed, count) {
                    all.add(e);
                }
                all.bind(repairs, |l| push(l.from, l.to, *l.id));
            });
            for sorted_first in [false, true] {
                let got = links(|repairs, push| {
                    let mut groups = FlowGroups::default();
                    for e in events(seed, count) {
                        groups.add(e);
                    }
                    assert_eq!(groups.len(), count);
                    if sorted_first {
                        groups.sort_unique();
                    }
                    groups.bind(repairs, |l| push(l.from, l.to, *l.id));
                });
                assert_eq!(got, expected, "seed {seed}, sorted first: {sorted_first}");
            }
        }
    }
}
