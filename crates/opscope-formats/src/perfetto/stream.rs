//! The live agent's view of a Perfetto recording read chunk by chunk while it runs: the
//! [`Reader`] with bounds that keep a hostile stream's memory in check, and a sink that
//! reports each slice once its end arrives, each instant and each counter value.

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
#[cfg(test)]
use prost::Message;

use opscope_model::{SliceKind, StrId, StringTable};

use super::proto::{TrackDescriptor, PACKET_KEY};
#[cfg(test)]
use super::reader::walk;
use super::reader::{number, syntax, Event, Limits, Place, Reader, Sink, SinkError, Walked};
use super::KIND_ANNOTATION;
use crate::error::ImportError;

// Bounds against a hostile or corrupt stream, which the agent reads for as long as the
// process runs: past them, what does not fit is counted (`ignored`) and dropped.
/// Distinct strings, and their bytes in all: new text past them reads as empty.
const MAX_STRINGS: usize = 1 << 20;
const MAX_STRING_BYTES: usize = 1 << 28;
/// Memory of all sequences' interning tables, in entries.
const MAX_INTERNED: usize = 1 << 22;
/// Sequences kept at once. Past it the least recently used half is forgotten.
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

const LIMITS: Limits = Limits {
    sequences: MAX_SEQUENCES,
    interned: MAX_INTERNED,
    lanes: MAX_TRACKS,
    depth: MAX_DEPTH,
    open: MAX_OPEN,
};

/// What [`StreamDecoder::feed`] reports. Text borrows from the decoder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StreamEvent<'a> {
    /// A slice whose end was seen: begin and end events on one track, matched with a
    /// stack per track; `depth` is the number of slices open around it there. Slices
    /// of a legacy `ThreadDescriptor`'s thread (events without a track) have their own
    /// stack and are reported on track 0, as their instants and counters are.
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
    reader: Reader<Frame>,
    state: State,
}

/// What the decoder keeps beside the reader's state: its text, the tracks as
/// described, and the preamble.
struct State {
    strings: Strings,
    /// `opscope.kind` in `strings`.
    kind_key: StrId,
    /// Described tracks, by the reader's lane.
    tracks: Vec<Option<Track>>,
    preamble: Vec<u8>,
    /// Length of the clock snapshot packet at the start of `preamble`, once seen.
    snapshot_len: Option<usize>,
    /// Descriptors and snapshots left out of a full preamble.
    ignored: u64,
}

struct Track {
    info: StreamTrack,
    /// The payload of the track's last descriptor copied into the preamble, relative to
    /// the end of the snapshot packet, so that an identical repeat is not copied again.
    copy: Option<(usize, usize)>,
}

/// A slice whose end has not been seen yet.
#[derive(Clone, Copy)]
struct Frame {
    name: StrId,
    category: StrId,
    kind: Option<SliceKind>,
    start: u64,
}

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
            reader: Reader::new(LIMITS),
            state: State {
                strings,
                kind_key,
                tracks: Vec::new(),
                preamble: Vec::new(),
                snapshot_len: None,
                ignored: 0,
            },
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
        let mut sink = Reporter {
            state: &mut self.state,
            on,
        };
        match self.reader.read(bytes, 0, path, &mut sink)? {
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
        let lane = self.reader.lane(uuid)?;
        let track = self.state.tracks.get(lane as usize)?.as_ref()?;
        Some(&track.info)
    }

    /// Every described track, in the order they were first seen.
    pub fn tracks(&self) -> impl Iterator<Item = &StreamTrack> {
        self.state.tracks.iter().flatten().map(|t| &t.info)
    }

    /// Packets (framed as `Trace.packet` fields) holding the first snapshot of the
    /// trace's global clocks, then every track descriptor seen so far (a repeat of a
    /// track's last one left out): put before a later run of chunks that start their
    /// sequences afresh, they make a trace the importer reads as the whole file would be.
    pub fn preamble(&self) -> &[u8] {
        &self.state.preamble
    }

    /// Slices begun and not yet ended.
    pub fn open_slices(&self) -> usize {
        self.reader.open_slices()
    }

    /// End events that found no open slice on their track.
    pub fn unmatched_ends(&self) -> u64 {
        self.reader.repairs().unmatched_ends
    }

    /// What was dropped: events on a sequence whose incremental state was lost or never
    /// set (as after the decoder forgot it, past its bound on sequences), counters
    /// without a value, events of unknown types, packets cut inside compressed ones,
    /// and whatever went past the decoder's other bounds (text, interned entries,
    /// tracks, open slices, preamble).
    pub fn ignored(&self) -> u64 {
        self.reader.repairs().malformed_events
            + self.reader.dropped()
            + self.state.ignored
            + self.state.strings.refused
    }
}

