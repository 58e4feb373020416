//! [`Trace`]: the whole model, its builder methods for importers and its look-ups for
//! analyses.

use hashbrown::HashMap;
use std::ops::Range;

use crate::args::Args;
use crate::clock::{ClockDomain, ClockId};
use crate::dims::*;
use crate::events::*;
use crate::samples::{StackSamples, Stacks};
use crate::strings::{StrId, StringTable};
use crate::NONE;

/// What [`Trace::finish`] and the importers repaired or could not place, so that
/// `opscope info` can say so instead of keeping it silently.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepairCounts {
    /// Slices with a negative duration, set to 0.
    pub negative_durations: u64,
    /// Slices on a thread track that overlapped a sibling or outlived their parent;
    /// their end was clipped to the enclosing slice's end.
    pub clipped_overlaps: u64,
    /// Rows referring to a track that does not exist; dropped.
    pub dangling_references: u64,
    /// Begins never ended (`B` with no `E`, `b` with no `e`, a cut trace); closed at
    /// the end of the trace (Perfetto: the last time on their track).
    pub unmatched_begins: u64,
    /// Ends (`E`/`e`) with nothing open; dropped.
    pub unmatched_ends: u64,
    /// Flow events bound to no slice, or with no partner in their chain (an end or
    /// step with no start, a start that nothing continues); their flows are dropped.
    pub unbound_flow_events: u64,
    /// Events the importer could not read (missing fields, wrong types); dropped.
    pub malformed_events: u64,
    /// Events of a kind the model does not hold (Chrome clock syncs, memory dumps,
    /// unknown metadata); skipped.
    pub unsupported_events: u64,
}

impl RepairCounts {
    pub fn total(&self) -> u64 {
        self.negative_durations
            + self.clipped_overlaps
            + self.dangling_references
            + self.unmatched_begins
            + self.unmatched_ends
            + self.unbound_flow_events
            + self.malformed_events
            + self.unsupported_events
    }
}

/// Keys under which importers find or create tracks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
enum TrackKey {
    Thread(ThreadId),
    Named(Option<ProcessId>, TrackKind, StrId, u64),
}

/// Everything loaded, on one nanosecond clock.
/// How much an import may add to a model: see [`Trace::reserve`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Room {
    pub slices: usize,
    pub instants: usize,
    pub args_bytes: usize,
}

#[derive(Clone, Default, Debug, serde::Serialize, serde::Deserialize)]
pub struct Trace {
    pub strings: StringTable,
    pub args: Args,
    pub sources: Vec<Source>,
    pub clocks: Vec<ClockDomain>,
    pub processes: Vec<Process>,
    pub threads: Vec<Thread>,
    pub devices: Vec<Device>,
    pub tracks: Vec<Track>,
    pub slices: Slices,
    pub instants: Instants,
    pub counters: CounterSamples,
    pub flows: Flows,
    /// Sampled call stacks on the thread tracks, and the stack tree they point into.
    pub samples: StackSamples,
    pub stacks: Stacks,
    pub repairs: RepairCounts,
    /// Slices and instants whose category no importer rule knew, by category; they are
    /// kept as kind `Other`.
    pub unknown_categories: HashMap<StrId, u64>,
    /// Problems an importer met and worked around, one line each, for the user.
    pub warnings: Vec<(SourceId, String)>,
    /// `track_slices[t]` is the range of slice rows on track `t` (valid after `finish`).
    track_slices: Vec<Range<u32>>,
    process_index: HashMap<(SourceId, i64), ProcessId>,
    thread_index: HashMap<(ProcessId, i64), ThreadId>,
    track_index: HashMap<TrackKey, TrackId>,
    device_index: HashMap<(SourceId, DeviceKind, u32), DeviceId>,
}

/// How the warning begins that marks a source whose file ended in an error and was
/// kept in part (`--partial`, or one file of a directory): what came after the error is
/// missing, so the end of its data is no end of its run.
pub const CUT_SHORT: &str = "cut short: ";

