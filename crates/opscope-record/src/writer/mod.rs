//! Turns drained records into a Perfetto trace file, one per process: each thread's
//! records are a packet sequence of their own (interned names and categories,
//! timestamps as deltas of an incremental clock), ranges that may end on another thread
//! go to per-category lane tracks, device work to a track per GPU stream (laid out as
//! opscope's exporter lays out devices) with a flow from the CUDA call on its thread
//! that launched it, and every flush appends one zlib-compressed chunk, so a file cut
//! off by a kill holds every chunk written before it.

use std::collections::{BTreeSet, VecDeque};
use std::fs::File;
use std::io::Write;
use std::rc::Rc;

use miniz_oxide::deflate::core::{
    compress_to_output, create_comp_flags_from_zip_params, CompressorOxide, TDEFLFlush,
};

use crate::clock;
use crate::event::{Kind, Record, Value};
use crate::live::{Link, LinkTotals};
use crate::proto::{self as pb, message, uint};
use crate::ring::{self, ThreadBuffer};
use crate::table::Map;

mod device;
mod lanes;

use device::{DeviceWork, Flow, HeldCall, PendingSlice};
use lanes::{fits, Lanes};

/// Chunks smaller than this are written as they are: compressing them gains nothing.
const COMPRESS_FROM: usize = 256;
/// The packet sequence of descriptors and of packets with absolute timestamps.
const GLOBAL_SEQUENCE: u64 = 1;

/// What the writer counted, for the end-of-process summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub records: u64,
    pub dropped: u64,
    pub bytes_written: u64,
}

/// One thread's packet sequence.
struct Sequence {
    claim: u64,
    id: u64,
    track: u64,
    /// Time of the last packet on the sequence's incremental clock.
    last_ts: Option<u64>,
    names: Map<Vec<u8>, u64>,
    categories: Map<Vec<u8>, u64>,
    next_iid: u64,
    /// Debug annotations for each open slice, added to its end event.
    open_args: Vec<Vec<u8>>,
    /// Category and name of each id the thread defined for its compact begins.
    defined: Map<u64, DefinedName>,
}

/// A category and a name, shared by every begin that refers to them, and their iids
/// on the sequence once a begin has interned them.
struct DefinedName {
    category: Rc<[u8]>,
    name: Rc<[u8]>,
    iids: Option<Iids>,
}

impl Sequence {
    fn new(claim: u64, id: u64, track: u64) -> Sequence {
        Sequence {
            claim,
            id,
            track,
            last_ts: None,
            names: Map::default(),
            categories: Map::default(),
            next_iid: 1,
            open_args: Vec::new(),
            defined: Map::default(),
        }
    }

    /// Forgets what the sequence's packets said so far (its clock and interned names),
    /// so that its next packet starts it again.
    fn restart(&mut self) {
        self.last_ts = None;
        self.names.clear();
        self.categories.clear();
        self.next_iid = 1;
        for defined in self.defined.values_mut() {
            defined.iids = None;
        }
    }
}

struct OpenRange {
    ts: u64,
    name: Vec<u8>,
    annotations: Vec<u8>,
}

/// A thread's track, as its descriptor gave it.
struct ThreadTrack {
    uuid: u64,
    /// The thread's `pthread_t`, or 0.
    handle: u64,
    name: Vec<u8>,
    /// Whether a record named the thread (ITT, NVTX): that name stays; else the name is
    /// the thread's own, read again now and then.
    given: bool,
}

/// How often the threads' own names are read again.
const NAMES_READ_EVERY_NS: u64 = 1_000_000_000;

/// Thread `tid`'s own name (`/proc/self/task/TID/comm`), when it still runs.
fn thread_comm(tid: i32) -> Option<Vec<u8>> {
    let mut comm = std::fs::read(format!("/proc/self/task/{tid}/comm")).ok()?;
    comm.truncate(comm.trim_ascii_end().len());
    Some(comm)
}

pub struct Writer {
    /// None when streaming to the agent only (`--live-only`).
    file: Option<File>,
    /// The agent, when one was asked for: every chunk also goes there, and then every
    /// chunk restarts the threads' sequences, so that the agent (and a dump of its last
    /// minute) can read a chunk without those before it.
    live: Option<Link>,
    /// With `live`: the packets a chunk's reader needs from before it (the clock
    /// snapshot and every track descriptor), sent first on each connection.
    preamble: Vec<u8>,
    /// The process that made the writer, the only one that writes its file: a drain
    /// that a fork from a signal handler interrupted goes on in the child too.
    owner: u32,
    pid: i32,
    /// Maps the records' clock ticks onto CLOCK_MONOTONIC.
    clock: clock::Calibration,
    out: Output,
    packets: Vec<u8>,
    sequences: Map<usize, Sequence>,
    next_sequence: u64,
    next_uuid: u64,
    process_uuid: u64,
    /// The process's name and labels, written again with a label added later.
    process_name: Vec<u8>,
    labels: Vec<Vec<u8>>,
    thread_tracks: Map<i32, ThreadTrack>,
    /// When the threads' names were last read again ([`Writer::refresh_thread_names`]).
    names_read_at: u64,
    counters: Map<(Vec<u8>, Vec<u8>), u64>,
    lanes: Map<Vec<u8>, Lanes>,
    open_ranges: Map<(Vec<u8>, u64), OpenRange>,
    /// Ends of ranges whose begin was not seen yet (it is on a thread drained later).
    early_ends: Map<(Vec<u8>, u64), u64>,
    /// Process track of each device.
    devices: Map<u32, u64>,
    /// Tracks of each (device, stream): the stream's own, then overflow lanes, each with
    /// the end of its last slice.
    streams: Map<(u32, u32), Vec<(u64, u64)>>,
    device_work: Vec<DeviceWork>,
    held_calls: Map<u32, HeldCall>,
    /// Correlation ids of held calls and when they came, oldest first (ids of calls
    /// written since are skipped).
    held_order: VecDeque<(u32, u64)>,
    totals: Totals,
}

// SAFETY: the writer's only non-`Send` parts are the `Rc`s of its sequences' defined
// names, which are cloned only among its own fields and the locals of its methods: no
// clone outlives a method call or leaves the writer, so moving the whole writer to
// another thread (the session hands it from the starting thread to its writer thread,
// under its lock) moves every owner of those counts together.
unsafe impl Send for Writer {}

