//! What an event belongs to: which slices are the ops of the views, the op running at
//! a point of a track, and each allocation's allocator and op. The op views
//! (`op_stats`, `tree`) and `memory` both build on it, and it on neither.

use hashbrown::HashMap;
use opscope_model::args::ArgValue;
use opscope_model::{SliceKind, SourceId, StrId, Trace, TrackId, TrackKind, NONE};

/// Whether a slice kind is an op for this view.
pub fn is_op_kind(kind: SliceKind) -> bool {
    matches!(
        kind,
        SliceKind::Op
            | SliceKind::Collective
            | SliceKind::Annotation
            | SliceKind::Step
            | SliceKind::Runtime
            | SliceKind::Driver
            | SliceKind::Sync
    )
}

/// Whether slice `i` is an op of the views: an op kind on a host thread, or an `Op`
/// anywhere (TensorFlow puts the ops it runs for a GPU on a lane of that GPU).
pub fn is_op_slice(trace: &Trace, i: usize) -> bool {
    let kind = trace.slices.kind(i);
    is_op_kind(kind)
        && (kind == SliceKind::Op
            || trace.tracks[trace.slices.track[i] as usize].kind == TrackKind::Thread)
}

/// The innermost op running on `track` at `ts`.
pub fn innermost_op(trace: &Trace, track: TrackId, ts: i64) -> Option<usize> {
    let mut at = trace.enclosing_slice(track, ts)?;
    loop {
        if is_op_kind(trace.slices.kind(at as usize)) {
            return Some(at as usize);
        }
        at = trace.slices.parent[at as usize];
        if at == NONE {
            return None;
        }
    }
}

/// The sampled Python stack that ran an op, from the samples of its thread.
#[derive(Debug, PartialEq, Eq)]
pub struct OpStack {
    /// Frames (rows of `trace.stacks.frames`), outermost first.
    pub frames: Vec<u32>,
    /// A function the op ran in, under `frames`, at a line not known: the samples
    /// around the op were in it at different lines (the loop that called the op).
    /// The row is one of its frames, whose line is not the op's.
    pub caller: Option<u32>,
}

/// An op's track, name and enclosing op's name: its calls from one place.
type OpKey = (u32, StrId, Option<StrId>);

/// The stacks that ran ops, from the samples of their threads (`opscope record`,
/// `attach`). An op a sample fell in has that sample's stack. Most ops are shorter
/// than the time between samples: one takes the stack of the nearest op of its name
/// under an op of the same name (or none) on its thread that a sample fell in, the
/// call site a loop runs it from; failing that, what the samples just before and
/// after it share. (The stack sampled last before it, taken before, put half the
/// calls of a phase under the phase that ran before it.)
pub struct OpStacks<'t> {
    trace: &'t Trace,
    /// Per (track, name, enclosing op's name), the ops a sample fell in: (start,
    /// sample row), by start.
    sampled: HashMap<OpKey, Vec<(i64, usize)>>,
}

