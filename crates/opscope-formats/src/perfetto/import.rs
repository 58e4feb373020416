//! Reads Perfetto protobuf traces into a [`Trace`]: track descriptors become processes,
//! threads and tracks, `TrackEvent` begin/end pairs become slices, and instants,
//! counters, flows and debug annotations are kept; opscope's own markers (see the
//! parent module) restore what the exporter wrote.
//!
//! The [`Reader`] reads the file twice, into two sinks: the first pass collects what is
//! global to the trace (track descriptors, clocks), so events can refer to tracks
//! described later in the file; the second builds the model from the events.

use std::collections::{HashMap, HashSet};

use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::{
    ArgValue, ArgsId, ClockDomain, DeviceKind, InstantScope, LinearTransform, Process, ProcessId,
    SampleRow, SliceKind, Source, SourceId, StrId, StringTable, Trace, TrackId, TrackKind,
};

use super::proto::{
    self, DebugAnnotation, NestedValue, ProcessDescriptor, ThreadDescriptor, TrackDescriptor,
    CLOCK_BOOTTIME, CLOCK_MONOTONIC, CLOCK_REALTIME,
};
use super::reader::{
    syntax, Event, Limits, Place, Reader, Sequence, Sink, SinkError, StackSample, Walked,
};
use super::{Marker, FLOW_ANNOTATION, FLOW_SEPARATOR, KIND_ANNOTATION, SCOPE_ANNOTATION};
use crate::common::{FlowBinder, FlowEnd, FlowRole};
use crate::error::ImportError;

/// Parent chains of track descriptors longer than this are taken for cycles.
const MAX_TRACK_DEPTH: u32 = 64;

/// Imports the Perfetto trace in `bytes` (read from `path`) into `trace` as one source
/// and finishes the trace.
///
/// A file cut off inside a packet (a recording that was killed) keeps the packets
/// before the cut, counts the cut one in `trace.repairs.malformed_events` and warns
/// of the bytes lost, naming the offset of the cut; any other
/// damage to the framing or to a packet is an [`ImportError::Syntax`] at the offset of
/// the packet, after the packets before it are read into `trace` (for `--partial`).
pub fn import(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let mut scan = Scan::default();
    let mut reader = Reader::globals_only(Limits::NONE);
    let (cut, damage) = match reader.read(bytes, 0, path, &mut scan) {
        Ok(Walked::Complete) => (None, None),
        Ok(Walked::Truncated { packets: 0, offset }) => {
            return Err(syntax(
                path,
                offset,
                "the data ends inside the first packet (truncated or not a Perfetto trace)".into(),
            ))
        }
        Ok(Walked::Truncated { packets, offset }) => (Some((packets, offset)), None),
        // The packets before a damaged one are whole: they are read, and the error
        // still ends the import, so that only `--partial` goes on with them.
        Err(e @ ImportError::Syntax { offset, .. }) if offset > 0 => (None, Some((offset, e))),
        Err(e) => return Err(e),
    };

    let primary = reader.primary_clock();
    let clock_name = match primary {
        CLOCK_BOOTTIME => "perfetto:BOOTTIME".to_string(),
        CLOCK_REALTIME => "perfetto:REALTIME".to_string(),
        CLOCK_MONOTONIC => "perfetto:MONOTONIC".to_string(),
        id => format!("perfetto:clock{id}"),
    };
    let unix_offset_ns = reader.first_globals().and_then(|c| {
        let realtime = *c.get(&CLOCK_REALTIME)? as i128;
        let primary = *c.get(&primary)? as i128;
        i64::try_from(realtime - primary).ok()
    });
    let name = trace.intern(&clock_name);
    let clock = trace.add_clock(ClockDomain {
        name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns,
    });
    let source = trace.add_source(Source {
        path: path.to_string(),
        format: crate::importer::Importer::name(&super::PerfettoFormat).into(),
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });

    if let Some((packets, offset)) = cut {
        // A count among the repairs is easily missed: say what the cut cost.
        let lost = bytes.len() as u64 - offset;
        trace.warnings.push((
            source,
            format!(
                "{path}: byte {offset}: the file ends inside a packet (cut off while being written?); the {packets} packets before it are read, the last {lost} bytes ({:.1}% of the file) are lost",
                lost as f64 * 100.0 / bytes.len() as f64
            ),
        ));
        trace.repairs.malformed_events += 1;
    }
    let mut model = Model::new(trace, source);
    model.resolve_descriptors(&scan.descriptors);
    // The first pass checked the framing and what it decoded; a packet can still fail
    // here in fields only this pass reads. What was read before it is kept, finished.
    let mut reader = reader.rewind();
    let end = damage
        .as_ref()
        .map_or(bytes.len(), |(offset, _)| *offset as usize);
    let read = reader.read(&bytes[..end], 0, path, &mut model);
    reader.finish(&mut model);
    let counted = reader.repairs();
    let repairs = &mut model.trace.repairs;
    repairs.unmatched_begins += counted.unmatched_begins;
    repairs.unmatched_ends += counted.unmatched_ends;
    repairs.malformed_events += counted.malformed_events;
    model.bind_flows();
    trace.finish();
    read?;
    match damage {
        Some((_, e)) => Err(e),
        None => Ok(source),
    }
}