impl Writer {
    /// Starts the trace in `file` for process `pid`: the clock snapshot and the
    /// process's track, named and labelled (`rank=0`, …).
    pub fn new(file: File, pid: i32, process_name: &[u8], labels: &[Vec<u8>]) -> Writer {
        Writer::new_with(Some(file), None, pid, process_name, labels)
    }

    /// [`Writer::new`] writing to `file` (or no file), and streaming to `live`.
    pub fn new_with(
        file: Option<File>,
        live: Option<Link>,
        pid: i32,
        process_name: &[u8],
        labels: &[Vec<u8>],
    ) -> Writer {
        let mut w = Writer {
            file,
            live,
            preamble: Vec::new(),
            owner: std::process::id(),
            pid,
            packets: Vec::with_capacity(1 << 16),
            sequences: Map::default(),
            next_sequence: GLOBAL_SEQUENCE + 1,
            next_uuid: 1,
            process_uuid: 0,
            process_name: process_name.to_vec(),
            labels: labels.to_vec(),
            thread_tracks: Map::default(),
            names_read_at: clock::monotonic_ns(),
            counters: Map::default(),
            lanes: Map::default(),
            open_ranges: Map::default(),
            early_ends: Map::default(),
            devices: Map::default(),
            streams: Map::default(),
            device_work: Vec::new(),
            held_calls: Map::default(),
            held_order: VecDeque::new(),
            totals: Totals::default(),
            clock: clock::Calibration::new(),
            out: Output::new(),
        };
        let snapshot = clock::Snapshot::now();
        message(&mut w.packets, pb::PACKET, |p| {
            uint(p, pb::PACKET_SEQUENCE_ID, GLOBAL_SEQUENCE);
            message(p, pb::PACKET_CLOCK_SNAPSHOT, |s| {
                for (id, ts) in [
                    (pb::CLOCK_MONOTONIC, snapshot.monotonic),
                    (pb::CLOCK_REALTIME, snapshot.realtime),
                    (pb::CLOCK_BOOTTIME, snapshot.boottime),
                ] {
                    message(s, pb::SNAPSHOT_CLOCK, |c| {
                        uint(c, pb::CLOCK_ID, id);
                        uint(c, pb::CLOCK_TIMESTAMP, ts);
                    });
                }
                uint(s, pb::SNAPSHOT_PRIMARY_CLOCK, pb::CLOCK_MONOTONIC);
            });
        });
        w.process_uuid = w.uuid();
        w.describe_process();
        if w.live.is_some() {
            w.preamble.extend_from_slice(&w.packets);
        }
        // At once, so a process killed before its first flush still leaves a file that
        // says whose it is.
        let _ = w.write_chunk();
        w
    }

    /// The process's track: its pid, name and labels.
    fn describe_process(&mut self) {
        let (uuid, pid) = (self.process_uuid, self.pid as u64);
        let (name, labels) = (
            std::mem::take(&mut self.process_name),
            std::mem::take(&mut self.labels),
        );
        self.descriptor(|d| {
            uint(d, pb::TRACK_UUID, uuid);
            message(d, pb::TRACK_PROCESS, |p| {
                uint(p, pb::PROCESS_PID, pid);
                pb::bytes(p, pb::PROCESS_NAME, &name);
                for label in &labels {
                    pb::bytes(p, pb::PROCESS_LABELS, label);
                }
            });
        });
        (self.process_name, self.labels) = (name, labels);
    }

    /// Labels the process `KEY=VALUE` from now on (its track is described again, with
    /// every label), unless a label already gives `KEY`: the launcher's variables that
    /// the labels began with win.
    pub fn label(&mut self, label: &[u8]) {
        let key = |l: &[u8]| l.split(|&b| b == b'=').next().map(<[u8]>::to_vec);
        if self.labels.iter().any(|l| key(l) == key(label)) {
            return;
        }
        self.labels.push(label.to_vec());
        self.describe_process();
    }

    pub fn totals(&self) -> Totals {
        self.totals
    }

    fn uuid(&mut self) -> u64 {
        // Unique per process file; the pid in the high bits keeps the uuids of several
        // processes' files apart when they are loaded together.
        self.next_uuid += 1;
        ((self.pid as u64) << 32) | self.next_uuid
    }

    fn descriptor(&mut self, body: impl FnOnce(&mut Vec<u8>)) {
        let start = self.packets.len();
        message(&mut self.packets, pb::PACKET, |p| {
            uint(p, pb::PACKET_SEQUENCE_ID, GLOBAL_SEQUENCE);
            message(p, pb::PACKET_TRACK_DESCRIPTOR, body);
        });
        if self.live.is_some() {
            self.preamble.extend_from_slice(&self.packets[start..]);
        }
    }

    /// What the link to the agent counted, when there is one.
    pub fn link_totals(&self) -> Option<LinkTotals> {
        self.live.as_ref().map(Link::totals)
    }

    /// Describes thread `tid` and its `pthread_t` now, whether or not it records.
    pub fn describe_thread(&mut self, tid: i32, handle: u64) {
        self.thread_track(tid, handle, None);
    }

    /// The track of thread `tid`, described (again) when it is new, renamed, or its
    /// `pthread_t` (`handle`, 0 when not known) is newly known.
    fn thread_track(&mut self, tid: i32, handle: u64, name: Option<&[u8]>) -> u64 {
        let known = match self.thread_tracks.get(&tid) {
            Some(t) if name.is_none() && (handle == 0 || handle == t.handle) => {
                return t.uuid;
            }
            Some(t) => Some((t.uuid, t.handle, t.given.then(|| t.name.clone()))),
            None => None,
        };
        let (uuid, handle, given_before) = match known {
            Some((uuid, written, given)) => {
                (uuid, if handle == 0 { written } else { handle }, given)
            }
            None => (self.uuid(), handle, None),
        };
        // A name a record gave stays; else the thread's own (which may change).
        let (comm, given) = match (name, given_before) {
            (Some(n), _) => (n.to_vec(), true),
            (None, Some(before)) => (before, true),
            (None, None) => (thread_comm(tid).unwrap_or_default(), false),
        };
        self.describe_thread_track(uuid, tid, handle, &comm);
        self.thread_tracks.insert(
            tid,
            ThreadTrack {
                uuid,
                handle,
                name: comm,
                given,
            },
        );
        uuid
    }

