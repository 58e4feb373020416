//! CTF events → the opscope model. Who emitted an event and when is worked out by
//! [`identify`]; what each event class becomes is up to the rules, one module each
//! under [`rules`]; opscope's own CTF has a reader of its own, [`own`]. The mapper here
//! holds what the rules share: lanes, open slices, strings, counters.
//!
//! Lanes: one process per `vpid` (or per trace when the events carry no pid), one
//! thread track per `vtid`/`tid` context; kernel-style traces without a tid context use
//! the packet's `cpu_id` as the lane (a thread `CPU n` of a `CPUs` process). perf
//! traces carry `perf_tid`/`perf_pid` in each event.
//!
//! Rules, by event name (`provider:event` for LTTng-UST), asked in this order:
//! - opscope's own events (`opscope:*`, see `ctf::export`) → the slices, instants and
//!   counter samples they were written from ([`rules::opscope`]);
//! - `lttng_ust_cyg_profile[_fast]:func_entry/func_exit` → slices named by `addr` (hex);
//! - `lttng_ust_libc:*` → `Alloc` instants and a per-process `bytes in use` counter
//!   ([`rules::libc`]);
//! - `lttng_ust_statedump:procname` names the process; other statedump events are
//!   process-scoped instants (build ids as args);
//! - the research tracer's families' `*_stats` events become counters;
//! - kernel `sched_switch` → `running` slices per thread (from its switch-in to its
//!   switch-out); `lttng_statedump_process_state` says each thread's process;
//! - in a kernel trace (domain `kernel`), only the pairs LTTng's kernel tracer itself
//!   makes are slices, on the thread running on the CPU: syscalls
//!   ([`rules::syscalls`]), irq and softirq handlers, timer and hrtimer expiries,
//!   workqueue items. Every other kernel event is an instant, whatever its name ends
//!   with;
//! - in other traces, any `X_entry`/`X_exit`, `X_begin`/`X_end`, `X_start`/`X_end` pair
//!   → a slice `X` (matched per lane as a stack; the research tracer's families' of the
//!   matching kind); everything else → an instant with its fields as args. The category
//!   is the provider (the part before `:`), or the trace's domain. A slice begun and
//!   never ended on its lane (a thread's `exit` syscall, a cut trace) ends at the
//!   lane's last event.
//!
//! The CPU each event ran on (its packet's `cpu_id`) is kept per thread as a counter
//! track `cpu (tid N)` of the thread, sampled where the thread's CPU changes: a thread
//! moves between CPUs, so its lane cannot say it, and one sample per migration costs
//! far less than an arg per event. `ctf::export` writes it back as the `cpu_id` of the
//! packets of the thread's events. (Kernel traces' CPU lanes are their CPU already.)

use std::rc::Rc;

use hashbrown::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::events::SliceRow;
use opscope_model::{
    ArgsId, ClockDomain, LinearTransform, ProcessId, SliceKind, Source, SourceId, StrId, Trace,
    TrackId, TrackKind,
};

use super::decode::{Event, Layout, Val};
use super::types::{EnumTy, EnvValue};
use crate::common::SliceStack;
use crate::error::ImportError;

mod identify;
mod own;
mod rules;

use identify::{field_positions, int_at};
pub(super) use identify::{up_to_nul, Identify, Who};
use rules::libc::Allocations;
use rules::opscope::LabelTable;
use rules::syscalls::KernelStyle;
use rules::Plan;

/// A slice begun and not yet ended (a pair's, a function's), on its lane's stack.
struct Open {
    key: StrId,
    name: StrId,
    ts: i64,
    kind: SliceKind,
    category: StrId,
    args: Vec<(StrId, ArgValue)>,
}

/// A lane: pid, tid, and whether the tid is a CPU number.
type LaneKey = (i64, i64, bool);

