//! Reads Perfetto protobuf traces into a [`Trace`]: track descriptors become processes,
//! threads and tracks, `TrackEvent` begin/end pairs become slices, and instants,
//! counters, flows and debug annotations are kept; opscope's own markers (see the
//! parent module) restore what the exporter wrote.
//!
//! Two passes over the bytes: the first frames the packets and collects what is global
//! to the trace (track descriptors, clock snapshots, compressed packets), so events can
//! refer to tracks described later in the file; the second reads the events with the
//! incremental state (interned strings, defaults, clocks) of their packet sequence.

use std::collections::{HashMap, HashSet};
use std::io::Read;

use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::{
    ArgValue, ArgsId, ClockDomain, DeviceKind, InstantScope, LinearTransform, Process, ProcessId,
    SliceKind, Source, SourceId, StrId, StringTable, Trace, TrackId, TrackKind,
};
use prost::Message;

use super::proto::{
    self, DebugAnnotation, NestedValue, TracePacket, TracePacketGlobals, TrackDescriptor,
    TrackEvent, CLOCK_BOOTTIME, CLOCK_MONOTONIC, CLOCK_REALTIME, SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE, TRACE_PACKET, TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
};
use super::{
    kind_named, recorded_kind, Marker, FLOW_ANNOTATION, FLOW_SEPARATOR, KIND_ANNOTATION,
    SCOPE_ANNOTATION,
};
use crate::common::{FlowBinder, FlowEnd, FlowRole, SliceStack};
use crate::error::ImportError;

/// Compressed packets inflate to at most this much each (Perfetto writes chunks of
/// well under a megabyte); more is taken for a corrupt or hostile file.
const MAX_INFLATED: u64 = 1 << 28;
/// Compressed packets hold plain packets only (Perfetto never nests them).
pub(super) const MAX_COMPRESSION_DEPTH: u32 = 1;
/// Parent chains of track descriptors longer than this are taken for cycles.
const MAX_TRACK_DEPTH: u32 = 64;

/// Imports the Perfetto trace in `bytes` (read from `path`) into `trace` as one source
/// and finishes the trace.
///
/// A file cut off inside a packet (a recording that was killed) keeps the packets
/// before the cut, counts the cut one in `trace.repairs.malformed_events` and warns
/// of the bytes lost, naming the offset of the cut; any other
/// damage to the framing or to a packet is an [`ImportError::Syntax`] at the offset of
/// the packet.
pub fn import(bytes: &[u8], path: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let mut scan = Scan {
        // Perfetto's default trace clock, unless a snapshot names another.
        primary_clock: CLOCK_BOOTTIME,
        ..Scan::default()
    };
    let walked = walk(bytes, 0, path, &mut |offset, packet| {
        scan.packet(offset, packet, path, 0)
    })?;
    let cut = match walked {
        Walked::Truncated { packets, offset } => Some((packets, offset)),
        Walked::Complete => None,
    };
    scan.note(walked, path)?;

    let primary = scan.primary_clock;
    let clock_name = match primary {
        CLOCK_BOOTTIME => "perfetto:BOOTTIME".to_string(),
        CLOCK_REALTIME => "perfetto:REALTIME".to_string(),
        CLOCK_MONOTONIC => "perfetto:MONOTONIC".to_string(),
        id => format!("perfetto:clock{id}"),
    };
    let unix_offset_ns = scan.global_clocks.as_ref().and_then(|c| {
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
    }
    let mut importer = Importer::new(trace, source, &scan);
    importer.trace.repairs.malformed_events += scan.truncated;
    importer.resolve_descriptors(&scan.descriptors);
    // The first pass checked the framing and what it decoded; a packet can still fail
    // here in fields only this pass reads. What was read before it is kept, finished.
    let read = importer.walk_events(bytes, path, &scan);
    importer.close_open_slices();
    importer.bind_flows();
    trace.finish();
    read.map(|()| source)
}

/// How a walk over packets ended.
pub(super) enum Walked {
    Complete,
    /// The bytes end inside the field at `offset`.
    Truncated {
        packets: u64,
        offset: u64,
    },
}

/// What [`walk`] calls for each packet: `(offset in the file, packet bytes)`.
type OnPacket<'a> = dyn FnMut(u64, &[u8]) -> Result<(), ImportError> + 'a;

/// Calls `f(offset, bytes)` for each `Trace.packet` field of `bytes` (`base` is the
/// offset of `bytes` in the file) and skips other fields, as protobuf readers do.
pub(super) fn walk(
    bytes: &[u8],
    base: u64,
    path: &str,
    f: &mut OnPacket<'_>,
) -> Result<Walked, ImportError> {
    let mut pos = 0usize;
    let mut packets = 0u64;
    while pos < bytes.len() {
        let offset = base + pos as u64;
        let bad = |message: String| syntax(path, offset, message);
        let cut = |e: Varint| match e {
            Varint::Cut => Ok(Walked::Truncated { packets, offset }),
            Varint::Overlong => Err(bad("a varint longer than 10 bytes (corrupt data?)".into())),
        };
        let key = match read_varint(bytes, &mut pos) {
            Ok(key) => key,
            Err(e) => return cut(e),
        };
        let (field, wire_type) = (key >> 3, key & 7);
        if field == 0 {
            return Err(bad("field number 0 (corrupt data?)".into()));
        }
        if field == u64::from(TRACE_PACKET) && wire_type != 2 {
            return Err(bad(format!(
                "field {TRACE_PACKET} (packet) has wire type {wire_type}, expected 2 (length-delimited)"
            )));
        }
        let len = match wire_type {
            0 => match read_varint(bytes, &mut pos) {
                Ok(_) => 0,
                Err(e) => return cut(e),
            },
            1 => 8,
            5 => 4,
            2 => match read_varint(bytes, &mut pos) {
                Ok(len) => usize::try_from(len).unwrap_or(usize::MAX),
                Err(e) => return cut(e),
            },
            _ => {
                return Err(bad(format!(
                    "wire type {wire_type} of field {field} is not valid here (corrupt data?)"
                )))
            }
        };
        if bytes.len() - pos < len {
            return Ok(Walked::Truncated { packets, offset });
        }
        if field == u64::from(TRACE_PACKET) {
            f(offset, &bytes[pos..pos + len])?;
            packets += 1;
        }
        pos += len;
    }
    Ok(Walked::Complete)
}

/// Why a varint could not be read.
pub(super) enum Varint {
    /// The data ends inside it.
    Cut,
    /// Ten bytes all with the continuation bit.
    Overlong,
}

pub(super) fn read_varint(bytes: &[u8], pos: &mut usize) -> Result<u64, Varint> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos).ok_or(Varint::Cut)?;
        *pos += 1;
        value |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err(Varint::Overlong)
}