    /// Describes the threads again whose own names changed since they were described:
    /// PyTorch names a DataLoader worker's main thread `pt_data_worker` (which tells
    /// the worker from its rank) after the thread's first records, in a spawned worker.
    /// At most once a second, and at the end: a read of `/proc` per thread.
    fn refresh_thread_names(&mut self, now: u64) {
        self.names_read_at = now;
        let mut renamed = Vec::new();
        for (&tid, t) in &self.thread_tracks {
            if t.given {
                continue;
            }
            if let Some(comm) = thread_comm(tid).filter(|c| !c.is_empty() && *c != t.name) {
                renamed.push((tid, comm));
            }
        }
        for (tid, comm) in renamed {
            let Some(t) = self.thread_tracks.get_mut(&tid) else {
                continue;
            };
            t.name = comm.clone();
            let (uuid, handle) = (t.uuid, t.handle);
            self.describe_thread_track(uuid, tid, handle, &comm);
        }
    }

    /// Writes the descriptor of thread `tid`'s track.
    fn describe_thread_track(&mut self, uuid: u64, tid: i32, handle: u64, comm: &[u8]) {
        let pid = self.pid as u64;
        self.descriptor(|d| {
            uint(d, pb::TRACK_UUID, uuid);
            if handle != 0 {
                // The importer's marker syntax (`perfetto::Marker`): Perfetto shows it
                // as the track's description and reads the thread as usual.
                let marker = format!("opscope:pthread={handle}");
                pb::bytes(d, pb::TRACK_DESCRIPTION, marker.as_bytes());
            }
            message(d, pb::TRACK_THREAD, |t| {
                uint(t, pb::THREAD_PID, pid);
                uint(t, pb::THREAD_TID, tid as u64);
                if !comm.is_empty() {
                    pb::bytes(t, pb::THREAD_NAME, comm);
                }
            });
        });
    }

    /// Drains every thread's ring and appends what it held to the file.
    pub fn drain(&mut self) -> std::io::Result<()> {
        self.clock.update();
        let now = clock::monotonic_ns();
        if now.saturating_sub(self.names_read_at) >= NAMES_READ_EVERY_NS {
            self.refresh_thread_names(now);
        }
        for buffer in ring::registry() {
            if buffer.holds_no_thread() {
                continue;
            }
            // Read before draining: a buffer retired by then holds its last records.
            let retired = buffer.is_retired();
            self.drain_buffer(buffer);
            if retired {
                self.sequences
                    .remove(&(buffer as *const ThreadBuffer as usize));
                buffer.release();
            }
        }
        self.place_device_work();
        self.release_held_calls(false);
        self.write_chunk()
    }

    fn drain_buffer(&mut self, buffer: &'static ThreadBuffer) {
        let key = buffer as *const ThreadBuffer as usize;
        let claim = buffer.claim_count();
        let mut seq = match self.sequences.remove(&key) {
            Some(s) if s.claim == claim => s,
            _ => {
                let track = self.thread_track(buffer.tid(), buffer.handle(), None);
                let id = self.next_sequence;
                self.next_sequence += 1;
                Sequence::new(claim, id, track)
            }
        };
        buffer.drain(&mut |bytes| {
            if let Some(mut r) = Record::parse(bytes) {
                self.totals.records += 1;
                if !r.times_in_ns {
                    r.ts = self.clock.ns(r.ts);
                    if r.kind == Kind::Complete {
                        r.id = self.clock.ns(r.id);
                    }
                }
                self.record(&mut seq, buffer.tid(), &r);
            }
        });
        let dropped = buffer.take_dropped();
        if dropped > 0 {
            self.totals.dropped += dropped;
            let mut annotations = Vec::new();
            annotation(&mut annotations, b"count", Value::U64(dropped));
            let ts = clock::monotonic_ns();
            self.absolute_event(
                ts,
                seq.track,
                pb::TYPE_INSTANT,
                b"opscope",
                b"opscope: events dropped (buffer full)",
                &annotations,
            );
        }
        self.sequences.insert(key, seq);
    }

    fn record(&mut self, seq: &mut Sequence, tid: i32, r: &Record<'_>) {
        match r.kind {
            Kind::DefineName => {
                let defined = DefinedName {
                    category: r.category.into(),
                    name: r.name.into(),
                    iids: None,
                };
                seq.defined.insert(r.id, defined);
            }
            Kind::BeginNamed => {
                seq.open_args.push(Vec::new());
                self.defined_begin(seq, r.ts, r.id);
            }
            Kind::Begin => {
                seq.open_args.push(Vec::new());
                let mut annotations = Vec::new();
                for (k, v) in r.args() {
                    annotation(&mut annotations, k, v);
                }
                self.sequence_event(
                    seq,
                    r.ts,
                    None,
                    pb::TYPE_SLICE_BEGIN,
                    r.category,
                    r.name,
                    &annotations,
                    None,
                );
            }
            Kind::End => {
                let annotations = seq.open_args.pop().unwrap_or_default();
                self.sequence_event(
                    seq,
                    r.ts,
                    None,
                    pb::TYPE_SLICE_END,
                    b"",
                    b"",
                    &annotations,
                    None,
                );
            }
            Kind::Args => {
                if let Some(open) = seq.open_args.last_mut() {
                    for (k, v) in r.args() {
                        annotation(open, k, v);
                    }
                }
            }
            Kind::Instant => {
                let mut annotations = Vec::new();
                for (k, v) in r.args() {
                    annotation(&mut annotations, k, v);
                }
                let track = (r.id == 1).then_some(self.process_uuid);
                self.sequence_event(
                    seq,
                    r.ts,
                    track,
                    pb::TYPE_INSTANT,
                    r.category,
                    r.name,
                    &annotations,
                    None,
                );
            }
            Kind::Counter => {
                let value = r
                    .args()
                    .find_map(|(_, v)| match v {
                        Value::F64(f) => Some(f),
                        Value::U64(u) => Some(u as f64),
                        Value::I64(i) => Some(i as f64),
                        Value::Str(_) => None,
                    })
                    .unwrap_or(0.0);
                let track = self.counter_track(r.category, r.name);
                self.sequence_event(
                    seq,
                    r.ts,
                    Some(track),
                    pb::TYPE_COUNTER,
                    b"",
                    b"",
                    &[],
                    Some(value),
                );
            }
            Kind::ThreadName => {
                seq.track = self.thread_track(tid, 0, Some(r.name));
            }
            Kind::OtherThreadName => {
                self.thread_track(r.id as i32, 0, Some(r.name));
            }
            Kind::AsyncBegin => {
                let key = (r.category.to_vec(), r.id);
                let mut annotations = Vec::new();
                for (k, v) in r.args() {
                    annotation(&mut annotations, k, v);
                }
                match self.early_ends.remove(&key) {
                    Some(end) => self.range(&key.0, r.ts, end, r.name, &annotations),
                    None => {
                        self.open_ranges.insert(
                            key,
                            OpenRange {
                                ts: r.ts,
                                name: r.name.to_vec(),
                                annotations,
                            },
                        );
                    }
                }
            }
            Kind::AsyncEnd => {
                let key = (r.category.to_vec(), r.id);
                match self.open_ranges.remove(&key) {
                    Some(open) => self.range(&key.0, open.ts, r.ts, &open.name, &open.annotations),
                    None => {
                        self.early_ends.insert(key, r.ts);
                    }
                }
            }
            Kind::Complete => {
                let mut annotations = Vec::new();
                for (k, v) in r.args() {
                    annotation(&mut annotations, k, v);
                }
                self.range(r.category, r.id, r.ts.max(r.id), r.name, &annotations);
            }
            Kind::DeviceSlice => {
                let mut work = DeviceWork {
                    slice: PendingSlice::of(r),
                    device: 0,
                    stream: 0,
                    correlation: 0,
                };
                for (k, v) in r.args() {
                    match (k, number(v)) {
                        (b"device", Some(n)) => work.device = n as u32,
                        (b"stream", Some(n)) => work.stream = n as u32,
                        (b"correlation", Some(n)) => work.correlation = n as u32,
                        _ => {}
                    }
                    annotation(&mut work.slice.annotations, k, v);
                }
                self.device_work.push(work);
            }
            Kind::ApiSlice => {
                let mut call = HeldCall {
                    slice: PendingSlice::of(r),
                    tid,
                };
                let mut correlation = 0;
                for (k, v) in r.args() {
                    match (k, number(v)) {
                        (b"thread", Some(n)) => call.tid = n as i32,
                        (b"correlation", Some(n)) => correlation = n as u32,
                        _ => {}
                    }
                    annotation(&mut call.slice.annotations, k, v);
                }
                if correlation == 0 {
                    self.write_call(call, Flow::None);
                } else {
                    self.hold_call(correlation, call);
                }
            }
            Kind::Wrap => {}
        }
    }