/// The first pass's sink: the track descriptors.
#[derive(Default)]
struct Scan {
    /// Track descriptors in file order, one per uuid (later copies fill in names).
    descriptors: Vec<TrackDescriptor>,
    descriptor_index: HashMap<u64, usize>,
}

impl Sink for Scan {
    type Open = ();

    // A first pass reads no text and no events.
    fn intern(&mut self, _text: &[u8]) -> StrId {
        StrId::EMPTY
    }

    fn text(&self, _id: StrId) -> &str {
        ""
    }

    fn kind_key(&self) -> StrId {
        StrId::EMPTY
    }

    fn describe(&mut self, _lane: u32, desc: &TrackDescriptor, _raw: &[u8]) {
        let uuid = desc.uuid.unwrap_or(0);
        let Some(&i) = self.descriptor_index.get(&uuid) else {
            self.descriptor_index.insert(uuid, self.descriptors.len());
            self.descriptors.push(desc.clone());
            return;
        };
        // Writers re-emit descriptors: a later copy may name what the first did not,
        // or rename it (a thread that set its name), as Perfetto reads them.
        fn named(name: &Option<Vec<u8>>) -> bool {
            name.as_ref().is_some_and(|n| !n.is_empty())
        }
        let old = &mut self.descriptors[i];
        if named(&desc.name) {
            old.name.clone_from(&desc.name);
        }
        if let (Some(o), Some(n)) = (&mut old.process, &desc.process) {
            if named(&n.process_name) {
                o.process_name.clone_from(&n.process_name);
            }
            // Labels given later (opscope's recorder labels a process with the rank
            // `torch.distributed` was initialised with) add to those before.
            for label in &n.process_labels {
                if !o.process_labels.contains(label) {
                    o.process_labels.push(label.clone());
                }
            }
        }
        if let (Some(o), Some(n)) = (&mut old.thread, &desc.thread) {
            if named(&n.thread_name) {
                o.thread_name.clone_from(&n.thread_name);
            }
        }
    }

    fn begin(&mut self, _event: &Event<'_>) -> Result<(), SinkError> {
        Ok(())
    }

    fn end(&mut self, _open: (), _event: &Event<'_>, _depth: u32) -> Result<(), SinkError> {
        Ok(())
    }

    fn instant(&mut self, _event: &Event<'_>) -> Result<(), SinkError> {
        Ok(())
    }

    fn counter(&mut self, _place: Place, _ts: i64, _value: f64) {}
}

/// Where events of one Perfetto track go in the model.
#[derive(Clone, Copy)]
struct Target {
    track: TrackId,
    scope: InstantScope,
}

/// A slice whose end has not been seen yet.
struct Frame {
    /// The slice row, pushed at the begin event so that rows keep the file's order
    /// (`Trace::finish` nests slices of equal times in row order).
    row: u32,
    ts: i64,
    /// Where this slice's args start in its lane's list.
    args_start: usize,
}

