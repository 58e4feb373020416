//! Writes a [`Trace`] as a Perfetto protobuf trace: one track descriptor per process,
//! thread, stream, async lane and counter, then every event as a `TrackEvent` packet in
//! time order, with names, categories and arg keys interned on one packet sequence.
//!
//! Timestamps are the model's nanoseconds as they are. Perfetto's are unsigned, so a
//! trace with negative timestamps is shifted as a whole to start at 0 (the importer
//! then reads the shifted times; nothing else changes).

use std::collections::HashMap;
use std::io::Write;

use opscope_model::{ArgValue, ArgsId, InstantScope, SliceKind, StrId, Trace, TrackKind};
use prost::Message;

use super::proto::{
    frame, Callstack, Clock, ClockSnapshot, CounterDescriptor, DebugAnnotation, Frame, Interned,
    InternedData, PerfSample, ProcessDescriptor, ThreadDescriptor, TracePacket,
    TracePacketDefaults, TrackDescriptor, TrackEvent, CLOCK_BOOTTIME, CLOCK_MONOTONIC,
    CLOCK_REALTIME, PACKET_KEY, SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE,
    TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};
use super::{Marker, FLOW_ANNOTATION, FLOW_SEPARATOR, KIND_ANNOTATION, SCOPE_ANNOTATION};
use crate::error::ExportError;

/// All packets go on one sequence, so interned data is shared by all of them.
const SEQUENCE_ID: u32 = 1;
/// Output is handed to the writer in chunks of about this size.
const FLUSH_AT: usize = 1 << 17;

/// The three clocks of this machine read at one instant, for a trace whose timestamps
/// are `CLOCK_MONOTONIC` nanoseconds (a recording made here): the file then says which
/// clock its times are on, as `opscope record`'s injected library does in its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonotonicClocks {
    pub monotonic_ns: u64,
    pub realtime_ns: u64,
    pub boottime_ns: u64,
}

/// How [`export_with`] writes a trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// The trace's times are `CLOCK_MONOTONIC`, read together with the other clocks
    /// here. Without it, the file's clock is Perfetto's default (`BOOTTIME`) placed on
    /// Unix time by the trace's own offsets.
    pub monotonic: Option<MonotonicClocks>,
}

/// Writes `trace` to `out` as a Perfetto trace, streaming packet by packet.
pub fn export(trace: &Trace, out: &mut impl Write) -> Result<(), ExportError> {
    export_with(trace, out, &ExportOptions::default())
}

/// [`export`] with [`ExportOptions`].
pub fn export_with(
    trace: &Trace,
    out: &mut impl Write,
    options: &ExportOptions,
) -> Result<(), ExportError> {
    let plan = Plan::new(trace);
    let mut writer = PacketWriter {
        out,
        buf: Vec::with_capacity(FLUSH_AT + 4096),
    };
    // The first packet clears the sequence's incremental state, as Perfetto requires
    // before any packet that uses interned data. Packets name no clock of their own:
    // theirs is the sequence's default, BOOTTIME unless the defaults say MONOTONIC.
    let defaults = options.monotonic.map(|_| {
        Box::new(TracePacketDefaults {
            timestamp_clock_id: Some(CLOCK_MONOTONIC),
            track_event_defaults: None,
        })
    });
    writer.write(&TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        first_packet_on_sequence: Some(true),
        trace_packet_defaults: defaults,
        ..Default::default()
    })?;
    let snapshot = match options.monotonic {
        Some(clocks) => Some(monotonic_snapshot(clocks, plan.origin)),
        None => unix_snapshot(trace, plan.origin),
    };
    if let Some(snapshot) = snapshot {
        writer.write(&TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            clock_snapshot: Some(Box::new(snapshot)),
            ..Default::default()
        })?;
    }
    write_descriptors(trace, &plan, &mut writer)?;
    write_events(trace, &plan, &mut writer)?;
    write_samples(trace, &plan, &mut writer)?;
    writer.finish()
}