    fn counter_track(&mut self, domain: &[u8], name: &[u8]) -> u64 {
        if let Some(&uuid) = self.counters.get(&(domain.to_vec(), name.to_vec())) {
            return uuid;
        }
        let uuid = self.uuid();
        self.counters.insert((domain.to_vec(), name.to_vec()), uuid);
        let parent = self.process_uuid;
        self.descriptor(|d| {
            uint(d, pb::TRACK_UUID, uuid);
            uint(d, pb::TRACK_PARENT_UUID, parent);
            pb::bytes(d, pb::TRACK_NAME, name);
            message(d, pb::TRACK_COUNTER, |_| {});
        });
        uuid
    }

    /// Writes the range `[begin, end]` on the first lane of `category` it fits.
    fn range(&mut self, category: &[u8], begin: u64, end: u64, name: &[u8], annotations: &[u8]) {
        let end = end.max(begin);
        let lanes = self.lanes.entry(category.to_vec()).or_default();
        let free = lanes
            .lanes
            .iter()
            .position(|(_, spans)| fits(spans, begin, end));
        let track = match free {
            Some(i) => {
                lanes.lanes[i].1.insert((begin, end));
                lanes.lanes[i].0
            }
            None => {
                let n = lanes.lanes.len();
                let uuid = self.uuid();
                let parent = self.process_uuid;
                let mut title = category.to_vec();
                if n > 0 {
                    title.extend_from_slice(format!(" ({})", n + 1).as_bytes());
                }
                self.descriptor(|d| {
                    uint(d, pb::TRACK_UUID, uuid);
                    uint(d, pb::TRACK_PARENT_UUID, parent);
                    pb::bytes(d, pb::TRACK_NAME, &title);
                });
                let lanes = self.lanes.entry(category.to_vec()).or_default();
                lanes.lanes.push((uuid, BTreeSet::from([(begin, end)])));
                uuid
            }
        };
        self.absolute_event(
            begin,
            track,
            pb::TYPE_SLICE_BEGIN,
            category,
            name,
            annotations,
        );
        self.absolute_event(end, track, pb::TYPE_SLICE_END, b"", b"", &[]);
    }

    /// A packet on the global sequence, at an absolute `CLOCK_MONOTONIC` time.
    fn absolute_event(
        &mut self,
        ts: u64,
        track: u64,
        kind: u64,
        category: &[u8],
        name: &[u8],
        annotations: &[u8],
    ) {
        self.flow_event(ts, track, kind, category, name, annotations, Flow::None);
    }

    /// A packet on a thread's sequence: its time as a delta, its name and category
    /// interned.
    #[allow(clippy::too_many_arguments)]
    fn sequence_event(
        &mut self,
        seq: &mut Sequence,
        ts: u64,
        track: Option<u64>,
        kind: u64,
        category: &[u8],
        name: &[u8],
        annotations: &[u8],
        counter: Option<f64>,
    ) {
        let Some(delta) = self.sequence_delta(seq, ts) else {
            // Earlier than the sequence's clock (an explicit timestamp): absolute.
            let track = track.unwrap_or(seq.track);
            self.absolute_event(ts, track, kind, category, name, annotations);
            return;
        };
        let iids = Iids::intern(seq, category, name);
        self.sequence_packet(
            seq.id,
            delta,
            track,
            kind,
            iids,
            (category, name),
            annotations,
            counter,
        );
    }

    /// A compact begin: its category and name were defined once for `id`, and are
    /// interned once on the sequence, then written by their iids without being hashed.
    fn defined_begin(&mut self, seq: &mut Sequence, ts: u64, id: u64) {
        let Some(defined) = seq.defined.get(&id) else {
            return self.sequence_event(seq, ts, None, pb::TYPE_SLICE_BEGIN, b"", b"", &[], None);
        };
        let (cached, category, name) =
            (defined.iids, defined.category.clone(), defined.name.clone());
        let Some(delta) = self.sequence_delta(seq, ts) else {
            let track = seq.track;
            self.absolute_event(ts, track, pb::TYPE_SLICE_BEGIN, &category, &name, &[]);
            return;
        };
        let iids = match cached {
            Some(iids) => iids,
            None => {
                let iids = Iids::intern(seq, &category, &name);
                if let Some(defined) = seq.defined.get_mut(&id) {
                    defined.iids = Some(Iids {
                        new_category: false,
                        new_name: false,
                        ..iids
                    });
                }
                iids
            }
        };
        self.sequence_packet(
            seq.id,
            delta,
            None,
            pb::TYPE_SLICE_BEGIN,
            iids,
            (&category, &name),
            &[],
            None,
        );
    }