/// Category and name from an `opscope.flow` annotation.
type FlowLabel = Option<(StrId, StrId)>;

/// Well-known annotation keys, interned once.
struct Keys {
    kind: StrId,
    scope: StrId,
    flow: StrId,
}

/// The second pass's sink, which builds the model.
struct Model<'t> {
    trace: &'t mut Trace,
    source: SourceId,
    keys: Keys,
    targets: HashMap<u64, Target>,
    /// The target of each lane, once known (legacy threads' only from their
    /// descriptor): looked up for every event, faster than by uuid.
    by_lane: Vec<Option<Target>>,
    process_of_uuid: HashMap<u64, ProcessId>,
    /// Args of each lane's open slices, innermost last: a stack discipline, so one list
    /// per lane serves.
    lane_args: Vec<Vec<(StrId, ArgValue)>>,
    flows: FlowBinder<u64, FlowLabel>,
    order: u64,
    /// Reused per event.
    annotations: Vec<(StrId, ArgValue)>,
    labels: Vec<(StrId, StrId)>,
}

impl<'t> Model<'t> {
    fn new(trace: &'t mut Trace, source: SourceId) -> Model<'t> {
        let keys = Keys {
            kind: trace.intern(KIND_ANNOTATION),
            scope: trace.intern(SCOPE_ANNOTATION),
            flow: trace.intern(FLOW_ANNOTATION),
        };
        Model {
            trace,
            source,
            keys,
            targets: HashMap::new(),
            by_lane: Vec::new(),
            process_of_uuid: HashMap::new(),
            lane_args: Vec::new(),
            flows: FlowBinder::pairs_by_role(),
            order: 0,
            annotations: Vec::new(),
            labels: Vec::new(),
        }
    }

    // ---- tracks ----

    /// Creates the processes, threads and tracks of all descriptors, processes first so
    /// that threads find them, in file order so that ids follow the file.
    fn resolve_descriptors(&mut self, descs: &[TrackDescriptor]) {
        let index: HashMap<u64, usize> = descs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.uuid.unwrap_or(0), i))
            .collect();
        let mut claimed = HashSet::new();
        for d in descs {
            if d.thread.is_none() {
                if let Some(process) = &d.process {
                    self.resolve_process(d, process, &mut claimed);
                }
            }
        }
        for i in 0..descs.len() {
            self.resolve(descs, &index, i, 0);
        }
    }

    fn resolve_process(
        &mut self,
        d: &TrackDescriptor,
        desc: &proto::ProcessDescriptor,
        claimed: &mut HashSet<ProcessId>,
    ) {
        let trace = &mut *self.trace;
        let pid = desc.pid.unwrap_or(0);
        let mut p = trace.process(self.source, pid);
        if !claimed.insert(p) {
            // A second process track with the same pid: Perfetto reads it as a new
            // process (pid reuse, or two hosts' pids in one file), and so do we. The
            // model's look-up by pid keeps finding the first.
            p = ProcessId(trace.processes.len() as u32);
            trace.processes.push(Process {
                source: self.source,
                pid,
                name: None,
                labels: None,
                sort_index: None,
                device: None,
            });
            claimed.insert(p);
        }
        if let Some(name) = &desc.process_name {
            trace.processes[p.index()].name = Some(intern_bytes(trace, name));
        }
        if !desc.process_labels.is_empty() {
            // One label, or several joined by commas (as opscope's export writes the
            // labels it read).
            let labels: Vec<String> = desc
                .process_labels
                .iter()
                .flat_map(|l| {
                    String::from_utf8_lossy(l)
                        .split(',')
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect();
            // opscope's recorder labels a process of a distributed job `rank=N`,
            // `world_size=M`, and every process with its host, `host=NAME`: the file
            // is that rank's, on that host.
            let value = |key: &str| {
                labels
                    .iter()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            };
            let number = |key: &str| value(key)?.parse::<u32>().ok();
            let (rank, world_size) = (number("rank"), number("world_size"));
            let host = value("host").filter(|h| !h.is_empty()).map(str::to_string);
            let host = host.map(|h| intern_str(trace, &h));
            let source = &mut trace.sources[self.source.index()];
            source.rank = source.rank.or(rank);
            source.world_size = source.world_size.or(world_size);
            source.host = source.host.or(host);
            let labels = intern_str(trace, &labels.join(","));
            trace.processes[p.index()].labels = Some(labels);
        }
        if desc.legacy_sort_index.is_some() {
            trace.processes[p.index()].sort_index = desc.legacy_sort_index;
        }
        let marker = marker_of(d);
        if let Some((kind, index)) = marker.device.as_deref().and_then(parse_device) {
            let device = trace.device(self.source, kind, index);
            if let Some(name) = marker.device_name.as_deref().filter(|n| !n.is_empty()) {
                trace.devices[device.index()].name = Some(intern_str(trace, name));
            }
            trace.processes[p.index()].device = Some(device);
        }
        self.process_of_uuid.insert(d.uuid.unwrap_or(0), p);
    }

    /// The target of descriptor `i`; `None` for process tracks (made on first use) and
    /// for parent chains that loop.
    fn resolve(
        &mut self,
        descs: &[TrackDescriptor],
        index: &HashMap<u64, usize>,
        i: usize,
        depth: u32,
    ) -> Option<Target> {
        let d = &descs[i];
        let uuid = d.uuid.unwrap_or(0);
        if let Some(&t) = self.targets.get(&uuid) {
            return Some(t);
        }
        if depth > MAX_TRACK_DEPTH || (d.process.is_some() && d.thread.is_none()) {
            return None;
        }
        let marker = marker_of(d);
        let parent = d.parent_uuid.and_then(|u| index.get(&u).copied());
        let counter = d.counter.is_some();
        // A lane's slices go on its parent's track (the reader matches them apart).
        if marker.lane {
            if let Some(parent) = parent.and_then(|p| self.resolve(descs, index, p, depth + 1)) {
                self.targets.insert(uuid, parent);
                return Some(parent);
            }
        }
        let marked_kind = marker.kind.as_deref().and_then(parse_track_kind);
        let target = if let Some(thread) = &d.thread {
            let pid = thread.pid.unwrap_or(0);
            let trace = &mut *self.trace;
            let process = d
                .parent_uuid
                .and_then(|u| self.process_of_uuid.get(&u).copied())
                .filter(|p| trace.processes[p.index()].pid == pid)
                .unwrap_or_else(|| trace.process(self.source, pid));
            let th = trace.thread(process, thread.tid.unwrap_or(0));
            if let Some(name) = &thread.thread_name {
                trace.threads[th.index()].name = Some(intern_bytes(trace, name));
            }
            if thread.legacy_sort_index.is_some() {
                trace.threads[th.index()].sort_index = thread.legacy_sort_index;
            }
            if marker.pthread.is_some() {
                trace.threads[th.index()].handle = marker.pthread;
            }
            let kind = marked_kind.unwrap_or(if counter {
                TrackKind::Counter
            } else {
                TrackKind::Thread
            });
            let track = trace.thread_track(th, kind);
            if let Some(name) = nonempty(trace, d.name.as_deref()) {
                trace.tracks[track.index()].name = name;
            }
            Target {
                track,
                scope: InstantScope::Thread,
            }
        } else {
            let process = match d.parent_uuid {
                Some(u) => match self.process_of_uuid.get(&u) {
                    Some(&p) => Some(p),
                    None => parent
                        .and_then(|p| self.resolve(descs, index, p, depth + 1))
                        .and_then(|t| self.trace.tracks[t.track.index()].process),
                },
                None => None,
            };
            let kind = marked_kind.unwrap_or(if counter {
                TrackKind::Counter
            } else {
                TrackKind::Async
            });
            let trace = &mut *self.trace;
            let name = nonempty(trace, d.name.as_deref().or(d.static_name.as_deref()))
                .unwrap_or(StrId::EMPTY);
            Target {
                track: trace.named_track(process, kind, name, uuid),
                scope: InstantScope::Thread,
            }
        };
        self.targets.insert(uuid, target);
        Some(target)
    }

    /// The target of an event's track uuid. Process tracks get a model track on first
    /// use; uuids no descriptor names get a root track (uuid 0 is Perfetto's implicit
    /// trace-global track).
    fn target(&mut self, uuid: u64) -> Target {
        if let Some(&t) = self.targets.get(&uuid) {
            return t;
        }
        let process = self.process_of_uuid.get(&uuid).copied();
        let scope = match (process, uuid) {
            (Some(_), _) => InstantScope::Process,
            (None, 0) => InstantScope::Global,
            (None, _) => InstantScope::Thread,
        };
        let target = Target {
            track: self
                .trace
                .named_track(process, TrackKind::Async, StrId::EMPTY, uuid),
            scope,
        };
        self.targets.insert(uuid, target);
        target
    }

    /// The target of an event's place: its track's, or its legacy thread's.
    fn place_target(&mut self, place: Place) -> Target {
        let lane = place.lane as usize;
        if let Some(&Some(target)) = self.by_lane.get(lane) {
            return target;
        }
        // The reader names a legacy thread's lane only once it described it.
        let target = self.target(place.uuid.unwrap_or(0));
        self.set_lane_target(lane, target);
        target
    }

    fn set_lane_target(&mut self, lane: usize, target: Target) {
        if lane >= self.by_lane.len() {
            self.by_lane.resize(lane + 1, None);
        }
        self.by_lane[lane] = Some(target);
    }

    // ---- events ----

    /// Converts the event's annotations into `self.annotations`, taking out our own
    /// markers (the reader read the kind): returns the scope, and fills `self.labels`
    /// with flow labels.
    fn annotations(&mut self, event: &Event<'_>) -> Result<Option<InstantScope>, SinkError> {
        self.annotations.clear();
        self.labels.clear();
        let mut scope = None;
        let seq = event.seq;
        for a in event.annotations() {
            let a = a.map_err(|e| e.to_string())?;
            let key = match (a.name_iid, &a.name) {
                (Some(iid), _) => seq.keys.get(iid),
                (None, Some(name)) => intern_bytes(self.trace, name),
                (None, None) => StrId::EMPTY,
            };
            let value = annotation_value(&a, seq, self.trace);
            match value {
                ArgValue::Str(_) if key == self.keys.kind => {}
                ArgValue::Str(s) if key == self.keys.scope => {
                    scope = match self.trace.str(s) {
                        "thread" => Some(InstantScope::Thread),
                        "process" => Some(InstantScope::Process),
                        "global" => Some(InstantScope::Global),
                        _ => None,
                    };
                }
                ArgValue::Str(s) if key == self.keys.flow => {
                    let text = self.trace.str(s);
                    let (cat, name) = text.split_once(FLOW_SEPARATOR).unwrap_or(("", text));
                    let (cat, name) = (cat.to_string(), name.to_string());
                    let label = (intern_str(self.trace, &cat), intern_str(self.trace, &name));
                    self.labels.push(label);
                }
                _ => self.annotations.push((key, value)),
            }
        }
        Ok(scope)
    }

    /// The args list of `lane`, made on first use.
    fn lane_args(&mut self, lane: u32) -> &mut Vec<(StrId, ArgValue)> {
        let lane = lane as usize;
        if lane >= self.lane_args.len() {
            self.lane_args.resize_with(lane + 1, Vec::new);
        }
        &mut self.lane_args[lane]
    }

    /// Ends `frame`, the innermost open slice of `lane`, at `ts`.
    fn close(&mut self, frame: Frame, lane: u32, ts: i64) {
        let lane = &mut self.lane_args[lane as usize];
        let trace = &mut *self.trace;
        let mut w = trace.args.writer();
        for &(k, v) in &lane[frame.args_start..] {
            w.push(k, v);
        }
        let row = frame.row as usize;
        trace.slices.args[row] = w.finish();
        trace.slices.dur[row] = ts.saturating_sub(frame.ts);
        lane.truncate(frame.args_start);
    }

    /// Adds the flows named on `event` of slice `slice` (none: an instant), with the
    /// labels of our annotations when there is one per outgoing id.
    fn pending_flows(&mut self, event: &Event<'_>, slice: Option<u32>) {
        if event.flow_fields.is_empty() {
            return;
        }
        let (outgoing, terminating) = event.flows();
        let labelled = outgoing.len() == self.labels.len();
        for (i, id) in outgoing.into_iter().enumerate() {
            self.flows.add(FlowEnd {
                id,
                ts: event.ts,
                order: self.order,
                role: FlowRole::StartOrStep,
                label: if labelled {
                    self.labels.get(i).copied()
                } else {
                    None
                },
                slice,
            });
        }
        for id in terminating {
            self.flows.add(FlowEnd {
                id,
                ts: event.ts,
                order: self.order,
                role: FlowRole::End,
                label: None,
                slice,
            });
        }
    }

    /// Joins the slices that share a flow id. As in Perfetto, the events of one id in
    /// time order form a chain (each outgoing id a step) that a terminating id ends; a
    /// pair of one outgoing and one terminating event is joined in that direction even
    /// when the clocks put the terminating one first.
    fn bind_flows(&mut self) {
        let flows = &mut self.trace.flows;
        self.flows.bind(&mut self.trace.repairs, |l| {
            let (cat, name) = l.from_label.unwrap_or_default();
            flows.push(l.from, l.to, name, cat);
        });
    }
}

impl Sink for Model<'_> {
    type Open = Frame;

    fn intern(&mut self, text: &[u8]) -> StrId {
        intern_bytes(self.trace, text)
    }

    fn text(&self, id: StrId) -> &str {
        self.trace.str(id)
    }

    fn kind_key(&self) -> StrId {
        self.keys.kind
    }

    fn legacy_process(&mut self, p: &ProcessDescriptor) {
        let process = self.trace.process(self.source, p.pid.unwrap_or(0));
        if let Some(name) = nonempty(self.trace, p.process_name.as_deref()) {
            self.trace.processes[process.index()].name = Some(name);
        }
    }

    fn legacy_thread(&mut self, lane: u32, t: &ThreadDescriptor) {
        let process = self.trace.process(self.source, t.pid.unwrap_or(0));
        let thread = self.trace.thread(process, t.tid.unwrap_or(0));
        if let Some(name) = nonempty(self.trace, t.thread_name.as_deref()) {
            self.trace.threads[thread.index()].name = Some(name);
        }
        let target = Target {
            track: self.trace.thread_track(thread, TrackKind::Thread),
            scope: InstantScope::Thread,
        };
        self.set_lane_target(lane as usize, target);
    }

    fn track_event(&mut self, place: Place) {
        self.order += 1;
        self.place_target(place);
    }

    fn begin(&mut self, event: &Event<'_>) -> Result<Frame, SinkError> {
        let target = self.place_target(event.place);
        self.annotations(event)?;
        if event.kind.is_none() {
            self.trace.note_unknown_category(event.category);
        }
        // Duration and args are filled in at the end event.
        let row = self.trace.slices.push(SliceRow {
            track: target.track,
            ts: event.ts,
            dur: 0,
            name: event.name,
            category: event.category,
            kind: event.kind.unwrap_or(SliceKind::Other),
            args: ArgsId::NONE,
        });
        let mut annotations = std::mem::take(&mut self.annotations);
        let lane = self.lane_args(event.place.lane);
        let args_start = lane.len();
        lane.append(&mut annotations);
        self.annotations = annotations;
        self.pending_flows(event, Some(row));
        Ok(Frame {
            row,
            ts: event.ts,
            args_start,
        })
    }

    fn end(&mut self, frame: Frame, event: &Event<'_>, _depth: u32) -> Result<(), SinkError> {
        // Perfetto merges the args and flows of an end event into its slice's.
        self.annotations(event)?;
        let mut annotations = std::mem::take(&mut self.annotations);
        self.lane_args(event.place.lane).append(&mut annotations);
        self.annotations = annotations;
        self.pending_flows(event, Some(frame.row));
        self.close(frame, event.place.lane, event.ts);
        Ok(())
    }

    fn unended(&mut self, frame: Frame, place: Place, ts: i64) {
        self.close(frame, place.lane, ts);
    }

    fn instant(&mut self, event: &Event<'_>) -> Result<(), SinkError> {
        let target = self.place_target(event.place);
        let scope = self.annotations(event)?;
        // Flows in the model join slices: an instant's have none to bind to.
        self.pending_flows(event, None);
        let trace = &mut *self.trace;
        let mut w = trace.args.writer();
        for &(k, v) in &self.annotations {
            w.push(k, v);
        }
        let args = w.finish();
        if event.kind.is_none() {
            trace.note_unknown_category(event.category);
        }
        trace.instants.push(InstantRow {
            track: target.track,
            ts: event.ts,
            name: event.name,
            category: event.category,
            kind: event.kind.unwrap_or(SliceKind::Other),
            scope: scope.unwrap_or(target.scope),
            args,
        });
        Ok(())
    }

    fn counter(&mut self, place: Place, ts: i64, value: f64) {
        let target = self.place_target(place);
        self.trace.counters.push(target.track, ts, value);
    }

    fn sample(&mut self, sample: &StackSample<'_>) {
        let trace = &mut *self.trace;
        let process = trace.process(self.source, i64::from(sample.pid));
        let thread = trace.thread(process, i64::from(sample.tid));
        let track = trace.thread_track(thread, TrackKind::Thread);
        let stacks = &mut trace.stacks;
        let stack = sample.frames.iter().fold(opscope_model::NONE, |parent, f| {
            let frame = stacks.frame(f.function, f.file, f.line);
            stacks.node(parent, frame)
        });
        trace.samples.push(SampleRow {
            ts: sample.ts,
            track,
            stack,
            period: i64::try_from(sample.period).unwrap_or(i64::MAX),
            state: sample.state,
        });
    }
}