/// Where the trace's time line sits on Unix time, as a snapshot of the boot clock (the
/// clock the events are written on) and the wall clock; `None` unless every source
/// whose clock knows its Unix offset agrees on it. Written times are the model's minus
/// `origin`, so the written boot clock is `origin` behind the model's time line.
fn unix_snapshot(trace: &Trace, origin: i64) -> Option<ClockSnapshot> {
    let mut offsets = trace
        .clocks
        .iter()
        .filter_map(|c| Some(c.unix_offset_ns? - c.to_global.offset_ns));
    let offset = offsets.next()?;
    if offsets.any(|o| o != offset) {
        return None;
    }
    let offset = offset.checked_add(origin)?;
    // Snapshot values are unsigned: start the boot clock where both stay positive.
    let boot = offset.min(0).unsigned_abs();
    Some(ClockSnapshot {
        clocks: vec![
            clock(CLOCK_BOOTTIME, boot),
            clock(CLOCK_REALTIME, boot.wrapping_add_signed(offset)),
        ],
        primary_trace_clock: Some(CLOCK_BOOTTIME as i32),
    })
}

/// The snapshot of a trace recorded on `CLOCK_MONOTONIC`, moved by `origin` as the
/// written times are.
fn monotonic_snapshot(clocks: MonotonicClocks, origin: i64) -> ClockSnapshot {
    let written = clocks
        .monotonic_ns
        .wrapping_add_signed(origin.wrapping_neg());
    ClockSnapshot {
        clocks: vec![
            clock(CLOCK_MONOTONIC, written),
            clock(CLOCK_REALTIME, clocks.realtime_ns),
            clock(CLOCK_BOOTTIME, clocks.boottime_ns),
        ],
        primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
    }
}