    /// The time of `ts` on the sequence's incremental clock, as a delta from its last
    /// packet (starting the sequence at its first), or none when `ts` is earlier.
    fn sequence_delta(&mut self, seq: &mut Sequence, ts: u64) -> Option<u64> {
        let last = match seq.last_ts {
            None => {
                self.start_sequence(seq, ts);
                ts
            }
            Some(last) if ts >= last => last,
            Some(_) => return None,
        };
        seq.last_ts = Some(ts);
        Some(ts - last)
    }

    /// Appends one track event packet of sequence `sequence_id`, with the interned data
    /// of whichever of `texts` (category, name) `iids` says is new.
    #[allow(clippy::too_many_arguments)]
    fn sequence_packet(
        &mut self,
        sequence_id: u64,
        delta: u64,
        track: Option<u64>,
        kind: u64,
        iids: Iids,
        (category, name): (&[u8], &[u8]),
        annotations: &[u8],
        counter: Option<f64>,
    ) {
        message(&mut self.packets, pb::PACKET, |p| {
            uint(p, pb::PACKET_TIMESTAMP, delta);
            uint(p, pb::PACKET_SEQUENCE_ID, sequence_id);
            uint(
                p,
                pb::PACKET_SEQUENCE_FLAGS,
                pb::SEQ_NEEDS_INCREMENTAL_STATE,
            );
            if iids.new_category || iids.new_name {
                message(p, pb::PACKET_INTERNED_DATA, |d| {
                    if let (true, Some(iid)) = (iids.new_category, iids.category) {
                        message(d, pb::INTERNED_CATEGORIES, |c| {
                            uint(c, pb::INTERNED_IID, iid);
                            pb::bytes(c, pb::INTERNED_NAME, category);
                        });
                    }
                    if let (true, Some(iid)) = (iids.new_name, iids.name) {
                        message(d, pb::INTERNED_NAMES, |c| {
                            uint(c, pb::INTERNED_IID, iid);
                            pb::bytes(c, pb::INTERNED_NAME, name);
                        });
                    }
                });
            }
            message(p, pb::PACKET_TRACK_EVENT, |e| {
                uint(e, pb::EVENT_TYPE, kind);
                if let Some(track) = track {
                    uint(e, pb::EVENT_TRACK_UUID, track);
                }
                if let Some(iid) = iids.category {
                    uint(e, pb::EVENT_CATEGORY_IIDS, iid);
                }
                if let Some(iid) = iids.name {
                    uint(e, pb::EVENT_NAME_IID, iid);
                }
                if let Some(v) = counter {
                    pb::double(e, pb::EVENT_DOUBLE_COUNTER_VALUE, v);
                }
                e.extend_from_slice(annotations);
            });
        });
    }

    /// The first packet of a thread's sequence: clears its state, defines its
    /// incremental clock at `ts` and makes the thread's track the default.
    fn start_sequence(&mut self, seq: &mut Sequence, ts: u64) {
        message(&mut self.packets, pb::PACKET, |p| {
            uint(p, pb::PACKET_SEQUENCE_ID, seq.id);
            uint(
                p,
                pb::PACKET_SEQUENCE_FLAGS,
                pb::SEQ_INCREMENTAL_STATE_CLEARED,
            );
            message(p, pb::PACKET_DEFAULTS, |d| {
                uint(d, pb::DEFAULTS_CLOCK_ID, pb::SEQUENCE_CLOCK);
                message(d, pb::DEFAULTS_TRACK_EVENT, |t| {
                    uint(t, pb::TRACK_EVENT_DEFAULTS_TRACK_UUID, seq.track);
                });
            });
            message(p, pb::PACKET_CLOCK_SNAPSHOT, |s| {
                message(s, pb::SNAPSHOT_CLOCK, |c| {
                    uint(c, pb::CLOCK_ID, pb::SEQUENCE_CLOCK);
                    uint(c, pb::CLOCK_TIMESTAMP, ts);
                    uint(c, pb::CLOCK_IS_INCREMENTAL, 1);
                });
                message(s, pb::SNAPSHOT_CLOCK, |c| {
                    uint(c, pb::CLOCK_ID, pb::CLOCK_MONOTONIC);
                    uint(c, pb::CLOCK_TIMESTAMP, ts);
                });
            });
        });
        seq.last_ts = Some(ts);
    }

    /// Ranges still open at the end are written as begun and never ended.
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.refresh_thread_names(clock::monotonic_ns());
        self.drain()?;
        self.close()
    }

    /// What `finish` writes once the rings are drained.
    fn close(&mut self) -> std::io::Result<()> {
        self.release_held_calls(true);
        let open: Vec<_> = self.open_ranges.drain().collect();
        for ((category, _), range) in open {
            let now = clock::monotonic_ns().max(range.ts);
            let mut annotations = range.annotations;
            annotation(&mut annotations, b"unfinished", Value::U64(1));
            self.range(&category, range.ts, now, &range.name, &annotations);
        }
        self.write_chunk()
    }

    fn write_chunk(&mut self) -> std::io::Result<()> {
        if self.packets.is_empty() {
            return Ok(());
        }
        if std::process::id() != self.owner {
            self.packets.clear();
            return Ok(());
        }
        // Every buffer here lives as long as the writer: freeing large blocks each
        // flush would move glibc's mmap threshold and cost the program page faults.
        let out = &mut self.out;
        out.framed.clear();
        if self.packets.len() < COMPRESS_FROM {
            out.framed.extend_from_slice(&self.packets);
        } else {
            out.deflate.reset();
            out.compressed.clear();
            let compressed = &mut out.compressed;
            compress_to_output(
                &mut out.deflate,
                &self.packets,
                TDEFLFlush::Finish,
                |bytes| {
                    compressed.extend_from_slice(bytes);
                    true
                },
            );
            message(&mut out.framed, pb::PACKET, |p| {
                pb::bytes(p, pb::PACKET_COMPRESSED, &out.compressed)
            });
        }
        self.packets.clear();
        if let Some(link) = &mut self.live {
            link.send(&out.framed, &self.preamble);
            for seq in self.sequences.values_mut() {
                seq.restart();
            }
        }
        match &mut self.file {
            Some(file) => {
                self.totals.bytes_written += out.framed.len() as u64;
                file.write_all(&out.framed)
            }
            None => Ok(()),
        }
    }
}