struct Mapper<'t> {
    trace: &'t mut Trace,
    source: SourceId,
    /// Built at an event class's first event; shared so that applying one does not
    /// borrow the mapper.
    plans: Vec<Option<Rc<Plan>>>,
    lanes: HashMap<LaneKey, (ProcessId, TrackId)>,
    /// The lane of the previous event: runs of events come from one thread.
    last_lane: Option<(LaneKey, (ProcessId, TrackId))>,
    stacks: SliceStack<TrackId, Open>,
    /// opscope's own slices still open (their rows), by the id the writer gave them:
    /// ids are the slices' indexes, so most fit `own_rows`; others go to `own_open`.
    own_rows: Vec<u32>,
    own_open: HashMap<u64, u32>,
    /// Rows of own slices begun again under the same id before they ended.
    own_replaced: Vec<u32>,
    /// The label tables of the enumerations of opscope's own events, by declaration.
    label_tables: HashMap<*const EnumTy, Rc<LabelTable>>,
    allocations: Allocations,
    /// The bytes-in-use counter track of each process (by index) with allocator events.
    libc_tracks: Vec<Option<TrackId>>,
    counters: HashMap<(ProcessId, StrId), TrackId>,
    /// Per CPU: the thread running there, since when, and its name.
    running: HashMap<u64, (i64, i64, StrId)>,
    tid_pid: HashMap<i64, i64>,
    named_processes: hashbrown::HashSet<ProcessId>,
    positions: Vec<u32>,
    scratch: Vec<(StrId, ArgValue)>,
    /// The last text of each (event class, slot) of opscope's typed classes.
    memo: Vec<StrId>,
    /// The last text of each string arg, per event class of opscope's typed classes.
    arg_memo: Vec<Vec<StrId>>,
    last_kind: Option<(StrId, SliceKind)>,
    /// Per track (by index): the CPU its thread last ran on, and its CPU counter track.
    cpu_of_track: Vec<(u64, Option<TrackId>)>,
    last_ts: i64,
    default_category: StrId,
    /// A kernel trace (domain `kernel`) and the style of its syscall events: only the
    /// kernel tracer's own pairs are slices ([`rules::syscalls`]).
    kernel: Option<KernelStyle>,
    k_bytes: StrId,
    k_addr: StrId,
    s_running: StrId,
    s_cpus: StrId,
    s_libc_in_use: StrId,
}

/// `a:b` → (`a`, `b`); names without a provider keep the whole name.
fn split_name(full: &str) -> (Option<&str>, &str) {
    match full.split_once(':') {
        Some((p, n)) => (Some(p), n),
        None => (None, full),
    }
}

impl<'t> Mapper<'t> {
    fn text(&mut self, r: &Event, v: Val) -> StrId {
        match v {
            Val::Str { start, len } => {
                let bytes = r.text(start, len);
                match std::str::from_utf8(bytes) {
                    Ok(s) => self.trace.intern(s),
                    Err(_) => self.trace.intern(&String::from_utf8_lossy(bytes)),
                }
            }
            Val::U(u) => self.trace.intern(&u.to_string()),
            Val::I(i) => self.trace.intern(&i.to_string()),
            _ => StrId::EMPTY,
        }
    }

    fn lane(&mut self, pid: i64, tid: i64, cpu_lane: bool) -> (ProcessId, TrackId) {
        let key = (pid, tid, cpu_lane);
        if let Some((k, l)) = self.last_lane {
            if k == key {
                return l;
            }
        }
        if let Some(&l) = self.lanes.get(&key) {
            self.last_lane = Some((key, l));
            return l;
        }
        let process = self.trace.process(self.source, pid);
        let thread = self.trace.thread(process, tid);
        if cpu_lane {
            let name = self.trace.intern(&format!("CPU {tid}"));
            self.trace.threads[thread.index()].name = Some(name);
            if self.trace.processes[process.index()].name.is_none() {
                self.trace.processes[process.index()].name = Some(self.s_cpus);
            }
        }
        let track = self.trace.thread_track(thread, TrackKind::Thread);
        self.lanes.insert((pid, tid, cpu_lane), (process, track));
        (process, track)
    }

