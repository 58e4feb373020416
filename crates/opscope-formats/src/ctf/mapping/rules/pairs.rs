//! Begin/end pairs by name: any `X_entry`/`X_exit`, `X_begin`/`X_end`, `X_start`/`X_end`
//! (and DPDK's `X.begin`/`X.end`, its `lib.eal.service.run.begin`) → a slice `X`,
//! matched per lane as a stack. Also how every pair is applied: the kernel's
//! ([`super::syscalls`], [`super::kernel_handlers`]) and the research tracers'
//! ([`super::tracers`]) are pairs of this kind with their own names and lanes.

use opscope_model::{DeviceKind, ProcessId, SliceKind, StrId, TrackId, TrackKind};

use super::{tracers, Class, Plan, Rule};
use crate::ctf::decode::{Event, Layout};
use crate::ctf::mapping::{Mapper, Open};

/// Where a pair's slice goes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::ctf::mapping) enum Lane {
    /// The emitting thread (or CPU lane).
    Thread,
    /// An async track of the process (overlapping operations).
    Async,
    /// A GPU track of the process.
    Gpu,
}

/// One half of a pair. `name_field`: a string field naming the slice; `time_field`: an
/// integer field holding the real time (clock value).
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) enum Pair {
    /// Opens a slice.
    Begin {
        key: StrId,
        kind: SliceKind,
        lane: Lane,
        name_field: Option<usize>,
        time_field: Option<usize>,
        /// The slice's name where it is not the key (an old-style syscall `sys_read`
        /// is a `syscall` pair named `read`).
        named: Option<StrId>,
    },
    /// Closes the innermost open slice of its key (and name, when it has a name field).
    End {
        key: StrId,
        lane: Lane,
        name_field: Option<usize>,
        time_field: Option<usize>,
    },
}

impl Pair {
    /// A half of a pair of slices of kind `Other` on the emitting thread, as the
    /// kernel's are.
    pub(super) fn on_thread(begin: bool, key: StrId, named: Option<StrId>) -> Pair {
        if begin {
            Pair::Begin {
                key,
                kind: SliceKind::Other,
                lane: Lane::Thread,
                name_field: None,
                time_field: None,
                named,
            }
        } else {
            Pair::End {
                key,
                lane: Lane::Thread,
                name_field: None,
                time_field: None,
            }
        }
    }
}

/// The pair rule: `X_entry`/`X_begin`/`X_start` (and DPDK's `X.begin`) open,
/// `X_exit`/`X_end` (`X.end`) close; kernel `syscall_entry_X`/`syscall_exit_X` too.
fn pair_of(name: &str) -> Option<(bool, &str)> {
    for (suffix, begin) in [
        ("_entry", true),
        ("_begin", true),
        ("_start", true),
        ("_exit", false),
        ("_end", false),
        // DPDK names its pairs `lib.eal.service.run.begin`/`.end`.
        (".begin", true),
        (".end", false),
    ] {
        if let Some(x) = name.strip_suffix(suffix) {
            if !x.is_empty() {
                return Some((begin, x));
            }
        }
    }
    for (prefix, begin) in [
        ("syscall_entry_", true),
        ("syscall_exit_", false),
        ("compat_syscall_entry_", true),
        ("compat_syscall_exit_", false),
    ] {
        if let Some(x) = name.strip_prefix(prefix) {
            if !x.is_empty() {
                return Some((begin, x));
            }
        }
    }
    None
}

pub(super) fn plan(m: &mut Mapper, c: &Class) -> Option<Rule> {
    let (begin, x) = pair_of(c.short)?;
    let key = m.trace.intern(x);
    let shape = tracers::pair_shape(c, x);
    Some(Rule::Pair(if begin {
        Pair::Begin {
            key,
            kind: shape.kind,
            lane: shape.lane,
            name_field: shape.name_field,
            time_field: shape.time_field,
            named: None,
        }
    } else {
        Pair::End {
            key,
            lane: shape.lane,
            name_field: shape.name_field,
            time_field: shape.time_field,
        }
    }))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn apply(
    m: &mut Mapper,
    pair: &Pair,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    process: ProcessId,
    track: TrackId,
    to_ns: &dyn Fn(u64) -> i64,
) {
    match pair {
        Pair::Begin {
            key,
            kind,
            lane,
            name_field,
            time_field,
            named,
        } => {
            let ts = time_field.map_or(ts, |i| to_ns(m.field_u(r, i)));
            let name = match name_field.and_then(|i| m.positions.get(i).copied()) {
                Some(p) => m.text(r, r.vals[p as usize]),
                None => named.unwrap_or(*key),
            };
            let track = m.lane_track(*lane, process, track);
            let args = m.payload_args(plan, layout, r);
            let open = Open {
                key: *key,
                name,
                ts,
                kind: *kind,
                category: plan.category,
                args,
            };
            m.stacks.begin(track, open);
        }
        Pair::End {
            key,
            lane,
            name_field,
            time_field,
        } => {
            let ts = time_field.map_or(ts, |i| to_ns(m.field_u(r, i)));
            let name = name_field
                .and_then(|i| m.positions.get(i).copied())
                .map(|p| m.text(r, r.vals[p as usize]));
            let lane_track = m.lane_track(*lane, process, track);
            let found = m.stacks.end_where(lane_track, &mut m.trace.repairs, |o| {
                o.key == *key && name.is_none_or(|n| n == o.name)
            });
            match found {
                Some(open) => {
                    let extra = m.payload_args(plan, layout, r);
                    m.close(open, lane_track, ts, &extra);
                }
                None => m.instant(plan, layout, r, ts, lane_track),
            }
        }
    }
}

impl Mapper<'_> {
    fn lane_track(&mut self, lane: Lane, process: ProcessId, track: TrackId) -> TrackId {
        match lane {
            Lane::Thread => track,
            Lane::Async => {
                let name = self.trace.intern("async operations");
                self.trace
                    .named_track(Some(process), TrackKind::Async, name, 0)
            }
            Lane::Gpu => {
                let name = self.trace.intern("GPU");
                let t = self
                    .trace
                    .named_track(Some(process), TrackKind::GpuStream, name, 0);
                if self.trace.tracks[t.index()].device.is_none() {
                    let d = self.trace.device(self.source, DeviceKind::Gpu, 0);
                    self.trace.tracks[t.index()].device = Some(d);
                }
                t
            }
        }
    }
}