/// The compressor and the buffers of a flush, kept from one flush to the next.
struct Output {
    deflate: Box<CompressorOxide>,
    compressed: Vec<u8>,
    framed: Vec<u8>,
}

impl Output {
    fn new() -> Output {
        // Level 1 (the stream is mostly interned ids and small deltas), zlib framing
        // (window bits > 0), as Perfetto's `compressed_packets` holds.
        let flags = create_comp_flags_from_zip_params(1, 15, 0);
        Output {
            deflate: Box::new(CompressorOxide::new(flags)),
            compressed: Vec::with_capacity(1 << 16),
            framed: Vec::with_capacity(1 << 16),
        }
    }
}

/// The iids of an event's category and name on its sequence (none for empty text),
/// and which of them the packet must define because the sequence has not seen them.
#[derive(Clone, Copy)]
struct Iids {
    category: Option<u64>,
    name: Option<u64>,
    new_category: bool,
    new_name: bool,
}

impl Iids {
    fn intern(seq: &mut Sequence, category: &[u8], name: &[u8]) -> Iids {
        let (category, new_category) = intern(&mut seq.categories, &mut seq.next_iid, category);
        let (name, new_name) = intern(&mut seq.names, &mut seq.next_iid, name);
        Iids {
            category,
            name,
            new_category,
            new_name,
        }
    }
}

/// The iid of `text` in a sequence's table (none for empty text), and whether it is new.
fn intern(table: &mut Map<Vec<u8>, u64>, next_iid: &mut u64, text: &[u8]) -> (Option<u64>, bool) {
    if text.is_empty() {
        return (None, false);
    }
    if let Some(&iid) = table.get(text) {
        return (Some(iid), false);
    }
    let iid = *next_iid;
    *next_iid += 1;
    table.insert(text.to_vec(), iid);
    (Some(iid), true)
}

/// An integer arg's value.
fn number(value: Value<'_>) -> Option<u64> {
    match value {
        Value::U64(v) => Some(v),
        Value::I64(v) => Some(v as u64),
        Value::F64(_) | Value::Str(_) => None,
    }
}