impl<'t> OpStacks<'t> {
    pub fn new(trace: &'t Trace) -> OpStacks<'t> {
        let mut sampled: HashMap<_, Vec<(i64, usize)>> = HashMap::new();
        if !trace.samples.is_empty() {
            let s = &trace.slices;
            for i in 0..s.len() {
                if !is_op_slice(trace, i) {
                    continue;
                }
                if let Some(at) = Self::inside(trace, i) {
                    sampled
                        .entry(Self::key(trace, i))
                        .or_default()
                        .push((s.ts[i], at));
                }
            }
        }
        // Slices come in (track, start) order, but keys mix tracks' rows only by key.
        for ops in sampled.values_mut() {
            ops.sort_unstable();
        }
        OpStacks { trace, sampled }
    }

    /// An index that knows of no sampled op (for views that read no stacks).
    pub fn none(trace: &'t Trace) -> OpStacks<'t> {
        OpStacks {
            trace,
            sampled: HashMap::new(),
        }
    }

    /// The stack that ran op `op`, if any is known.
    pub fn of(&self, op: usize) -> Option<OpStack> {
        let trace = self.trace;
        if let Some(at) = Self::inside(trace, op) {
            return Some(self.whole(at)).filter(|st| !st.frames.is_empty());
        }
        if let Some(ops) = self.sampled.get(&Self::key(trace, op)) {
            let ts = trace.slices.ts[op];
            let k = ops.partition_point(|&(t, _)| t < ts);
            let nearest = [k.checked_sub(1), Some(k)]
                .into_iter()
                .flatten()
                .filter_map(|k| ops.get(k))
                .min_by_key(|&&(t, _)| (t - ts).abs());
            if let Some(&(_, at)) = nearest {
                return Some(self.whole(at)).filter(|st| !st.frames.is_empty());
            }
        }
        self.around(op)
    }

    fn key(trace: &Trace, op: usize) -> OpKey {
        let s = &trace.slices;
        let p = s.parent[op];
        let parent = (p != NONE).then(|| s.name[p as usize]);
        (s.track[op], s.name[op], parent)
    }

    /// A sample of the op's thread taken while it ran.
    fn inside(trace: &Trace, op: usize) -> Option<usize> {
        let (samples, s) = (&trace.samples, &trace.slices);
        let rows = samples.of_track(TrackId(s.track[op]));
        let ts = &samples.ts[rows.clone()];
        let k = ts.partition_point(|&t| t < s.ts[op]);
        (k < ts.len() && ts[k] <= s.end(op)).then_some(rows.start + k)
    }

    fn whole(&self, sample: usize) -> OpStack {
        let mut frames: Vec<u32> = self
            .trace
            .stacks
            .frames_of(self.trace.samples.stack[sample])
            .collect();
        frames.reverse();
        OpStack {
            frames,
            caller: None,
        }
    }

    /// What the samples just before and after op `op` share; at either end of the
    /// samples, the nearest one if it is within its period.
    fn around(&self, op: usize) -> Option<OpStack> {
        let (samples, s) = (&self.trace.samples, &self.trace.slices);
        let rows = samples.of_track(TrackId(s.track[op]));
        let k = rows.start + samples.ts[rows.clone()].partition_point(|&t| t < s.ts[op]);
        let before = (k > rows.start).then(|| k - 1);
        let after = (k < rows.end).then_some(k);
        let near = |i: usize, gap: i64| gap <= samples.period[i].max(0);
        let stack = match (before, after) {
            (Some(b), Some(a)) => {
                let (mut b, a) = (self.whole(b).frames, self.whole(a).frames);
                let shared = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
                let f = &self.trace.stacks.frames;
                let caller = match (b.get(shared), a.get(shared)) {
                    (Some(&x), Some(&y))
                        if f.function[x as usize] == f.function[y as usize]
                            && f.file[x as usize] == f.file[y as usize] =>
                    {
                        Some(x)
                    }
                    _ => None,
                };
                b.truncate(shared);
                OpStack { frames: b, caller }
            }
            (Some(b), None) if near(b, s.ts[op] - samples.ts[b]) => self.whole(b),
            (None, Some(a)) if near(a, samples.ts[a] - s.end(op)) => self.whole(a),
            _ => return None,
        };
        (!stack.frames.is_empty() || stack.caller.is_some()).then_some(stack)
    }
}

/// One allocation (positive `bytes`) or free.
pub(crate) struct AllocationEvent {
    pub ts: i64,
    pub bytes: i64,
    pub addr: Option<i64>,
    pub total_allocated: Option<i64>,
    pub total_reserved: Option<i64>,
    /// The innermost op around it (a slice row).
    pub op: Option<usize>,
}

/// An allocator: a source, Kineto's `Device Type` and `Device Id`, and the allocator's
/// name where the trace gives one (TensorFlow's, in an XPlane).
pub(crate) type AllocatorKey = (Option<SourceId>, i64, i64, Option<StrId>);

fn int_arg(trace: &Trace, args: opscope_model::ArgsId, key: Option<StrId>) -> Option<i64> {
    match trace.args.find(args, key?)? {
        ArgValue::Float(v) if v.is_finite() => Some(v as i64),
        v => v.as_i64(),
    }
}

/// The allocation events of every allocator, each in time order, allocators sorted.
pub(crate) fn allocation_events(trace: &Trace) -> Vec<(AllocatorKey, Vec<AllocationEvent>)> {
    let key = |k: &str| trace.strings.find(k);
    let (k_type, k_id, k_addr, k_bytes, k_total, k_reserved, k_allocator) = (
        key("Device Type"),
        key("Device Id"),
        key("Addr"),
        key("Bytes"),
        key("Total Allocated"),
        key("Total Reserved"),
        key("allocator_name"),
    );
    let source_of_track = |t: u32| {
        trace.tracks[t as usize]
            .process
            .map(|p| trace.processes[p.index()].source)
    };
    let mut groups: HashMap<AllocatorKey, Vec<AllocationEvent>> = HashMap::new();
    let inst = &trace.instants;
    for i in 0..inst.len() {
        if inst.kind(i) != SliceKind::Alloc {
            continue;
        }
        let args = inst.args[i];
        let Some(bytes) = int_arg(trace, args, k_bytes) else {
            continue;
        };
        let device = (
            int_arg(trace, args, k_type).unwrap_or(0),
            int_arg(trace, args, k_id).unwrap_or(-1),
        );
        let allocator = k_allocator.and_then(|k| match trace.args.find(args, k)? {
            ArgValue::Str(s) => Some(s),
            _ => None,
        });
        groups
            .entry((
                source_of_track(inst.track[i]),
                device.0,
                device.1,
                allocator,
            ))
            .or_default()
            .push(AllocationEvent {
                ts: inst.ts[i],
                bytes,
                addr: int_arg(trace, args, k_addr),
                total_allocated: int_arg(trace, args, k_total),
                total_reserved: int_arg(trace, args, k_reserved),
                op: innermost_op(trace, TrackId(inst.track[i]), inst.ts[i]),
            });
    }
    let mut groups: Vec<(AllocatorKey, Vec<AllocationEvent>)> = groups.into_iter().collect();
    groups.sort_by_key(|g| g.0);
    for (_, events) in &mut groups {
        events.sort_by_key(|e| e.ts);
    }
    groups
}
