//! The one reader of Perfetto TrackEvent packets, fed a whole file or a recording's
//! chunks as they come: it keeps what later packets need (sequences, clocks, tracks,
//! open slices), repairs damage one way, and hands typed events to a [`Sink`].

use std::borrow::Cow;
use std::io::Read;
use std::mem;

use hashbrown::HashMap;
use opscope_model::{RepairCounts, SliceKind, StrId};
use prost::Message;

use super::proto::{
    self, ClockSnapshot, InternedData, PerfSample, ProcessDescriptor, ThreadDescriptor,
    TracePacketDefaults, TrackDescriptor, CLOCK_BOOTTIME, SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE, TRACE_PACKET, TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
};
use super::{kind_named, recorded_kind, KIND_ANNOTATION};
use crate::common::SliceStack;
use crate::error::ImportError;

/// Compressed packets inflate to at most this much each (Perfetto writes chunks of
/// well under a megabyte); more is taken for a corrupt or hostile file.
const MAX_INFLATED: u64 = 1 << 28;
/// Compressed packets hold plain packets only (Perfetto never nests them).
const MAX_COMPRESSION_DEPTH: u32 = 1;
/// An inflate buffer larger than this is freed after use rather than kept.
const KEEP_INFLATED: usize = 1 << 24;

/// How much state a reader may keep. Past a bound, what does not fit is counted in
/// [`Reader::dropped`] and dropped: a hostile stream, read for as long as a process
/// runs, must stay bounded in memory; a file is read whole.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    /// Sequences kept at once; past it the least recently used half is forgotten.
    pub sequences: usize,
    /// Memory of all sequences' interning tables, in entries.
    pub interned: usize,
    /// Lanes (tracks known, described or only named by events, and legacy threads).
    pub lanes: usize,
    /// Open slices per lane, and in all.
    pub depth: usize,
    pub open: usize,
}

impl Limits {
    pub const NONE: Limits = Limits {
        sequences: usize::MAX,
        interned: usize::MAX,
        lanes: usize::MAX,
        depth: usize::MAX,
        open: usize::MAX,
    };
}

/// Where an event goes: its lane, whose open slices a stack matches, which is a track
/// (`uuid`) or, for an event with neither a track of its own nor a default one on a
/// sequence that had a legacy `ThreadDescriptor`, that thread (`uuid` is `None`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub lane: u32,
    pub uuid: Option<u64>,
}

/// A track event as a sink gets it.
pub(super) struct Event<'a> {
    pub place: Place,
    pub ts: i64,
    /// Name, category and kind of begins and instants; empty and `None` for ends.
    pub name: StrId,
    pub category: StrId,
    pub kind: Option<SliceKind>,
    /// The part of the `TrackEvent`'s encoding that holds its debug annotations, and
    /// the part that holds its flow ids (empty when it has none), for what only some
    /// sinks read: [`Self::annotations`] and [`Self::flows`].
    pub annotations: &'a [u8],
    pub flow_fields: &'a [u8],
    /// Its sequence, whose interning tables the annotations refer to.
    pub seq: &'a Sequence,
}

impl Event<'_> {
    /// The debug annotations, each decoded.
    pub fn annotations(
        &self,
    ) -> impl Iterator<Item = Result<proto::DebugAnnotation, prost::DecodeError>> + '_ {
        Fields::new(self.annotations)
            .flatten()
            .filter_map(|(number, v)| match (number, v) {
                (number::event::DEBUG_ANNOTATIONS, Value::Bytes(b)) => {
                    Some(proto::DebugAnnotation::decode(b))
                }
                _ => None,
            })
    }

    /// The flow ids the event continues or starts, then those it terminates, each in
    /// the order Perfetto lists them (the current fields, then the deprecated ones).
    pub fn flows(&self) -> (Vec<u64>, Vec<u64>) {
        use number::event as n;
        let [mut out, mut out_old, mut term, mut term_old] = <[Vec<u64>; 4]>::default();
        for (number, v) in Fields::new(self.flow_fields).flatten() {
            // EventFields::read checked these fields' encoding.
            let _ = match number {
                n::FLOW_IDS => v.each_fixed64(|x| out.push(x)),
                n::FLOW_IDS_OLD => v.each_varint(|x| out_old.push(x)),
                n::TERMINATING_FLOW_IDS => v.each_fixed64(|x| term.push(x)),
                n::TERMINATING_FLOW_IDS_OLD => v.each_varint(|x| term_old.push(x)),
                _ => Ok(()),
            };
        }
        out.append(&mut out_old);
        term.append(&mut term_old);
        (out, term)
    }
}

/// One frame of a sampled stack, its strings in the sink's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SampledFrame {
    pub function: StrId,
    pub file: StrId,
    pub line: u32,
}

/// A sampled stack of one thread (a `PerfSample` packet), as a sink gets it.
pub(super) struct StackSample<'a> {
    pub ts: i64,
    pub pid: u32,
    pub tid: u32,
    /// Outermost first; empty for a thread sampled outside any frame.
    pub frames: &'a [SampledFrame],
    /// `timebase_count`: for opscope's samplers, the nanoseconds the sample stands for.
    pub period: u64,
    pub state: u32,
}

/// What a sink's event handlers give when the event cannot be taken: the packet is
/// then an [`ImportError::Syntax`], as one that does not decode.
pub(super) type SinkError = String;

/// What a [`Reader`] hands what it reads to. Text is interned in the sink's own table,
/// so that events name strings by id.
pub(super) trait Sink {
    /// What the sink keeps of a slice while it is open (the reader matches ends).
    type Open;

    fn intern(&mut self, text: &[u8]) -> StrId;
    fn text(&self, id: StrId) -> &str;
    /// `opscope.kind` in the sink's table.
    fn kind_key(&self) -> StrId;

    /// A track descriptor, whatever the state of its sequence, as `raw` encodes it.
    fn describe(&mut self, _lane: u32, _track: &TrackDescriptor, _raw: &[u8]) {}
    /// The first snapshot of the trace's global clocks, as `raw` encodes it.
    fn first_snapshot(&mut self, _raw: &[u8]) {}
    /// Legacy per-sequence descriptor packets: a process, and the thread whose lane
    /// (`lane`) the sequence's events without a track go to.
    fn legacy_process(&mut self, _process: &ProcessDescriptor) {}
    fn legacy_thread(&mut self, _lane: u32, _thread: &ThreadDescriptor) {}
    /// Each track event read, before what it holds.
    fn track_event(&mut self, _place: Place) {}