/// Appends one debug annotation (`TrackEvent.debug_annotations`) for an arg.
fn annotation(out: &mut Vec<u8>, key: &[u8], value: Value<'_>) {
    message(out, pb::EVENT_DEBUG_ANNOTATIONS, |a| {
        pb::bytes(a, pb::ANNOTATION_NAME, key);
        match value {
            Value::U64(v) => uint(a, pb::ANNOTATION_UINT, v),
            Value::I64(v) => uint(a, pb::ANNOTATION_INT, v as u64),
            Value::F64(v) => pb::double(a, pb::ANNOTATION_DOUBLE, v),
            Value::Str(s) => pb::bytes(a, pb::ANNOTATION_STRING, s),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::device::{device_pid, MAX_HELD_CALLS};
    use super::*;
    use crate::event::Builder;

    fn writer() -> Writer {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        Writer::new(file, 4321, b"test", &[])
    }

    fn sequence() -> Sequence {
        Sequence::new(0, 99, 0)
    }

    fn feed(w: &mut Writer, kind: Kind, begin: u64, end: u64, args: &[(&[u8], u64)]) {
        let mut buf = vec![0u8; crate::event::MAX_RECORD];
        let mut b = Builder::new(&mut buf, kind, end, begin, &[b"cuda/kernel"], b"k");
        for &(k, v) in args {
            b.arg(k, Value::U64(v));
        }
        let bytes = b.finish().to_vec();
        let r = Record::parse(&bytes).unwrap();
        w.record(&mut sequence(), 1, &r);
    }

    fn work(w: &mut Writer, device: u64, stream: u64, begin: u64, end: u64) {
        let args: [(&[u8], u64); 2] = [(b"device", device), (b"stream", stream)];
        feed(w, Kind::DeviceSlice, begin, end, &args);
    }

    /// Only the process that made the writer writes its file: in a child forked in the
    /// middle of a drain (from a signal handler), the drain goes on and must write
    /// nothing into the parent's file.
    #[test]
    fn a_writer_writes_nothing_from_a_forked_child() {
        let _one = crate::fork_lock::tests::one_fork_test_at_a_time();
        let path =
            std::env::temp_dir().join(format!("opscope-owner-{}.pftrace", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let mut w = Writer::new(file, 4321, b"test", &[]);
        feed(&mut w, Kind::Instant, 1_000, 1_000, &[]);
        assert!(!w.packets.is_empty());
        let before = std::fs::metadata(&path).unwrap().len();
        // The child writes through the writer it copied.
        let code =
            crate::fork_lock::tests::in_a_child(|| if w.write_chunk().is_ok() { 7 } else { 8 });
        assert_eq!(code, 7);
        let after_child = std::fs::metadata(&path).unwrap().len();
        w.write_chunk().unwrap();
        let after_parent = std::fs::metadata(&path).unwrap().len();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            after_child, before,
            "the child wrote into the parent's file"
        );
        assert!(after_parent > before, "the parent's own write went nowhere");
    }

    /// A label given after the file began (the rank `init_process_group` was given, in
    /// a process `mp.spawn` started) reads back as the source's rank and world size;
    /// a key the launcher's variables gave already keeps their value.
    #[test]
    fn labels_given_later_read_back_and_the_launchers_win() {
        let path =
            std::env::temp_dir().join(format!("opscope-label-{}.pftrace", std::process::id()));
        let read_back = |labels: &[Vec<u8>], later: &[&[u8]]| {
            let file = std::fs::File::create(&path).unwrap();
            let mut w = Writer::new(file, 4321, b"test", labels);
            feed(&mut w, Kind::Instant, 1_000, 1_000, &[]);
            w.write_chunk().unwrap();
            for label in later {
                w.label(label);
            }
            feed(&mut w, Kind::Instant, 2_000, 2_000, &[]);
            w.close().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let mut trace = opscope_model::Trace::new();
            opscope_formats::perfetto::import(&bytes, "label.pftrace", &mut trace).unwrap();
            assert_eq!(trace.processes.len(), 1, "one process, described twice");
            let source = &trace.sources[0];
            (source.rank, source.world_size)
        };
        assert_eq!(read_back(&[], &[]), (None, None));
        assert_eq!(
            read_back(&[], &[b"rank=1", b"world_size=2", b"rank=5"]),
            (Some(1), Some(2))
        );
        assert_eq!(
            read_back(&[b"rank=3".to_vec()], &[b"rank=1", b"world_size=4"]),
            (Some(3), Some(4))
        );
        let _ = std::fs::remove_file(&path);
    }

    /// A thread's own name is read again: PyTorch renames a spawned DataLoader
    /// worker's main thread `pt_data_worker` after its first records (the file kept
    /// "python", and the worker counted its batches as steps). A name a record gave
    /// (ITT, NVTX) stays.
    #[test]
    fn threads_renamed_after_their_first_records_are_described_again() {
        let path =
            std::env::temp_dir().join(format!("opscope-rename-{}.pftrace", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let pid = std::process::id() as i32;
        let mut w = Writer::new(file, pid, b"test", &[]);
        let (tids, tid) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let stopped = std::sync::Arc::new(std::sync::Mutex::new(stopped));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (tids, stopped) = (tids.clone(), stopped.clone());
                std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tids.send(unsafe { libc::gettid() }).unwrap();
                    let _ = stopped.lock().unwrap().recv();
                })
            })
            .collect();
        let (own, given) = (tid.recv().unwrap(), tid.recv().unwrap());
        w.describe_thread(own, 0);
        w.thread_track(given, 0, Some(b"given name"));
        let rename = |tid: i32, name: &str| {
            std::fs::write(format!("/proc/self/task/{tid}/comm"), name).unwrap();
        };
        rename(own, "pt_data_worker");
        rename(given, "other");
        w.refresh_thread_names(clock::monotonic_ns());
        // Not `finish`: its drain would take in what other tests left in their rings.
        w.close().unwrap();
        drop(stop);
        for t in threads {
            t.join().unwrap();
        }
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut trace = opscope_model::Trace::new();
        opscope_formats::perfetto::import(&bytes, "rename.pftrace", &mut trace).unwrap();
        let name_of = |tid: i32| {
            let t = trace
                .threads
                .iter()
                .find(|t| t.tid == i64::from(tid))
                .unwrap_or_else(|| panic!("thread {tid}"));
            t.name.map(|n| trace.str(n).to_string())
        };
        assert_eq!(name_of(own).as_deref(), Some("pt_data_worker"));
        assert_eq!(name_of(given).as_deref(), Some("given name"));
    }

    /// Compact begins name their slices by ids the thread defined; the writer interns
    /// each definition once and then writes only iids: every slice read back must still
    /// carry its own name, also after a begin earlier than the sequence's clock (written
    /// absolute), when two ids share a category, and after an id is defined again for
    /// another name (a thread's name cache reuses a slot's id when a name takes the slot).
    #[test]
    fn compact_begins_keep_their_names_read_back() {
        let path =
            std::env::temp_dir().join(format!("opscope-compact-{}.pftrace", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let mut w = Writer::new(file, 4321, b"test", &[]);
        let mut seq = sequence();
        let mut buf = vec![0u8; crate::event::MAX_RECORD];
        let mut define = |w: &mut Writer, seq: &mut Sequence, id: u64, name: &[u8]| {
            let bytes = Builder::new(
                &mut buf,
                Kind::DefineName,
                0,
                id,
                &[b"itt/", b"PyTorch"],
                name,
            )
            .times_in_ns()
            .finish()
            .to_vec();
            w.record(seq, 1, &Record::parse(&bytes).unwrap());
        };
        define(&mut w, &mut seq, 1, b"aten::conv2d");
        define(&mut w, &mut seq, 2, b"aten::relu");
        let mut compact_buf = vec![0u8; crate::event::MAX_RECORD];
        let mut compact_record = |w: &mut Writer, seq: &mut Sequence, kind, id, ts| {
            let len = crate::event::compact(&mut compact_buf, kind, id, ts);
            let mut r = Record::parse(&compact_buf[..len]).unwrap();
            r.ts = ts; // already nanoseconds here: no tick conversion
            w.record(seq, 1, &r);
        };
        let mut slice = |w: &mut Writer, seq: &mut Sequence, id, ts| {
            compact_record(w, seq, Kind::BeginNamed, id, ts);
            compact_record(w, seq, Kind::End, 0, ts + 100);
        };
        let expected = [
            (1, 1_000),
            (2, 2_000),
            (1, 3_000),
            (2, 4_000),
            (2, 500),
            (1, 5_000),
        ];
        for &(id, ts) in &expected {
            slice(&mut w, &mut seq, id, ts);
        }
        define(&mut w, &mut seq, 1, b"aten::linear");
        slice(&mut w, &mut seq, 1, 6_000);
        slice(&mut w, &mut seq, 2, 7_000);
        w.sequences.insert(0, seq);
        // Not `finish`: its drain would take in what other tests left in their rings.
        w.close().unwrap();

        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut trace = opscope_model::Trace::new();
        opscope_formats::perfetto::import(&bytes, "compact.pftrace", &mut trace).unwrap();
        let s = &trace.slices;
        let mut read: Vec<(String, i64, i64)> = (0..s.len())
            .map(|i| (trace.str(s.name[i]).to_string(), s.ts[i], s.end(i)))
            .collect();
        read.sort_by_key(|r| r.1);
        let mut want: Vec<(String, i64, i64)> = expected
            .iter()
            .map(|&(id, ts)| {
                let name = if id == 1 {
                    "aten::conv2d"
                } else {
                    "aten::relu"
                };
                (name.to_string(), ts as i64, ts as i64 + 100)
            })
            .collect();
        want.push(("aten::linear".to_string(), 6_000, 6_100));
        want.push(("aten::relu".to_string(), 7_000, 7_100));
        want.sort_by_key(|r| r.1);
        assert_eq!(read, want);
        for i in 0..s.len() {
            assert_eq!(trace.str(s.category[i]), "itt/PyTorch");
        }
    }

    /// Streaming to the agent, each chunk with the preamble alone reads back whole:
    /// names interned in an earlier chunk and the sequence's clock are defined again.
    #[test]
    fn live_chunks_read_back_without_the_chunks_before_them() {
        use std::io::Read;
        let dir = std::env::temp_dir().join(format!("opscope-live-w-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let hello = crate::live::Hello::default();
        let path = std::os::unix::ffi::OsStrExt::as_bytes(socket.as_os_str());
        let link = Link::to(path, &hello).unwrap();
        let mut w = Writer::new_with(None, Some(link), 4321, b"test", &[]);
        let mut buf = vec![0u8; crate::event::MAX_RECORD];
        let mut seq = sequence();
        let mut slice = |w: &mut Writer, seq: &mut Sequence, name: &[u8], ts: u64| {
            let begin = Builder::new(&mut buf, Kind::Begin, 0, 0, &[b"itt/", b"PyTorch"], name)
                .times_in_ns()
                .finish()
                .to_vec();
            let mut r = Record::parse(&begin).unwrap();
            r.ts = ts;
            w.record(seq, 1, &r);
            let end = Builder::new(&mut buf, Kind::End, 0, 0, &[], b"")
                .times_in_ns()
                .finish()
                .to_vec();
            let mut r = Record::parse(&end).unwrap();
            r.ts = ts + 10;
            w.record(seq, 1, &r);
        };
        let chunks: [&[(&[u8], u64)]; 3] = [
            &[(b"aten::mm", 1_000), (b"aten::add", 2_000)],
            &[(b"aten::mm", 3_000), (b"aten::relu", 4_000)],
            &[(b"aten::add", 5_000)],
        ];
        for chunk in chunks {
            for &(name, ts) in chunk {
                slice(&mut w, &mut seq, name, ts);
            }
            w.sequences.insert(0, seq);
            w.write_chunk().unwrap();
            seq = w.sequences.remove(&0).unwrap();
        }
        let (mut peer, _) = listener.accept().unwrap();
        drop(w);
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let mut preamble = Vec::new();
        let mut read_chunks = Vec::new();
        let mut rest = &got[..];
        while !rest.is_empty() {
            let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            let (kind, body) = (rest[4], &rest[5..4 + len]);
            match kind {
                opscope_wire::frame::PREAMBLE => preamble = body.to_vec(),
                opscope_wire::frame::CHUNK => read_chunks.push(body[8..].to_vec()),
                _ => {}
            }
            rest = &rest[4 + len..];
        }
        // The first chunk is the writer's own start (process track), then ours.
        let ours = &read_chunks[read_chunks.len() - 3..];
        for (chunk, want) in ours.iter().zip(chunks) {
            let mut bytes = preamble.clone();
            bytes.extend_from_slice(chunk);
            let mut trace = opscope_model::Trace::new();
            opscope_formats::perfetto::import(&bytes, "chunk.pftrace", &mut trace).unwrap();
            let s = &trace.slices;
            let mut read: Vec<(String, i64, i64)> = (0..s.len())
                .map(|i| (trace.str(s.name[i]).to_string(), s.ts[i], s.end(i)))
                .collect();
            read.sort_by_key(|r| r.1);
            let want: Vec<(String, i64, i64)> = want
                .iter()
                .map(|&(n, ts)| {
                    let n = String::from_utf8(n.to_vec()).unwrap();
                    (n, ts as i64, ts as i64 + 10)
                })
                .collect();
            assert_eq!(read, want);
            assert_eq!(trace.processes.len(), 1);
        }
    }

    #[test]
    fn a_streams_work_shares_one_track_unless_it_overlaps() {
        let mut w = writer();
        // Out of order within a drain, touching: one track.
        work(&mut w, 0, 7, 10, 20);
        work(&mut w, 0, 7, 0, 10);
        work(&mut w, 0, 7, 20, 20);
        w.place_device_work();
        assert_eq!(w.streams[&(0, 7)].len(), 1);
        // Earlier than what was placed (a later drain): a lane.
        work(&mut w, 0, 7, 5, 8);
        w.place_device_work();
        assert_eq!(w.streams[&(0, 7)].len(), 2);
        // Overlapping work of another stream: a lane; the first free one is reused.
        work(&mut w, 1, 9, 0, 100);
        work(&mut w, 1, 9, 50, 150);
        work(&mut w, 1, 9, 150, 160);
        w.place_device_work();
        assert_eq!(w.streams[&(1, 9)].len(), 2);
        assert_eq!(w.devices.len(), 2);
        // Device processes get pids no process can have, distinct per device.
        assert!(device_pid(4321, 0) > 1 << 22);
        assert_ne!(device_pid(4321, 0), device_pid(4321, 1));
        assert_ne!(device_pid(4321, 0), device_pid(4322, 0));
    }

    #[test]
    fn held_calls_are_written_when_their_work_comes_or_when_too_many() {
        let mut w = writer();
        let call = |w: &mut Writer, correlation: u64| {
            let args: [(&[u8], u64); 2] = [(b"thread", 1), (b"correlation", correlation)];
            feed(w, Kind::ApiSlice, 0, 1, &args);
        };
        for c in 1..=(MAX_HELD_CALLS as u64 + 10) {
            call(&mut w, c);
        }
        call(&mut w, 0); // no correlation: written at once
        assert_eq!(w.held_calls.len(), MAX_HELD_CALLS + 10);
        let args: [(&[u8], u64); 3] = [(b"device", 0), (b"stream", 1), (b"correlation", 20)];
        feed(&mut w, Kind::DeviceSlice, 5, 6, &args);
        w.place_device_work();
        assert!(!w.held_calls.contains_key(&20), "matched and written");
        w.release_held_calls(false);
        assert_eq!(w.held_calls.len(), MAX_HELD_CALLS);
        assert!(!w.held_calls.contains_key(&1), "the oldest go first");
        w.release_held_calls(true);
        assert!(w.held_calls.is_empty());
        assert!(w.held_order.is_empty());
    }

    #[test]
    fn lane_fitting_agrees_with_checking_every_span() {
        let mut state = 7u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut lane: Vec<(u64, u64)> = Vec::new();
        let mut spans = BTreeSet::new();
        for _ in 0..5000 {
            let begin = next(1000);
            let end = begin + next(4) * next(20);
            let slow = lane.iter().all(|&(b, e)| end <= b || begin >= e);
            assert_eq!(fits(&spans, begin, end), slow, "[{begin}, {end}]");
            if slow {
                lane.push((begin, end));
                spans.insert((begin, end));
            }
        }
        assert!(lane.len() > 100);
    }
}