impl Trace {
    pub fn new() -> Trace {
        Trace::default()
    }

    /// Whether `source`'s file was cut short ([`CUT_SHORT`]).
    pub fn is_cut(&self, source: SourceId) -> bool {
        self.warnings
            .iter()
            .any(|(s, w)| *s == source && w.starts_with(CUT_SHORT))
    }

    pub fn intern(&mut self, s: &str) -> StrId {
        self.strings.intern(s)
    }

    pub fn str(&self, id: StrId) -> &str {
        self.strings.get(id)
    }

    pub fn add_clock(&mut self, clock: ClockDomain) -> ClockId {
        self.clocks.push(clock);
        ClockId(self.clocks.len() as u32 - 1)
    }

    pub fn add_source(&mut self, source: Source) -> SourceId {
        self.sources.push(source);
        SourceId(self.sources.len() as u32 - 1)
    }

    /// The process `pid` of `source`, created on first use.
    pub fn process(&mut self, source: SourceId, pid: i64) -> ProcessId {
        if let Some(&p) = self.process_index.get(&(source, pid)) {
            return p;
        }
        let id = ProcessId(self.processes.len() as u32);
        self.processes.push(Process {
            source,
            pid,
            name: None,
            labels: None,
            sort_index: None,
            device: None,
        });
        self.process_index.insert((source, pid), id);
        id
    }

    /// The thread `tid` of `process`, created on first use.
    pub fn thread(&mut self, process: ProcessId, tid: i64) -> ThreadId {
        if let Some(&t) = self.thread_index.get(&(process, tid)) {
            return t;
        }
        let id = ThreadId(self.threads.len() as u32);
        self.threads.push(Thread {
            process,
            tid,
            name: None,
            sort_index: None,
            handle: None,
        });
        self.thread_index.insert((process, tid), id);
        id
    }

    pub fn device(&mut self, source: SourceId, kind: DeviceKind, index: u32) -> DeviceId {
        if let Some(&d) = self.device_index.get(&(source, kind, index)) {
            return d;
        }
        let id = DeviceId(self.devices.len() as u32);
        self.devices.push(Device {
            source,
            kind,
            index,
            name: None,
        });
        self.device_index.insert((source, kind, index), id);
        id
    }

    /// The track of a thread, created on first use with `kind` (`Thread` or `GpuStream`).
    pub fn thread_track(&mut self, thread: ThreadId, kind: TrackKind) -> TrackId {
        let key = TrackKey::Thread(thread);
        if let Some(&t) = self.track_index.get(&key) {
            return t;
        }
        let process = self.threads[thread.index()].process;
        let device = self.processes[process.index()].device;
        self.new_track(
            key,
            Track {
                kind,
                name: StrId::EMPTY,
                process: Some(process),
                thread: Some(thread),
                device,
            },
        )
    }

    /// A named track that is not a thread (counter, async lane), created on first use.
    /// `lane` tells apart tracks of one name (e.g. an async id).
    pub fn named_track(
        &mut self,
        process: Option<ProcessId>,
        kind: TrackKind,
        name: StrId,
        lane: u64,
    ) -> TrackId {
        let key = TrackKey::Named(process, kind, name, lane);
        if let Some(&t) = self.track_index.get(&key) {
            return t;
        }
        let device = process.and_then(|p| self.processes[p.index()].device);
        self.new_track(
            key,
            Track {
                kind,
                name,
                process,
                thread: None,
                device,
            },
        )
    }

    fn new_track(&mut self, key: TrackKey, track: Track) -> TrackId {
        let id = TrackId(self.tracks.len() as u32);
        self.tracks.push(track);
        self.track_index.insert(key, id);
        id
    }

    /// Counts a slice or instant kept as `Other` because its category was unknown.
    pub fn note_unknown_category(&mut self, category: StrId) {
        *self.unknown_categories.entry(category).or_default() += 1;
    }