    fn begin(&mut self, event: &Event<'_>) -> Result<Self::Open, SinkError>;
    /// The end of `open`, the innermost open slice of its lane; `depth` slices stay
    /// open around it there.
    fn end(&mut self, open: Self::Open, event: &Event<'_>, depth: u32) -> Result<(), SinkError>;
    /// A slice never ended, closed at [`Reader::finish`] at the last time of its lane.
    fn unended(&mut self, _open: Self::Open, _place: Place, _ts: i64) {}
    fn instant(&mut self, event: &Event<'_>) -> Result<(), SinkError>;
    /// A counter's value, its track's unit applied and increments summed.
    fn counter(&mut self, place: Place, ts: i64, value: f64);
    /// A sampled stack.
    fn sample(&mut self, _sample: &StackSample<'_>) {}
}

/// A lane: a track or a legacy thread, with what the reader keeps of it.
struct Lane {
    /// The track's uuid; `None` for a legacy thread.
    uuid: Option<u64>,
    described: bool,
    /// Unit multiplier and whether values are increments, for counter tracks.
    counter: Option<(f64, bool)>,
    total: f64,
    /// Begins past the depth bound, innermost: the next ends close them, unreported.
    lost: u32,
    /// The last time of any event on the lane, where what stays open is closed.
    last_ts: i64,
}

/// How a walk over packets ended.
pub(super) enum Walked {
    Complete,
    /// The bytes end inside the field at `offset`, after `packets` packets.
    Truncated {
        packets: u64,
        offset: u64,
    },
}

/// Reads packets into a sink. `O` is what the sink keeps of an open slice.
pub(super) struct Reader<O> {
    limits: Limits,
    /// Reads only what is global to the trace (descriptors, clocks): a first pass.
    globals_only: bool,
    primary_clock: u32,
    /// Set for a second pass over the same input: the first pass found the clock.
    primary_fixed: bool,
    /// The latest snapshot of the trace-global clocks, by clock id; the first one.
    globals: Option<HashMap<u32, u64>>,
    first_globals: Option<HashMap<u32, u64>>,
    /// The sequence of the last packet; the others with the packet count when they were
    /// last left.
    seq: Sequence,
    seq_id: u32,
    sequences: HashMap<u32, (Sequence, u64)>,
    /// Memory of all sequences' interning tables, in entries.
    interned: usize,
    lanes: Vec<Lane>,
    lane_of: HashMap<u64, u32>,
    open: SliceStack<u32, O>,
    open_count: usize,
    repairs: RepairCounts,
    dropped: u64,
    packets: u64,
    /// Reused across packets and events.
    inflated: Vec<u8>,
    /// A first pass's inflated compressed packets, by their offset in the input, for
    /// the second pass to read again without inflating them twice (inflating was a
    /// tenth of importing a recording).
    kept: HashMap<u64, Vec<u8>>,
    text: String,
    /// Reused for each sampled stack.
    frames: Vec<SampledFrame>,
    /// Recorded kernels' names demangled (CUPTI gives their symbols).
    kernel_names: crate::kernel_names::Demangler,
}

impl<O> Reader<O> {
    pub fn new(limits: Limits) -> Reader<O> {
        Reader {
            limits,
            globals_only: false,
            // Perfetto's default trace clock, unless a snapshot names another.
            primary_clock: CLOCK_BOOTTIME,
            primary_fixed: false,
            globals: None,
            first_globals: None,
            seq: Sequence::default(),
            seq_id: 0,
            sequences: HashMap::new(),
            interned: 0,
            lanes: Vec::new(),
            lane_of: HashMap::new(),
            open: SliceStack::new(),
            open_count: 0,
            repairs: RepairCounts::default(),
            dropped: 0,
            packets: 0,
            inflated: Vec::new(),
            kept: HashMap::new(),
            kernel_names: Default::default(),
            text: String::new(),
            frames: Vec::new(),
        }
    }

    /// A reader for a first pass that only learns the trace's globals: track
    /// descriptors (given to the sink) and clocks. [`Self::rewind`] then reads the same
    /// input's events knowing them, as a reader of a whole file may.
    pub fn globals_only(limits: Limits) -> Reader<O> {
        Reader {
            globals_only: true,
            ..Reader::new(limits)
        }
    }

    /// A reader for the second pass over the input this one read, into a sink that
    /// keeps `P` of open slices: what is global (the primary clock, the tracks' counter
    /// units, the first clock snapshot) stays, as it would after the whole input.
    pub fn rewind<P>(self) -> Reader<P> {
        Reader {
            primary_clock: self.primary_clock,
            primary_fixed: true,
            globals: self.first_globals.clone(),
            first_globals: self.first_globals,
            lanes: self
                .lanes
                .into_iter()
                .map(|l| Lane {
                    total: 0.0,
                    lost: 0,
                    last_ts: i64::MIN,
                    ..l
                })
                .collect(),
            lane_of: self.lane_of,
            kept: self.kept,
            ..Reader::new(self.limits)
        }
    }

    pub fn primary_clock(&self) -> u32 {
        self.primary_clock
    }

    /// The first snapshot of the trace-global clocks, by clock id.
    pub fn first_globals(&self) -> Option<&HashMap<u32, u64>> {
        self.first_globals.as_ref()
    }

    pub fn repairs(&self) -> &RepairCounts {
        &self.repairs
    }

    /// What went past the reader's limits.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Slices begun and not yet ended.
    pub fn open_slices(&self) -> usize {
        self.open_count
    }

    /// The lane of track `uuid`, when it has one.
    pub fn lane(&self, uuid: u64) -> Option<u32> {
        self.lane_of.get(&uuid).copied()
    }

    /// Reads the `Trace.packet` fields of `bytes` (other fields are skipped), which
    /// start at `base` in the input; compressed packets are inflated (to 256 MiB each)
    /// and read.
    ///
    /// Damage (bad framing, a packet that does not decode or that the sink refuses,
    /// compressed packets that do not inflate) is an [`ImportError::Syntax`] naming
    /// `path` and the offset of the packet, which changes nothing unless the sink
    /// refused it; what came before was read. Bytes that end inside a packet are
    /// [`Walked::Truncated`] at its offset, for the caller to judge.
    pub fn read<S: Sink<Open = O>>(
        &mut self,
        bytes: &[u8],
        base: u64,
        path: &str,
        sink: &mut S,
    ) -> Result<Walked, ImportError> {
        walk(bytes, base, path, &mut |offset, packet| {
            self.packet(packet, offset, path, 0, sink)
        })
    }

    /// At the end of the input: closes what is still open at the last time of its
    /// lane, innermost first, and counts it.
    pub fn finish<S: Sink<Open = O>>(&mut self, sink: &mut S) {
        for (lane, frames) in self.open.finish(&mut self.repairs) {
            let place = self.place(lane);
            let ts = self.lanes[lane as usize].last_ts;
            for open in frames.into_iter().rev() {
                sink.unended(open, place, ts);
            }
        }
        self.open_count = 0;
    }

    fn place(&self, lane: u32) -> Place {
        Place {
            lane,
            uuid: self.lanes[lane as usize].uuid,
        }
    }

    fn packet<S: Sink<Open = O>>(
        &mut self,
        body: &[u8],
        offset: u64,
        path: &str,
        depth: u32,
        sink: &mut S,
    ) -> Result<(), ImportError> {
        self.packets += 1;
        let bad = |e: &dyn std::fmt::Display| {
            syntax(path, offset, format!("not a valid TracePacket: {e}"))
        };
        let p = Packet::read(body).map_err(|e| bad(&e))?;
        if p.compressed.is_some() && depth >= MAX_COMPRESSION_DEPTH {
            return Err(syntax(
                path,
                offset,
                "compressed packets inside compressed packets are not supported".into(),
            ));
        }
        // All is decoded before anything is applied, so a bad packet changes nothing.
        let rare = match p.rare {
            true => Some(Rare::read(body).map_err(|e| bad(&e))?),
            false => None,
        };
        if rare.as_ref().is_some_and(|r| r.zstd) {
            return Err(syntax(
                path,
                offset,
                "zstd-compressed packets are not supported".into(),
            ));
        }
        let event_bytes = match (p.events, self.globals_only) {
            (0, _) | (_, true) => None,
            (1, false) => p.event.map(Cow::Borrowed),
            _ => field_bytes(body, number::packet::TRACK_EVENT),
        };
        let event = match &event_bytes {
            Some(b) => Some(EventFields::read(b).map_err(|e| bad(&e))?),
            None => None,
        };

        if let Some(rare) = &rare {
            self.trace_globals(rare, sink);
        }
        if !self.globals_only {
            self.select_sequence(p.sequence);
            if self.seq.start_packet(p.flags, p.cleared, p.dropped) {
                if let Some(rare) = &rare {
                    self.sequence_state(rare, sink);
                }
                if let Some(event) = &event {
                    let ts = self.timestamp(p.timestamp, p.clock, event.absolute_us);
                    self.event(ts, event, sink).map_err(|e| bad(&e))?;
                }
                if let Some(sample) = rare.as_ref().and_then(|r| r.sample.as_deref()) {
                    let ts = self.timestamp(p.timestamp, p.clock, None);
                    self.sample(ts, sample, sink);
                }
            } else if event.is_some() {
                self.repairs.malformed_events += 1;
            }
        }
        match p.compressed {
            Some(compressed) => self.compressed(compressed, offset, path, depth, sink),
            None => Ok(()),
        }
    }

    /// Reads what is global to the trace, whatever the state of the packet's sequence.
    fn trace_globals<S: Sink<Open = O>>(&mut self, rare: &Rare<'_>, sink: &mut S) {
        if let Some((d, raw)) = &rare.descriptor {
            self.describe(d, raw, sink);
        }
        if let Some((s, raw)) = &rare.snapshot {
            if let (Some(primary), false) = (s.primary_trace_clock, self.primary_fixed) {
                self.primary_clock = primary as u32;
            }
            if self.first_globals.is_none() && is_global_snapshot(&s.clocks) {
                self.first_globals = Some(clock_values(&s.clocks));
                sink.first_snapshot(raw);
            }
        }
    }

    fn describe<S: Sink<Open = O>>(&mut self, d: &TrackDescriptor, raw: &[u8], sink: &mut S) {
        let Some(lane) = self.track_lane(d.uuid.unwrap_or(0)) else {
            return;
        };
        let l = &mut self.lanes[lane as usize];
        if !l.described {
            l.described = true;
            // A track's first descriptor says what its counter is; a process's track
            // has none.
            let process_track = d.process.is_some() && d.thread.is_none();
            l.counter = d.counter.as_ref().filter(|_| !process_track).map(|c| {
                let unit = c.unit_multiplier.filter(|&m| m != 0).unwrap_or(1);
                (unit as f64, c.is_incremental.unwrap_or(false))
            });
        }
        sink.describe(lane, d, raw);
    }

    /// Reads what changes the state of the packet's sequence, which can be read.
    fn sequence_state<S: Sink<Open = O>>(&mut self, rare: &Rare<'_>, sink: &mut S) {
        if let Some(d) = &rare.defaults {
            self.seq.set_defaults(d);
        }
        if let Some(data) = &rare.interned {
            self.intern(data, sink);
        }
        if let Some((s, _)) = &rare.snapshot {
            if is_global_snapshot(&s.clocks) {
                self.globals = Some(clock_values(&s.clocks));
            } else {
                self.seq.define_clocks(&s.clocks, self.primary_clock);
            }
        }
        if let Some(p) = &rare.process {
            sink.legacy_process(p);
        }
        if let Some(t) = &rare.thread {
            // Writers repeat the descriptor; slices open on the thread stay open.
            let lane = match self.seq.legacy_lane {
                Some(lane) => Some(lane),
                None => self.new_lane(None),
            };
            if let Some(lane) = lane {
                self.seq.legacy_lane = Some(lane);
                sink.legacy_thread(lane, t);
            }
        }
    }

    fn compressed<S: Sink<Open = O>>(
        &mut self,
        compressed: &[u8],
        offset: u64,
        path: &str,
        depth: u32,
        sink: &mut S,
    ) -> Result<(), ImportError> {
        let kept = self.kept.remove(&offset);
        let reused = kept.is_some();
        let mut inflated = kept.unwrap_or_else(|| mem::take(&mut self.inflated));
        let inflating = if reused {
            Ok(())
        } else {
            inflate(compressed, &mut inflated, path, offset)
        };
        let read = inflating.and_then(|()| {
            // Offsets inside are reported as the compressed packet's own.
            let walked = walk(&inflated, offset, path, &mut |_, inner| {
                self.packet(inner, offset, path, depth + 1, sink)
            });
            match walked {
                Ok(Walked::Complete) => Ok(()),
                // A cut before any packet: the data is not packets at all.
                Ok(Walked::Truncated { packets: 0, .. }) => Err(syntax(
                    path,
                    offset,
                    "the data ends inside the first packet (truncated or not a Perfetto trace)"
                        .into(),
                )),
                // As a file cut while written: what came before is kept.
                Ok(Walked::Truncated { .. }) => {
                    if !self.globals_only {
                        self.repairs.malformed_events += 1;
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
            .map_err(|e| inside_compressed(e, offset))
        });
        if self.globals_only && read.is_ok() {
            self.kept.insert(offset, inflated);
        } else if !reused && inflated.capacity() <= KEEP_INFLATED {
            self.inflated = inflated;
        }
        read
    }

    /// Makes `id` the current sequence.
    fn select_sequence(&mut self, id: u32) {
        if id == self.seq_id {
            return;
        }
        let next = match self.sequences.remove(&id) {
            Some((seq, _)) => seq,
            None => {
                if self.sequences.len().saturating_add(1) >= self.limits.sequences {
                    forget_stale(&mut self.sequences, &mut self.interned);
                }
                Sequence::default()
            }
        };
        let previous = mem::replace(&mut self.seq, next);
        self.sequences.insert(self.seq_id, (previous, self.packets));
        self.seq_id = id;
    }

    fn intern<S: Sink<Open = O>>(&mut self, data: &InternedData, sink: &mut S) {
        let limit = self.limits.interned;
        let Reader {
            seq,
            sequences,
            interned,
            dropped,
            ..
        } = self;
        for (table, entries) in seq.tables(data) {
            for e in entries {
                let before = table.footprint();
                if !room_for_one_more(*interned, before, limit) {
                    forget_stale(sequences, interned);
                    if !room_for_one_more(*interned, before, limit) {
                        *dropped += 1;
                        continue;
                    }
                }
                let s = sink.intern(e.name.as_deref().unwrap_or_default());
                table.insert(e.iid.unwrap_or(0), s);
                *interned = (*interned + table.footprint()).saturating_sub(before);
            }
        }
        // Frames and callstacks keep iids, looked up when a sample names them.
        let entries = data.frames.len()
            + data
                .callstacks
                .iter()
                .map(|c| c.frame_ids.len())
                .sum::<usize>();
        if !room_for_one_more(*interned, entries, limit) {
            forget_stale(sequences, interned);
            if !room_for_one_more(*interned, entries, limit) {
                *dropped += (data.frames.len() + data.callstacks.len()) as u64;
                return;
            }
        }
        for f in &data.frames {
            let frame = RawFrame {
                function: f.function_name_id.unwrap_or(0),
                path: f.source_path_iid.unwrap_or(0),
                line: f.line_number.unwrap_or(0),
            };
            seq.frames.insert(f.iid.unwrap_or(0), frame);
        }
        for c in &data.callstacks {
            seq.callstacks
                .insert(c.iid.unwrap_or(0), c.frame_ids.clone());
        }
        *interned = interned.saturating_add(entries);
    }

    /// A `PerfSample`: its callstack's frames looked up in the sequence's tables. A
    /// callstack or frame never interned is a frame-less sample, counted as malformed.
    fn sample<S: Sink<Open = O>>(&mut self, ts: i64, sample: &PerfSample, sink: &mut S) {
        if sample.kernel_records_lost.is_some() || sample.sample_skipped_reason.is_some() {
            return;
        }
        self.frames.clear();
        let seq = &self.seq;
        let mut complete = true;
        if let Some(iid) = sample.callstack_iid.filter(|&i| i != 0) {
            match seq.callstacks.get(&iid) {
                Some(ids) => {
                    for id in ids {
                        match seq.frames.get(id) {
                            Some(f) => self.frames.push(SampledFrame {
                                function: seq.functions.get(f.function),
                                file: seq.paths.get(f.path),
                                line: f.line,
                            }),
                            None => complete = false,
                        }
                    }
                }
                None => complete = false,
            }
        }
        if !complete {
            self.repairs.malformed_events += 1;
        }
        sink.sample(&StackSample {
            ts,
            pid: sample.pid.unwrap_or(0),
            tid: sample.tid.unwrap_or(0),
            frames: &self.frames,
            period: sample.timebase_count.unwrap_or(0),
            state: sample.opscope_thread_state.unwrap_or(0),
        });
    }

    /// The packet's time in nanoseconds of the trace's primary clock: a sequence
    /// clock's value is moved onto the global clock of its snapshot, and another global
    /// clock's onto the primary one with the latest snapshot of both.
    fn timestamp(&mut self, raw: Option<u64>, clock: Option<u32>, absolute_us: Option<i64>) -> i64 {
        let Some(raw) = raw else {
            return absolute_us.map_or(0, |us| us.saturating_mul(1000));
        };
        let (clock, ns) = self.seq.time(raw, clock);
        let ns = match &self.globals {
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

    /// The lane of track `uuid`, added if new and there is room.
    fn track_lane(&mut self, uuid: u64) -> Option<u32> {
        if let Some(&lane) = self.lane_of.get(&uuid) {
            return Some(lane);
        }
        let lane = self.new_lane(Some(uuid))?;
        self.lane_of.insert(uuid, lane);
        Some(lane)
    }

    fn new_lane(&mut self, uuid: Option<u64>) -> Option<u32> {
        if self.lanes.len() >= self.limits.lanes {
            self.dropped += 1;
            return None;
        }
        self.lanes.push(Lane {
            uuid,
            described: false,
            counter: None,
            total: 0.0,
            lost: 0,
            last_ts: i64::MIN,
        });
        Some(self.lanes.len() as u32 - 1)
    }

    // ---- events ----

    fn event<S: Sink<Open = O>>(
        &mut self,
        ts: i64,
        ev: &EventFields<'_>,
        sink: &mut S,
    ) -> Result<(), SinkError> {
        let uuid = ev.track.or(self.seq.default_track);
        let lane = match (uuid, self.seq.legacy_lane) {
            (Some(uuid), _) => self.track_lane(uuid),
            (None, Some(lane)) => Some(lane),
            // Perfetto's implicit trace-global track.
            (None, None) => self.track_lane(0),
        };
        let Some(lane) = lane else { return Ok(()) };
        let place = self.place(lane);
        let l = &mut self.lanes[lane as usize];
        l.last_ts = l.last_ts.max(ts);
        sink.track_event(place);
        if ev.extra_counters {
            self.extra_counters(ev.body, ts, sink);
        }
        match ev.kind {
            TYPE_SLICE_BEGIN => self.begin(ev, place, ts, sink),
            TYPE_SLICE_END => self.end(ev, place, ts, sink),
            TYPE_INSTANT => {
                let event = self.view(ev, place, ts, sink);
                sink.instant(&event)
            }
            TYPE_COUNTER => {
                match ev.double_counter.or(ev.counter.map(|v| v as f64)) {
                    Some(value) => self.counter(place, ts, value, sink),
                    None => self.repairs.malformed_events += 1,
                }
                Ok(())
            }
            // Legacy (JSON-style) events and types this reader does not know.
            _ => {
                self.repairs.malformed_events += 1;
                Ok(())
            }
        }
    }

    /// A begin's or an instant's event: its name, category and kind read.
    fn view<'a, S: Sink<Open = O>>(
        &'a mut self,
        ev: &EventFields<'a>,
        place: Place,
        ts: i64,
        sink: &mut S,
    ) -> Event<'a> {
        let name = match (ev.name_iid, ev.name) {
            (Some(iid), _) => self.seq.names.get(iid),
            (None, Some(name)) if !name.is_empty() => sink.intern(name),
            _ => StrId::EMPTY,
        };
        let category = self.category(ev, sink);
        let annotated = annotated_kind(ev.annotations, &self.seq, &*sink);
        let kind = annotated.or_else(|| recorded_kind(sink.text(category), sink.text(name)));
        // Kernels the recorder wrote carry CUPTI's symbols; a model exported by opscope
        // (its kind annotated) keeps its names as they were.
        let recorded_kernel = annotated.is_none() && kind == Some(SliceKind::Kernel);
        let name = if !recorded_kernel {
            name
        } else if let Some(done) = self.kernel_names.get(name) {
            done
        } else {
            let text = sink.text(name).to_string();
            self.kernel_names
                .learn(name, &text, |d| sink.intern(d.as_bytes()))
        };
        Event {
            name,
            category,
            kind,
            ..Self::bare(&self.seq, ev, place, ts)
        }
    }

    /// An event with neither name nor category read (an end's).
    fn bare<'a>(seq: &'a Sequence, ev: &EventFields<'a>, place: Place, ts: i64) -> Event<'a> {
        Event {
            place,
            ts,
            name: StrId::EMPTY,
            category: StrId::EMPTY,
            kind: None,
            annotations: ev.annotations,
            flow_fields: ev.flows,
            seq,
        }
    }

    fn begin<S: Sink<Open = O>>(
        &mut self,
        ev: &EventFields<'_>,
        place: Place,
        ts: i64,
        sink: &mut S,
    ) -> Result<(), SinkError> {
        let (depth, open) = (self.limits.depth, self.limits.open);
        if self.open.depth(place.lane) >= depth || self.open_count >= open {
            self.lanes[place.lane as usize].lost += 1;
            self.dropped += 1;
            return Ok(());
        }
        let event = self.view(ev, place, ts, sink);
        let open = sink.begin(&event)?;
        self.open.begin(place.lane, open);
        self.open_count += 1;
        Ok(())
    }

    fn end<S: Sink<Open = O>>(
        &mut self,
        ev: &EventFields<'_>,
        place: Place,
        ts: i64,
        sink: &mut S,
    ) -> Result<(), SinkError> {
        let lane = &mut self.lanes[place.lane as usize];
        if lane.lost > 0 {
            lane.lost -= 1;
            return Ok(());
        }
        let Some(open) = self.open.end(place.lane, &mut self.repairs) else {
            return Ok(());
        };
        self.open_count -= 1;
        let depth = self.open.depth(place.lane) as u32;
        sink.end(open, &Self::bare(&self.seq, ev, place, ts), depth)
    }

    fn counter<S: Sink<Open = O>>(&mut self, place: Place, ts: i64, value: f64, sink: &mut S) {
        let lane = &mut self.lanes[place.lane as usize];
        let (unit, incremental) = lane.counter.unwrap_or((1.0, false));
        let mut value = value * unit;
        if incremental {
            lane.total += value;
            value = lane.total;
        }
        sink.counter(place, ts, value);
    }

    /// The values an event gives counter tracks besides its own, on the tracks it names
    /// or else its sequence's defaults; values without a track are counted.
    fn extra_counters<S: Sink<Open = O>>(&mut self, body: &[u8], ts: i64, sink: &mut S) {
        use number::event as n;
        let [mut ints, mut int_tracks, mut doubles, mut double_tracks] = <[Vec<u64>; 4]>::default();
        for (number, v) in Fields::new(body).flatten() {
            // EventFields::read checked these fields' encoding.
            let _ = match number {
                n::EXTRA_COUNTER_VALUES => v.each_varint(|x| ints.push(x)),
                n::EXTRA_COUNTER_TRACK_UUIDS => v.each_varint(|x| int_tracks.push(x)),
                n::EXTRA_DOUBLE_COUNTER_VALUES => v.each_fixed64(|x| doubles.push(x)),
                n::EXTRA_DOUBLE_COUNTER_TRACK_UUIDS => v.each_varint(|x| double_tracks.push(x)),
                _ => Ok(()),
            };
        }
        // An event's own list of counter tracks replaces the sequence's default one.
        let seq = &self.seq;
        let int_tracks = match int_tracks.is_empty() {
            true => &seq.extra_counter_tracks,
            false => &int_tracks,
        };
        let double_tracks = match double_tracks.is_empty() {
            true => &seq.extra_double_counter_tracks,
            false => &double_tracks,
        };
        let values: Vec<(f64, u64)> = ints
            .iter()
            .map(|&v| v as i64 as f64)
            .zip(int_tracks.iter().copied())
            .chain(
                doubles
                    .iter()
                    .map(|&v| f64::from_bits(v))
                    .zip(double_tracks.iter().copied()),
            )
            .collect();
        self.repairs.malformed_events += (ints.len() + doubles.len() - values.len()) as u64;
        for (value, uuid) in values {
            if let Some(lane) = self.track_lane(uuid) {
                let place = self.place(lane);
                self.counter(place, ts, value, sink);
            }
        }
    }

    /// The event's category; several are joined with commas, as Chrome does.
    fn category<S: Sink<Open = O>>(&mut self, ev: &EventFields<'_>, sink: &mut S) -> StrId {
        match (ev.category_iids, ev.categories) {
            (0, 0) => StrId::EMPTY,
            (1, 0) => self.seq.categories.get(ev.first_category_iid),
            (0, 1) => sink.intern(ev.first_category),
            _ => {
                use number::event as n;
                let mut text = mem::take(&mut self.text);
                text.clear();
                let table = &self.seq.categories;
                let mut parts = 0usize;
                for (number, v) in Fields::new(ev.body).flatten() {
                    if number == n::CATEGORY_IIDS {
                        let _ = v.each_varint(|iid| {
                            if parts > 0 {
                                text.push(',');
                            }
                            parts += 1;
                            text.push_str(sink.text(table.get(iid)));
                        });
                    }
                }
                for (number, v) in Fields::new(ev.body).flatten() {
                    if let (n::CATEGORIES, Value::Bytes(b)) = (number, v) {
                        if parts > 0 {
                            text.push(',');
                        }
                        parts += 1;
                        text.push_str(&String::from_utf8_lossy(b));
                    }
                }
                let id = sink.intern(text.as_bytes());
                // Kept for the next event unless a hostile one made it huge.
                if text.capacity() <= 1 << 16 {
                    self.text = text;
                }
                id
            }
        }
    }
}

/// The kind named by the `opscope.kind` annotations among an event's `annotations`
/// fields: the last with a text value decides, even one naming no kind (an annotation
/// whose value is not text is an arg like any other).
fn annotated_kind<S: Sink + ?Sized>(
    annotations: &[u8],
    seq: &Sequence,
    sink: &S,
) -> Option<SliceKind> {
    use number::annotation as a;
    let mut kind = None;
    for (number, v) in Fields::new(annotations).flatten() {
        let (number::event::DEBUG_ANNOTATIONS, Value::Bytes(annotation)) = (number, v) else {
            continue;
        };
        let mut key_iid = None;
        let mut key = None;
        let (mut scalar, mut pointer) = (false, false);
        let (mut string, mut string_iid, mut json) = (None, None, None);
        for (number, v) in Fields::new(annotation).flatten() {
            match (number, v) {
                (a::NAME_IID, Value::Varint(iid)) => key_iid = Some(iid),
                (a::NAME, Value::Bytes(b)) => key = Some(b),
                (a::BOOL_VALUE | a::UINT_VALUE | a::INT_VALUE | a::DOUBLE_VALUE, _) => {
                    scalar = true
                }
                (a::STRING_VALUE, Value::Bytes(b)) => string = Some(b),
                (a::STRING_VALUE_IID, Value::Varint(iid)) => string_iid = Some(iid),
                (a::POINTER_VALUE, _) => pointer = true,
                (a::LEGACY_JSON_VALUE, Value::Bytes(b)) => json = Some(b),
                _ => {}
            }
        }
        let is_kind = match (key_iid, key) {
            (Some(iid), _) => seq.keys.get(iid) == sink.kind_key(),
            (None, Some(key)) => key == KIND_ANNOTATION.as_bytes(),
            (None, None) => false,
        };
        if !is_kind || scalar {
            continue;
        }
        // Which value is the annotation's, in the order the importer's args take them.
        kind = if let Some(s) = string {
            std::str::from_utf8(s).ok().and_then(kind_named)
        } else if let Some(iid) = string_iid {
            kind_named(sink.text(seq.values.get(iid)))
        } else if pointer {
            None
        } else if let Some(json) = json {
            // Legacy JSON that is not JSON is kept as text.
            let text = String::from_utf8_lossy(json);
            if text.trim() == "null" || serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok()
            {
                continue;
            }
            kind_named(&text)
        } else {
            continue;
        };
    }
    kind
}

fn clock_values(clocks: &[proto::Clock]) -> HashMap<u32, u64> {
    clocks
        .iter()
        .map(|c| (c.clock_id.unwrap_or(0), c.timestamp.unwrap_or(0)))
        .collect()
}

fn footprint(seq: &Sequence) -> usize {
    seq.names.footprint()
        + seq.categories.footprint()
        + seq.keys.footprint()
        + seq.values.footprint()
        + seq.functions.footprint()
        + seq.paths.footprint()
        + seq.frames.len()
        + seq.callstacks.values().map(Vec::len).sum::<usize>()
}

/// Whether an interning table holding `footprint` entries of memory may take one more
/// while all tables stay within `limit`: one insert grows a table by at most its size
/// and a constant.
fn room_for_one_more(interned: usize, footprint: usize, limit: usize) -> bool {
    interned
        .saturating_add(footprint.saturating_mul(2))
        .saturating_add(4096)
        <= limit
}

/// Forgets the least recently used half of the sequences other than the current one:
/// the recorder gives every thread a new sequence and restarts them all each chunk, so
/// the old ones are mostly dead threads', and a live one loses at most one chunk.
fn forget_stale(sequences: &mut HashMap<u32, (Sequence, u64)>, interned: &mut usize) {
    let mut used: Vec<u64> = sequences.values().map(|&(_, used)| used).collect();
    if used.is_empty() {
        return;
    }
    let middle = used.len() / 2;
    let cut = *used.select_nth_unstable(middle).1;
    sequences.retain(|_, (seq, used)| {
        let keep = *used > cut;
        if !keep {
            *interned = interned.saturating_sub(footprint(seq));
        }
        keep
    });
}

// ---- framing ----

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

/// Inflates the `compressed_packets` of the packet at `offset` into `out` (cleared
/// first), up to [`MAX_INFLATED`] bytes.
fn inflate(
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

fn inside_compressed(e: ImportError, offset: u64) -> ImportError {
    match e {
        ImportError::Syntax { path, message, .. } => ImportError::Syntax {
            path,
            offset,
            message: format!("inside the compressed packets of this packet: {message}"),
        },
        other => other,
    }
}

// ---- sequences ----

/// Clock ids 64..=127 are scoped to one packet sequence.
fn is_sequence_clock(id: u32) -> bool {
    (64..=127).contains(&id)
}

/// Whether a snapshot is of trace-global clocks only (not one defining a sequence's).
fn is_global_snapshot(clocks: &[proto::Clock]) -> bool {
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
    fn insert(&mut self, iid: u64, s: StrId) {
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
    pub fn get(&self, iid: u64) -> StrId {
        match usize::try_from(iid).ok().and_then(|i| self.dense.get(i)) {
            Some(&s) => s,
            None => self.sparse.get(&iid).copied().unwrap_or_default(),
        }
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
    }

    /// Entries of memory held (cleared ones included), for the bound on them.
    fn footprint(&self) -> usize {
        self.dense.capacity() + self.sparse.capacity()
    }
}

/// A frame as interned: the iids of its function and file, and its line.
struct RawFrame {
    function: u64,
    path: u64,
    line: u32,
}

/// Incremental state of one packet sequence.
#[derive(Default)]
pub(super) struct Sequence {
    /// Whether incremental state was cleared since the sequence started or lost data.
    valid: bool,
    names: IidTable,
    categories: IidTable,
    pub keys: IidTable,
    pub values: IidTable,
    functions: IidTable,
    paths: IidTable,
    frames: HashMap<u64, RawFrame>,
    callstacks: HashMap<u64, Vec<u64>>,
    default_track: Option<u64>,
    default_clock: Option<u32>,
    extra_counter_tracks: Vec<u64>,
    extra_double_counter_tracks: Vec<u64>,
    /// Looked up for every event: hashbrown's hasher is the faster one.
    clocks: HashMap<u32, SequenceClock>,
    /// The lane of a legacy `ThreadDescriptor`'s thread: events without a track go there.
    legacy_lane: Option<u32>,
}

impl Sequence {
    /// Applies a packet's sequence flags (`cleared`: its deprecated
    /// `incremental_state_cleared`; `dropped`: its `previous_packet_dropped`); whether
    /// the packet can be read, which it cannot when it needs incremental state the
    /// sequence lost or never had.
    fn start_packet(&mut self, flags: u32, cleared: bool, dropped: bool) -> bool {
        if flags & SEQ_INCREMENTAL_STATE_CLEARED != 0 || cleared {
            self.clear_incremental_state();
        } else if dropped {
            // Interned data may have been lost with the dropped packets.
            self.valid = false;
        }
        flags & SEQ_NEEDS_INCREMENTAL_STATE == 0 || self.valid
    }

    fn set_defaults(&mut self, defaults: &TracePacketDefaults) {
        self.default_clock = defaults.timestamp_clock_id;
        if let Some(te) = &defaults.track_event_defaults {
            self.default_track = te.track_uuid;
            self.extra_counter_tracks = te.extra_counter_track_uuids.clone();
            self.extra_double_counter_tracks = te.extra_double_counter_track_uuids.clone();
        }
    }

    /// Each interning table of the sequence with the entries `data` adds to it.
    fn tables<'a>(
        &'a mut self,
        data: &'a InternedData,
    ) -> [(&'a mut IidTable, &'a [proto::Interned]); 6] {
        [
            (&mut self.names, &data.event_names),
            (&mut self.categories, &data.event_categories),
            (&mut self.keys, &data.debug_annotation_names),
            (&mut self.values, &data.debug_annotation_string_values),
            (&mut self.functions, &data.function_names),
            (&mut self.paths, &data.source_paths),
        ]
    }

    /// Defines the sequence's own clocks of a snapshot that has some, each tied to a
    /// global clock of the same snapshot (`primary`, the trace's clock, when it is
    /// there).
    fn define_clocks(&mut self, clocks: &[proto::Clock], primary: u32) {
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
    fn time(&mut self, raw: u64, clock_id: Option<u32>) -> (u32, i128) {
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
        self.functions.clear();
        self.paths.clear();
        self.frames.clear();
        self.callstacks.clear();
        self.default_track = None;
        self.default_clock = None;
        self.extra_counter_tracks.clear();
        self.extra_double_counter_tracks.clear();
        self.valid = true;
    }
}

// ---- the wire ----

/// Field numbers of the messages read here by hand rather than through prost, which
/// would allocate for every event (the tests check them against the prost types).
pub(super) mod number {
    pub mod packet {
        pub const TIMESTAMP: u32 = 8;
        pub const TIMESTAMP_CLOCK_ID: u32 = 58;
        pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
        pub const SEQUENCE_FLAGS: u32 = 13;
        pub const INCREMENTAL_STATE_CLEARED: u32 = 41;
        pub const PREVIOUS_PACKET_DROPPED: u32 = 42;
        pub const FIRST_PACKET_ON_SEQUENCE: u32 = 87;
        pub const INTERNED_DATA: u32 = 12;
        pub const TRACE_PACKET_DEFAULTS: u32 = 59;
        pub const TRACK_EVENT: u32 = 11;
        pub const TRACK_DESCRIPTOR: u32 = 60;
        pub const CLOCK_SNAPSHOT: u32 = 6;
        pub const THREAD_DESCRIPTOR: u32 = 44;
        pub const PROCESS_DESCRIPTOR: u32 = 43;
        pub const COMPRESSED_PACKETS: u32 = 50;
        pub const ZSTD_COMPRESSED_PACKETS: u32 = 133;
        pub const PERF_SAMPLE: u32 = 66;
    }

    pub mod event {
        pub const CATEGORY_IIDS: u32 = 3;
        pub const CATEGORIES: u32 = 22;
        pub const NAME_IID: u32 = 10;
        pub const NAME: u32 = 23;
        pub const TYPE: u32 = 9;
        pub const TRACK_UUID: u32 = 11;
        pub const COUNTER_VALUE: u32 = 30;
        pub const DOUBLE_COUNTER_VALUE: u32 = 44;
        pub const EXTRA_COUNTER_TRACK_UUIDS: u32 = 31;
        pub const EXTRA_COUNTER_VALUES: u32 = 12;
        pub const EXTRA_DOUBLE_COUNTER_TRACK_UUIDS: u32 = 45;
        pub const EXTRA_DOUBLE_COUNTER_VALUES: u32 = 46;
        pub const FLOW_IDS_OLD: u32 = 36;
        pub const FLOW_IDS: u32 = 47;
        pub const TERMINATING_FLOW_IDS_OLD: u32 = 42;
        pub const TERMINATING_FLOW_IDS: u32 = 48;
        pub const DEBUG_ANNOTATIONS: u32 = 4;
        pub const TIMESTAMP_ABSOLUTE_US: u32 = 16;
    }

    pub mod annotation {
        pub const NAME_IID: u32 = 1;
        pub const NAME: u32 = 10;
        pub const BOOL_VALUE: u32 = 2;
        pub const UINT_VALUE: u32 = 3;
        pub const INT_VALUE: u32 = 4;
        pub const DOUBLE_VALUE: u32 = 5;
        pub const STRING_VALUE: u32 = 6;
        pub const POINTER_VALUE: u32 = 7;
        pub const LEGACY_JSON_VALUE: u32 = 9;
        pub const STRING_VALUE_IID: u32 = 17;
    }
}

/// Why a message read by hand does not decode.
type Bad = &'static str;

const WRONG_WIRE_TYPE: Bad = "a field with the wrong wire type";

/// A field's value as encoded.
#[derive(Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32,
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    fn varint(self) -> Result<u64, Bad> {
        match self {
            Value::Varint(v) => Ok(v),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    fn fixed64(self) -> Result<u64, Bad> {
        match self {
            Value::Fixed64(v) => Ok(v),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    fn bytes(self) -> Result<&'a [u8], Bad> {
        match self {
            Value::Bytes(b) => Ok(b),
            _ => Err(WRONG_WIRE_TYPE),
        }
    }

    /// Each value of a repeated varint field, packed or not.
    fn each_varint(self, mut f: impl FnMut(u64)) -> Result<(), Bad> {
        match self {
            Value::Varint(v) => f(v),
            Value::Bytes(b) => {
                let mut packed = Fields::new(b);
                while packed.pos < b.len() {
                    f(packed.varint()?);
                }
            }
            _ => return Err(WRONG_WIRE_TYPE),
        }
        Ok(())
    }

    /// Each value of a repeated 64-bit field, packed or not.
    fn each_fixed64(self, mut f: impl FnMut(u64)) -> Result<(), Bad> {
        match self {
            Value::Fixed64(v) => f(v),
            Value::Bytes(b) if b.len() % 8 == 0 => {
                for v in b.chunks_exact(8) {
                    f(u64::from_le_bytes(eight(v)));
                }
            }
            _ => return Err(WRONG_WIRE_TYPE),
        }
        Ok(())
    }
}

fn eight(b: &[u8]) -> [u8; 8] {
    let mut a = [0; 8];
    a.copy_from_slice(b);
    a
}

/// The fields of one protobuf message, in order.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, pos: 0 }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, Bad> {
        // Most keys and values are one byte.
        if let Some(&b) = self.bytes.get(self.pos).filter(|&&b| b < 0x80) {
            self.pos += 1;
            return Ok(b.into());
        }
        read_varint(self.bytes, &mut self.pos).map_err(|e| match e {
            Varint::Cut => "a varint cut off by the end of its message",
            Varint::Overlong => "a varint longer than 10 bytes",
        })
    }

    #[inline]
    fn take(&mut self, len: u64) -> Result<&'a [u8], Bad> {
        let rest = &self.bytes[self.pos..];
        let len = usize::try_from(len)
            .ok()
            .filter(|&len| len <= rest.len())
            .ok_or("a field longer than its message")?;
        self.pos += len;
        Ok(&rest[..len])
    }

    #[inline]
    fn field(&mut self) -> Result<(u32, Value<'a>), Bad> {
        let key = self.varint()?;
        let number = u32::try_from(key)
            .ok()
            .map(|k| k >> 3)
            .filter(|&n| n != 0)
            .ok_or("an invalid field key")?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(eight(self.take(8)?))),
            2 => {
                let len = self.varint()?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed32
            }
            // Perfetto writes no groups.
            _ => return Err("a group or an invalid wire type"),
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Bad>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.pos = self.bytes.len();
        }
        Some(field)
    }
}

/// The encoding of field `number` of `message`: its occurrences joined, which merges
/// them as protobuf readers do.
fn field_bytes(message: &[u8], number: u32) -> Option<Cow<'_, [u8]>> {
    let mut found: Option<Cow<'_, [u8]>> = None;
    for (n, v) in Fields::new(message).flatten() {
        if let (true, Value::Bytes(b)) = (n == number, v) {
            found = Some(match found {
                None => Cow::Borrowed(b),
                Some(before) => Cow::Owned([&before[..], b].concat()),
            });
        }
    }
    found
}

/// A message and its encoding.
type Encoded<'a, M> = (M, Cow<'a, [u8]>);

/// The parts of a packet that events rarely have, decoded with prost, each with its
/// encoding when a sink may keep it.
struct Rare<'a> {
    descriptor: Option<Encoded<'a, TrackDescriptor>>,
    snapshot: Option<Encoded<'a, ClockSnapshot>>,
    defaults: Option<TracePacketDefaults>,
    interned: Option<InternedData>,
    process: Option<ProcessDescriptor>,
    thread: Option<ThreadDescriptor>,
    sample: Option<Box<PerfSample>>,
    zstd: bool,
}

impl<'a> Rare<'a> {
    fn read(packet: &'a [u8]) -> Result<Rare<'a>, prost::DecodeError> {
        use number::packet as n;
        fn decoded<M: Message + Default>(
            packet: &[u8],
            number: u32,
        ) -> Result<Option<Encoded<'_, M>>, prost::DecodeError> {
            let Some(bytes) = field_bytes(packet, number) else {
                return Ok(None);
            };
            Ok(Some((M::decode(&bytes[..])?, bytes)))
        }
        Ok(Rare {
            descriptor: decoded(packet, n::TRACK_DESCRIPTOR)?,
            snapshot: decoded(packet, n::CLOCK_SNAPSHOT)?,
            defaults: decoded(packet, n::TRACE_PACKET_DEFAULTS)?.map(|(m, _)| m),
            interned: decoded(packet, n::INTERNED_DATA)?.map(|(m, _)| m),
            process: decoded(packet, n::PROCESS_DESCRIPTOR)?.map(|(m, _)| m),
            thread: decoded(packet, n::THREAD_DESCRIPTOR)?.map(|(m, _)| m),
            sample: decoded(packet, n::PERF_SAMPLE)?.map(|(m, _)| Box::new(m)),
            zstd: field_bytes(packet, n::ZSTD_COMPRESSED_PACKETS).is_some(),
        })
    }
}

/// The `TracePacket` fields the reader reads, located without copying.
#[derive(Default)]
struct Packet<'a> {
    timestamp: Option<u64>,
    clock: Option<u32>,
    sequence: u32,
    flags: u32,
    cleared: bool,
    dropped: bool,
    /// The last track event, and how many there are.
    event: Option<&'a [u8]>,
    events: u32,
    compressed: Option<&'a [u8]>,
    /// Whether it has any of the fields [`Rare`] reads.
    rare: bool,
}

impl<'a> Packet<'a> {
    fn read(bytes: &'a [u8]) -> Result<Packet<'a>, Bad> {
        use number::packet as n;
        let mut p = Packet::default();
        for field in Fields::new(bytes) {
            let (number, v) = field?;
            // Narrower integers are truncated and a repeated scalar's last value wins,
            // as prost reads them.
            match number {
                n::TIMESTAMP => p.timestamp = Some(v.varint()?),
                n::TIMESTAMP_CLOCK_ID => p.clock = Some(v.varint()? as u32),
                n::TRUSTED_PACKET_SEQUENCE_ID => p.sequence = v.varint()? as u32,
                n::SEQUENCE_FLAGS => p.flags = v.varint()? as u32,
                n::INCREMENTAL_STATE_CLEARED => p.cleared = v.varint()? != 0,
                n::PREVIOUS_PACKET_DROPPED => p.dropped = v.varint()? as u32 != 0,
                n::FIRST_PACKET_ON_SEQUENCE => {
                    v.varint()?;
                }
                n::TRACK_EVENT => {
                    p.event = Some(v.bytes()?);
                    p.events += 1;
                }
                n::COMPRESSED_PACKETS => p.compressed = Some(v.bytes()?),
                n::INTERNED_DATA
                | n::TRACE_PACKET_DEFAULTS
                | n::TRACK_DESCRIPTOR
                | n::CLOCK_SNAPSHOT
                | n::THREAD_DESCRIPTOR
                | n::PROCESS_DESCRIPTOR
                | n::PERF_SAMPLE
                | n::ZSTD_COMPRESSED_PACKETS => {
                    v.bytes()?;
                    p.rare = true;
                }
                _ => {}
            }
        }
        Ok(p)
    }
}

/// The `TrackEvent` fields read for every event; the rarer ones are read again from
/// `body` when these say they are there.
#[derive(Default)]
struct EventFields<'a> {
    body: &'a [u8],
    kind: i32,
    track: Option<u64>,
    name_iid: Option<u64>,
    name: Option<&'a [u8]>,
    /// How many category iids and inline categories, and the first of each.
    category_iids: u32,
    first_category_iid: u64,
    categories: u32,
    first_category: &'a [u8],
    counter: Option<i64>,
    double_counter: Option<f64>,
    absolute_us: Option<i64>,
    /// The span of the body from its first debug annotation to its last, and from its
    /// first flow id field to its last (writers put each kind together): later reads
    /// of them walk only that.
    annotations: &'a [u8],
    flows: &'a [u8],
    extra_counters: bool,
}

impl<'a> EventFields<'a> {
    fn read(body: &'a [u8]) -> Result<EventFields<'a>, Bad> {
        use number::event as n;
        let mut e = EventFields {
            body,
            ..EventFields::default()
        };
        let (mut annotations, mut flows) = (None, None);
        let mut fields = Fields::new(body);
        while fields.pos < body.len() {
            let start = fields.pos;
            let (number, v) = fields.field()?;
            let span = |seen: &mut Option<(usize, usize)>| {
                *seen = Some(seen.map_or((start, fields.pos), |(first, _)| (first, fields.pos)));
            };
            match number {
                n::TYPE => e.kind = v.varint()? as i32,
                n::TRACK_UUID => e.track = Some(v.varint()?),
                n::NAME_IID => e.name_iid = Some(v.varint()?),
                n::NAME => e.name = Some(v.bytes()?),
                n::CATEGORY_IIDS => v.each_varint(|iid| {
                    if e.category_iids == 0 {
                        e.first_category_iid = iid;
                    }
                    e.category_iids += 1;
                })?,
                n::CATEGORIES => {
                    let category = v.bytes()?;
                    if e.categories == 0 {
                        e.first_category = category;
                    }
                    e.categories += 1;
                }
                n::COUNTER_VALUE => e.counter = Some(v.varint()? as i64),
                n::DOUBLE_COUNTER_VALUE => e.double_counter = Some(f64::from_bits(v.fixed64()?)),
                n::TIMESTAMP_ABSOLUTE_US => e.absolute_us = Some(v.varint()? as i64),
                n::DEBUG_ANNOTATIONS => {
                    v.bytes()?;
                    span(&mut annotations);
                }
                n::EXTRA_COUNTER_VALUES
                | n::EXTRA_COUNTER_TRACK_UUIDS
                | n::EXTRA_DOUBLE_COUNTER_TRACK_UUIDS => {
                    v.each_varint(|_| ())?;
                    e.extra_counters = true;
                }
                n::EXTRA_DOUBLE_COUNTER_VALUES => {
                    v.each_fixed64(|_| ())?;
                    e.extra_counters = true;
                }
                n::FLOW_IDS_OLD | n::TERMINATING_FLOW_IDS_OLD => {
                    v.each_varint(|_| ())?;
                    span(&mut flows);
                }
                n::FLOW_IDS | n::TERMINATING_FLOW_IDS => {
                    v.each_fixed64(|_| ())?;
                    span(&mut flows);
                }
                _ => {}
            }
        }
        let part = |span: Option<(usize, usize)>| span.map_or(&[][..], |(a, b)| &body[a..b]);
        e.annotations = part(annotations);
        e.flows = part(flows);
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto::{DebugAnnotation, TracePacket, TracePacketGlobals, TrackEvent};
    use super::*;

    /// The field numbers the reader walks by hand are those of the prost types.
    #[test]
    fn perfetto_field_numbers_are_the_protos() {
        use number::{annotation as a, event as e, packet as p};
        /// The field number of the one field `set` sets in a fresh message.
        fn key_of<M: Message + Default>(set: impl FnOnce(&mut M)) -> u32 {
            let mut m = M::default();
            set(&mut m);
            let bytes = m.encode_to_vec();
            let mut pos = 0;
            (read_varint(&bytes, &mut pos).ok().expect("a key") >> 3) as u32
        }
        assert_eq!(
            key_of(|m: &mut TracePacket| m.timestamp = Some(1)),
            p::TIMESTAMP
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.timestamp_clock_id = Some(1)),
            p::TIMESTAMP_CLOCK_ID
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.trusted_packet_sequence_id = Some(1)),
            p::TRUSTED_PACKET_SEQUENCE_ID
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.sequence_flags = Some(1)),
            p::SEQUENCE_FLAGS
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.incremental_state_cleared = Some(true)),
            p::INCREMENTAL_STATE_CLEARED
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.previous_packet_dropped = Some(1)),
            p::PREVIOUS_PACKET_DROPPED
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.interned_data = Some(InternedData::default())),
            p::INTERNED_DATA
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.trace_packet_defaults = Some(Default::default())),
            p::TRACE_PACKET_DEFAULTS
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.track_event = Some(Default::default())),
            p::TRACK_EVENT
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.track_descriptor = Some(Default::default())),
            p::TRACK_DESCRIPTOR
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.clock_snapshot = Some(Default::default())),
            p::CLOCK_SNAPSHOT
        );
        assert_eq!(
            key_of(|m: &mut TracePacketGlobals| m.compressed_packets = Some(vec![])),
            p::COMPRESSED_PACKETS
        );
        assert_eq!(
            key_of(|m: &mut TracePacketGlobals| m.zstd_compressed_packets = Some(vec![])),
            p::ZSTD_COMPRESSED_PACKETS
        );

        assert_eq!(
            key_of(|m: &mut TrackEvent| m.category_iids = vec![1]),
            e::CATEGORY_IIDS
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.categories = vec![vec![]]),
            e::CATEGORIES
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.name_iid = Some(1)),
            e::NAME_IID
        );
        assert_eq!(key_of(|m: &mut TrackEvent| m.name = Some(vec![])), e::NAME);
        assert_eq!(key_of(|m: &mut TrackEvent| m.r#type = Some(1)), e::TYPE);
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.track_uuid = Some(1)),
            e::TRACK_UUID
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.counter_value = Some(1)),
            e::COUNTER_VALUE
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.double_counter_value = Some(1.0)),
            e::DOUBLE_COUNTER_VALUE
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.extra_counter_track_uuids = vec![1]),
            e::EXTRA_COUNTER_TRACK_UUIDS
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.extra_counter_values = vec![1]),
            e::EXTRA_COUNTER_VALUES
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.extra_double_counter_track_uuids = vec![1]),
            e::EXTRA_DOUBLE_COUNTER_TRACK_UUIDS
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.extra_double_counter_values = vec![1.0]),
            e::EXTRA_DOUBLE_COUNTER_VALUES
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.debug_annotations = vec![Default::default()]),
            e::DEBUG_ANNOTATIONS
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.timestamp_absolute_us = Some(1)),
            e::TIMESTAMP_ABSOLUTE_US
        );

        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.name_iid = Some(1)),
            a::NAME_IID
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.name = Some(vec![])),
            a::NAME
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.bool_value = Some(true)),
            a::BOOL_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.uint_value = Some(1)),
            a::UINT_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.int_value = Some(1)),
            a::INT_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.double_value = Some(1.0)),
            a::DOUBLE_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.string_value = Some(vec![])),
            a::STRING_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.pointer_value = Some(1)),
            a::POINTER_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.legacy_json_value = Some(vec![])),
            a::LEGACY_JSON_VALUE
        );
        assert_eq!(
            key_of(|m: &mut DebugAnnotation| m.string_value_iid = Some(1)),
            a::STRING_VALUE_IID
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.first_packet_on_sequence = Some(true)),
            p::FIRST_PACKET_ON_SEQUENCE
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.thread_descriptor = Some(Default::default())),
            p::THREAD_DESCRIPTOR
        );
        assert_eq!(
            key_of(|m: &mut TracePacket| m.process_descriptor = Some(Default::default())),
            p::PROCESS_DESCRIPTOR
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.flow_ids = vec![1]),
            e::FLOW_IDS
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.flow_ids_old = vec![1]),
            e::FLOW_IDS_OLD
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.terminating_flow_ids = vec![1]),
            e::TERMINATING_FLOW_IDS
        );
        assert_eq!(
            key_of(|m: &mut TrackEvent| m.terminating_flow_ids_old = vec![1]),
            e::TERMINATING_FLOW_IDS_OLD
        );
    }

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
