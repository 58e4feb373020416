//! lttng-modules' statedump of the processes alive when tracing starts
//! (`lttng_statedump_process_state`): which process each thread belongs to (kernel
//! events carry only a tid) and the threads' and processes' names.

use opscope_model::TrackId;

use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout};
use crate::ctf::mapping::Mapper;

/// The payload fields of a `lttng_statedump_process_state` class.
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) struct ProcessState {
    tid: usize,
    pid: usize,
    name: Option<usize>,
}

/// Takes every `lttng_statedump_process_state`: with its tid and pid, else an instant.
pub(super) fn plan(_: &mut Mapper, c: &Class) -> Option<Rule> {
    if c.short != "lttng_statedump_process_state" {
        return None;
    }
    Some(match (c.int_field("tid"), c.int_field("pid")) {
        (Some(tid), Some(pid)) => Rule::ProcessState(ProcessState {
            tid,
            pid,
            name: c.str_field("name"),
        }),
        _ => Rule::Instant,
    })
}

pub(super) fn apply(
    m: &mut Mapper,
    state: &ProcessState,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    track: TrackId,
) {
    let ProcessState { tid, pid, name } = state;
    if let (Some(t), Some(p)) = (m.field_int(r, *tid), m.field_int(r, *pid)) {
        m.tid_pid.insert(t, p);
        if let Some(n) = name.and_then(|i| m.positions.get(i).copied()) {
            let n = m.text(r, r.vals[n as usize]);
            let proc_ = m.trace.process(m.source, p);
            let th = m.trace.thread(proc_, t);
            m.trace.threads[th.index()].name.get_or_insert(n);
            if t == p {
                m.trace.processes[proc_.index()].name.get_or_insert(n);
            }
        }
    }
    m.instant(plan, layout, r, ts, track);
}
