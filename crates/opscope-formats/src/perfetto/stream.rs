//! A streaming reader of Perfetto TrackEvent traces, for the per-host agent that gets a
//! recorded process's trace chunk by chunk while it runs: it reports each slice once its
//! end arrives, and each instant and counter sample, keeping only the state later
//! packets need (interned names, clocks, open slices, track descriptors).

use std::borrow::Cow;
use std::mem;

use hashbrown::HashMap;
use opscope_model::{SliceKind, StrId, StringTable};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use super::import::{
    inflate, inside_compressed, is_global_snapshot, read_varint, syntax, walk, Sequence, Varint,
    Walked, MAX_COMPRESSION_DEPTH,
};
use super::proto::{
    ClockSnapshot, InternedData, TracePacketDefaults, TrackDescriptor, CLOCK_BOOTTIME, PACKET_KEY,
    TYPE_COUNTER, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};
use super::{kind_named, recorded_kind, KIND_ANNOTATION};
use crate::error::ImportError;

// Bounds against a hostile or corrupt stream, which the agent reads for as long as the
// process runs: past them, what does not fit is counted (`ignored`) and dropped.
/// Distinct strings, and their bytes in all: new text past them reads as empty.
const MAX_STRINGS: usize = 1 << 20;
const MAX_STRING_BYTES: usize = 1 << 28;
/// Memory of all sequences' interning tables, in entries.
const MAX_INTERNED: usize = 1 << 22;
/// Sequences kept at once. Past it the least recently used half is forgotten: the
/// recorder gives every thread a new sequence and restarts them all each chunk, so the
/// old ones are mostly dead threads', and a live one loses at most one chunk.
const MAX_SEQUENCES: usize = 1 << 16;
/// Tracks known, described or only named by events.
const MAX_TRACKS: usize = 1 << 18;
/// Open slices per track, and in all.
const MAX_DEPTH: usize = 4096;
const MAX_OPEN: usize = 1 << 20;
/// Bytes of [`StreamDecoder::preamble`].
const MAX_PREAMBLE: usize = 1 << 26;
/// Bytes kept of a track's name or label, and labels kept per track.
const MAX_TEXT: usize = 256;
const MAX_LABELS: usize = 8;
/// An inflate buffer larger than this is freed after use rather than kept.
const KEEP_INFLATED: usize = 1 << 24;

/// What [`StreamDecoder::feed`] reports. Text borrows from the decoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamEvent<'a> {
    /// A slice whose end was seen: begin and end events on one track, matched with a
    /// stack per track; `depth` is the number of slices open around it there.
    Slice {
        track: u64,
        name: &'a str,
        category: &'a str,
        kind: Option<SliceKind>,
        start_ns: u64,
        end_ns: u64,
        depth: u32,
    },
    Instant {
        track: u64,
        name: &'a str,
        category: &'a str,
        ts_ns: u64,
    },
    /// A counter's value, with its track's unit applied and increments summed.
    Counter { track: u64, ts_ns: u64, value: f64 },
}

/// A track as its descriptors describe it (a later descriptor of the track renames it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamTrack {
    pub uuid: u64,
    pub parent: Option<u64>,
    pub pid: Option<i64>,
    pub tid: Option<i64>,
    /// The descriptor's name, else its thread's, else its process's.
    pub name: String,
    /// On a process's track, the process's name.
    pub process_name: Option<String>,
    pub labels: Vec<String>,
}

/// Reads a Perfetto trace fed in pieces that each hold whole packets; see
/// [`StreamDecoder::feed`].
pub struct StreamDecoder {
    strings: Strings,
    /// `opscope.kind` in `strings`.
    kind_key: StrId,
    /// The sequence of the last packet; the others with the packet count when they were
    /// last left.
    seq: Sequence,
    seq_id: u32,
    sequences: HashMap<u32, (Sequence, u64)>,
    /// Memory of all sequences' interning tables, in entries.
    interned: usize,
    primary_clock: u32,
    tracks: Vec<Track>,
    track_index: HashMap<u64, u32>,
    preamble: Vec<u8>,
    /// Length of the clock snapshot packet at the start of `preamble`, once seen.
    snapshot_len: Option<usize>,
    open: usize,
    unmatched_ends: u64,
    ignored: u64,
    packets: u64,
    /// Reused across chunks and events.
    inflated: Vec<u8>,
    text: String,
}

struct Track {
    info: StreamTrack,
    described: bool,
    /// Open slices, innermost last.
    stack: Vec<Frame>,
    /// Begins past the depth bound, innermost: the next ends close them, unreported.
    lost: u32,
    /// Unit multiplier and whether values are increments, for counter tracks.
    counter: Option<(f64, bool)>,
    total: f64,
    /// The payload of the track's last descriptor copied into the preamble, relative to
    /// the end of the snapshot packet, so that an identical repeat is not copied again.
    copy: Option<(usize, usize)>,
}

#[derive(Clone, Copy)]
struct Frame {
    name: StrId,
    category: StrId,
    kind: Option<SliceKind>,
    start: u64,
}