/// One clock's reading in a snapshot.
fn clock(id: u32, timestamp: u64) -> Clock {
    Clock {
        clock_id: Some(id),
        timestamp: Some(timestamp),
        ..Default::default()
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Tag {
    Begin,
    End,
    Instant,
    Counter,
}

/// One event to write: `idx` is a slice, instant or counter-sample row.
#[derive(Copy, Clone)]
struct Ev {
    ts: i64,
    /// Index into [`Plan::lane_uuid`]; also orders events of equal time, with the
    /// events of one lane kept in the order they were planned.
    lane: u32,
    idx: u32,
    tag: Tag,
}

/// A child track the exporter adds under a model track.
struct ExtraLane {
    uuid: u64,
    parent: usize,
    counter: bool,
    number: usize,
}

/// Track uuids, the lanes events go to and all events in write order.
struct Plan {
    /// Subtracted from every timestamp: the smallest one when it is negative, else 0.
    origin: i64,
    processes: usize,
    lane_uuid: Vec<u64>,
    extra_lanes: Vec<ExtraLane>,
    events: Vec<Ev>,
    /// Outgoing and incoming flows per slice, as CSR offsets into flow lists.
    flows_out: Csr,
    flows_in: Csr,
}

impl Plan {
    fn new(trace: &Trace) -> Plan {
        let tracks = trace.tracks.len();
        let mut plan = Plan {
            origin: 0,
            processes: trace.processes.len(),
            lane_uuid: Vec::new(),
            extra_lanes: Vec::new(),
            events: Vec::with_capacity(
                trace.slices.len() * 2 + trace.instants.len() + trace.counters.len(),
            ),
            flows_out: Csr::default(),
            flows_in: Csr::default(),
        };
        let mut next_uuid = plan.track_uuid(tracks);
        plan.plan_slices(trace, &mut next_uuid);

        // Instants and counter samples need no ordering of their own: the final stable
        // sort puts them in time order and keeps equal times in row order.
        let mut instant_lane = vec![u32::MAX; tracks];
        for i in 0..trace.instants.len() {
            let t = trace.instants.track[i] as usize;
            if t >= tracks {
                continue;
            }
            if instant_lane[t] == u32::MAX {
                // Counter tracks take only counter events, so their instants go to a child.
                let on_child = trace.tracks[t].kind == TrackKind::Counter;
                instant_lane[t] = plan.new_lane(t, on_child, false, 1, &mut next_uuid);
            }
            plan.events.push(Ev {
                ts: trace.instants.ts[i],
                lane: instant_lane[t],
                idx: i as u32,
                tag: Tag::Instant,
            });
        }
        let mut counter_lane = vec![u32::MAX; tracks];
        for i in 0..trace.counters.len() {
            let t = trace.counters.track[i] as usize;
            if t >= tracks {
                continue;
            }
            if counter_lane[t] == u32::MAX {
                let on_child = trace.tracks[t].kind != TrackKind::Counter;
                counter_lane[t] = plan.new_lane(t, on_child, true, 1, &mut next_uuid);
            }
            plan.events.push(Ev {
                ts: trace.counters.ts[i],
                lane: counter_lane[t],
                idx: i as u32,
                tag: Tag::Counter,
            });
        }
        let first_sample = trace.samples.ts.iter().copied().min();
        plan.origin = plan
            .events
            .iter()
            .map(|e| e.ts)
            .chain(first_sample)
            .min()
            .unwrap_or(0)
            .min(0);
        plan.events.sort_by_key(|e| (e.ts, e.lane));

        let slices = trace.slices.len();
        let exported =
            |s: u32| (s as usize) < slices && (trace.slices.track[s as usize] as usize) < tracks;
        let valid: Vec<u32> = (0..trace.flows.len() as u32)
            .filter(|&f| {
                exported(trace.flows.from[f as usize]) && exported(trace.flows.to[f as usize])
            })
            .collect();
        plan.flows_out = Csr::new(slices, &valid, |f| trace.flows.from[f as usize]);
        plan.flows_in = Csr::new(slices, &valid, |f| trace.flows.to[f as usize]);
        plan
    }

    fn process_uuid(&self, p: usize) -> u64 {
        1 + p as u64
    }

    fn track_uuid(&self, t: usize) -> u64 {
        1 + (self.processes + t) as u64
    }

    /// Adds a lane of track `t`: the track itself, or a new child track of it.
    fn new_lane(
        &mut self,
        t: usize,
        on_child: bool,
        counter: bool,
        number: usize,
        next_uuid: &mut u64,
    ) -> u32 {
        let uuid = if on_child {
            let uuid = *next_uuid;
            *next_uuid += 1;
            self.extra_lanes.push(ExtraLane {
                uuid,
                parent: t,
                counter,
                number,
            });
            uuid
        } else {
            self.track_uuid(t)
        };
        self.lane_uuid.push(uuid);
        (self.lane_uuid.len() - 1) as u32
    }

    /// Turns slices into begin/end events. Perfetto pairs them with a stack per track,
    /// so each lane must hold properly nested slices: a slice goes to the first lane
    /// whose open slices all contain it, else to a new child lane. Ends come before
    /// begins at equal times, as `Trace::finish` nests them.
    fn plan_slices(&mut self, trace: &Trace, next_uuid: &mut u64) {
        let s = &trace.slices;
        let tracks = trace.tracks.len();
        let key = |i: u32| {
            let i = i as usize;
            (s.track[i], s.ts[i], std::cmp::Reverse(s.dur[i].max(0)))
        };
        let mut order: Vec<u32> = (0..s.len() as u32)
            .filter(|&i| (s.track[i as usize] as usize) < tracks)
            .collect();
        // `Trace::finish` leaves slices in this order already; check before sorting.
        if !order.is_sorted_by_key(|&i| key(i)) {
            order.sort_by_key(|&i| key(i));
        }
        struct Lane {
            id: u32,
            /// Open slices: (end, row).
            stack: Vec<(i64, u32)>,
        }
        let mut lanes: Vec<Lane> = Vec::new();
        let mut start = 0;
        while start < order.len() {
            let t = s.track[order[start] as usize] as usize;
            let mut end_of_group = start;
            while end_of_group < order.len() && s.track[order[end_of_group] as usize] as usize == t
            {
                end_of_group += 1;
            }
            lanes.clear();
            for &i in &order[start..end_of_group] {
                let ts = s.ts[i as usize];
                let end = ts.saturating_add(s.dur[i as usize].max(0));
                let mut chosen = None;
                for (n, lane) in lanes.iter_mut().enumerate() {
                    while let Some(&(open_end, open)) = lane.stack.last() {
                        if open_end > ts {
                            break;
                        }
                        lane.stack.pop();
                        self.events.push(Ev {
                            ts: open_end,
                            lane: lane.id,
                            idx: open,
                            tag: Tag::End,
                        });
                    }
                    if lane
                        .stack
                        .last()
                        .is_none_or(|&(open_end, _)| open_end >= end)
                    {
                        chosen = Some(n);
                        break;
                    }
                }
                let n = match chosen {
                    Some(n) => n,
                    None => {
                        let number = lanes.len();
                        // Counter tracks take only counter events, so all their slice
                        // lanes are children.
                        let on_child = number > 0 || trace.tracks[t].kind == TrackKind::Counter;
                        let id = self.new_lane(t, on_child, false, number + 1, next_uuid);
                        lanes.push(Lane {
                            id,
                            stack: Vec::new(),
                        });
                        number
                    }
                };
                let lane = &mut lanes[n];
                self.events.push(Ev {
                    ts,
                    lane: lane.id,
                    idx: i,
                    tag: Tag::Begin,
                });
                lane.stack.push((end, i));
            }
            for lane in &mut lanes {
                while let Some((open_end, open)) = lane.stack.pop() {
                    self.events.push(Ev {
                        ts: open_end,
                        lane: lane.id,
                        idx: open,
                        tag: Tag::End,
                    });
                }
            }
            start = end_of_group;
        }
    }

    fn time(&self, ts: i64) -> u64 {
        // Exact: the difference of two i64 always fits a u64 when ts >= origin.
        (ts as i128 - self.origin as i128) as u64
    }
}

/// Rows grouped by a key row (compressed sparse rows): `items[offsets[k]..offsets[k+1]]`.
#[derive(Default)]
struct Csr {
    offsets: Vec<u32>,
    items: Vec<u32>,
}

impl Csr {
    fn new(keys: usize, rows: &[u32], key_of: impl Fn(u32) -> u32) -> Csr {
        let mut offsets = vec![0u32; keys + 1];
        for &r in rows {
            offsets[key_of(r) as usize + 1] += 1;
        }
        for k in 0..keys {
            offsets[k + 1] += offsets[k];
        }
        let mut fill = offsets.clone();
        let mut items = vec![0u32; rows.len()];
        for &r in rows {
            let k = key_of(r) as usize;
            items[fill[k] as usize] = r;
            fill[k] += 1;
        }
        Csr { offsets, items }
    }

    fn get(&self, key: u32) -> &[u32] {
        let k = key as usize;
        match (self.offsets.get(k), self.offsets.get(k + 1)) {
            (Some(&a), Some(&b)) => &self.items[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// Frames packets as `Trace.packet` fields and hands them to the writer in chunks.
struct PacketWriter<'w, W: Write> {
    out: &'w mut W,
    buf: Vec<u8>,
}

impl<W: Write> PacketWriter<'_, W> {
    fn write(&mut self, packet: &TracePacket) -> Result<(), ExportError> {
        self.buf.push(PACKET_KEY);
        packet
            .encode_length_delimited(&mut self.buf)
            .map_err(|e| ExportError::Unsupported(format!("encoding a packet: {e}")))?;
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(), ExportError> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()?;
        Ok(())
    }
}

/// The model's string, or "" for an id that does not resolve.
fn text(trace: &Trace, id: StrId) -> &str {
    if (id.0 as usize) < trace.strings.len() {
        trace.str(id)
    } else {
        ""
    }
}

/// A name the model has, even an empty one (the importer restores `Some("")`).
fn some_text(trace: &Trace, id: Option<StrId>) -> Option<Vec<u8>> {
    id.map(|id| text(trace, id).as_bytes().to_vec())
}

fn descriptor_packet(desc: TrackDescriptor) -> TracePacket {
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE_ID),
        track_descriptor: Some(Box::new(desc)),
        ..Default::default()
    }
}

fn description(marker: &Marker) -> Option<Vec<u8>> {
    (!marker.is_empty()).then(|| marker.format().into_bytes())
}

fn write_descriptors<W: Write>(
    trace: &Trace,
    plan: &Plan,
    w: &mut PacketWriter<'_, W>,
) -> Result<(), ExportError> {
    for (p, process) in trace.processes.iter().enumerate() {
        let mut marker = Marker::default();
        if let Some(device) = process.device.and_then(|d| trace.devices.get(d.index())) {
            marker.device = Some(format!("{}:{}", device.kind.name(), device.index));
            marker.device_name = device.name.map(|n| text(trace, n).to_string());
        }
        w.write(&descriptor_packet(TrackDescriptor {
            uuid: Some(plan.process_uuid(p)),
            description: description(&marker),
            process: Some(ProcessDescriptor {
                pid: Some(process.pid),
                process_name: some_text(trace, process.name),
                process_labels: some_text(trace, process.labels).into_iter().collect(),
                legacy_sort_index: process.sort_index,
            }),
            ..Default::default()
        }))?;
    }
    for (t, track) in trace.tracks.iter().enumerate() {
        let mut desc = TrackDescriptor {
            uuid: Some(plan.track_uuid(t)),
            name: (track.name != StrId::EMPTY).then(|| text(trace, track.name).as_bytes().to_vec()),
            ..Default::default()
        };
        let thread = track.thread.and_then(|th| trace.threads.get(th.index()));
        let process = thread.map(|th| th.process).or(track.process);
        desc.parent_uuid = process
            .filter(|p| p.index() < trace.processes.len())
            .map(|p| plan.process_uuid(p.index()));
        // The kind a reader infers from the descriptor's shape: thread descriptor =>
        // thread, counter descriptor => counter, neither => async lane.
        let implied = if track.kind == TrackKind::Counter {
            desc.counter = Some(CounterDescriptor::default());
            TrackKind::Counter
        } else if thread.is_some() {
            TrackKind::Thread
        } else {
            TrackKind::Async
        };
        if let Some(th) = thread {
            let pid = trace.processes.get(th.process.index()).map_or(0, |p| p.pid);
            desc.thread = Some(ThreadDescriptor {
                pid: Some(pid),
                tid: Some(th.tid),
                thread_name: some_text(trace, th.name),
                legacy_sort_index: th.sort_index,
            });
        }
        let marker = Marker {
            kind: (track.kind != implied).then(|| track.kind.name().to_string()),
            pthread: thread.and_then(|th| th.handle),
            ..Default::default()
        };
        desc.description = description(&marker);
        w.write(&descriptor_packet(desc))?;
    }
    for lane in &plan.extra_lanes {
        let track = &trace.tracks[lane.parent];
        let base = if track.name != StrId::EMPTY {
            text(trace, track.name)
        } else {
            track
                .thread
                .and_then(|th| trace.threads.get(th.index()))
                .and_then(|th| th.name)
                .map_or(track.kind.name(), |n| text(trace, n))
        };
        w.write(&descriptor_packet(TrackDescriptor {
            uuid: Some(lane.uuid),
            parent_uuid: Some(plan.track_uuid(lane.parent)),
            name: Some(format!("{base} #{}", lane.number).into_bytes()),
            description: description(&Marker {
                lane: true,
                ..Default::default()
            }),
            counter: lane.counter.then(CounterDescriptor::default),
            ..Default::default()
        }))?;
    }
    Ok(())
}

/// One interning table of the sequence. Model strings use `StrId + 1` as iid (iids
/// are per table, so the tables can share the numbering); strings the exporter adds
/// itself get iids after the last model string.
struct Table {
    emitted: Vec<bool>,
    fixed: HashMap<&'static str, u64>,
    pairs: HashMap<(StrId, StrId), u64>,
    next_extra: u64,
}

impl Table {
    fn new(strings: usize) -> Table {
        Table {
            emitted: vec![false; strings],
            fixed: HashMap::new(),
            pairs: HashMap::new(),
            next_extra: strings as u64 + 1,
        }
    }

    /// The iid of a model string, emitting it into `out` on first use.
    fn model(&mut self, trace: &Trace, id: StrId, out: &mut Vec<Interned>) -> u64 {
        let i = id.0 as usize;
        if i >= self.emitted.len() {
            return self.model(trace, StrId::EMPTY, out);
        }
        if !self.emitted[i] {
            self.emitted[i] = true;
            out.push(Interned {
                iid: Some(i as u64 + 1),
                name: Some(trace.str(id).as_bytes().to_vec()),
            });
        }
        i as u64 + 1
    }

    fn fixed(&mut self, s: &'static str, out: &mut Vec<Interned>) -> u64 {
        if let Some(&iid) = self.fixed.get(s) {
            return iid;
        }
        let iid = self.next_extra;
        self.next_extra += 1;
        self.fixed.insert(s, iid);
        out.push(Interned {
            iid: Some(iid),
            name: Some(s.as_bytes().to_vec()),
        });
        iid
    }

    /// A flow's `category U+001F name`.
    fn flow(&mut self, trace: &Trace, cat: StrId, name: StrId, out: &mut Vec<Interned>) -> u64 {
        if let Some(&iid) = self.pairs.get(&(cat, name)) {
            return iid;
        }
        let iid = self.next_extra;
        self.next_extra += 1;
        self.pairs.insert((cat, name), iid);
        let value = format!("{}{FLOW_SEPARATOR}{}", text(trace, cat), text(trace, name));
        out.push(Interned {
            iid: Some(iid),
            name: Some(value.into_bytes()),
        });
        iid
    }
}

struct Interner {
    names: Table,
    categories: Table,
    keys: Table,
    values: Table,
    /// `(key iid, value iid)` of each kind's annotation, by `SliceKind::code`.
    kinds: [Option<(u64, u64)>; SliceKind::ALL.len()],
}

impl Interner {
    fn new(strings: usize) -> Interner {
        Interner {
            names: Table::new(strings),
            categories: Table::new(strings),
            keys: Table::new(strings),
            values: Table::new(strings),
            kinds: [None; SliceKind::ALL.len()],
        }
    }

    fn name_and_category(
        &mut self,
        trace: &Trace,
        name: StrId,
        category: StrId,
        te: &mut TrackEvent,
        data: &mut InternedData,
    ) {
        if name != StrId::EMPTY {
            te.name_iid = Some(self.names.model(trace, name, &mut data.event_names));
        }
        if category != StrId::EMPTY {
            let iid = self
                .categories
                .model(trace, category, &mut data.event_categories);
            te.category_iids.push(iid);
        }
    }

    fn args(&mut self, trace: &Trace, args: ArgsId, te: &mut TrackEvent, data: &mut InternedData) {
        for (key, value) in trace.args.get(args) {
            let mut a = DebugAnnotation {
                name_iid: Some(
                    self.keys
                        .model(trace, key, &mut data.debug_annotation_names),
                ),
                ..Default::default()
            };
            match value {
                // Debug annotations have no null; JSON `null` says it and cannot be
                // confused with a `Json` arg, which is always an array or object.
                ArgValue::Null => a.legacy_json_value = Some(b"null".to_vec()),
                ArgValue::Bool(b) => a.bool_value = Some(b),
                ArgValue::Int(v) => a.int_value = Some(v),
                ArgValue::UInt(v) => a.uint_value = Some(v),
                ArgValue::Float(v) => a.double_value = Some(v),
                ArgValue::Str(s) => {
                    let values = &mut data.debug_annotation_string_values;
                    a.string_value_iid = Some(self.values.model(trace, s, values));
                }
                ArgValue::Json(s) => a.legacy_json_value = Some(text(trace, s).as_bytes().to_vec()),
            }
            te.debug_annotations.push(a);
        }
    }

    /// An annotation `key` whose value is one of our fixed strings.
    fn fixed_annotation(
        &mut self,
        key: &'static str,
        value: &'static str,
        te: &mut TrackEvent,
        data: &mut InternedData,
    ) {
        te.debug_annotations.push(DebugAnnotation {
            name_iid: Some(self.keys.fixed(key, &mut data.debug_annotation_names)),
            string_value_iid: Some(
                self.values
                    .fixed(value, &mut data.debug_annotation_string_values),
            ),
            ..Default::default()
        });
    }

    fn kind(&mut self, kind: SliceKind, te: &mut TrackEvent, data: &mut InternedData) {
        if kind == SliceKind::Other {
            return;
        }
        // Nearly every event has one: skip the string look-ups.
        let (key, value) = match self.kinds[kind.code() as usize] {
            Some(iids) => iids,
            None => {
                let key = self
                    .keys
                    .fixed(KIND_ANNOTATION, &mut data.debug_annotation_names);
                let values = &mut data.debug_annotation_string_values;
                let iids = (key, self.values.fixed(kind.name(), values));
                self.kinds[kind.code() as usize] = Some(iids);
                iids
            }
        };
        te.debug_annotations.push(DebugAnnotation {
            name_iid: Some(key),
            string_value_iid: Some(value),
            ..Default::default()
        });
    }
}

fn scope_name(scope: InstantScope) -> &'static str {
    match scope {
        InstantScope::Thread => "thread",
        InstantScope::Process => "process",
        InstantScope::Global => "global",
    }
}

fn write_events<W: Write>(
    trace: &Trace,
    plan: &Plan,
    w: &mut PacketWriter<'_, W>,
) -> Result<(), ExportError> {
    let mut interner = Interner::new(trace.strings.len());
    // Reused for every event, so a packet costs no allocation beyond its new strings.
    let mut packet = TracePacket::default();
    let mut te = TrackEvent::default();
    let mut data = InternedData::default();
    let slices = &trace.slices;
    let instants = &trace.instants;
    let flows = &trace.flows;
    for ev in &plan.events {
        te.clear();
        data.clear();
        te.track_uuid = Some(plan.lane_uuid[ev.lane as usize]);
        let i = ev.idx as usize;
        match ev.tag {
            Tag::Begin => {
                te.r#type = Some(TYPE_SLICE_BEGIN);
                interner.name_and_category(
                    trace,
                    slices.name[i],
                    slices.category[i],
                    &mut te,
                    &mut data,
                );
                interner.args(trace, slices.args[i], &mut te, &mut data);
                interner.kind(slices.kind(i), &mut te, &mut data);
                let out = plan.flows_out.get(ev.idx);
                te.flow_ids.extend(out.iter().map(|&f| f as u64 + 1));
                let named = out.iter().any(|&f| {
                    let f = f as usize;
                    flows.name[f] != StrId::EMPTY || flows.category[f] != StrId::EMPTY
                });
                if named {
                    // One per flow id, in the same order, so the importer can pair them.
                    for &f in out {
                        let f = f as usize;
                        let values = &mut data.debug_annotation_string_values;
                        let iid =
                            interner
                                .values
                                .flow(trace, flows.category[f], flows.name[f], values);
                        let key = interner
                            .keys
                            .fixed(FLOW_ANNOTATION, &mut data.debug_annotation_names);
                        te.debug_annotations.push(DebugAnnotation {
                            name_iid: Some(key),
                            string_value_iid: Some(iid),
                            ..Default::default()
                        });
                    }
                }
                let incoming = plan.flows_in.get(ev.idx);
                te.terminating_flow_ids
                    .extend(incoming.iter().map(|&f| f as u64 + 1));
            }
            Tag::End => te.r#type = Some(TYPE_SLICE_END),
            Tag::Instant => {
                te.r#type = Some(TYPE_INSTANT);
                interner.name_and_category(
                    trace,
                    instants.name[i],
                    instants.category[i],
                    &mut te,
                    &mut data,
                );
                interner.args(trace, instants.args[i], &mut te, &mut data);
                interner.kind(instants.kind(i), &mut te, &mut data);
                if instants.scope[i] != InstantScope::Thread {
                    interner.fixed_annotation(
                        SCOPE_ANNOTATION,
                        scope_name(instants.scope[i]),
                        &mut te,
                        &mut data,
                    );
                }
            }
            Tag::Counter => {
                te.r#type = Some(TYPE_COUNTER);
                te.double_counter_value = Some(trace.counters.value[i]);
            }
        }
        packet.timestamp = Some(plan.time(ev.ts));
        packet.trusted_packet_sequence_id = Some(SEQUENCE_ID);
        packet.sequence_flags = Some(SEQ_NEEDS_INCREMENTAL_STATE);
        packet.track_event = Some(std::mem::take(&mut te));
        packet.interned_data = (!data.is_empty()).then(|| std::mem::take(&mut data));
        w.write(&packet)?;
        te = packet.track_event.take().unwrap_or_default();
        if let Some(d) = packet.interned_data.take() {
            data = d;
        }
    }
    Ok(())
}

/// Writes the sampled stacks as `PerfSample` packets on the events' sequence, each
/// callstack, frame, function name and file interned on first use (frames and
/// callstacks take the model's row numbers as iids), so that Perfetto's UI draws them
/// as it draws its own CPU profiles.
fn write_samples<W: Write>(
    trace: &Trace,
    plan: &Plan,
    w: &mut PacketWriter<'_, W>,
) -> Result<(), ExportError> {
    let (samples, stacks) = (&trace.samples, &trace.stacks);
    let mut functions = Table::new(trace.strings.len());
    let mut paths = Table::new(trace.strings.len());
    let mut frame_written = vec![false; stacks.frames.len()];
    let mut node_written = vec![false; stacks.nodes.len()];
    let mut data = InternedData::default();
    let mut chain = Vec::new();
    for i in 0..samples.len() {
        let track = &trace.tracks[samples.track[i] as usize];
        let Some(thread) = track.thread.and_then(|t| trace.threads.get(t.index())) else {
            continue;
        };
        let pid = trace.processes[thread.process.index()].pid;
        data.clear();
        let node = samples.stack[i];
        if node != opscope_model::NONE && !node_written[node as usize] {
            node_written[node as usize] = true;
            chain.clear();
            chain.extend(stacks.frames_of(node));
            for &f in &chain {
                if std::mem::replace(&mut frame_written[f as usize], true) {
                    continue;
                }
                let frames = &stacks.frames;
                let f = f as usize;
                data.frames.push(Frame {
                    iid: Some(f as u64 + 1),
                    function_name_id: Some(functions.model(
                        trace,
                        frames.function[f],
                        &mut data.function_names,
                    )),
                    source_path_iid: Some(paths.model(
                        trace,
                        frames.file[f],
                        &mut data.source_paths,
                    )),
                    line_number: Some(frames.line[f]),
                    kind: Some(frame::Kind::Interpreted as i32),
                    ..Default::default()
                });
            }
            data.callstacks.push(Callstack {
                iid: Some(node as u64 + 1),
                frame_ids: chain.iter().rev().map(|&f| f as u64 + 1).collect(),
            });
        }
        let packet = TracePacket {
            timestamp: Some(plan.time(samples.ts[i])),
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            interned_data: (!data.is_empty()).then(|| std::mem::take(&mut data)),
            perf_sample: Some(Box::new(PerfSample {
                pid: Some(pid as u32),
                tid: Some(thread.tid as u32),
                callstack_iid: (node != opscope_model::NONE).then_some(node as u64 + 1),
                timebase_count: Some(samples.period[i].max(0) as u64),
                opscope_thread_state: Some(samples.state[i]),
                ..Default::default()
            })),
            ..Default::default()
        };
        w.write(&packet)?;
    }
    Ok(())
}