fn annotation_value(a: &DebugAnnotation, seq: &Sequence, trace: &mut Trace) -> ArgValue {
    if let Some(b) = a.bool_value {
        ArgValue::Bool(b)
    } else if let Some(v) = a.uint_value {
        // The model keeps `UInt` for what an `i64` cannot hold.
        i64::try_from(v).map_or(ArgValue::UInt(v), ArgValue::Int)
    } else if let Some(v) = a.int_value {
        ArgValue::Int(v)
    } else if let Some(v) = a.double_value {
        ArgValue::Float(v)
    } else if let Some(s) = &a.string_value {
        ArgValue::Str(intern_bytes(trace, s))
    } else if let Some(iid) = a.string_value_iid {
        ArgValue::Str(seq.values.get(iid))
    } else if let Some(p) = a.pointer_value {
        ArgValue::Str(intern_str(trace, &format!("0x{p:x}")))
    } else if let Some(json) = &a.legacy_json_value {
        let text = String::from_utf8_lossy(json);
        if text.trim() == "null" {
            ArgValue::Null
        } else if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() {
            ArgValue::Json(intern_str(trace, &text))
        } else {
            // Not JSON after all: kept as text, since a `Json` arg is written verbatim
            // into Chrome JSON.
            ArgValue::Str(intern_str(trace, &text))
        }
    } else if let Some(nested) = &a.nested_value {
        ArgValue::Json(intern_str(trace, &nested_json(nested).to_string()))
    } else if !a.dict_entries.is_empty() || !a.array_values.is_empty() {
        let json = structured_json(a, seq, trace).to_string();
        ArgValue::Json(intern_str(trace, &json))
    } else {
        ArgValue::Null
    }
}