pub(super) fn syntax(path: &str, offset: u64, message: String) -> ImportError {
    ImportError::Syntax {
        path: path.to_string(),
        offset,
        message,
    }
}

/// What the first pass collects.
#[derive(Default)]
struct Scan {
    /// Track descriptors in file order, one per uuid (later copies fill in names).
    descriptors: Vec<TrackDescriptor>,
    descriptor_index: HashMap<u64, usize>,
    /// The first snapshot of the trace-global clocks, by clock id.
    global_clocks: Option<HashMap<u32, u64>>,
    primary_clock: u32,
    /// Inflated compressed packets, keyed by the ordinal of their packet in walk order.
    inflated: HashMap<u64, Vec<u8>>,
    ordinal: u64,
    /// Packets cut off by the end of the data.
    truncated: u64,
}

impl Scan {
    fn packet(
        &mut self,
        offset: u64,
        bytes: &[u8],
        path: &str,
        depth: u32,
    ) -> Result<(), ImportError> {
        let ordinal = self.ordinal;
        self.ordinal += 1;
        let packet = TracePacketGlobals::decode(bytes)
            .map_err(|e| syntax(path, offset, format!("not a valid TracePacket: {e}")))?;
        if let Some(desc) = packet.track_descriptor {
            self.add_descriptor(desc);
        }
        if let Some(snapshot) = packet.clock_snapshot {
            if let Some(primary) = snapshot.primary_trace_clock {
                self.primary_clock = primary as u32;
            }
            if is_global_snapshot(&snapshot.clocks) && self.global_clocks.is_none() {
                self.global_clocks = Some(
                    snapshot
                        .clocks
                        .iter()
                        .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
                        .collect(),
                );
            }
        }
        if packet.zstd_compressed_packets.is_some() {
            return Err(syntax(
                path,
                offset,
                "zstd-compressed packets are not supported".into(),
            ));
        }
        if let Some(compressed) = packet.compressed_packets {
            if depth >= MAX_COMPRESSION_DEPTH {
                return Err(syntax(
                    path,
                    offset,
                    "compressed packets inside compressed packets are not supported".into(),
                ));
            }
            let mut inflated = Vec::new();
            inflate(&compressed, &mut inflated, path, offset)?;
            // Offsets inside are reported as the compressed packet's own.
            let walked = walk(&inflated, offset, path, &mut |_, inner| {
                self.packet(offset, inner, path, depth + 1)
            })
            .map_err(|e| inside_compressed(e, offset))?;
            self.note(walked, path)
                .map_err(|e| inside_compressed(e, offset))?;
            self.inflated.insert(ordinal, inflated);
        }
        Ok(())
    }

