//! The research tracer's LTTng-UST provider families (`tensorflowTracer`,
//! `cuptiTracer`, `hcTracer`, `hsaTracer`, `hipTracer`, `streamTracer`, `grpcTracer`):
//! their pairs become slices of the matching kind and lane (applied by
//! [`super::pairs`]), `cuptiTracer` events are placed at their `timestamp` field, and
//! `tensorflowTracer`'s `*_stats` and memory events become counters.

use opscope_model::{CopyDirection, ProcessId, SliceKind, TrackId, TrackKind};

use super::pairs::Lane;
use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout, Node, Val};
use crate::ctf::mapping::Mapper;

/// Takes `tensorflowTracer`'s statistics and memory events: every numeric field a
/// counter.
pub(super) fn plan(_: &mut Mapper, c: &Class) -> Option<Rule> {
    match (c.provider, c.short) {
        ("tensorflowTracer", ev) if ev.ends_with("_stats") => Some(Rule::Counters),
        ("tensorflowTracer", "memory_allocate" | "memory_deallocate") => Some(Rule::Counters),
        _ => None,
    }
}

/// Every numeric field is a counter `event.field` of the process; the event is an
/// instant too.
pub(super) fn apply(
    m: &mut Mapper,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    process: ProcessId,
    track: TrackId,
) {
    let el = &layout.events[r.event];
    if let Some(Node::Struct { fields, .. }) = &el.fields {
        for (i, f) in fields.iter().enumerate() {
            let Some(&pos) = m.positions.get(i) else {
                break;
            };
            let v = match (f, r.vals.get(pos as usize)) {
                (Node::Int(_), Some(Val::U(v))) => *v as f64,
                (Node::Int(_), Some(Val::I(v))) => *v as f64,
                (Node::Float { .. }, Some(Val::F(v))) => *v,
                _ => continue,
            };
            let key = (process, plan.keys[i]);
            let counter = match m.counters.get(&(process, plan.keys[i])) {
                Some(&t) => t,
                None => {
                    let name = format!("{}.{}", m.trace.str(plan.name), m.trace.str(plan.keys[i]));
                    let name = m.trace.intern(&name);
                    let t = m
                        .trace
                        .named_track(Some(process), TrackKind::Counter, name, 0);
                    m.counters.insert(key, t);
                    t
                }
            };
            m.trace.counters.push(counter, ts, v);
        }
    }
    m.instant(plan, layout, r, ts, track);
}

/// How a pair `x` of provider `c.provider` looks.
pub(super) struct PairShape {
    pub(super) kind: SliceKind,
    pub(super) lane: Lane,
    /// A string field naming the slice (the tracers' `name`).
    pub(super) name_field: Option<usize>,
    /// An integer field holding the real time (`cuptiTracer`'s `timestamp`).
    pub(super) time_field: Option<usize>,
}

pub(super) fn pair_shape(c: &Class, x: &str) -> PairShape {
    let (kind, lane) = family_kind(c.provider, x);
    let time_field = if c.provider == "cuptiTracer" {
        c.int_field("timestamp")
    } else {
        None
    };
    let name_field = if c.provider.ends_with("Tracer") {
        c.str_field("name")
    } else {
        None
    };
    PairShape {
        kind,
        lane,
        name_field,
        time_field,
    }
}

fn family_kind(provider: &str, x: &str) -> (SliceKind, Lane) {
    let lower = x.to_ascii_lowercase();
    match provider {
        "tensorflowTracer" => match x {
            "operation" => (SliceKind::Op, Lane::Thread),
            "async_operation" => (SliceKind::Op, Lane::Async),
            "session" => (SliceKind::Step, Lane::Thread),
            _ => (SliceKind::Other, Lane::Thread),
        },
        "cuptiTracer" | "hcTracer" | "hsaTracer" | "hipTracer" | "streamTracer" => {
            if lower.contains("kernel") {
                (SliceKind::Kernel, Lane::Gpu)
            } else if lower.contains("memcpy") || lower.contains("copy") {
                (SliceKind::Memcpy(CopyDirection::Unknown), Lane::Gpu)
            } else if lower.contains("memset") {
                (SliceKind::Memset, Lane::Gpu)
            } else if lower.contains("driver") {
                (SliceKind::Driver, Lane::Thread)
            } else {
                (SliceKind::Runtime, Lane::Thread)
            }
        }
        "grpcTracer" => (SliceKind::Collective, Lane::Thread),
        _ => (SliceKind::Other, Lane::Thread),
    }
}
