//! Time in collectives (gloo, MPI, NCCL calls on the host: slices of kind collective,
//! as `opscope steps` and `gpu`'s host rows count them): their union, nested ones
//! once, and a collective that spans two chunks once.

use opscope_analysis::intervals::IntervalSet;
use opscope_model::SliceKind;

use super::{LiveMetric, MetricTally};

pub const COMMUNICATION: LiveMetric = LiveMetric {
    name: "communication",
    column: "comm",
    window_column: "comm 10 s",
    tally: || Box::<Talk>::default(),
};

#[derive(Default)]
struct Talk {
    /// The chunk's collectives, start and end ns.
    talk: Vec<(i64, i64)>,
    /// The last chunk's: a collective written in this chunk around one written in the
    /// last (each slice goes out when it ends) counts its time once.
    talked: IntervalSet,
}

impl MetricTally for Talk {
    fn slice(&mut self, kind: SliceKind, _name: &str, start_ns: i64, end_ns: i64) {
        if kind == SliceKind::Collective {
            self.talk.push((start_ns, end_ns));
        }
    }

    fn end_chunk(&mut self) -> u64 {
        let talk = IntervalSet::from_spans(std::mem::take(&mut self.talk));
        let new_ns = talk.difference(&self.talked).total().max(0) as u64;
        self.talked = talk;
        new_ns
    }
}