    /// Slice rows of a track, in time order (valid after [`Trace::finish`]).
    pub fn track_slices(&self, track: TrackId) -> Range<usize> {
        self.track_slices
            .get(track.index())
            .map(|r| r.start as usize..r.end as usize)
            .unwrap_or(0..0)
    }

    /// The deepest slice on `track` that contains `ts` (start and end inclusive).
    pub fn enclosing_slice(&self, track: TrackId, ts: i64) -> Option<u32> {
        let range = self.track_slices(track);
        // Last slice starting at or before ts; among equal starts the shortest (deepest)
        // sorts last.
        let n = self.slices.ts[range.clone()].partition_point(|&s| s <= ts);
        self.enclosing_of(range.start, n, ts)
    }

    /// The first slice on `track` starting at or after `ts`.
    pub fn next_slice(&self, track: TrackId, ts: i64) -> Option<u32> {
        let range = self.track_slices(track);
        let n = self.slices.ts[range.clone()].partition_point(|&s| s < ts);
        (range.start + n < range.end).then_some((range.start + n) as u32)
    }

    /// [`Self::enclosing_slice`] for look-ups that come in about time order, as a
    /// trace's flow events do: the search starts where `finger` left the last one on
    /// this track, and costs the log of the distance from there instead of the log of
    /// the track's length (whose rows a binary search misses the cache on).
    pub fn enclosing_slice_near(
        &self,
        track: TrackId,
        ts: i64,
        finger: &mut Finger,
    ) -> Option<u32> {
        let range = self.track_slices(track);
        let n = partition_point_near(&self.slices.ts[range.clone()], finger.at(track), |s| {
            s <= ts
        });
        finger.set(track, n);
        self.enclosing_of(range.start, n, ts)
    }

    /// [`Self::next_slice`] for look-ups in about time order (see
    /// [`Self::enclosing_slice_near`]).
    pub fn next_slice_near(&self, track: TrackId, ts: i64, finger: &mut Finger) -> Option<u32> {
        let range = self.track_slices(track);
        let n = partition_point_near(&self.slices.ts[range.clone()], finger.at(track), |s| s < ts);
        finger.set(track, n);
        (range.start + n < range.end).then_some((range.start + n) as u32)
    }

    /// The deepest slice containing `ts` among the first `n` of a track's rows (from row
    /// `first`) and their ancestors: the last of them, or the nearest ancestor that
    /// still runs at `ts`.
    fn enclosing_of(&self, first: usize, n: usize, ts: i64) -> Option<u32> {
        if n == 0 {
            return None;
        }
        let mut i = (first + n - 1) as u32;
        loop {
            if self.slices.end(i as usize) >= ts {
                return Some(i);
            }
            i = self.slices.parent[i as usize];
            if i == NONE {
                return None;
            }
        }
    }

    /// Sorts slices by track and time, computes nesting, repairs what breaks the
    /// invariants and counts the repairs. Importers call it when done; it is cheap to
    /// call again.
    pub fn finish(&mut self) {
        crate::repair::finish(self);
    }

    pub(crate) fn set_track_slices(&mut self, ranges: Vec<Range<u32>>) {
        self.track_slices = ranges;
    }