    /// Counts a cut at the end of the data; a cut before any packet was read means the
    /// data is not a trace at all.
    fn note(&mut self, walked: Walked, path: &str) -> Result<(), ImportError> {
        match walked {
            Walked::Complete => Ok(()),
            Walked::Truncated { packets: 0, offset } => Err(syntax(
                path,
                offset,
                "the data ends inside the first packet (truncated or not a Perfetto trace)".into(),
            )),
            Walked::Truncated { .. } => {
                self.truncated += 1;
                Ok(())
            }
        }
    }

    fn add_descriptor(&mut self, desc: TrackDescriptor) {
        let uuid = desc.uuid.unwrap_or(0);
        let Some(&i) = self.descriptor_index.get(&uuid) else {
            self.descriptor_index.insert(uuid, self.descriptors.len());
            self.descriptors.push(desc);
            return;
        };
        // Writers re-emit descriptors: a later copy may name what the first did not,
        // or rename it (a thread that set its name), as Perfetto reads them.
        fn named(name: &Option<Vec<u8>>) -> bool {
            name.as_ref().is_some_and(|n| !n.is_empty())
        }
        let old = &mut self.descriptors[i];
        if named(&desc.name) {
            old.name = desc.name;
        }
        if let (Some(o), Some(n)) = (&mut old.process, desc.process) {
            if named(&n.process_name) {
                o.process_name = n.process_name;
            }
        }
        if let (Some(o), Some(n)) = (&mut old.thread, desc.thread) {
            if named(&n.thread_name) {
                o.thread_name = n.thread_name;
            }
        }
    }
}