    fn event(
        &mut self,
        layout: &Layout,
        ident: &Identify,
        stream_index: usize,
        r: &Event,
        who: Who,
    ) {
        let ev = r.event;
        let plan = match &self.plans[ev] {
            Some(plan) => Rc::clone(plan),
            None => {
                let plan = Rc::new(self.plan(layout, ev));
                self.plans[ev] = Some(Rc::clone(&plan));
                plan
            }
        };
        let origin = ident.origin;
        let to_ns = |cycles: u64| match origin {
            Some(o) => o.ns(cycles),
            None => cycles as i64,
        };
        let Who {
            ts,
            pid,
            tid,
            procname,
        } = who;
        self.last_ts = self.last_ts.max(ts);
        let el = &layout.events[ev];
        field_positions(
            el.fields.as_ref(),
            &ident.offsets[ev].1,
            r.vals,
            r.scopes[3],
            &mut self.positions,
        );
        let cpu = r.cpu_id.unwrap_or(stream_index as u64);
        let cpu_lane = pid.is_none() && tid.is_none();
        let (process, track) = match (pid, tid) {
            (None, None) => self.lane(-1, cpu as i64, true),
            (p, t) => {
                let p = p.unwrap_or(0);
                self.lane(p, t.unwrap_or(p), false)
            }
        };
        if let Some(v) = procname {
            let thread = self.trace.tracks[track.index()].thread;
            if let Some(th) = thread {
                if self.trace.threads[th.index()].name.is_none() {
                    // Read from the context's bytes, the name is the whole text field.
                    let n = self.text(r, up_to_nul(r, v));
                    self.trace.threads[th.index()].name = Some(n);
                    if self.trace.processes[process.index()].name.is_none() {
                        self.trace.processes[process.index()].name = Some(n);
                    }
                }
            }
        }
        if let (Some(c), true, false) = (r.cpu_id, plan.note_cpu, cpu_lane) {
            self.note_cpu(process, track, ts, c);
        }
        // Kernel pairs (syscalls, irq handlers) belong to the thread running on the CPU.
        let (process, track) = if cpu_lane && plan.rule.on_running_thread() {
            self.running_lane(cpu).unwrap_or((process, track))
        } else {
            (process, track)
        };
        self.apply(&plan, layout, r, ts, process, track, cpu, &to_ns);
    }

    fn field_text(&mut self, r: &Event, i: usize) -> StrId {
        match self.positions.get(i).and_then(|&p| r.vals.get(p as usize)) {
            Some(&v) => self.text(r, v),
            None => StrId::EMPTY,
        }
    }

    /// Notes that the thread of `track` ran on `cpu` at `ts`: a sample of its CPU
    /// counter where that changed.
    fn note_cpu(&mut self, process: ProcessId, track: TrackId, ts: i64, cpu: u64) {
        let t = track.index();
        if self.cpu_of_track.len() <= t {
            self.cpu_of_track.resize(t + 1, (u64::MAX, None));
        }
        let (last, counter) = self.cpu_of_track[t];
        if last == cpu {
            return;
        }
        let counter = match counter {
            Some(c) => c,
            None => {
                let thread = self.trace.tracks[t].thread;
                let tid = thread.map_or(-1, |th| self.trace.threads[th.index()].tid);
                let name = self.trace.intern(&format!("cpu (tid {tid})"));
                let c = self
                    .trace
                    .named_track(Some(process), TrackKind::Counter, name, 0);
                self.trace.tracks[c.index()].thread = thread;
                c
            }
        };
        self.cpu_of_track[t] = (cpu, Some(counter));
        self.trace.counters.push(counter, ts, cpu as f64);
    }

    fn field_int(&self, r: &Event, i: usize) -> Option<i64> {
        int_at(r.vals, self.positions.get(i).copied())
    }

    fn field_u(&self, r: &Event, i: usize) -> u64 {
        match self.positions.get(i).and_then(|&p| r.vals.get(p as usize)) {
            Some(Val::U(v)) => *v,
            Some(Val::I(v)) => *v as u64,
            _ => 0,
        }
    }

    fn close(&mut self, open: Open, track: TrackId, ts: i64, extra: &[(StrId, ArgValue)]) {
        let mut entries = open.args;
        for e in extra {
            if !entries.iter().any(|x| x.0 == e.0) {
                entries.push(*e);
            }
        }
        let args = self.trace.args.push_bag(&entries);
        self.trace.slices.push(SliceRow {
            track,
            ts: open.ts,
            dur: ts.saturating_sub(open.ts),
            name: open.name,
            category: open.category,
            kind: open.kind,
            args,
        });
    }
}

/// The mapper as the decoding pipeline's sink.
struct MapperSink<'m, 't, 'l> {
    mapper: &'m mut Mapper<'t>,
    layout: &'l Layout,
    ident: &'l Identify,
}

impl<'a> super::pipeline::Sink<'a, Who> for MapperSink<'_, '_, '_> {
    fn event(&mut self, stream_index: usize, event: &Event<'a, '_>, who: Who) {
        self.mapper
            .event(self.layout, self.ident, stream_index, event, who);
    }

    fn spare_capacity(&mut self, out: &mut Vec<std::ops::Range<usize>>) {
        self.mapper.trace.spare_capacity(out);
    }
}

