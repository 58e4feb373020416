//! lttng-ust's libc wrapper (`liblttng-ust-libc-wrapper`, events `lttng_ust_libc:*`):
//! `Alloc` instants (`Bytes`, `Addr` and the event's fields whose values these two do
//! not hold: a malloc's `size` and `ptr` are its `Bytes` and `Addr`; a realloc is a
//! free keeping `size` and `ptr` and an allocation keeping `in_ptr`) and a per-process
//! `bytes in use` counter, from which blocks are live ([`Allocations`]).

use hashbrown::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::{ProcessId, SliceKind, TrackId, TrackKind};

use super::{Class, Plan, Rule};
use crate::ctf::decode::{Event, EventLayout, Layout, Node, Val};
use crate::ctf::mapping::identify::int_at;
use crate::ctf::mapping::Mapper;

/// An allocator event class, with the payload fields (by index) the rule reads.
#[derive(Clone, Debug)]
pub(in crate::ctf::mapping) enum Libc {
    Malloc {
        size: usize,
        ptr: usize,
    },
    Calloc {
        nmemb: usize,
        size: usize,
        ptr: usize,
    },
    Realloc {
        in_ptr: usize,
        size: usize,
        ptr: usize,
    },
    Free {
        ptr: usize,
    },
    Memalign {
        size: usize,
        ptr: usize,
    },
    PosixMemalign {
        out_ptr: usize,
        size: usize,
        result: Option<usize>,
    },
}

impl Libc {
    /// The rule of an `lttng_ust_libc:*` event class whose payload has the integer
    /// fields the rule reads.
    pub(super) fn of(el: &EventLayout) -> Option<Libc> {
        let event = el.name.strip_prefix("lttng_ust_libc:")?;
        let Some(Node::Struct { names, fields, .. }) = &el.fields else {
            return None;
        };
        let int_field = |name: &str| {
            let i = names.iter().position(|n| n == name)?;
            matches!(fields[i], Node::Int(_)).then_some(i)
        };
        match event {
            "malloc" => int_field("size")
                .zip(int_field("ptr"))
                .map(|(size, ptr)| Libc::Malloc { size, ptr }),
            "calloc" => match (int_field("nmemb"), int_field("size"), int_field("ptr")) {
                (Some(nmemb), Some(size), Some(ptr)) => Some(Libc::Calloc { nmemb, size, ptr }),
                _ => None,
            },
            "realloc" => match (int_field("in_ptr"), int_field("size"), int_field("ptr")) {
                (Some(in_ptr), Some(size), Some(ptr)) => Some(Libc::Realloc { in_ptr, size, ptr }),
                _ => None,
            },
            "free" => int_field("ptr").map(|ptr| Libc::Free { ptr }),
            "memalign" => int_field("size")
                .zip(int_field("ptr"))
                .map(|(size, ptr)| Libc::Memalign { size, ptr }),
            "posix_memalign" => {
                int_field("out_ptr")
                    .zip(int_field("size"))
                    .map(|(out_ptr, size)| Libc::PosixMemalign {
                        out_ptr,
                        size,
                        result: int_field("result"),
                    })
            }
            _ => None,
        }
    }

    /// Payload fields whose values the instants' `Bytes` and `Addr` already hold (a
    /// mask by [`field_bit`]): the `size` and `ptr` of malloc, memalign and free.
    pub(super) fn covered(&self) -> u64 {
        match self {
            Libc::Malloc { size, ptr } | Libc::Memalign { size, ptr } => {
                field_bit(*size) | field_bit(*ptr)
            }
            Libc::Free { ptr } => field_bit(*ptr),
            _ => 0,
        }
    }
}

/// A payload field's bit in a mask of fields (none past the 64th field).
pub(super) fn field_bit(field: usize) -> u64 {
    1u64.checked_shl(field as u32).unwrap_or(0)
}

/// What one allocator event did: the bytes its process has in use after it, and its
/// changes (a realloc frees then allocates; an event that changed nothing has one
/// change of zero bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Effect {
    pub in_use: i64,
    changes: [Change; 2],
    len: u8,
}

/// One change: bytes (negative when freed) at an address, and the payload fields (a
/// mask by [`field_bit`]) whose values these two already hold, left out of the
/// change's instant: a realloc's `in_ptr` on its free, its `size` and `ptr` on its
/// allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Change {
    pub bytes: i64,
    pub addr: u64,
    pub covered: u64,
}

impl Effect {
    pub(super) fn changes(&self) -> &[Change] {
        &self.changes[..self.len as usize]
    }

    fn push(&mut self, bytes: i64, addr: u64, covered: u64) {
        self.changes[self.len as usize] = Change {
            bytes,
            addr,
            covered,
        };
        self.len += 1;
    }
}

/// Live blocks and bytes in use, per process (by index).
#[derive(Default)]
pub(in crate::ctf::mapping) struct Allocations {
    processes: Vec<Process>,
}