/// Inflates the `compressed_packets` of the packet at `offset` into `out` (cleared
/// first), up to [`MAX_INFLATED`] bytes.
pub(super) fn inflate(
    compressed: &[u8],
    out: &mut Vec<u8>,
    path: &str,
    offset: u64,
) -> Result<(), ImportError> {
    out.clear();
    let read = flate2::read::ZlibDecoder::new(compressed)
        .take(MAX_INFLATED + 1)
        .read_to_end(out);
    match read {
        Ok(n) if n as u64 > MAX_INFLATED => Err(syntax(
            path,
            offset,
            "compressed packets inflate to over 256 MiB".into(),
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(syntax(
            path,
            offset,
            format!("compressed packets are corrupt: {e}"),
        )),
    }
}

pub(super) fn inside_compressed(e: ImportError, offset: u64) -> ImportError {
    match e {
        ImportError::Syntax { path, message, .. } => ImportError::Syntax {
            path,
            offset,
            message: format!("inside the compressed packets of this packet: {message}"),
        },
        other => other,
    }
}

/// Clock ids 64..=127 are scoped to one packet sequence.
fn is_sequence_clock(id: u32) -> bool {
    (64..=127).contains(&id)
}

/// Whether a snapshot is of trace-global clocks only (not one defining a sequence's).
pub(super) fn is_global_snapshot(clocks: &[proto::Clock]) -> bool {
    clocks
        .iter()
        .all(|c| !is_sequence_clock(c.clock_id.unwrap_or(0)))
}

/// A clock defined by a snapshot on one sequence.
#[derive(Clone, Copy)]
struct SequenceClock {
    incremental: bool,
    unit_ns: u64,
    /// Last absolute value (in the clock's units), for incremental clocks.
    last: u64,
    /// The clock's value at the snapshot, and a global clock's at the same moment.
    at_snapshot: u64,
    reference_clock: u32,
    reference_ts: u64,
}

/// One interning table of a sequence. Writers count iids up from 1, so they mostly
/// index a vector; scattered ones go to a map (and cannot make the vector huge).
#[derive(Default)]
pub(super) struct IidTable {
    dense: Vec<StrId>,
    sparse: HashMap<u64, StrId>,
}

impl IidTable {
    pub(super) fn insert(&mut self, iid: u64, s: StrId) {
        let len = self.dense.len() as u64;
        if iid >= len.saturating_mul(2) + 1024 {
            self.sparse.insert(iid, s);
            return;
        }
        if iid >= len {
            // Doubling keeps the moves from the map below rare.
            let new_len = (iid + 1).max(len * 2) as usize;
            self.dense.resize(new_len, StrId::EMPTY);
            let dense = &mut self.dense;
            self.sparse
                .retain(|&i, &mut s| match dense.get_mut(i as usize) {
                    Some(slot) => {
                        *slot = s;
                        false
                    }
                    None => true,
                });
        }
        self.dense[iid as usize] = s;
    }

    /// The string of `iid`; the empty string for one never interned.
    pub(super) fn get(&self, iid: u64) -> StrId {
        match usize::try_from(iid).ok().and_then(|i| self.dense.get(i)) {
            Some(&s) => s,
            None => self.sparse.get(&iid).copied().unwrap_or_default(),
        }
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
    }

    /// Entries of memory held (cleared ones included), for callers that bound it.
    pub(super) fn footprint(&self) -> usize {
        self.dense.capacity() + self.sparse.capacity()
    }
}

/// Incremental state of one packet sequence.
#[derive(Default)]
pub(super) struct Sequence {
    /// Whether incremental state was cleared since the sequence started or lost data.
    valid: bool,
    pub(super) names: IidTable,
    pub(super) categories: IidTable,
    pub(super) keys: IidTable,
    pub(super) values: IidTable,
    pub(super) default_track: Option<u64>,
    default_clock: Option<u32>,
    pub(super) extra_counter_tracks: Vec<u64>,
    pub(super) extra_double_counter_tracks: Vec<u64>,
    /// Looked up for every event: hashbrown's hasher is the faster one.
    clocks: hashbrown::HashMap<u32, SequenceClock>,
    /// The thread of a legacy `ThreadDescriptor` packet: the track of events without one.
    legacy_thread: Option<Target>,
}

impl Sequence {
    /// Applies a packet's sequence flags (`cleared`: its deprecated
    /// `incremental_state_cleared`; `dropped`: its `previous_packet_dropped`); whether
    /// the packet can be read, which it cannot when it needs incremental state the
    /// sequence lost or never had.
    pub(super) fn start_packet(&mut self, flags: u32, cleared: bool, dropped: bool) -> bool {
        if flags & SEQ_INCREMENTAL_STATE_CLEARED != 0 || cleared {
            self.clear_incremental_state();
        } else if dropped {
            // Interned data may have been lost with the dropped packets.
            self.valid = false;
        }
        flags & SEQ_NEEDS_INCREMENTAL_STATE == 0 || self.valid
    }

    pub(super) fn set_defaults(&mut self, defaults: &proto::TracePacketDefaults) {
        self.default_clock = defaults.timestamp_clock_id;
        if let Some(te) = &defaults.track_event_defaults {
            self.default_track = te.track_uuid;
            self.extra_counter_tracks = te.extra_counter_track_uuids.clone();
            self.extra_double_counter_tracks = te.extra_double_counter_track_uuids.clone();
        }
    }

    /// Each interning table of the sequence with the entries `data` adds to it.
    pub(super) fn tables<'a>(
        &'a mut self,
        data: &'a proto::InternedData,
    ) -> [(&'a mut IidTable, &'a [proto::Interned]); 4] {
        [
            (&mut self.names, &data.event_names),
            (&mut self.categories, &data.event_categories),
            (&mut self.keys, &data.debug_annotation_names),
            (&mut self.values, &data.debug_annotation_string_values),
        ]
    }

    /// Defines the sequence's own clocks of a snapshot that has some, each tied to a
    /// global clock of the same snapshot (`primary`, the trace's clock, when it is
    /// there).
    pub(super) fn define_clocks(&mut self, clocks: &[proto::Clock], primary: u32) {
        let reference = clocks
            .iter()
            .filter(|c| !is_sequence_clock(c.clock_id.unwrap_or(0)))
            .min_by_key(|c| c.clock_id.unwrap_or(0) != primary);
        let Some(reference) = reference else { return };
        for c in clocks
            .iter()
            .filter(|c| is_sequence_clock(c.clock_id.unwrap_or(0)))
        {
            let ts = c.timestamp.unwrap_or(0);
            self.clocks.insert(
                c.clock_id.unwrap_or(0),
                SequenceClock {
                    incremental: c.is_incremental.unwrap_or(false),
                    unit_ns: c.unit_multiplier_ns.filter(|&m| m != 0).unwrap_or(1),
                    last: ts,
                    at_snapshot: ts,
                    reference_clock: reference.clock_id.unwrap_or(0),
                    reference_ts: reference.timestamp.unwrap_or(0),
                },
            );
        }
    }

    /// A packet's `timestamp` on clock `clock_id` (the sequence's default if `None`)
    /// as nanoseconds of a global clock: `(clock, ns)`. A sequence clock's value is
    /// moved onto the global clock of its snapshot, and an incremental one's is a
    /// delta from its previous value, which this advances.
    pub(super) fn time(&mut self, raw: u64, clock_id: Option<u32>) -> (u32, i128) {
        let clock = clock_id.or(self.default_clock).unwrap_or(CLOCK_BOOTTIME);
        match self.clocks.get_mut(&clock) {
            Some(c) if is_sequence_clock(clock) => {
                let value = if c.incremental {
                    c.last = c.last.wrapping_add(raw);
                    c.last
                } else {
                    raw
                };
                // Saturating: a hostile snapshot must not overflow even an i128.
                let delta =
                    (value as i128 - c.at_snapshot as i128).saturating_mul(c.unit_ns as i128);
                (
                    c.reference_clock,
                    (c.reference_ts as i128).saturating_add(delta),
                )
            }
            _ => (clock, raw as i128),
        }
    }

    fn clear_incremental_state(&mut self) {
        self.names.clear();
        self.categories.clear();
        self.keys.clear();
        self.values.clear();
        self.default_track = None;
        self.default_clock = None;
        self.extra_counter_tracks.clear();
        self.extra_double_counter_tracks.clear();
        self.valid = true;
    }
}

/// Where events of one Perfetto track go.
#[derive(Clone, Copy)]
struct Target {
    track: TrackId,
    /// The lane of the Perfetto track, for its open slices (lane tracks have their own).
    lane: usize,
    scope: InstantScope,
    /// Counter tracks: unit multiplier and whether values are deltas.
    counter: Option<(f64, bool)>,
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

/// What a lane keeps beside its open slices.
struct Lane {
    /// Args of all open slices, innermost last: a stack discipline, so one list serves.
    args: Vec<(StrId, ArgValue)>,
    /// The last time of any event on the track, where what stays open is closed.
    last_ts: i64,
}

impl Default for Lane {
    fn default() -> Lane {
        Lane {
            args: Vec::new(),
            last_ts: i64::MIN,
        }
    }
}

/// Category and name from an `opscope.flow` annotation.
type FlowLabel = Option<(StrId, StrId)>;

/// Well-known annotation keys, interned once.
struct Keys {
    kind: StrId,
    scope: StrId,
    flow: StrId,
}

/// The second pass.
struct Importer<'t> {
    trace: &'t mut Trace,
    source: SourceId,
    keys: Keys,
    primary_clock: u32,
    global_clocks: Option<HashMap<u32, u64>>,
    /// The sequence of the packet being read, and the others.
    seq: Sequence,
    seq_id: u32,
    sequences: HashMap<u32, Sequence>,
    targets: HashMap<u64, Target>,
    process_of_uuid: HashMap<u64, ProcessId>,
    counter_totals: HashMap<u64, f64>,
    /// Open slices by lane (`Target::lane`).
    open: SliceStack<usize, Frame>,
    lanes: Vec<Lane>,
    flows: FlowBinder<u64, FlowLabel>,
    kinds: HashMap<StrId, Option<SliceKind>>,
    order: u64,
    /// Reused per event.
    annotations: Vec<(StrId, ArgValue)>,
    labels: Vec<(StrId, StrId)>,
}

impl<'t> Importer<'t> {
    fn new(trace: &'t mut Trace, source: SourceId, scan: &Scan) -> Importer<'t> {
        let keys = Keys {
            kind: trace.intern(KIND_ANNOTATION),
            scope: trace.intern(SCOPE_ANNOTATION),
            flow: trace.intern(FLOW_ANNOTATION),
        };
        Importer {
            trace,
            source,
            keys,
            primary_clock: scan.primary_clock,
            global_clocks: scan.global_clocks.clone(),
            seq: Sequence::default(),
            seq_id: 0,
            sequences: HashMap::new(),
            targets: HashMap::new(),
            process_of_uuid: HashMap::new(),
            counter_totals: HashMap::new(),
            open: SliceStack::new(),
            lanes: Vec::new(),
            flows: FlowBinder::pairs_by_role(),
            kinds: HashMap::new(),
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
        let counter = d.counter.as_ref().map(|c| {
            let unit = c.unit_multiplier.filter(|&m| m != 0).unwrap_or(1);
            (unit as f64, c.is_incremental.unwrap_or(false))
        });
        if marker.lane {
            if let Some(parent) = parent.and_then(|p| self.resolve(descs, index, p, depth + 1)) {
                let target = Target {
                    lane: self.new_lane(),
                    counter,
                    ..parent
                };
                self.targets.insert(uuid, target);
                return Some(target);
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
            let kind = marked_kind.unwrap_or(if counter.is_some() {
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
                lane: self.new_lane(),
                scope: InstantScope::Thread,
                counter,
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
            let kind = marked_kind.unwrap_or(if counter.is_some() {
                TrackKind::Counter
            } else {
                TrackKind::Async
            });
            let trace = &mut *self.trace;
            let name = nonempty(trace, d.name.as_deref().or(d.static_name.as_deref()))
                .unwrap_or(StrId::EMPTY);
            Target {
                track: trace.named_track(process, kind, name, uuid),
                lane: self.new_lane(),
                scope: InstantScope::Thread,
                counter,
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
            lane: self.new_lane(),
            scope,
            counter: None,
        };
        self.targets.insert(uuid, target);
        target
    }

    fn new_lane(&mut self) -> usize {
        self.lanes.push(Lane::default());
        self.lanes.len() - 1
    }

    // ---- packets ----

    fn walk_events(&mut self, bytes: &[u8], path: &str, scan: &Scan) -> Result<(), ImportError> {
        // Packets are numbered as in the first pass, which inflated compressed ones.
        let mut ordinal = 0u64;
        // Decoding into one reused packet saves building and moving a new one each time.
        let mut packet = TracePacket::default();
        walk(bytes, 0, path, &mut |offset, body| {
            let this = ordinal;
            ordinal += 1;
            decode_into(&mut packet, body, path, offset, "")?;
            self.packet(&packet);
            if let Some(inflated) = scan.inflated.get(&this) {
                // The first pass checked the framing; only decoding can fail here.
                walk(inflated, offset, path, &mut |_, inner| {
                    ordinal += 1;
                    let context = "inside the compressed packets of this packet: ";
                    decode_into(&mut packet, inner, path, offset, context)?;
                    self.packet(&packet);
                    Ok(())
                })?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Makes `id` the current sequence.
    fn select_sequence(&mut self, id: u32) {
        if id != self.seq_id {
            let next = self.sequences.remove(&id).unwrap_or_default();
            let previous = std::mem::replace(&mut self.seq, next);
            self.sequences.insert(self.seq_id, previous);
            self.seq_id = id;
        }
    }

    fn packet(&mut self, packet: &TracePacket) {
        self.select_sequence(packet.trusted_packet_sequence_id.unwrap_or(0));
        let seq = &mut self.seq;
        let readable = seq.start_packet(
            packet.sequence_flags.unwrap_or(0),
            packet.incremental_state_cleared == Some(true),
            packet.previous_packet_dropped.unwrap_or(0) != 0,
        );
        if !readable {
            if packet.track_event.is_some() {
                self.trace.repairs.malformed_events += 1;
            }
            return;
        }
        if let Some(defaults) = &packet.trace_packet_defaults {
            seq.set_defaults(defaults);
        }
        if let Some(data) = &packet.interned_data {
            let trace = &mut *self.trace;
            for (table, entries) in seq.tables(data) {
                for e in entries {
                    let s = intern_bytes(trace, e.name.as_deref().unwrap_or_default());
                    table.insert(e.iid.unwrap_or(0), s);
                }
            }
        }
        if let Some(snapshot) = &packet.clock_snapshot {
            self.clock_snapshot(snapshot);
        }
        if let Some(p) = &packet.process_descriptor {
            let process = self.trace.process(self.source, p.pid.unwrap_or(0));
            if let Some(name) = nonempty(self.trace, p.process_name.as_deref()) {
                self.trace.processes[process.index()].name = Some(name);
            }
        }
        if let Some(t) = &packet.thread_descriptor {
            let process = self.trace.process(self.source, t.pid.unwrap_or(0));
            let thread = self.trace.thread(process, t.tid.unwrap_or(0));
            if let Some(name) = nonempty(self.trace, t.thread_name.as_deref()) {
                self.trace.threads[thread.index()].name = Some(name);
            }
            // Writers repeat the descriptor; slices open on the thread stay open.
            let lane = match self.seq.legacy_thread {
                Some(previous) => previous.lane,
                None => self.new_lane(),
            };
            self.seq.legacy_thread = Some(Target {
                track: self.trace.thread_track(thread, TrackKind::Thread),
                lane,
                scope: InstantScope::Thread,
                counter: None,
            });
        }
        if let Some(te) = &packet.track_event {
            let ts = self.timestamp(packet, te);
            self.track_event(te, ts);
        }
    }

    fn clock_snapshot(&mut self, snapshot: &proto::ClockSnapshot) {
        let clocks = &snapshot.clocks;
        if is_global_snapshot(clocks) {
            self.global_clocks = Some(
                clocks
                    .iter()
                    .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
                    .collect(),
            );
            return;
        }
        self.seq.define_clocks(clocks, self.primary_clock);
    }

    /// The packet's time in nanoseconds of the trace's primary clock.
    fn timestamp(&mut self, packet: &TracePacket, te: &TrackEvent) -> i64 {
        let Some(raw) = packet.timestamp else {
            return te
                .timestamp_absolute_us
                .map_or(0, |us| us.saturating_mul(1000));
        };
        let (clock, ns) = self.seq.time(raw, packet.timestamp_clock_id);
        let ns = match &self.global_clocks {
            Some(snapshot) if clock != self.primary_clock => {
                match (snapshot.get(&clock), snapshot.get(&self.primary_clock)) {
                    (Some(&at_clock), Some(&at_primary)) => ns
                        .saturating_sub(at_clock as i128)
                        .saturating_add(at_primary as i128),
                    _ => ns,
                }
            }
            _ => ns,
        };
        ns.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    // ---- events ----

    fn track_event(&mut self, te: &TrackEvent, ts: i64) {
        self.order += 1;
        let uuid = te.track_uuid.or(self.seq.default_track);
        let target = match (uuid, self.seq.legacy_thread) {
            (Some(uuid), _) => self.target(uuid),
            (None, Some(thread)) => thread,
            (None, None) => self.target(0),
        };
        let lane = &mut self.lanes[target.lane];
        lane.last_ts = lane.last_ts.max(ts);
        self.extra_counters(te, ts);
        match te.r#type.unwrap_or(0) {
            TYPE_SLICE_BEGIN => self.begin(te, ts, target),
            TYPE_SLICE_END => self.end(te, ts, target),
            TYPE_INSTANT => self.instant(te, ts, target),
            TYPE_COUNTER => {
                let value = te
                    .double_counter_value
                    .or(te.counter_value.map(|v| v as f64));
                match value {
                    Some(v) => self.counter(target, uuid.unwrap_or(0), ts, v),
                    None => self.trace.repairs.malformed_events += 1,
                }
            }
            // Legacy (JSON-style) events and types this reader does not know.
            _ => self.trace.repairs.malformed_events += 1,
        }
    }

    fn counter(&mut self, target: Target, uuid: u64, ts: i64, value: f64) {
        let (unit, incremental) = target.counter.unwrap_or((1.0, false));
        let mut value = value * unit;
        if incremental {
            let total = self.counter_totals.entry(uuid).or_insert(0.0);
            *total += value;
            value = *total;
        }
        self.trace.counters.push(target.track, ts, value);
    }

    fn extra_counters(&mut self, te: &TrackEvent, ts: i64) {
        if te.extra_counter_values.is_empty() && te.extra_double_counter_values.is_empty() {
            return;
        }
        // An event's own list of counter tracks replaces the sequence's default one.
        let pick = |own: &Vec<u64>, default: &Vec<u64>| -> Vec<u64> {
            if own.is_empty() {
                default.clone()
            } else {
                own.clone()
            }
        };
        let ints = pick(
            &te.extra_counter_track_uuids,
            &self.seq.extra_counter_tracks,
        );
        let doubles = pick(
            &te.extra_double_counter_track_uuids,
            &self.seq.extra_double_counter_tracks,
        );
        let values = te
            .extra_counter_values
            .iter()
            .map(|&v| v as f64)
            .zip(ints)
            .chain(te.extra_double_counter_values.iter().copied().zip(doubles));
        let values: Vec<(f64, u64)> = values.collect();
        let missing =
            te.extra_counter_values.len() + te.extra_double_counter_values.len() - values.len();
        self.trace.repairs.malformed_events += missing as u64;
        for (value, uuid) in values {
            let target = self.target(uuid);
            self.counter(target, uuid, ts, value);
        }
    }

    /// Reads an event's category (several are joined with commas, as Chrome does).
    fn category(&mut self, te: &TrackEvent) -> StrId {
        let seq = &self.seq;
        if te.categories.is_empty() && te.category_iids.len() == 1 {
            return seq.categories.get(te.category_iids[0]);
        }
        let mut parts: Vec<String> = te
            .category_iids
            .iter()
            .map(|&iid| self.trace.str(seq.categories.get(iid)).to_string())
            .collect();
        parts.extend(
            te.categories
                .iter()
                .map(|c| String::from_utf8_lossy(c).into_owned()),
        );
        intern_str(self.trace, &parts.join(","))
    }

    fn name(&mut self, te: &TrackEvent) -> StrId {
        match te.name_iid {
            Some(iid) => self.seq.names.get(iid),
            None => nonempty(self.trace, te.name.as_deref()).unwrap_or_default(),
        }
    }

    /// Converts the event's annotations into `self.annotations`, taking out our own
    /// markers: returns the kind and scope, and fills `self.labels` with flow labels.
    fn annotations(&mut self, te: &TrackEvent) -> (Option<SliceKind>, Option<InstantScope>) {
        self.annotations.clear();
        self.labels.clear();
        let mut kind = None;
        let mut scope = None;
        let seq = &self.seq;
        for a in &te.debug_annotations {
            let key = match (a.name_iid, &a.name) {
                (Some(iid), _) => seq.keys.get(iid),
                (None, Some(name)) => intern_bytes(self.trace, name),
                (None, None) => StrId::EMPTY,
            };
            let value = annotation_value(a, seq, self.trace);
            match value {
                ArgValue::Str(s) if key == self.keys.kind => {
                    let trace = &*self.trace;
                    kind = *self
                        .kinds
                        .entry(s)
                        .or_insert_with(|| kind_named(trace.str(s)));
                }
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
        (kind, scope)
    }

    fn begin(&mut self, te: &TrackEvent, ts: i64, target: Target) {
        let name = self.name(te);
        let category = self.category(te);
        let (kind, _) = self.annotations(te);
        let kind = kind.or_else(|| recorded_kind(self.trace.str(category), self.trace.str(name)));
        if kind.is_none() {
            self.trace.note_unknown_category(category);
        }
        // Duration and args are filled in at the end event.
        let row = self.trace.slices.push(SliceRow {
            track: target.track,
            ts,
            dur: 0,
            name,
            category,
            kind: kind.unwrap_or(SliceKind::Other),
            args: ArgsId::NONE,
        });
        let lane = &mut self.lanes[target.lane];
        let args_start = lane.args.len();
        lane.args.append(&mut self.annotations);
        self.open.begin(
            target.lane,
            Frame {
                row,
                ts,
                args_start,
            },
        );
        pending_flows(te, ts, self.order, Some(row), &self.labels, &mut self.flows);
    }

    fn end(&mut self, te: &TrackEvent, ts: i64, target: Target) {
        let Some(frame) = self.open.end(target.lane, &mut self.trace.repairs) else {
            return;
        };
        // Perfetto merges the args and flows of an end event into its slice's.
        self.annotations(te);
        self.lanes[target.lane].args.append(&mut self.annotations);
        let row = Some(frame.row);
        pending_flows(te, ts, self.order, row, &self.labels, &mut self.flows);
        self.close(frame, target.lane, ts);
    }

    /// Ends `frame`, the innermost open slice of `lane`, at `ts`.
    fn close(&mut self, frame: Frame, lane: usize, ts: i64) {
        let lane = &mut self.lanes[lane];
        let trace = &mut *self.trace;
        let mut w = trace.args.writer();
        for &(k, v) in &lane.args[frame.args_start..] {
            w.push(k, v);
        }
        let row = frame.row as usize;
        trace.slices.args[row] = w.finish();
        trace.slices.dur[row] = ts.saturating_sub(frame.ts);
        lane.args.truncate(frame.args_start);
    }

    fn instant(&mut self, te: &TrackEvent, ts: i64, target: Target) {
        let name = self.name(te);
        let category = self.category(te);
        let (kind, scope) = self.annotations(te);
        // Flows in the model join slices: an instant's have none to bind to.
        pending_flows(te, ts, self.order, None, &self.labels, &mut self.flows);
        let trace = &mut *self.trace;
        let mut w = trace.args.writer();
        for &(k, v) in &self.annotations {
            w.push(k, v);
        }
        let args = w.finish();
        let kind = kind.or_else(|| recorded_kind(trace.str(category), trace.str(name)));
        if kind.is_none() {
            trace.note_unknown_category(category);
        }
        trace.instants.push(InstantRow {
            track: target.track,
            ts,
            name,
            category,
            kind: kind.unwrap_or(SliceKind::Other),
            scope: scope.unwrap_or(target.scope),
            args,
        });
    }

    /// Closes what is still open at the end of the trace at the last time seen on its
    /// track (the tracker counts it), innermost first as the lane's args require.
    fn close_open_slices(&mut self) {
        for (lane, frames) in self.open.finish(&mut self.trace.repairs) {
            let end = self.lanes[lane].last_ts;
            for frame in frames.into_iter().rev() {
                self.close(frame, lane, end);
            }
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

fn decode_into(
    packet: &mut TracePacket,
    bytes: &[u8],
    path: &str,
    offset: u64,
    context: &str,
) -> Result<(), ImportError> {
    packet.clear();
    packet.merge(bytes).map_err(|e| {
        syntax(
            path,
            offset,
            format!("{context}not a valid TracePacket: {e}"),
        )
    })
}

/// Adds the flows named on an event of slice `slice` (none: an instant) to `out`, with
/// the labels of our annotations when there is one per outgoing id.
fn pending_flows(
    te: &TrackEvent,
    ts: i64,
    order: u64,
    slice: Option<u32>,
    labels: &[(StrId, StrId)],
    out: &mut FlowBinder<u64, FlowLabel>,
) {
    let outgoing = te.flow_ids.len() + te.flow_ids_old.len();
    let labelled = outgoing == labels.len();
    let ids = te.flow_ids.iter().chain(&te.flow_ids_old);
    for (i, &id) in ids.enumerate() {
        out.add(FlowEnd {
            id,
            ts,
            order,
            role: FlowRole::StartOrStep,
            label: if labelled {
                labels.get(i).copied()
            } else {
                None
            },
            slice,
        });
    }
    let ids = te
        .terminating_flow_ids
        .iter()
        .chain(&te.terminating_flow_ids_old);
    for &id in ids {
        out.add(FlowEnd {
            id,
            ts,
            order,
            role: FlowRole::End,
            label: None,
            slice,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfetto_iid_table_keeps_scattered_iids_when_it_grows() {
        let mut table = IidTable::default();
        table.insert(5_000, StrId(1));
        table.insert(1, StrId(2));
        for iid in 2..10_000 {
            if iid != 5_000 {
                table.insert(iid, StrId(3));
            }
        }
        assert_eq!(table.get(5_000), StrId(1));
        assert_eq!(table.get(1), StrId(2));
        assert_eq!(table.get(u64::MAX), StrId::EMPTY);
        table.insert(u64::MAX, StrId(4));
        assert_eq!(table.get(u64::MAX), StrId(4));
        assert!(table.dense.len() < 40_000);
    }
}