/// Which reader maps opscope's own CTF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// Its own reader ([`own`]), when the layout is exactly what `ctf::export` writes.
    Fast,
    /// The general reader, as for any CTF (for tests that compare the two).
    #[cfg_attr(not(test), allow(dead_code))]
    General,
}

/// Names the processes and threads of a trace opscope wrote as the environment says
/// (`opscope_processes`, `opscope_threads`; see `ctf::export`): the lanes its events
/// made, never new ones.
fn name_own_lanes(m: &mut Mapper, meta: &super::types::Metadata) {
    let list = |key: &str| -> Vec<serde_json::Value> {
        meta.env_str(key)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    };
    let source = m.source;
    let trace = &mut *m.trace;
    let processes: HashMap<i64, usize> = (0..trace.processes.len())
        .filter(|&p| trace.processes[p].source == source)
        .map(|p| (trace.processes[p].pid, p))
        .collect();
    for entry in list("opscope_processes") {
        if let (Some(pid), Some(name)) = (entry[0].as_i64(), entry[1].as_str()) {
            if let Some(&p) = processes.get(&pid) {
                if trace.processes[p].name.is_none() {
                    trace.processes[p].name = Some(trace.intern(name));
                }
            }
        }
    }
    let threads: HashMap<(i64, i64), usize> = (0..trace.threads.len())
        .filter(|&t| trace.processes[trace.threads[t].process.index()].source == source)
        .map(|t| {
            let th = &trace.threads[t];
            ((trace.processes[th.process.index()].pid, th.tid), t)
        })
        .collect();
    for entry in list("opscope_threads") {
        let (pid, tid, name) = (entry[0].as_i64(), entry[1].as_i64(), entry[2].as_str());
        if let (Some(pid), Some(tid), Some(name)) = (pid, tid, name) {
            if let Some(&t) = threads.get(&(pid, tid)) {
                if trace.threads[t].name.is_none() {
                    trace.threads[t].name = Some(trace.intern(name));
                }
            }
        }
    }
}