    /// First and last timestamp of any event, if there is one.
    pub fn time_span(&self) -> Option<(i64, i64)> {
        let mut lo = i64::MAX;
        let mut hi = i64::MIN;
        for (&ts, &dur) in self.slices.ts.iter().zip(self.slices.dur.iter()) {
            lo = lo.min(ts);
            hi = hi.max(ts.saturating_add(dur));
        }
        for &t in self
            .instants
            .ts
            .iter()
            .chain(&self.counters.ts)
            .chain(&self.samples.ts)
        {
            lo = lo.min(t);
            hi = hi.max(t);
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// Bytes of memory the model holds (the event tables, strings and args; not the
    /// small dimension tables' look-up maps).
    pub fn heap_bytes(&self) -> usize {
        self.strings.heap_bytes()
            + self.args.heap_bytes()
            + self.slices.heap_bytes()
            + self.instants.heap_bytes()
            + self.counters.heap_bytes()
            + self.flows.heap_bytes()
            + self.samples.heap_bytes()
            + self.stacks.heap_bytes()
            + self.track_slices.capacity() * 8
            + self.tracks.capacity() * std::mem::size_of::<Track>()
            + self.threads.capacity() * std::mem::size_of::<Thread>()
            + self.processes.capacity() * std::mem::size_of::<Process>()
    }

    /// Whether the import indexes point into the tables (a model read back could
    /// differ).
    pub(crate) fn check_indexes(&self) -> Result<(), String> {
        let ok = self
            .process_index
            .values()
            .all(|p| p.index() < self.processes.len())
            && self
                .thread_index
                .values()
                .all(|t| t.index() < self.threads.len())
            && self
                .track_index
                .values()
                .all(|t| t.index() < self.tracks.len())
            && self
                .device_index
                .values()
                .all(|d| d.index() < self.devices.len());
        if ok {
            Ok(())
        } else {
            Err("an import index points past its table".into())
        }
    }

    /// The address ranges of the event tables' spare capacity (into `out`, cleared
    /// first): memory allocated for rows not yet pushed, which the kernel maps in when
    /// the first row lands on each page. An importer whose other thread has nothing to
    /// do may have it map them in ahead (`madvise(MADV_POPULATE_WRITE)`), which keeps
    /// every byte as it was.
    pub fn spare_capacity(&self, out: &mut Vec<Range<usize>>) {
        out.clear();
        self.slices.spare_capacity(out);
        self.instants.spare_capacity(out);
        self.counters.spare_capacity(out);
        self.flows.spare_capacity(out);
        self.args.spare_capacity(out);
    }

    /// Room for at least this many more slices, instants and bytes of args, for an
    /// importer that knows how large its input can grow the model. Growing a column
    /// moves it (`mremap`), which stops every thread of the process while the old
    /// mapping is flushed from each CPU; reserving first keeps a multi-threaded import
    /// from doing that while its other thread runs. Capacity never touched costs
    /// address space only, and [`Trace::shrink_to_fit`] gives it back.
    pub fn reserve(&mut self, room: Room) {
        self.slices.reserve(room.slices);
        self.instants.reserve(room.instants);
        self.args.reserve(room.args_bytes);
    }

    /// Gives back spare capacity of the growable tables.
    pub fn shrink_to_fit(&mut self) {
        self.slices.shrink_to_fit();
        self.args.shrink_to_fit();
        self.instants.shrink_to_fit();
        self.counters.shrink_to_fit();
        self.flows.shrink_to_fit();
        self.samples.shrink_to_fit();
        self.stacks.shrink_to_fit();
        self.strings.shrink_to_fit();
        self.track_slices.shrink_to_fit();
        self.tracks.shrink_to_fit();
        self.threads.shrink_to_fit();
        self.processes.shrink_to_fit();
    }

    /// Makes the processes of `sources` that share a pid one process, and their threads
    /// that share a tid one thread: for files written on one machine over one run (an
    /// `opscope record` session: the recorded program's own file and the process
    /// sampler's), where a pid names one process. The first process and thread met
    /// stay, with the first name any of them had; tracks and the import indexes follow.
    /// Process and thread ids change: call it before anything holds one.
    /// Gives `process` the pid another file knows it by (an XPlane's host plane has
    /// none of its own), keeping the import index on it.
    pub fn set_pid(&mut self, process: ProcessId, pid: i64) {
        let p = &mut self.processes[process.index()];
        if self.process_index.get(&(p.source, p.pid)) == Some(&process) {
            self.process_index.remove(&(p.source, p.pid));
        }
        p.pid = pid;
        self.process_index.entry((p.source, pid)).or_insert(process);
    }

    /// Gives a thread the tid another source knows it by (see [`Trace::set_pid`]).
    pub fn set_tid(&mut self, thread: ThreadId, tid: i64) {
        let t = &mut self.threads[thread.index()];
        if self.thread_index.get(&(t.process, t.tid)) == Some(&thread) {
            self.thread_index.remove(&(t.process, t.tid));
        }
        t.tid = tid;
        self.thread_index.entry((t.process, tid)).or_insert(thread);
    }

    pub fn unite_processes(&mut self, sources: &[SourceId]) {
        let mut first_of_pid: HashMap<i64, ProcessId> = HashMap::new();
        let mut process_to = Vec::with_capacity(self.processes.len());
        let mut kept_processes = Vec::with_capacity(self.processes.len());
        for (i, p) in self.processes.iter().enumerate() {
            let old = ProcessId(i as u32);
            let united = sources
                .contains(&p.source)
                .then(|| *first_of_pid.entry(p.pid).or_insert(old));
            match united {
                Some(first) if first != old => {
                    let to: ProcessId = process_to[first.index()];
                    let kept: &mut Process = &mut kept_processes[to.index()];
                    // The longest name: a command line rather than a profile's name for
                    // its host plane (`/host:CPU`) or a program's short name.
                    let length = |n: Option<StrId>| n.map_or(0, |n| self.strings.get(n).len());
                    if length(p.name) > length(kept.name) {
                        kept.name = p.name;
                    }
                    kept.labels = kept.labels.or(p.labels);
                    kept.device = kept.device.or(p.device);
                    process_to.push(to);
                }
                _ => {
                    process_to.push(ProcessId(kept_processes.len() as u32));
                    kept_processes.push(p.clone());
                }
            }
        }
        if kept_processes.len() == self.processes.len() {
            return;
        }
        let mut first_of_thread: HashMap<(ProcessId, i64), ThreadId> = HashMap::new();
        let mut thread_to = Vec::with_capacity(self.threads.len());
        let mut kept_threads: Vec<Thread> = Vec::with_capacity(self.threads.len());
        for t in &self.threads {
            let process = process_to[t.process.index()];
            match first_of_thread.get(&(process, t.tid)) {
                Some(&to) => {
                    let kept = &mut kept_threads[to.index()];
                    kept.name = kept.name.or(t.name);
                    kept.sort_index = kept.sort_index.or(t.sort_index);
                    kept.handle = kept.handle.or(t.handle);
                    thread_to.push(to);
                }
                None => {
                    let to = ThreadId(kept_threads.len() as u32);
                    first_of_thread.insert((process, t.tid), to);
                    thread_to.push(to);
                    kept_threads.push(Thread {
                        process,
                        ..t.clone()
                    });
                }
            }
        }
        for track in &mut self.tracks {
            track.process = track.process.map(|p| process_to[p.index()]);
            track.thread = track.thread.map(|t| thread_to[t.index()]);
        }
        for p in self.process_index.values_mut() {
            *p = process_to[p.index()];
        }
        self.thread_index = std::mem::take(&mut self.thread_index)
            .into_iter()
            .map(|((p, tid), t)| ((process_to[p.index()], tid), thread_to[t.index()]))
            .collect();
        let mut track_index = HashMap::with_capacity(self.track_index.len());
        for (key, track) in std::mem::take(&mut self.track_index) {
            let key = match key {
                TrackKey::Thread(t) => TrackKey::Thread(thread_to[t.index()]),
                TrackKey::Named(p, kind, name, id) => {
                    TrackKey::Named(p.map(|p| process_to[p.index()]), kind, name, id)
                }
            };
            // Two tracks of one united thread: the index keeps one, and
            // `merge_thread_tracks` moves the other's events onto it.
            track_index.entry(key).or_insert(track);
        }
        self.track_index = track_index;
        self.processes = kept_processes;
        self.threads = kept_threads;
        self.merge_thread_tracks();
    }

    /// The thread tracks of one kind of one thread (its files' tracks, once their
    /// processes are united) become one, so that what ran on the thread nests as one
    /// stack: a oneDNN primitive inside the TensorFlow op that ran it, not beside it
    /// with its time counted twice. The emptied tracks stay (ids held elsewhere stay
    /// valid) with nothing on them.
    fn merge_thread_tracks(&mut self) {
        let mut first: HashMap<(ThreadId, TrackKind), u32> = HashMap::new();
        let mut track_to: Vec<u32> = Vec::with_capacity(self.tracks.len());
        let mut moved = false;
        for (i, track) in self.tracks.iter().enumerate() {
            let to = match track.thread {
                Some(th) => *first.entry((th, track.kind)).or_insert(i as u32),
                None => i as u32,
            };
            moved |= to != i as u32;
            track_to.push(to);
        }
        if !moved {
            return;
        }
        for t in self
            .slices
            .track
            .iter_mut()
            .chain(self.instants.track.iter_mut())
            .chain(self.counters.track.iter_mut())
            .chain(self.samples.track.iter_mut())
        {
            *t = track_to[*t as usize];
        }
        for t in self.track_index.values_mut() {
            *t = TrackId(track_to[t.index()]);
        }
        // Sorted and nested again as one track.
        self.finish();
    }
}

/// Where the last look-up of [`Trace::enclosing_slice_near`] or
/// [`Trace::next_slice_near`] ended on each track: the next one starts there.
#[derive(Clone, Debug, Default)]
pub struct Finger {
    rows: Vec<usize>,
}

impl Finger {
    fn at(&self, track: TrackId) -> usize {
        self.rows.get(track.index()).copied().unwrap_or(0)
    }

    fn set(&mut self, track: TrackId, row: usize) {
        let t = track.index();
        if t >= self.rows.len() {
            self.rows.resize(t + 1, 0);
        }
        self.rows[t] = row;
    }
}

/// `v.partition_point(pred)` (`pred` holds on a prefix of `v`), searched outward from
/// `from` in doubling steps, then by halves between the last two probes.
fn partition_point_near(v: &[i64], from: usize, pred: impl Fn(i64) -> bool) -> usize {
    let n = v.len();
    let from = from.min(n);
    // `pred` holds below `lo`, and fails from `hi` on.
    let (mut lo, mut hi);
    if from < n && pred(v[from]) {
        lo = from + 1;
        let mut step = 1;
        loop {
            let probe = from.saturating_add(step);
            if probe >= n {
                hi = n;
                break;
            }
            if !pred(v[probe]) {
                hi = probe;
                break;
            }
            lo = probe + 1;
            step *= 2;
        }
    } else {
        hi = from;
        let mut step = 1;
        loop {
            if step > from {
                lo = 0;
                break;
            }
            let probe = from - step;
            if pred(v[probe]) {
                lo = probe + 1;
                break;
            }
            hi = probe;
            step *= 2;
        }
    }
    lo + v[lo..hi].partition_point(|&s| pred(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ArgsId;

    fn source(trace: &mut Trace, path: &str) -> SourceId {
        trace.add_source(Source {
            path: path.into(),
            format: "perfetto".into(),
            clock: ClockId(0),
            host: None,
            rank: None,
            world_size: None,
            metadata: ArgsId::NONE,
        })
    }

    /// The search from a finger finds what a binary search finds, from any finger, on
    /// runs of equal values, at both ends and on empty slices.
    #[test]
    fn searches_near_a_finger_find_the_partition_point() {
        let mut next = crate::testing::numbers(0x853c_49e6_748f_ea9bu64);
        for _ in 0..3000 {
            let len = next(70) as usize;
            let mut v: Vec<i64> = (0..len).map(|_| next(40) as i64).collect();
            v.sort();
            for _ in 0..20 {
                let (from, t) = (next(len as u64 + 5) as usize, next(44) as i64 - 2);
                for pred in [|s: i64, t: i64| s <= t, |s: i64, t: i64| s < t] {
                    assert_eq!(
                        partition_point_near(&v, from, |s| pred(s, t)),
                        v.partition_point(|&s| pred(s, t)),
                        "{v:?} from {from} t {t}"
                    );
                }
            }
        }
    }

    /// Look-ups through a finger, in any order and across tracks, find the slices a
    /// scan of the track finds.
    #[test]
    fn look_ups_near_a_finger_find_what_a_scan_finds() {
        let mut trace = Trace::new();
        let src = source(&mut trace, "t.json");
        let p = trace.process(src, 1);
        let tracks: Vec<TrackId> = (0..3)
            .map(|tid| {
                let t = trace.thread(p, tid);
                trace.thread_track(t, TrackKind::Thread)
            })
            .collect();
        let mut next = crate::testing::numbers(0x2545_f491_4f6c_dd1du64);
        for i in 0..3000i64 {
            let track = tracks[next(3) as usize];
            // Nested and overlapping slices, ties among their starts.
            trace.slices.push(SliceRow {
                track,
                ts: i / 2 * 10,
                dur: next(60) as i64,
                name: StrId::EMPTY,
                category: StrId::EMPTY,
                kind: crate::SliceKind::Op,
                args: ArgsId::NONE,
            });
        }
        trace.finish();
        // By a scan of the track's rows.
        let scanned = |track: TrackId, ts: i64| {
            let rows = trace.track_slices(track);
            let next = rows.clone().find(|&i| trace.slices.ts[i] >= ts);
            let mut enclosing = rows.rev().find(|&i| trace.slices.ts[i] <= ts);
            while let Some(i) = enclosing.filter(|&i| trace.slices.end(i) < ts) {
                let parent = trace.slices.parent[i];
                enclosing = (parent != NONE).then_some(parent as usize);
            }
            (enclosing.map(|i| i as u32), next.map(|i| i as u32))
        };
        let mut finger = Finger::default();
        for n in 0..20_000u64 {
            let track = tracks[next(3) as usize];
            // Mostly forward in time, sometimes far back.
            let ts = if n % 7 == 0 {
                next(16_000) as i64 - 100
            } else {
                (n as i64 * 3 / 4) + next(30) as i64
            };
            let (enclosing, next) = scanned(track, ts);
            assert_eq!(
                trace.enclosing_slice_near(track, ts, &mut finger),
                enclosing
            );
            assert_eq!(trace.next_slice_near(track, ts, &mut finger), next);
            assert_eq!(trace.enclosing_slice(track, ts), enclosing);
            assert_eq!(trace.next_slice(track, ts), next);
        }
    }

    /// A thread that two files describe (a framework's op on one, the library call
    /// inside it on the other) is one stack once united: the call nests in the op, so
    /// the op's self time no longer includes it.
    #[test]
    fn a_united_threads_tracks_become_one_stack() {
        let mut trace = Trace::new();
        let (recorded, profiled) = (
            source(&mut trace, "s/opscope-7.pftrace"),
            source(&mut trace, "s/framework.xplane.pb"),
        );
        let row = |track, ts, dur, name| SliceRow {
            track,
            ts,
            dur,
            name,
            category: StrId::EMPTY,
            kind: crate::SliceKind::Op,
            args: ArgsId::NONE,
        };
        let (op, call) = (trace.intern("Conv2D"), trace.intern("convolution"));
        let p = trace.process(recorded, 7);
        let t = trace.thread(p, 8);
        let call_track = trace.thread_track(t, TrackKind::Thread);
        trace.slices.push(row(call_track, 120, 50, call));
        let q = trace.process(profiled, 7);
        let u = trace.thread(q, 8);
        let op_track = trace.thread_track(u, TrackKind::Thread);
        trace.slices.push(row(op_track, 100, 100, op));
        trace.finish();
        assert_ne!(call_track, op_track);

        trace.unite_processes(&[recorded, profiled]);

        assert_eq!(trace.threads.len(), 1);
        let tracks: Vec<u32> = trace.slices.track.to_vec();
        assert_eq!(tracks, vec![call_track.0; 2], "both on the first track");
        let range = trace.track_slices(call_track);
        assert_eq!(range.len(), 2);
        let names: Vec<StrId> = range.clone().map(|i| trace.slices.name[i]).collect();
        assert_eq!(names, vec![op, call], "sorted by time");
        assert_eq!(trace.slices.parent[range.start + 1], range.start as u32);
        assert!(trace.track_slices(op_track).is_empty());
        assert_eq!(trace.repairs.total(), 0);
    }

    #[test]
    fn processes_of_one_run_with_one_pid_become_one() {
        let mut trace = Trace::new();
        let (program, sampler, elsewhere) = (
            source(&mut trace, "s/opscope-7.pftrace"),
            source(&mut trace, "s/opscope-processes-6.pftrace"),
            source(&mut trace, "other/opscope-7.pftrace"),
        );
        let p = trace.process(program, 7);
        let main = trace.thread(p, 7);
        let worker = trace.thread(p, 8);
        let main_track = trace.thread_track(main, TrackKind::Thread);
        let worker_track = trace.thread_track(worker, TrackKind::Thread);
        let s = trace.process(sampler, 7);
        let name = trace.intern("python train.py");
        trace.processes[s.index()].name = Some(name);
        let sampler_main = trace.thread(s, 7);
        let cpu = trace.intern("cpu %");
        let cpu_track = trace.named_track(Some(s), TrackKind::Counter, cpu, 0);
        let sampler_thread_track = trace.thread_track(sampler_main, TrackKind::Thread);
        // Its own pid 6, and pid 7 of another run: both stay apart.
        trace.process(sampler, 6);
        let other = trace.process(elsewhere, 7);
        let other_main = trace.thread(other, 7);
        let other_track = trace.thread_track(other_main, TrackKind::Thread);

        trace.unite_processes(&[program, sampler]);

        assert_eq!(trace.processes.len(), 3, "{:?}", trace.processes);
        let united = trace.tracks[main_track.index()].process.unwrap();
        assert_eq!(trace.processes[united.index()].pid, 7);
        assert_eq!(trace.processes[united.index()].name, Some(name));
        assert_eq!(trace.tracks[cpu_track.index()].process, Some(united));
        // The sampler's thread 7 is the program's thread 7.
        assert_eq!(
            trace.tracks[sampler_thread_track.index()].thread,
            trace.tracks[main_track.index()].thread
        );
        let worker_thread = trace.tracks[worker_track.index()].thread.unwrap();
        assert_eq!(trace.threads[worker_thread.index()].tid, 8);
        assert_eq!(trace.threads[worker_thread.index()].process, united);
        assert_eq!(trace.threads.len(), 3);
        let apart = trace.tracks[other_track.index()].process.unwrap();
        assert_ne!(apart, united);
        assert_eq!(trace.processes[apart.index()].source, elsewhere);
        // The import indexes follow: asking again gives the united ids.
        assert_eq!(trace.process(sampler, 7), united);
        assert_eq!(trace.process(program, 7), united);
        let own_again = trace.process(sampler, 6);
        assert_ne!(own_again, united);
        assert_eq!(trace.processes[own_again.index()].pid, 6);
        let again = trace.thread(united, 8);
        assert_eq!(again, worker_thread);
        assert_eq!(
            trace.named_track(Some(united), TrackKind::Counter, cpu, 0),
            cpu_track
        );
        assert_eq!(trace.processes.len(), 3);
    }
}