/// The JSON of a `dict_entries` / `array_values` annotation (or of a leaf inside one).
fn structured_json(a: &DebugAnnotation, seq: &Sequence, trace: &mut Trace) -> serde_json::Value {
    use serde_json::Value;
    if !a.dict_entries.is_empty() {
        let mut map = serde_json::Map::new();
        for e in &a.dict_entries {
            let key = match (e.name_iid, &e.name) {
                (Some(iid), _) => trace.str(seq.keys.get(iid)).to_string(),
                (None, Some(n)) => String::from_utf8_lossy(n).into_owned(),
                (None, None) => String::new(),
            };
            map.insert(key, structured_json(e, seq, trace));
        }
        return Value::Object(map);
    }
    if !a.array_values.is_empty() {
        return Value::Array(
            a.array_values
                .iter()
                .map(|e| structured_json(e, seq, trace))
                .collect(),
        );
    }
    match annotation_value(a, seq, trace) {
        ArgValue::Null => Value::Null,
        ArgValue::Bool(b) => Value::Bool(b),
        ArgValue::Int(v) => Value::from(v),
        ArgValue::UInt(v) => Value::from(v),
        ArgValue::Float(v) => serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ArgValue::Str(s) => Value::String(trace.str(s).to_string()),
        ArgValue::Json(s) => serde_json::from_str(trace.str(s))
            .unwrap_or_else(|_| Value::String(trace.str(s).to_string())),
    }
}