#[derive(Default)]
struct Process {
    /// Address → size of each live block.
    live: HashMap<u64, u64>,
    in_use: i64,
}

impl Allocations {
    /// Applies one event of process `process`: `u(field)` reads an integer field as
    /// unsigned, `int(field)` as signed (`None` when it has no value).
    pub(super) fn apply(
        &mut self,
        process: usize,
        libc: &Libc,
        u: impl Fn(usize) -> u64,
        int: impl Fn(usize) -> Option<i64>,
    ) -> Effect {
        // Fields the free's and the allocation's Bytes and Addr hold.
        let (free_covers, alloc_covers) = match *libc {
            Libc::Realloc { in_ptr, size, ptr } => {
                (field_bit(in_ptr), field_bit(size) | field_bit(ptr))
            }
            Libc::Calloc { ptr, .. } => (0, field_bit(ptr)),
            Libc::PosixMemalign { out_ptr, size, .. } => (0, field_bit(out_ptr) | field_bit(size)),
            _ => (libc.covered(), libc.covered()),
        };
        // (freed pointer, allocated pointer and size)
        let (freed, alloc) = match *libc {
            Libc::Malloc { size, ptr } | Libc::Memalign { size, ptr } => {
                (None, Some((u(ptr), u(size))))
            }
            Libc::Calloc { nmemb, size, ptr } => {
                (None, Some((u(ptr), u(nmemb).saturating_mul(u(size)))))
            }
            Libc::Realloc { in_ptr, size, ptr } => {
                let (inp, sz, p) = (u(in_ptr), u(size), u(ptr));
                // A failed realloc (null result for a non-zero size) keeps the block.
                if p == 0 && sz != 0 {
                    (None, None)
                } else {
                    ((inp != 0).then_some(inp), (p != 0).then_some((p, sz)))
                }
            }
            Libc::Free { ptr } => ((u(ptr) != 0).then(|| u(ptr)), None),
            Libc::PosixMemalign {
                out_ptr,
                size,
                result,
            } => {
                let ok = result.is_none_or(|i| int(i) == Some(0));
                (None, ok.then(|| (u(out_ptr), u(size))))
            }
        };
        if self.processes.len() <= process {
            self.processes.resize_with(process + 1, Process::default);
        }
        let state = &mut self.processes[process];
        let mut effect = Effect::default();
        // Sizes come from the trace: saturate rather than overflow on corrupt ones.
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        if let Some(p) = freed {
            let size = signed(state.live.remove(&p).unwrap_or(0));
            state.in_use = state.in_use.saturating_sub(size);
            effect.push(size.saturating_neg(), p, free_covers);
        }
        if let Some((p, size)) = alloc {
            if p != 0 {
                if let Some(old) = state.live.insert(p, size) {
                    state.in_use = state.in_use.saturating_sub(signed(old));
                }
                state.in_use = state.in_use.saturating_add(signed(size));
                effect.push(signed(size), p, alloc_covers);
            }
        }
        if effect.len == 0 {
            effect.push(0, 0, 0);
        }
        effect.in_use = state.in_use;
        effect
    }
}

/// Takes every `lttng_ust_libc:*` class: an allocator event with the fields the rule
/// reads, else an instant.
pub(super) fn plan(_: &mut Mapper, c: &Class) -> Option<Rule> {
    (c.provider == "lttng_ust_libc").then(|| Libc::of(c.el).map_or(Rule::Instant, Rule::Libc))
}

/// A sample of the process's bytes in use, and an instant per change.
#[allow(clippy::too_many_arguments)]
pub(super) fn apply(
    m: &mut Mapper,
    libc: &Libc,
    plan: &Plan,
    layout: &Layout,
    r: &Event,
    ts: i64,
    process: ProcessId,
    track: TrackId,
) {
    let positions = &m.positions;
    let value = |i: usize| positions.get(i).and_then(|&p| r.vals.get(p as usize));
    let u = |i| match value(i) {
        Some(Val::U(v)) => *v,
        Some(Val::I(v)) => *v as u64,
        _ => 0,
    };
    let int = |i| int_at(r.vals, positions.get(i).copied());
    let effect = m.allocations.apply(process.index(), libc, u, int);
    let at = process.index();
    if m.libc_tracks.len() <= at {
        m.libc_tracks.resize(at + 1, None);
    }
    let counter = match m.libc_tracks[at] {
        Some(t) => t,
        None => {
            let name = m.s_libc_in_use;
            let t = m
                .trace
                .named_track(Some(process), TrackKind::Counter, name, 0);
            m.libc_tracks[at] = Some(t);
            t
        }
    };
    m.trace.counters.push(counter, ts, effect.in_use as f64);
    for change in effect.changes() {
        let extra = [
            (m.k_bytes, ArgValue::Int(change.bytes)),
            (m.k_addr, ArgValue::Int(change.addr as i64)),
        ];
        let (kind, covered) = (SliceKind::Alloc, change.covered);
        m.instant_leaving_out(plan, layout, r, ts, track, kind, &extra, covered);
    }
}