type Emit<'a> = dyn FnMut(StreamEvent<'_>) + 'a;

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        let mut strings = Strings::default();
        let kind_key = strings.intern(KIND_ANNOTATION);
        StreamDecoder {
            strings,
            kind_key,
            seq: Sequence::default(),
            seq_id: 0,
            sequences: HashMap::new(),
            interned: 0,
            // Perfetto's default trace clock, unless a snapshot names another.
            primary_clock: CLOCK_BOOTTIME,
            tracks: Vec::new(),
            track_index: HashMap::new(),
            preamble: Vec::new(),
            snapshot_len: None,
            open: 0,
            unmatched_ends: 0,
            ignored: 0,
            packets: 0,
            inflated: Vec::new(),
            text: String::new(),
        }
    }

    /// Feeds bytes that are a run of `Trace.packet` fields, as a Perfetto file or one
    /// appended chunk of it holds (other fields are skipped); compressed packets are
    /// inflated (to 256 MiB each, as [`super::import()`] bounds them) and read. Calls `on`
    /// for each slice that ends, each instant and each counter value.
    ///
    /// Damage (bad framing, a packet that does not decode, compressed packets that do not
    /// inflate) is an [`ImportError::Syntax`] naming `path` and the offset in `bytes` of
    /// the packet; what came before it was reported, the damaged packet changes nothing,
    /// and the decoder reads later feeds. Bytes that end inside a packet are damage too:
    /// a chunk holds whole packets.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        path: &str,
        on: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<(), ImportError> {
        let walked = walk(bytes, 0, path, &mut |offset, packet| {
            self.packet(packet, offset, path, 0, on)
        })?;
        match walked {
            Walked::Complete => Ok(()),
            Walked::Truncated { offset, .. } => Err(syntax(
                path,
                offset,
                "the data ends inside a packet (a chunk must hold whole packets)".into(),
            )),
        }
    }

    /// The described track `uuid`.
    pub fn track(&self, uuid: u64) -> Option<&StreamTrack> {
        let &i = self.track_index.get(&uuid)?;
        let track = &self.tracks[i as usize];
        track.described.then_some(&track.info)
    }

    /// Every described track, in the order they were first seen.
    pub fn tracks(&self) -> impl Iterator<Item = &StreamTrack> {
        self.tracks.iter().filter(|t| t.described).map(|t| &t.info)
    }

    /// Packets (framed as `Trace.packet` fields) holding the first snapshot of the
    /// trace's global clocks, then every track descriptor seen so far (a repeat of a
    /// track's last one left out): put before a later run of chunks that start their
    /// sequences afresh, they make a trace the importer reads as the whole file would be.
    pub fn preamble(&self) -> &[u8] {
        &self.preamble
    }

    /// Slices begun and not yet ended.
    pub fn open_slices(&self) -> usize {
        self.open
    }

    /// End events that found no open slice on their track.
    pub fn unmatched_ends(&self) -> u64 {
        self.unmatched_ends
    }

    /// What was dropped: events on a sequence whose incremental state was lost or never
    /// set (as after the decoder forgot it, past its bound on sequences), counters
    /// without a value, events of unknown types, and whatever went past the decoder's
    /// other bounds (text, interned entries, tracks, open slices, preamble).
    pub fn ignored(&self) -> u64 {
        self.ignored + self.strings.refused
    }

    fn packet(
        &mut self,
        body: &[u8],
        offset: u64,
        path: &str,
        depth: u32,
        on: &mut Emit<'_>,
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
        let event_bytes = match p.events {
            0 => None,
            1 => p.event.map(Cow::Borrowed),
            _ => field_bytes(body, number::packet::TRACK_EVENT),
        };
        let event = match &event_bytes {
            Some(b) => Some(Event::read(b).map_err(|e| bad(&e))?),
            None => None,
        };

        if let Some(rare) = &rare {
            self.trace_globals(rare);
        }
        self.select_sequence(p.sequence);
        if self.seq.start_packet(p.flags, p.cleared, p.dropped) {
            if let Some(rare) = &rare {
                self.sequence_state(rare);
            }
            if let Some(event) = &event {
                self.event(p.timestamp, p.clock, event, on);
            }
        } else if event.is_some() {
            self.ignored += 1;
        }
        match p.compressed {
            Some(compressed) => self.compressed(compressed, offset, path, depth, on),
            None => Ok(()),
        }
    }

    /// Reads what is global to the trace, whatever the state of the packet's sequence.
    fn trace_globals(&mut self, rare: &Rare<'_>) {
        if let Some((d, raw)) = &rare.descriptor {
            self.describe(d, raw);
        }
        if let Some((s, raw)) = &rare.snapshot {
            if let Some(primary) = s.primary_trace_clock {
                self.primary_clock = primary as u32;
            }
            if self.snapshot_len.is_none() && is_global_snapshot(&s.clocks) {
                self.keep_snapshot(raw);
            }
        }
    }

    /// Reads what changes the state of the packet's sequence, which can be read.
    fn sequence_state(&mut self, rare: &Rare<'_>) {
        if let Some(d) = &rare.defaults {
            self.seq.set_defaults(d);
        }
        if let Some(data) = &rare.interned {
            self.intern(data);
        }
        if let Some((s, _)) = &rare.snapshot {
            if !is_global_snapshot(&s.clocks) {
                self.seq.define_clocks(&s.clocks, self.primary_clock);
            }
        }
    }

    fn compressed(
        &mut self,
        compressed: &[u8],
        offset: u64,
        path: &str,
        depth: u32,
        on: &mut Emit<'_>,
    ) -> Result<(), ImportError> {
        let mut inflated = mem::take(&mut self.inflated);
        let read = inflate(compressed, &mut inflated, path, offset).and_then(|()| {
            // Offsets inside are reported as the compressed packet's own.
            let walked = walk(&inflated, offset, path, &mut |_, inner| {
                self.packet(inner, offset, path, depth + 1, on)
            });
            match walked {
                Ok(Walked::Complete) => Ok(()),
                Ok(Walked::Truncated { .. }) => {
                    Err(syntax(path, offset, "the data ends inside a packet".into()))
                }
                Err(e) => Err(e),
            }
            .map_err(|e| inside_compressed(e, offset))
        });
        if inflated.capacity() <= KEEP_INFLATED {
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
                if self.sequences.len() + 1 >= MAX_SEQUENCES {
                    forget_stale(&mut self.sequences, &mut self.interned);
                }
                Sequence::default()
            }
        };
        let previous = mem::replace(&mut self.seq, next);
        self.sequences.insert(self.seq_id, (previous, self.packets));
        self.seq_id = id;
    }

    fn intern(&mut self, data: &InternedData) {
        let StreamDecoder {
            seq,
            sequences,
            interned,
            strings,
            ignored,
            ..
        } = self;
        for (table, entries) in seq.tables(data) {
            for e in entries {
                let before = table.footprint();
                if !room_for_one_more(*interned, before) {
                    forget_stale(sequences, interned);
                    if !room_for_one_more(*interned, before) {
                        *ignored += 1;
                        continue;
                    }
                }
                let s = strings.intern_bytes(e.name.as_deref().unwrap_or_default());
                table.insert(e.iid.unwrap_or(0), s);
                *interned = (*interned + table.footprint()).saturating_sub(before);
            }
        }
    }

    fn event(
        &mut self,
        timestamp: Option<u64>,
        clock: Option<u32>,
        ev: &Event<'_>,
        on: &mut Emit<'_>,
    ) {
        let ts = match timestamp {
            Some(raw) => self.seq.time(raw, clock).1,
            None => ev
                .absolute_us
                .map_or(0, |us| us.saturating_mul(1000))
                .into(),
        };
        let ts = ts.clamp(0, u64::MAX as i128) as u64;
        // Legacy `ThreadDescriptor` packets are not read: events without a track of
        // their own or by default go on the global track, 0.
        let uuid = ev.track.or(self.seq.default_track).unwrap_or(0);
        if ev.extra_counters {
            self.extra_counters(ev.body, ts, on);
        }
        match ev.kind {
            TYPE_SLICE_BEGIN => self.begin(ev, uuid, ts),
            TYPE_SLICE_END => self.end(uuid, ts, on),
            TYPE_INSTANT => {
                let name = self.name(ev);
                let category = self.category(ev);
                on(StreamEvent::Instant {
                    track: uuid,
                    name: self.strings.get(name),
                    category: self.strings.get(category),
                    ts_ns: ts,
                });
            }
            TYPE_COUNTER => match ev.double_counter.or(ev.counter.map(|v| v as f64)) {
                Some(value) => self.counter(uuid, ts, value, on),
                None => self.ignored += 1,
            },
            // Legacy (JSON-style) events and types this reader does not know.
            _ => self.ignored += 1,
        }
    }

    fn begin(&mut self, ev: &Event<'_>, uuid: u64, ts: u64) {
        let Some(t) = self.slot(uuid) else { return };
        let name = self.name(ev);
        let category = self.category(ev);
        let kind = ev
            .annotated
            .then(|| self.annotated_kind(ev.body))
            .flatten()
            .or_else(|| recorded_kind(self.strings.get(category), self.strings.get(name)));
        let track = &mut self.tracks[t];
        if track.stack.len() >= MAX_DEPTH || self.open >= MAX_OPEN {
            track.lost += 1;
            self.ignored += 1;
            return;
        }
        track.stack.push(Frame {
            name,
            category,
            kind,
            start: ts,
        });
        self.open += 1;
    }

    fn end(&mut self, uuid: u64, ts: u64, on: &mut Emit<'_>) {
        let frame = match self.track_index.get(&uuid) {
            Some(&t) => {
                let track = &mut self.tracks[t as usize];
                if track.lost > 0 {
                    track.lost -= 1;
                    return;
                }
                track.stack.pop().map(|f| (f, track.stack.len()))
            }
            None => None,
        };
        let Some((frame, depth)) = frame else {
            self.unmatched_ends += 1;
            return;
        };
        self.open -= 1;
        on(StreamEvent::Slice {
            track: uuid,
            name: self.strings.get(frame.name),
            category: self.strings.get(frame.category),
            kind: frame.kind,
            start_ns: frame.start,
            end_ns: ts,
            depth: depth as u32,
        });
    }

    fn counter(&mut self, uuid: u64, ts: u64, value: f64, on: &mut Emit<'_>) {
        let Some(t) = self.slot(uuid) else { return };
        let track = &mut self.tracks[t];
        let (unit, incremental) = track.counter.unwrap_or((1.0, false));
        let mut value = value * unit;
        if incremental {
            track.total += value;
            value = track.total;
        }
        on(StreamEvent::Counter {
            track: uuid,
            ts_ns: ts,
            value,
        });
    }

    /// The values an event gives counter tracks besides its own, on the tracks it names
    /// or else its sequence's defaults; values without a track are counted.
    fn extra_counters(&mut self, body: &[u8], ts: u64, on: &mut Emit<'_>) {
        use number::event as n;
        let [mut ints, mut int_tracks, mut doubles, mut double_tracks] = <[Vec<u64>; 4]>::default();
        for (number, v) in Fields::new(body).flatten() {
            // Event::read checked these fields' encoding.
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
        self.ignored += (ints.len() + doubles.len() - values.len()) as u64;
        for (value, uuid) in values {
            self.counter(uuid, ts, value, on);
        }
    }

    fn name(&mut self, ev: &Event<'_>) -> StrId {
        match (ev.name_iid, ev.name) {
            (Some(iid), _) => self.seq.names.get(iid),
            (None, Some(name)) => self.strings.intern_bytes(name),
            (None, None) => StrId::EMPTY,
        }
    }

    /// The event's category; several are joined with commas, as the importer does.
    fn category(&mut self, ev: &Event<'_>) -> StrId {
        match (ev.category_iids, ev.categories) {
            (0, 0) => StrId::EMPTY,
            (1, 0) => self.seq.categories.get(ev.first_category_iid),
            (0, 1) => self.strings.intern_bytes(ev.first_category),
            _ => {
                use number::event as n;
                let mut text = mem::take(&mut self.text);
                text.clear();
                let (strings, table) = (&self.strings, &self.seq.categories);
                let mut parts = 0usize;
                for (number, v) in Fields::new(ev.body).flatten() {
                    if number == n::CATEGORY_IIDS {
                        let _ = v.each_varint(|iid| {
                            if parts > 0 {
                                text.push(',');
                            }
                            parts += 1;
                            text.push_str(strings.get(table.get(iid)));
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
                let id = self.strings.intern(&text);
                // Kept for the next event unless a hostile one made it huge.
                if text.capacity() <= 1 << 16 {
                    self.text = text;
                }
                id
            }
        }
    }

    /// The kind named by the event's `opscope.kind` annotations, read as the importer
    /// reads them: the last with a text value decides, even one naming no kind.
    fn annotated_kind(&self, body: &[u8]) -> Option<SliceKind> {
        use number::annotation as a;
        let mut kind = None;
        for (number, v) in Fields::new(body).flatten() {
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
                (Some(iid), _) => self.seq.keys.get(iid) == self.kind_key,
                (None, Some(key)) => key == KIND_ANNOTATION.as_bytes(),
                (None, None) => false,
            };
            if !is_kind || scalar {
                continue;
            }
            kind = if let Some(s) = string {
                std::str::from_utf8(s).ok().and_then(kind_named)
            } else if let Some(iid) = string_iid {
                kind_named(self.strings.get(self.seq.values.get(iid)))
            } else if pointer {
                None
            } else if let Some(json) = json {
                // The importer keeps legacy JSON that is not JSON as text.
                let text = String::from_utf8_lossy(json);
                if text.trim() == "null"
                    || serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok()
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

    /// The index of track `uuid` in `tracks`, added if new and there is room.
    fn slot(&mut self, uuid: u64) -> Option<usize> {
        if let Some(&i) = self.track_index.get(&uuid) {
            return Some(i as usize);
        }
        if self.tracks.len() >= MAX_TRACKS {
            self.ignored += 1;
            return None;
        }
        self.track_index.insert(uuid, self.tracks.len() as u32);
        self.tracks.push(Track {
            info: StreamTrack {
                uuid,
                ..StreamTrack::default()
            },
            described: false,
            stack: Vec::new(),
            lost: 0,
            counter: None,
            total: 0.0,
            copy: None,
        });
        Some(self.tracks.len() - 1)
    }

    /// Reads a track descriptor whose encoding is `raw`, and copies it to the preamble.
    fn describe(&mut self, d: &TrackDescriptor, raw: &[u8]) {
        let Some(t) = self.slot(d.uuid.unwrap_or(0)) else {
            return;
        };
        let track = &mut self.tracks[t];
        let described = StreamTrack::from_descriptor(d);
        if track.described {
            track.info.update(described);
        } else {
            track.info = described;
            track.described = true;
            // As the importer, which keeps a track's first descriptor but for names.
            track.counter = d.counter.as_ref().map(|c| {
                let unit = c.unit_multiplier.filter(|&m| m != 0).unwrap_or(1);
                (unit as f64, c.is_incremental.unwrap_or(false))
            });
        }
        let base = self.snapshot_len.unwrap_or(0);
        if let Some((start, end)) = track.copy {
            if self.preamble.get(base + start..base + end) == Some(raw) {
                return;
            }
        }
        if self.preamble.len() + raw.len() + 32 > MAX_PREAMBLE {
            self.ignored += 1;
            return;
        }
        let (start, end) = frame_packet(&mut self.preamble, number::packet::TRACK_DESCRIPTOR, raw);
        track.copy = Some((start - base, end - base));
    }

    /// Puts the trace's clock snapshot, whose encoding is `raw`, first in the preamble.
    fn keep_snapshot(&mut self, raw: &[u8]) {
        let mut packet = Vec::new();
        frame_packet(&mut packet, number::packet::CLOCK_SNAPSHOT, raw);
        if self.preamble.len() + packet.len() > MAX_PREAMBLE {
            self.ignored += 1;
            return;
        }
        self.snapshot_len = Some(packet.len());
        self.preamble.splice(0..0, packet);
    }
}

impl StreamTrack {
    fn from_descriptor(d: &TrackDescriptor) -> StreamTrack {
        let thread = d.thread.as_ref();
        let process = d.process.as_ref();
        let process_name = process.and_then(|p| text(p.process_name.as_deref()));
        StreamTrack {
            uuid: d.uuid.unwrap_or(0),
            parent: d.parent_uuid,
            pid: thread.and_then(|t| t.pid).or(process.and_then(|p| p.pid)),
            tid: thread.and_then(|t| t.tid),
            name: text(d.name.as_deref())
                .or_else(|| text(d.static_name.as_deref()))
                .or_else(|| thread.and_then(|t| text(t.thread_name.as_deref())))
                .or_else(|| process_name.clone())
                .unwrap_or_default(),
            process_name,
            labels: process
                .map(|p| {
                    p.process_labels
                        .iter()
                        .take(MAX_LABELS)
                        .map(|l| text(Some(l)).unwrap_or_default())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Takes what a later descriptor of the track says: writers describe a track again
    /// to rename it (a thread that set its name), as Perfetto reads them.
    fn update(&mut self, later: StreamTrack) {
        if !later.name.is_empty() {
            self.name = later.name;
        }
        if later.process_name.is_some() {
            self.process_name = later.process_name;
        }
        if !later.labels.is_empty() {
            self.labels = later.labels;
        }
        self.parent = self.parent.or(later.parent);
        self.pid = self.pid.or(later.pid);
        self.tid = self.tid.or(later.tid);
    }
}

/// Descriptor text, cut to [`MAX_TEXT`] bytes; none if empty.
fn text(b: Option<&[u8]>) -> Option<String> {
    let b = b.filter(|b| !b.is_empty())?;
    Some(String::from_utf8_lossy(&b[..b.len().min(MAX_TEXT)]).into_owned())
}

/// Appends a `Trace.packet` holding only field `number` of `TracePacket`, with
/// `payload`, to `out`; returns where the payload is.
fn frame_packet(out: &mut Vec<u8>, number: u32, payload: &[u8]) -> (usize, usize) {
    let len = payload.len() as u64;
    let body = key_len(number) + encoded_len_varint(len) + payload.len();
    out.push(PACKET_KEY);
    encode_varint(body as u64, out);
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(len, out);
    let start = out.len();
    out.extend_from_slice(payload);
    (start, out.len())
}

fn footprint(seq: &Sequence) -> usize {
    seq.names.footprint()
        + seq.categories.footprint()
        + seq.keys.footprint()
        + seq.values.footprint()
}

/// Whether an interning table holding `footprint` entries of memory may take one more
/// while all tables stay within [`MAX_INTERNED`]: one insert grows a table by at most
/// its size and a constant.
fn room_for_one_more(interned: usize, footprint: usize) -> bool {
    interned + 2 * footprint + 4096 <= MAX_INTERNED
}

/// Forgets the least recently used half of the sequences other than the current one.
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

/// The decoder's own text, which the events it reports borrow.
#[derive(Default)]
struct Strings {
    table: StringTable,
    bytes: usize,
    /// Strings not added for want of room.
    refused: u64,
}

impl Strings {
    fn get(&self, id: StrId) -> &str {
        self.table.get(id)
    }

    /// The id of `s`, added if new; the empty string's once the table is full.
    fn intern(&mut self, s: &str) -> StrId {
        if let Some(id) = self.table.find(s) {
            return id;
        }
        if self.table.len() >= MAX_STRINGS || self.bytes + s.len() > MAX_STRING_BYTES {
            self.refused += 1;
            return StrId::EMPTY;
        }
        self.bytes += s.len();
        self.table.intern(s)
    }

    fn intern_bytes(&mut self, b: &[u8]) -> StrId {
        match std::str::from_utf8(b) {
            Ok(s) => self.intern(s),
            Err(_) => self.intern(&String::from_utf8_lossy(b)),
        }
    }
}

/// Field numbers of the messages read here by hand rather than through prost, which
/// would allocate for every event (the tests check them against the prost types).
mod number {
    pub mod packet {
        pub const TIMESTAMP: u32 = 8;
        pub const TIMESTAMP_CLOCK_ID: u32 = 58;
        pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
        pub const SEQUENCE_FLAGS: u32 = 13;
        pub const INCREMENTAL_STATE_CLEARED: u32 = 41;
        pub const PREVIOUS_PACKET_DROPPED: u32 = 42;
        pub const INTERNED_DATA: u32 = 12;
        pub const TRACE_PACKET_DEFAULTS: u32 = 59;
        pub const TRACK_EVENT: u32 = 11;
        pub const TRACK_DESCRIPTOR: u32 = 60;
        pub const CLOCK_SNAPSHOT: u32 = 6;
        pub const COMPRESSED_PACKETS: u32 = 50;
        pub const ZSTD_COMPRESSED_PACKETS: u32 = 133;
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
/// encoding when it is to be copied to the preamble.
struct Rare<'a> {
    descriptor: Option<Encoded<'a, TrackDescriptor>>,
    snapshot: Option<Encoded<'a, ClockSnapshot>>,
    defaults: Option<TracePacketDefaults>,
    interned: Option<InternedData>,
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
            zstd: field_bytes(packet, n::ZSTD_COMPRESSED_PACKETS).is_some(),
        })
    }
}

/// The `TracePacket` fields the decoder reads, located without copying.
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
                n::TRACK_EVENT => {
                    p.event = Some(v.bytes()?);
                    p.events += 1;
                }
                n::COMPRESSED_PACKETS => p.compressed = Some(v.bytes()?),
                n::INTERNED_DATA
                | n::TRACE_PACKET_DEFAULTS
                | n::TRACK_DESCRIPTOR
                | n::CLOCK_SNAPSHOT
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
struct Event<'a> {
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
    annotated: bool,
    extra_counters: bool,
}

impl<'a> Event<'a> {
    fn read(body: &'a [u8]) -> Result<Event<'a>, Bad> {
        use number::event as n;
        let mut e = Event {
            body,
            ..Event::default()
        };
        for field in Fields::new(body) {
            let (number, v) = field?;
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
                    e.annotated = true;
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
                _ => {}
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use opscope_model::Trace;

    use super::super::proto::*;
    use super::super::tests::{
        event, export_bytes, frame, import_bytes, interned, sample_trace, sdk_style_trace,
        thread_descriptor,
    };
    use super::*;

    /// A reported event, owned.
    #[derive(Clone, Debug, PartialEq)]
    enum Seen {
        Slice {
            track: u64,
            name: String,
            category: String,
            kind: Option<SliceKind>,
            start: u64,
            end: u64,
            depth: u32,
        },
        Instant {
            track: u64,
            name: String,
            category: String,
            ts: u64,
        },
        Counter {
            track: u64,
            ts: u64,
            value: f64,
        },
    }

    fn seen(e: StreamEvent<'_>) -> Seen {
        match e {
            StreamEvent::Slice {
                track,
                name,
                category,
                kind,
                start_ns,
                end_ns,
                depth,
            } => Seen::Slice {
                track,
                name: name.into(),
                category: category.into(),
                kind,
                start: start_ns,
                end: end_ns,
                depth,
            },
            StreamEvent::Instant {
                track,
                name,
                category,
                ts_ns,
            } => Seen::Instant {
                track,
                name: name.into(),
                category: category.into(),
                ts: ts_ns,
            },
            StreamEvent::Counter {
                track,
                ts_ns,
                value,
            } => Seen::Counter {
                track,
                ts: ts_ns,
                value,
            },
        }
    }

    fn feed(d: &mut StreamDecoder, bytes: &[u8]) -> (Vec<Seen>, Result<(), ImportError>) {
        let mut events = Vec::new();
        let read = d.feed(bytes, "test", &mut |e| events.push(seen(e)));
        (events, read)
    }

    fn feed_ok(d: &mut StreamDecoder, bytes: &[u8]) -> Vec<Seen> {
        let (events, read) = feed(d, bytes);
        read.expect("feed");
        events
    }

    fn syntax_error(read: Result<(), ImportError>) -> (u64, String) {
        match read {
            Err(ImportError::Syntax {
                offset, message, ..
            }) => (offset, message),
            other => panic!("expected a syntax error, got {other:?}"),
        }
    }

    /// The offsets where the packets of `bytes` start.
    fn packet_starts(bytes: &[u8]) -> Vec<usize> {
        let mut starts = Vec::new();
        walk(bytes, 0, "test", &mut |offset, _| {
            starts.push(offset as usize);
            Ok(())
        })
        .expect("framing");
        starts
    }

    /// `(name, start, end, kind)` of every slice, sorted.
    fn imported_slices(t: &Trace) -> Vec<(String, u64, u64, SliceKind)> {
        let s = &t.slices;
        let mut v: Vec<_> = (0..s.len())
            .map(|i| {
                let (ts, end) = (s.ts[i] as u64, (s.ts[i] + s.dur[i]) as u64);
                (t.str(s.name[i]).to_string(), ts, end, s.kind(i))
            })
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
        v
    }

    fn streamed_slices(events: &[Seen]) -> Vec<(String, u64, u64, SliceKind)> {
        let mut v: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Seen::Slice {
                    name,
                    kind,
                    start,
                    end,
                    ..
                } => Some((name.clone(), *start, *end, kind.unwrap_or(SliceKind::Other))),
                _ => None,
            })
            .collect();
        v.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
        v
    }

    fn compressed(plain: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(plain).expect("compress");
        let outer = TracePacketGlobals {
            compressed_packets: Some(z.finish().expect("compress")),
            ..Default::default()
        };
        let mut bytes = vec![PACKET_KEY];
        outer.encode_length_delimited(&mut bytes).expect("encode");
        bytes
    }

    #[test]
    fn stream_reads_exported_traces_as_the_importer_does() {
        let bytes = export_bytes(&sample_trace());
        let imported = import_bytes(&bytes).expect("import");
        let mut d = StreamDecoder::new();
        let events = feed_ok(&mut d, &bytes);
        // Names, times and kinds (from `opscope.kind` annotations or the categories).
        let slices = streamed_slices(&events);
        assert_eq!(slices.len(), 10);
        assert_eq!(slices, imported_slices(&imported));
        let mut instants: Vec<(String, i64)> = events
            .iter()
            .filter_map(|e| match e {
                Seen::Instant { name, ts, .. } => Some((name.clone(), *ts as i64)),
                _ => None,
            })
            .collect();
        instants.sort();
        let i = &imported.instants;
        let mut expected: Vec<(String, i64)> = (0..i.len())
            .map(|k| (imported.str(i.name[k]).to_string(), i.ts[k]))
            .collect();
        expected.sort();
        assert_eq!(instants, expected);
        let counters: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                Seen::Counter { ts, value, .. } => Some(format!("{ts} {value:e}")),
                _ => None,
            })
            .collect();
        let c = &imported.counters;
        let expected: Vec<String> = (0..c.len())
            .map(|k| format!("{} {:e}", c.ts[k], c.value[k]))
            .collect();
        assert_eq!(counters, expected);
        assert_eq!(
            (d.open_slices(), d.unmatched_ends(), d.ignored()),
            (0, 0, 0)
        );
        let main = d.tracks().find(|t| t.name == "MainThread").expect("thread");
        assert_eq!((main.pid, main.tid), (Some(4242), Some(4243)));
        let process = d.track(main.parent.expect("parent")).expect("process");
        assert_eq!(process.process_name.as_deref(), Some("python3 train.py"));

        // The same packets compressed read alike.
        let mut d = StreamDecoder::new();
        assert_eq!(feed_ok(&mut d, &compressed(&bytes)), events);
    }

    #[test]
    fn stream_reads_sdk_style_traces_as_the_importer_does() {
        let bytes = sdk_style_trace();
        let imported = import_bytes(&bytes).expect("import");
        let mut d = StreamDecoder::new();
        let events = feed_ok(&mut d, &bytes);
        // The importer ends what is still open at the end of the trace; the stream
        // waits for its end.
        let mut expected = imported_slices(&imported);
        expected.retain(|s| s.1 != 1_010_000);
        assert_eq!(streamed_slices(&events), expected);
        assert_eq!(d.open_slices(), 1);
        assert_eq!(
            events[0],
            Seen::Slice {
                track: 11,
                name: "request".into(),
                category: "rpc".into(),
                kind: None,
                start: 1_001_000,
                end: 1_003_000,
                depth: 0,
            }
        );
        assert_eq!(
            events.last(),
            Some(&Seen::Counter {
                track: 12,
                ts: 1_011_000,
                value: 5.0
            })
        );
    }

    #[test]
    fn stream_gives_the_same_events_whatever_packet_boundaries_cut_its_feeds() {
        for bytes in [export_bytes(&sample_trace()), sdk_style_trace()] {
            let whole = feed_ok(&mut StreamDecoder::new(), &bytes);
            let starts = packet_starts(&bytes);
            for step in [1, 2, 3, 7] {
                let mut cuts: Vec<usize> = starts.iter().copied().step_by(step).collect();
                cuts.push(bytes.len());
                let mut d = StreamDecoder::new();
                let mut events = Vec::new();
                for piece in cuts.windows(2) {
                    events.extend(feed_ok(&mut d, &bytes[piece[0]..piece[1]]));
                }
                assert_eq!(events, whole, "every {step} packets");
            }
        }
    }

    // ---- a recording, as opscope's recorder writes it ----

    const SEQ: u32 = 2;
    const PROCESS: u64 = 100;
    const THREAD: u64 = 101;
    const COUNTER: u64 = 102;
    /// The recorder's incremental sequence clock.
    const SEQUENCE_CLOCK: u32 = 64;

    fn clock(id: u32, ts: u64) -> Clock {
        Clock {
            clock_id: Some(id),
            timestamp: Some(ts),
            ..Default::default()
        }
    }

    /// The clock snapshot and the track descriptors, on the recorder's global sequence.
    fn global_packets() -> Vec<TracePacket> {
        let snapshot = ClockSnapshot {
            clocks: vec![
                clock(CLOCK_MONOTONIC, 5_000_000),
                clock(CLOCK_REALTIME, 1_700_000_000_000_000_000),
                clock(CLOCK_BOOTTIME, 5_500_000),
            ],
            primary_trace_clock: Some(CLOCK_MONOTONIC as i32),
        };
        let mut thread = thread_descriptor(THREAD, 42, 43, "main");
        if let Some(d) = &mut thread.track_descriptor {
            d.parent_uuid = Some(PROCESS);
        }
        let counter = TrackDescriptor {
            uuid: Some(COUNTER),
            parent_uuid: Some(PROCESS),
            name: Some(b"queued".to_vec()),
            counter: Some(CounterDescriptor {
                unit_multiplier: Some(2),
                is_incremental: Some(true),
            }),
            ..Default::default()
        };
        let process = TrackDescriptor {
            uuid: Some(PROCESS),
            process: Some(ProcessDescriptor {
                pid: Some(42),
                process_name: Some(b"python".to_vec()),
                process_labels: vec![b"rank=0".to_vec()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let global = |p: TracePacket| TracePacket {
            trusted_packet_sequence_id: Some(1),
            ..p
        };
        vec![
            global(TracePacket {
                clock_snapshot: Some(Box::new(snapshot)),
                ..Default::default()
            }),
            global(TracePacket {
                track_descriptor: Some(Box::new(process)),
                ..Default::default()
            }),
            global(thread),
            global(TracePacket {
                track_descriptor: Some(Box::new(counter)),
                ..Default::default()
            }),
        ]
    }

    /// A chunk's first packet on the thread's sequence, as the recorder's
    /// `start_sequence` writes it: it clears the sequence's state, makes the thread's
    /// track the default and sets the incremental clock to `ts`.
    fn start(ts: u64) -> TracePacket {
        TracePacket {
            trusted_packet_sequence_id: Some(SEQ),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            trace_packet_defaults: Some(Box::new(TracePacketDefaults {
                timestamp_clock_id: Some(SEQUENCE_CLOCK),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(THREAD),
                    ..Default::default()
                }),
            })),
            clock_snapshot: Some(Box::new(ClockSnapshot {
                clocks: vec![
                    Clock {
                        is_incremental: Some(true),
                        ..clock(SEQUENCE_CLOCK, ts)
                    },
                    clock(CLOCK_MONOTONIC, ts),
                ],
                primary_trace_clock: None,
            })),
            ..Default::default()
        }
    }

    /// An event `delta` ns after the previous one on the sequence, defining the names
    /// and categories `names` and `categories` (iid, text).
    fn recorded(
        delta: u64,
        te: TrackEvent,
        names: &[(u64, &str)],
        categories: &[(u64, &str)],
    ) -> TracePacket {
        let mut p = event(delta, SEQ, te);
        if !names.is_empty() || !categories.is_empty() {
            p.interned_data = Some(InternedData {
                event_names: names.iter().map(|&(i, n)| interned(i, n)).collect(),
                event_categories: categories.iter().map(|&(i, n)| interned(i, n)).collect(),
                ..Default::default()
            });
        }
        p
    }

    fn begin(name_iid: u64, category_iid: u64) -> TrackEvent {
        TrackEvent {
            r#type: Some(TYPE_SLICE_BEGIN),
            name_iid: Some(name_iid),
            category_iids: vec![category_iid],
            ..Default::default()
        }
    }

    fn end() -> TrackEvent {
        TrackEvent {
            r#type: Some(TYPE_SLICE_END),
            ..Default::default()
        }
    }

    fn count(value: f64) -> TrackEvent {
        TrackEvent {
            r#type: Some(TYPE_COUNTER),
            track_uuid: Some(COUNTER),
            double_counter_value: Some(value),
            ..Default::default()
        }
    }

    /// The first chunk: the global packets, an event on the thread's sequence before it
    /// starts (to be ignored), then a step with two ops nested in it (the step stays
    /// open), an instant and two counter increments.
    fn first_chunk() -> Vec<u8> {
        let mut packets = global_packets();
        packets.push(event(5, SEQ, begin(1, 1)));
        packets.push(start(5_000_000));
        packets.extend([
            recorded(
                100,
                begin(1, 2),
                &[(1, "ProfilerStep#1")],
                &[(2, "itt/PyTorch")],
            ),
            recorded(50, begin(3, 2), &[(3, "aten::mm")], &[]),
            recorded(25, begin(4, 2), &[(4, "aten::addmm")], &[]),
            recorded(25, end(), &[], &[]),
            recorded(10, end(), &[], &[]),
            recorded(
                5,
                TrackEvent {
                    r#type: Some(TYPE_INSTANT),
                    name: Some(b"mark".to_vec()),
                    category_iids: vec![2],
                    categories: vec![b"extra".to_vec()],
                    ..Default::default()
                },
                &[],
                &[],
            ),
            recorded(5, count(1.5), &[], &[]),
            recorded(5, count(0.5), &[], &[]),
        ]);
        frame(&packets)
    }

    /// The next chunk: the sequence restarted with its clock at 6 ms and the same iids
    /// naming other text; a CUDA call in the step, then the step's end.
    fn second_chunk() -> Vec<u8> {
        frame(&[
            start(6_000_000),
            recorded(
                7,
                begin(1, 2),
                &[(1, "cudaLaunchKernel")],
                &[(2, "cuda/runtime")],
            ),
            recorded(3, end(), &[], &[]),
            recorded(90, end(), &[], &[]),
        ])
    }

    fn first_chunk_events() -> Vec<Seen> {
        let op = |name: &str, start, end, depth| Seen::Slice {
            track: THREAD,
            name: name.into(),
            category: "itt/PyTorch".into(),
            kind: Some(SliceKind::Op),
            start,
            end,
            depth,
        };
        vec![
            op("aten::addmm", 5_000_175, 5_000_200, 2),
            op("aten::mm", 5_000_150, 5_000_210, 1),
            Seen::Instant {
                track: THREAD,
                name: "mark".into(),
                category: "itt/PyTorch,extra".into(),
                ts: 5_000_215,
            },
            // Times the unit 2, summed.
            Seen::Counter {
                track: COUNTER,
                ts: 5_000_220,
                value: 3.0,
            },
            Seen::Counter {
                track: COUNTER,
                ts: 5_000_225,
                value: 4.0,
            },
        ]
    }

    fn second_chunk_events() -> Vec<Seen> {
        vec![
            Seen::Slice {
                track: THREAD,
                name: "cudaLaunchKernel".into(),
                category: "cuda/runtime".into(),
                kind: Some(SliceKind::Runtime),
                start: 6_000_007,
                end: 6_000_010,
                depth: 1,
            },
            Seen::Slice {
                track: THREAD,
                name: "ProfilerStep#1".into(),
                category: "itt/PyTorch".into(),
                kind: Some(SliceKind::Step),
                start: 5_000_100,
                end: 6_000_100,
                depth: 0,
            },
        ]
    }

    #[test]
    fn stream_reads_recorded_chunks_with_their_sequence_restarted() {
        let mut d = StreamDecoder::new();
        assert_eq!(feed_ok(&mut d, &first_chunk()), first_chunk_events());
        // The event before the sequence's start could not be read.
        assert_eq!((d.ignored(), d.open_slices()), (1, 1));
        assert_eq!(
            feed_ok(&mut d, &compressed(&second_chunk())),
            second_chunk_events()
        );
        assert_eq!(
            (d.open_slices(), d.unmatched_ends(), d.ignored()),
            (0, 0, 1)
        );
        assert_eq!(
            d.track(THREAD),
            Some(&StreamTrack {
                uuid: THREAD,
                parent: Some(PROCESS),
                pid: Some(42),
                tid: Some(43),
                name: "main".into(),
                process_name: None,
                labels: vec![],
            })
        );
        let process = d.track(PROCESS).expect("process");
        assert_eq!(
            (process.name.as_str(), process.process_name.as_deref()),
            ("python", Some("python"))
        );
        assert_eq!(
            (process.pid, &process.labels[..]),
            (Some(42), &["rank=0".to_string()][..])
        );
        assert_eq!(d.tracks().count(), 3);
        // An end with nothing open is counted.
        feed_ok(&mut d, &frame(&[recorded(1, end(), &[], &[])]));
        assert_eq!(d.unmatched_ends(), 1);
    }

    #[test]
    fn stream_damage_is_an_error_at_its_packet_and_reading_goes_on() {
        let good = first_chunk();
        let starts = packet_starts(&good);
        // The instant's packet, after which only the step is open.
        let at = starts[starts.len() - 3];
        let before = feed_ok(&mut StreamDecoder::new(), &good[..at]);

        // A packet whose timestamp's varint is cut by the packet's end.
        let mut bytes = good[..at].to_vec();
        bytes.extend([PACKET_KEY, 2, 0x40, 0xff]);
        bytes.extend(&good[at..]);
        let mut d = StreamDecoder::new();
        let (events, read) = feed(&mut d, &bytes);
        let (offset, message) = syntax_error(read);
        assert_eq!((offset, events), (at as u64, before.clone()));
        assert!(message.contains("not a valid TracePacket"), "{message}");
        // Later feeds read on: the next chunk restarts the sequence.
        assert_eq!(feed_ok(&mut d, &second_chunk()), second_chunk_events());

        // Bytes that end inside a packet.
        let mut d = StreamDecoder::new();
        let (events, read) = feed(&mut d, &good[..good.len() - 1]);
        assert_eq!(
            syntax_error(read).0,
            *starts.last().expect("packets") as u64
        );
        assert_eq!(events, first_chunk_events()[..4]);

        // Bad framing: the packet field with another wire type.
        let (_, read) = feed(&mut d, &[0x08, 0x01]);
        assert_eq!(syntax_error(read).0, 0);

        // Compressed packets that do not inflate, and ones holding a bad packet; zstd.
        let prefix = frame(&[recorded(1, end(), &[], &[])]);
        let at = prefix.len() as u64;
        let mut bytes = prefix.clone();
        let corrupt = TracePacketGlobals {
            compressed_packets: Some(vec![0x78, 0x9c, 0xff, 0xff]),
            ..Default::default()
        };
        bytes.push(PACKET_KEY);
        corrupt.encode_length_delimited(&mut bytes).expect("encode");
        let (_, read) = feed(&mut d, &bytes);
        let (offset, message) = syntax_error(read);
        assert_eq!(offset, at, "{message}");
        let mut inner = frame(&global_packets()[..1]);
        inner.extend([PACKET_KEY, 2, 0x40, 0xff]);
        let (_, read) = feed(&mut d, &[&prefix[..], &compressed(&inner)].concat());
        let (offset, message) = syntax_error(read);
        assert_eq!(offset, at);
        assert!(
            message.contains("inside the compressed packets"),
            "{message}"
        );
        let zstd = TracePacketGlobals {
            zstd_compressed_packets: Some(vec![1]),
            ..Default::default()
        };
        let mut bytes = vec![PACKET_KEY];
        zstd.encode_length_delimited(&mut bytes).expect("encode");
        assert_eq!(syntax_error(feed(&mut d, &bytes).1).0, 0);

        // After all that, a recording reads as ever (inside the step the cut feed left
        // open, and adding to the counter's total).
        let mut events = feed_ok(&mut d, &first_chunk());
        events.extend(feed_ok(&mut d, &second_chunk()));
        let expected = [first_chunk_events(), second_chunk_events()].concat();
        assert_eq!(streamed_slices(&events), streamed_slices(&expected));
        assert_eq!(d.open_slices(), 1);
    }

    #[test]
    fn stream_preamble_makes_a_later_chunk_a_trace() {
        let mut d = StreamDecoder::new();
        feed_ok(&mut d, &first_chunk());
        let second = compressed(&second_chunk());
        feed_ok(&mut d, &second);
        let preamble = d.preamble().to_vec();
        // The snapshot first, then the four descriptors.
        let packets: Vec<TracePacketGlobals> = {
            let mut v = Vec::new();
            walk(&preamble, 0, "test", &mut |_, p| {
                v.push(TracePacketGlobals::decode(p).expect("decode"));
                Ok(())
            })
            .expect("framing");
            v
        };
        assert_eq!(packets.len(), 4);
        assert!(packets[0].clock_snapshot.is_some());
        assert!(packets[1..].iter().all(|p| p.track_descriptor.is_some()));

        let t = import_bytes(&[&preamble[..], &second].concat()).expect("import");
        let clock = t.sources[0].clock;
        assert_eq!(t.str(t.clocks[clock.0 as usize].name), "perfetto:MONOTONIC");
        let s = &t.slices;
        assert_eq!(s.len(), 1);
        assert_eq!(t.str(s.name[0]), "cudaLaunchKernel");
        assert_eq!((s.ts[0], s.dur[0]), (6_000_007, 3));
        let track = &t.tracks[s.track[0] as usize];
        let thread = &t.threads[track.thread.expect("a thread's track").index()];
        let process = &t.processes[thread.process.index()];
        assert_eq!(thread.tid, 43);
        assert_eq!(t.str(thread.name.expect("named")), "main");
        assert_eq!(t.str(process.name.expect("named")), "python");

        // The descriptors sent again (as on a new connection) add nothing; a renamed
        // thread's descriptor is kept, after the first.
        feed_ok(&mut d, &frame(&global_packets()));
        assert_eq!(d.preamble(), &preamble[..]);
        feed_ok(
            &mut d,
            &frame(&[thread_descriptor(THREAD, 42, 43, "worker")]),
        );
        assert_eq!(d.track(THREAD).map(|t| t.name.as_str()), Some("worker"));
        let t = import_bytes(d.preamble()).expect("import");
        let names: Vec<&str> = t
            .threads
            .iter()
            .filter_map(|th| th.name)
            .map(|n| t.str(n))
            .collect();
        assert_eq!(names, ["worker"]);
        // A decoder fed the preamble knows the tracks.
        let mut again = StreamDecoder::new();
        feed_ok(&mut again, d.preamble());
        assert!(again.tracks().eq(d.tracks()));
    }

    #[test]
    fn stream_bounds_nesting() {
        let slice = |ty: i32| TrackEvent {
            r#type: Some(ty),
            track_uuid: Some(7),
            name: Some(b"deep".to_vec()),
            ..Default::default()
        };
        let n = MAX_DEPTH as u64 + 100;
        let begins: Vec<TracePacket> = (0..n)
            .map(|i| TracePacket {
                timestamp: Some(i),
                track_event: Some(slice(TYPE_SLICE_BEGIN)),
                ..Default::default()
            })
            .collect();
        let mut d = StreamDecoder::new();
        assert!(feed_ok(&mut d, &frame(&begins)).is_empty());
        assert_eq!((d.open_slices(), d.ignored()), (MAX_DEPTH, 100));
        let ends: Vec<TracePacket> = (0..=n)
            .map(|i| TracePacket {
                timestamp: Some(n + i),
                track_event: Some(slice(TYPE_SLICE_END)),
                ..Default::default()
            })
            .collect();
        let events = feed_ok(&mut d, &frame(&ends));
        assert_eq!(events.len(), MAX_DEPTH);
        // The ends of the begins not kept close nothing; the first kept one ends next.
        assert_eq!(
            events[0],
            Seen::Slice {
                track: 7,
                name: "deep".into(),
                category: String::new(),
                kind: None,
                start: MAX_DEPTH as u64 - 1,
                end: n + 100,
                depth: MAX_DEPTH as u32 - 1,
            }
        );
        assert_eq!((d.open_slices(), d.unmatched_ends()), (0, 1));
    }

    #[test]
    fn stream_survives_damaged_bytes() {
        let bytes = [
            first_chunk(),
            compressed(&second_chunk()),
            export_bytes(&sample_trace()),
        ]
        .concat();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..1000 {
            let mut b = bytes.clone();
            for _ in 0..1 + round % 4 {
                let r = next();
                let i = r as usize % b.len();
                b[i] = (r >> 32) as u8;
            }
            let cut = next() as usize % b.len();
            let mut d = StreamDecoder::new();
            let _ = d.feed(&b[..cut], "test", &mut |_| ());
            let _ = d.feed(&b[cut..], "test", &mut |_| ());
            d.feed(&second_chunk(), "test", &mut |_| ())
                .expect("usable after damage");
            import_bytes(d.preamble()).expect("the preamble imports");
        }
    }

    #[test]
    fn stream_field_numbers_are_the_protos() {
        use number::{annotation as a, event as e, packet as p};
        fn key(bytes: Vec<u8>) -> u32 {
            let mut pos = 0;
            (read_varint(&bytes, &mut pos).ok().expect("a key") >> 3) as u32
        }
        let packet = |f: fn(&mut TracePacket)| {
            let mut m = TracePacket::default();
            f(&mut m);
            key(m.encode_to_vec())
        };
        assert_eq!(packet(|m| m.timestamp = Some(1)), p::TIMESTAMP);
        assert_eq!(
            packet(|m| m.timestamp_clock_id = Some(1)),
            p::TIMESTAMP_CLOCK_ID
        );
        assert_eq!(
            packet(|m| m.trusted_packet_sequence_id = Some(1)),
            p::TRUSTED_PACKET_SEQUENCE_ID
        );
        assert_eq!(packet(|m| m.sequence_flags = Some(1)), p::SEQUENCE_FLAGS);
        assert_eq!(
            packet(|m| m.incremental_state_cleared = Some(true)),
            p::INCREMENTAL_STATE_CLEARED
        );
        assert_eq!(
            packet(|m| m.previous_packet_dropped = Some(1)),
            p::PREVIOUS_PACKET_DROPPED
        );
        assert_eq!(
            packet(|m| m.interned_data = Some(InternedData::default())),
            p::INTERNED_DATA
        );
        assert_eq!(
            packet(|m| m.trace_packet_defaults = Some(Default::default())),
            p::TRACE_PACKET_DEFAULTS
        );
        assert_eq!(
            packet(|m| m.track_event = Some(Default::default())),
            p::TRACK_EVENT
        );
        assert_eq!(
            packet(|m| m.track_descriptor = Some(Default::default())),
            p::TRACK_DESCRIPTOR
        );
        assert_eq!(
            packet(|m| m.clock_snapshot = Some(Default::default())),
            p::CLOCK_SNAPSHOT
        );
        let globals = |f: fn(&mut TracePacketGlobals)| {
            let mut m = TracePacketGlobals::default();
            f(&mut m);
            key(m.encode_to_vec())
        };
        assert_eq!(
            globals(|m| m.compressed_packets = Some(vec![])),
            p::COMPRESSED_PACKETS
        );
        assert_eq!(
            globals(|m| m.zstd_compressed_packets = Some(vec![])),
            p::ZSTD_COMPRESSED_PACKETS
        );

        let event = |f: fn(&mut TrackEvent)| {
            let mut m = TrackEvent::default();
            f(&mut m);
            key(m.encode_to_vec())
        };
        assert_eq!(event(|m| m.category_iids = vec![1]), e::CATEGORY_IIDS);
        assert_eq!(event(|m| m.categories = vec![vec![]]), e::CATEGORIES);
        assert_eq!(event(|m| m.name_iid = Some(1)), e::NAME_IID);
        assert_eq!(event(|m| m.name = Some(vec![])), e::NAME);
        assert_eq!(event(|m| m.r#type = Some(1)), e::TYPE);
        assert_eq!(event(|m| m.track_uuid = Some(1)), e::TRACK_UUID);
        assert_eq!(event(|m| m.counter_value = Some(1)), e::COUNTER_VALUE);
        assert_eq!(
            event(|m| m.double_counter_value = Some(1.0)),
            e::DOUBLE_COUNTER_VALUE
        );
        assert_eq!(
            event(|m| m.extra_counter_track_uuids = vec![1]),
            e::EXTRA_COUNTER_TRACK_UUIDS
        );
        assert_eq!(
            event(|m| m.extra_counter_values = vec![1]),
            e::EXTRA_COUNTER_VALUES
        );
        assert_eq!(
            event(|m| m.extra_double_counter_track_uuids = vec![1]),
            e::EXTRA_DOUBLE_COUNTER_TRACK_UUIDS
        );
        assert_eq!(
            event(|m| m.extra_double_counter_values = vec![1.0]),
            e::EXTRA_DOUBLE_COUNTER_VALUES
        );
        assert_eq!(
            event(|m| m.debug_annotations = vec![Default::default()]),
            e::DEBUG_ANNOTATIONS
        );
        assert_eq!(
            event(|m| m.timestamp_absolute_us = Some(1)),
            e::TIMESTAMP_ABSOLUTE_US
        );

        let annotation = |f: fn(&mut DebugAnnotation)| {
            let mut m = DebugAnnotation::default();
            f(&mut m);
            key(m.encode_to_vec())
        };
        assert_eq!(annotation(|m| m.name_iid = Some(1)), a::NAME_IID);
        assert_eq!(annotation(|m| m.name = Some(vec![])), a::NAME);
        assert_eq!(annotation(|m| m.bool_value = Some(true)), a::BOOL_VALUE);
        assert_eq!(annotation(|m| m.uint_value = Some(1)), a::UINT_VALUE);
        assert_eq!(annotation(|m| m.int_value = Some(1)), a::INT_VALUE);
        assert_eq!(annotation(|m| m.double_value = Some(1.0)), a::DOUBLE_VALUE);
        assert_eq!(
            annotation(|m| m.string_value = Some(vec![])),
            a::STRING_VALUE
        );
        assert_eq!(annotation(|m| m.pointer_value = Some(1)), a::POINTER_VALUE);
        assert_eq!(
            annotation(|m| m.legacy_json_value = Some(vec![])),
            a::LEGACY_JSON_VALUE
        );
        assert_eq!(
            annotation(|m| m.string_value_iid = Some(1)),
            a::STRING_VALUE_IID
        );
    }
}