fn nested_json(v: &NestedValue) -> serde_json::Value {
    use serde_json::Value;
    match v.nested_type.unwrap_or(0) {
        proto::NESTED_DICT => Value::Object(
            v.dict_keys
                .iter()
                .zip(&v.dict_values)
                .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), nested_json(v)))
                .collect(),
        ),
        proto::NESTED_ARRAY => Value::Array(v.array_values.iter().map(nested_json).collect()),
        _ => {
            if let Some(b) = v.bool_value {
                Value::Bool(b)
            } else if let Some(i) = v.int_value {
                Value::from(i)
            } else if let Some(d) = v.double_value {
                serde_json::Number::from_f64(d).map_or(Value::Null, Value::Number)
            } else if let Some(s) = &v.string_value {
                Value::String(String::from_utf8_lossy(s).into_owned())
            } else {
                Value::Null
            }
        }
    }
}

fn marker_of(d: &TrackDescriptor) -> Marker {
    d.description
        .as_deref()
        .map(|b| Marker::parse(&String::from_utf8_lossy(b)))
        .unwrap_or_default()
}

fn parse_track_kind(name: &str) -> Option<TrackKind> {
    [
        TrackKind::Thread,
        TrackKind::GpuStream,
        TrackKind::Async,
        TrackKind::Counter,
    ]
    .into_iter()
    .find(|k| k.name() == name)
}

