//! lttng-ust's statedump (`lttng_ust_statedump:*`, emitted at a process's registration):
//! `procname` names the process; every statedump event (build ids, loaded objects) is a
//! process-scoped instant, as it says something of the process, not of a thread.

use opscope_model::{ProcessId, TrackId};

use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout};
use crate::ctf::mapping::Mapper;

#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) enum UstStatedump {
    /// `procname`, with its string field.
    Procname {
        field: usize,
    },
    Other,
}

pub(super) fn plan(_: &mut Mapper, c: &Class) -> Option<Rule> {
    if c.provider != "lttng_ust_statedump" {
        return None;
    }
    Some(Rule::UstStatedump(
        match (c.short, c.str_field("procname")) {
            ("procname", Some(field)) => UstStatedump::Procname { field },
            _ => UstStatedump::Other,
        },
    ))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn apply(
    m: &mut Mapper,
    statedump: &UstStatedump,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    process: ProcessId,
    track: TrackId,
) {
    if let UstStatedump::Procname { field } = statedump {
        if let Some(&p) = m.positions.get(*field) {
            let n = m.text(r, r.vals[p as usize]);
            m.trace.processes[process.index()].name = Some(n);
            m.named_processes.insert(process);
        }
    }
    m.instant(plan, layout, r, ts, track);
}
