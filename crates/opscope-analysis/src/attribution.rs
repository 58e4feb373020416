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