/// `gpu:0` → (Gpu, 0).
fn parse_device(s: &str) -> Option<(DeviceKind, u32)> {
    let (kind, index) = s.split_once(':')?;
    let kind = [
        DeviceKind::Cpu,
        DeviceKind::Gpu,
        DeviceKind::Mtia,
        DeviceKind::Tpu,
        DeviceKind::Sycl,
        DeviceKind::Other,
    ]
    .into_iter()
    .find(|k| k.name() == kind)?;
    Some((kind, index.parse().ok()?))
}

/// Interns a string, or gives the empty string when the table is full (a string of
/// over a GiB, or 4 GiB in all, can only come from a corrupt file).
fn intern_str(trace: &mut Trace, s: &str) -> StrId {
    if s.len() > StringTable::MAX_STRING || !trace.strings.has_room_for(s.len()) {
        trace.repairs.malformed_events += 1;
        return StrId::EMPTY;
    }
    trace.intern(s)
}

fn intern_bytes(trace: &mut Trace, b: &[u8]) -> StrId {
    match std::str::from_utf8(b) {
        Ok(s) => intern_str(trace, s),
        Err(_) => intern_str(trace, &String::from_utf8_lossy(b)),
    }
}

fn nonempty(trace: &mut Trace, b: Option<&[u8]>) -> Option<StrId> {
    b.filter(|b| !b.is_empty()).map(|b| intern_bytes(trace, b))
}
