//! Kernel `sched_switch` (lttng-modules' `sched_switch`, and perf's) → `running` slices
//! per thread, from its switch-in to its switch-out on a CPU, on an async track of the
//! thread's process. The thread running on each CPU is also where the kernel's pairs
//! go on CPU lanes ([`Mapper::running_lane`]).

use opscope_model::args::ArgValue;
use opscope_model::events::SliceRow;
use opscope_model::{ProcessId, SliceKind, StrId, TrackId, TrackKind};

use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout};
use crate::ctf::mapping::Mapper;

/// The payload fields of a `sched_switch` class.
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) struct SchedSwitch {
    prev_tid: usize,
    next_tid: usize,
    prev_comm: Option<usize>,
    next_comm: Option<usize>,
}

/// Takes every `sched_switch`, whatever its provider: a switch with its tids, else an
/// instant.
pub(super) fn plan(_: &mut Mapper, c: &Class) -> Option<Rule> {
    if c.short != "sched_switch" {
        return None;
    }
    let tid = |a: &str, b: &str| c.int_field(a).or_else(|| c.int_field(b));
    Some(
        match (tid("prev_tid", "prev_pid"), tid("next_tid", "next_pid")) {
            (Some(prev_tid), Some(next_tid)) => Rule::SchedSwitch(SchedSwitch {
                prev_tid,
                next_tid,
                prev_comm: c.str_field("prev_comm"),
                next_comm: c.str_field("next_comm"),
            }),
            _ => Rule::Instant,
        },
    )
}

#[allow(clippy::too_many_arguments)]
pub(super) fn apply(
    m: &mut Mapper,
    switch: &SchedSwitch,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    track: TrackId,
    cpu: u64,
) {
    let SchedSwitch {
        prev_tid,
        next_tid,
        prev_comm,
        next_comm,
    } = switch;
    let prev = m.field_int(r, *prev_tid).unwrap_or(-1);
    let next = m.field_int(r, *next_tid).unwrap_or(-1);
    let comm = |m: &mut Mapper, f: &Option<usize>| {
        f.and_then(|i| m.positions.get(i).copied())
            .map(|p| m.text(r, r.vals[p as usize]))
            .unwrap_or(m.s_running)
    };
    let prev_name = comm(m, prev_comm);
    let next_name = comm(m, next_comm);
    if let Some((tid, since, name)) = m.running.remove(&cpu) {
        if tid == prev && tid > 0 {
            let name = if name == m.s_running { prev_name } else { name };
            m.running_slice(tid, since, ts, name, cpu);
        }
    }
    if next > 0 {
        m.running.insert(cpu, (next, ts, next_name));
    }
    m.instant(plan, layout, r, ts, track);
}

/// Ends the threads still running at `end`.
pub(in crate::ctf::mapping) fn finish(m: &mut Mapper, end: i64) {
    let running: Vec<(u64, (i64, i64, StrId))> = m.running.drain().collect();
    for (cpu, (tid, since, name)) in running {
        m.running_slice(tid, since, end.max(since), name, cpu);
    }
}

impl Mapper<'_> {
    /// The lane of the thread running on `cpu`, if a switch said which (its process
    /// from the statedump, else its own).
    pub(in crate::ctf::mapping) fn running_lane(
        &mut self,
        cpu: u64,
    ) -> Option<(ProcessId, TrackId)> {
        let &(tid, _, _) = self.running.get(&cpu)?;
        let pid = self.tid_pid.get(&tid).copied().unwrap_or(tid);
        Some(self.lane(pid, tid, false))
    }

    fn running_slice(&mut self, tid: i64, since: i64, ts: i64, name: StrId, cpu: u64) {
        let pid = self.tid_pid.get(&tid).copied().unwrap_or(tid);
        let process = self.trace.process(self.source, pid);
        let thread = self.trace.thread(process, tid);
        self.trace.threads[thread.index()].name.get_or_insert(name);
        if pid == tid {
            self.trace.processes[process.index()]
                .name
                .get_or_insert(name);
        }
        let track =
            self.trace
                .named_track(Some(process), TrackKind::Async, self.s_running, tid as u64);
        let key = self.trace.intern("cpu");
        let args = self
            .trace
            .args
            .push_bag(&[(key, ArgValue::Int(cpu as i64))]);
        let category = self.trace.intern("sched");
        self.trace.slices.push(SliceRow {
            track,
            ts: since,
            dur: ts.saturating_sub(since),
            name,
            category,
            kind: SliceKind::Other,
            args,
        });
    }
}