/// Imports one trace into a new source; returns it and the first stream error.
pub(super) fn import_layout(
    trace_name: &str,
    layout: &Layout,
    streams: &[(String, &[u8])],
    trace: &mut Trace,
    path: Path,
) -> (SourceId, Option<ImportError>) {
    let meta = &layout.meta;
    let clock_name = trace.intern(layout.clock.as_ref().map_or("ctf", |c| c.name.as_str()));
    let absolute = layout
        .clock
        .as_ref()
        .is_some_and(|c| c.offset_s != 0 || c.offset != 0);
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: absolute.then_some(0),
    });
    let host = meta
        .env_str("hostname")
        .or(meta.env_str("host"))
        .map(|h| trace.intern(h));
    let domain = meta.env_str("domain").unwrap_or("").to_string();
    let source = trace.add_source(Source {
        path: trace_name.to_string(),
        format: crate::importer::Importer::name(&crate::ctf::CtfFormat).into(),
        clock,
        host,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    let default_category = trace.intern(if domain.is_empty() { "ctf" } else { &domain });
    let mut m = Mapper {
        k_bytes: trace.intern("Bytes"),
        cpu_of_track: Vec::new(),
        memo: Vec::new(),
        arg_memo: Vec::new(),
        last_kind: None,
        k_addr: trace.intern("Addr"),
        s_running: trace.intern("running"),
        s_cpus: trace.intern("CPUs"),
        s_libc_in_use: trace.intern("bytes in use (lttng_ust_libc)"),
        trace,
        source,
        plans: (0..layout.events.len()).map(|_| None).collect(),
        lanes: HashMap::new(),
        last_lane: None,
        stacks: SliceStack::new(),
        own_open: HashMap::new(),
        own_rows: Vec::new(),
        own_replaced: Vec::new(),
        label_tables: HashMap::new(),
        allocations: Allocations::default(),
        libc_tracks: Vec::new(),
        counters: HashMap::new(),
        running: HashMap::new(),
        tid_pid: HashMap::new(),
        named_processes: hashbrown::HashSet::new(),
        positions: Vec::new(),
        scratch: Vec::new(),
        last_ts: i64::MIN,
        default_category,
        kernel: KernelStyle::of(&domain, layout),
    };
    let ident = Identify::new(layout);
    let (readers, error) = if path == Path::Fast && own::applies(layout) {
        own::import(&mut m, layout, ident.origin, streams)
    } else {
        let mut positions = Vec::new();
        let mut sink = MapperSink {
            mapper: &mut m,
            layout,
            ident: &ident,
        };
        super::pipeline::read_merged_batched(
            layout,
            streams,
            !ident.context_by_bytes,
            |r| ident.who(layout, r, &mut positions),
            &mut sink,
        )
    };
    // Close what is still open at its lane's last event: a thread that called exit()
    // (whose syscall never returns) or was cut by the trace's end did nothing later.
    let end = m.last_ts;
    let mut open: Vec<(TrackId, Open)> = m
        .stacks
        .finish(&mut m.trace.repairs)
        .into_iter()
        .flat_map(|(t, v)| v.into_iter().map(move |o| (t, o)))
        .collect();
    open.sort_by_key(|(t, o)| (t.0, o.ts));
    let mut last_of_track: HashMap<u32, i64> = open.iter().map(|(t, o)| (t.0, o.ts)).collect();
    let trace = &m.trace;
    let events = (0..trace.slices.len())
        .map(|i| (trace.slices.track[i], trace.slices.end(i)))
        .chain((0..trace.instants.len()).map(|i| (trace.instants.track[i], trace.instants.ts[i])));
    for (track, at) in events {
        if let Some(last) = last_of_track.get_mut(&track) {
            *last = (*last).max(at);
        }
    }
    for (track, o) in open {
        let at = last_of_track
            .get(&track.0)
            .copied()
            .unwrap_or(end)
            .max(o.ts);
        m.close(o, track, at, &[]);
    }
    // opscope's own slices with no end (a cut trace) end there too, as the others.
    rules::opscope::finish(&mut m, end);
    // Threads still running ran until the trace's end.
    rules::sched::finish(&mut m, end);
    let own_trace = meta.env_str("tracer_name") == Some("opscope");
    if own_trace {
        name_own_lanes(&mut m, meta);
    }
    // Source metadata: environment, clock, streams, discarded events.
    let trace = m.trace;
    let mut entries: Vec<(StrId, ArgValue)> = Vec::new();
    for (k, v) in &meta.env {
        // The keys and types of opscope's typed classes are the events' args already,
        // and the names are the processes' and threads'.
        let names = ["opscope_processes", "opscope_threads", "opscope_no_cpu"];
        if own_trace && (k.starts_with("opscope_args_") || names.contains(&k.as_str())) {
            continue;
        }
        let key = trace.intern(&format!("env.{k}"));
        let value = match v {
            EnvValue::Int(i) => ArgValue::Int(*i),
            EnvValue::Str(s) => ArgValue::Str(trace.intern(s)),
        };
        entries.push((key, value));
    }
    if let Some(c) = &layout.clock {
        let k = trace.intern("clock.freq");
        entries.push((k, ArgValue::Int(c.freq as i64)));
    }
    let total_events: u64 = readers.iter().map(|r| r.events).sum();
    let total_discarded: u64 = readers.iter().map(|r| r.events_discarded).sum();
    let k = trace.intern("streams");
    entries.push((k, ArgValue::Int(readers.len() as i64)));
    let k = trace.intern("events");
    entries.push((k, ArgValue::Int(total_events as i64)));
    let k = trace.intern("events_discarded");
    entries.push((k, ArgValue::Int(total_discarded as i64)));
    let mut per_stream = Vec::new();
    for (r, (path, _)) in readers.iter().zip(streams) {
        if r.events_discarded > 0 {
            let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
            per_stream.push(format!("{file}: {}", r.events_discarded));
            let k = trace.intern(&format!("events_discarded.{file}"));
            entries.push((k, ArgValue::Int(r.events_discarded as i64)));
        }
    }
    let mut w = trace.args.writer();
    for (k, v) in entries {
        w.push(k, v);
    }
    let metadata = w.finish();
    trace.sources[source.index()].metadata = metadata;
    if total_discarded > 0 {
        trace.warnings.push((
            source,
            format!(
                "{trace_name}: the tracer discarded {total_discarded} events ({})",
                per_stream.join(", ")
            ),
        ));
    }
    (source, error)
}