/// The sink of one feed: reports to its callback.
struct Reporter<'s, 'f> {
    state: &'s mut State,
    on: &'f mut dyn FnMut(StreamEvent<'_>),
}

/// The track a stream event names: a legacy thread's events have none, so 0.
fn track_of(place: Place) -> u64 {
    place.uuid.unwrap_or(0)
}

/// Stream times are unsigned: a time before 0 reads as 0.
fn unsigned(ts: i64) -> u64 {
    ts.max(0) as u64
}

impl Sink for Reporter<'_, '_> {
    type Open = Frame;

    fn intern(&mut self, text: &[u8]) -> StrId {
        self.state.strings.intern_bytes(text)
    }

    fn text(&self, id: StrId) -> &str {
        self.state.strings.get(id)
    }

    fn kind_key(&self) -> StrId {
        self.state.kind_key
    }

    fn describe(&mut self, lane: u32, d: &TrackDescriptor, raw: &[u8]) {
        self.state.describe(lane as usize, d, raw);
    }

    fn first_snapshot(&mut self, raw: &[u8]) {
        self.state.keep_snapshot(raw);
    }

    fn begin(&mut self, event: &Event<'_>) -> Result<Frame, SinkError> {
        Ok(Frame {
            name: event.name,
            category: event.category,
            kind: event.kind,
            start: unsigned(event.ts),
        })
    }

    fn end(&mut self, frame: Frame, event: &Event<'_>, depth: u32) -> Result<(), SinkError> {
        let strings = &self.state.strings;
        (self.on)(StreamEvent::Slice {
            track: track_of(event.place),
            name: strings.get(frame.name),
            category: strings.get(frame.category),
            kind: frame.kind,
            start_ns: frame.start,
            end_ns: unsigned(event.ts),
            depth,
        });
        Ok(())
    }

    fn instant(&mut self, event: &Event<'_>) -> Result<(), SinkError> {
        let strings = &self.state.strings;
        (self.on)(StreamEvent::Instant {
            track: track_of(event.place),
            name: strings.get(event.name),
            category: strings.get(event.category),
            ts_ns: unsigned(event.ts),
        });
        Ok(())
    }

    fn counter(&mut self, place: Place, ts: i64, value: f64) {
        (self.on)(StreamEvent::Counter {
            track: track_of(place),
            ts_ns: unsigned(ts),
            value,
        });
    }
}

impl State {
    /// Reads a track descriptor whose encoding is `raw`, and copies it to the preamble.
    fn describe(&mut self, lane: usize, d: &TrackDescriptor, raw: &[u8]) {
        if lane >= self.tracks.len() {
            self.tracks.resize_with(lane + 1, || None);
        }
        let described = StreamTrack::from_descriptor(d);
        let track = match &mut self.tracks[lane] {
            Some(track) => {
                track.info.update(described);
                track
            }
            slot @ None => slot.insert(Track {
                info: described,
                copy: None,
            }),
        };
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
        let (start, end) = frame_packet(&mut self.preamble, TRACK_DESCRIPTOR, raw);
        track.copy = Some((start - base, end - base));
    }

    /// Puts the trace's clock snapshot, whose encoding is `raw`, first in the preamble.
    fn keep_snapshot(&mut self, raw: &[u8]) {
        let mut packet = Vec::new();
        frame_packet(&mut packet, CLOCK_SNAPSHOT, raw);
        if self.preamble.len() + packet.len() > MAX_PREAMBLE {
            self.ignored += 1;
            return;
        }
        self.snapshot_len = Some(packet.len());
        self.preamble.splice(0..0, packet);
    }
}

/// `TracePacket` fields the preamble's packets hold.
const TRACK_DESCRIPTOR: u32 = number::packet::TRACK_DESCRIPTOR;
const CLOCK_SNAPSHOT: u32 = number::packet::CLOCK_SNAPSHOT;

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
}
