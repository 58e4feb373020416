//! CTF events → the opscope model: the rules by event name, below. Who emitted an
//! event and when is worked out by [`identify`]; opscope's own CTF has a reader of its
//! own, [`own`].
//!
//! Lanes: one process per `vpid` (or per trace when the events carry no pid), one
//! thread track per `vtid`/`tid` context; kernel-style traces without a tid context use
//! the packet's `cpu_id` as the lane (a thread `CPU n` of a `CPUs` process). perf
//! traces carry `perf_tid`/`perf_pid` in each event.
//!
//! Rules, by event name (`provider:event` for LTTng-UST):
//! - `lttng_ust_cyg_profile[_fast]:func_entry/func_exit` → slices named by `addr` (hex);
//! - `lttng_ust_libc:*` → `Alloc` instants (`Bytes`, `Addr` and the event's fields
//!   whose values these two do not hold: a malloc's `size` and `ptr` are its `Bytes` and
//!   `Addr`; a realloc is a free keeping `size` and `ptr` and an allocation keeping
//!   `in_ptr`) and a per-process `bytes in use` counter (see [`super::allocations`]);
//! - `lttng_ust_statedump:procname` names the process; other statedump events are
//!   process-scoped instants (build ids as args);
//! - kernel `sched_switch` → `running` slices per thread (from its switch-in to its
//!   switch-out); in a kernel trace (domain `kernel`), only the pairs LTTng's kernel
//!   tracer itself makes are slices, on the thread running on the CPU
//!   ([`kernel_pair`]): syscalls (`syscall_entry_X`/`syscall_exit_X`, their `compat_`
//!   forms, and before LTTng 2.6 `sys_X` closed by `exit_syscall`), irq and softirq
//!   handlers, timer and hrtimer expiries, workqueue items. Every other kernel event is
//!   an instant, whatever its name ends with (`hrtimer_start` arms a timer, and
//!   `sched_process_exit` ends a process, not a slice);
//! - the research tracer's families (`tensorflowTracer`, `cuptiTracer`, `hcTracer`,
//!   `hsaTracer`, `hipTracer`, `streamTracer`, `grpcTracer`): their pairs become slices
//!   of the matching kind; `cuptiTracer` events are placed at their `timestamp` field;
//!   `*_stats` events become counters;
//! - opscope's own events (`opscope:*`, see `ctf::export`) → the slices, instants and
//!   counter samples they were written from. Their names, categories, kinds and
//!   repeated string args are enumerations: each enumeration's labels are interned at
//!   most once, through a table by value built at its first event, so that an event's
//!   text is a load rather than a scan, a UTF-8 check and a hash. A slice's row is
//!   added at its begin (the model's order) and its end sets its duration; begins
//!   never ended (a cut trace) end at the trace's last event, counted as unmatched.
//!   A trace whose layout is exactly what `ctf::export` writes is read by [`own`],
//!   which decodes those classes at fixed places; the rules here map the same events
//!   the same way in any other layout; a slice begun and never ended on its lane (a
//!   thread's `exit` syscall, a cut trace) ends at the lane's last event;
//! - in other traces, any `X_entry`/`X_exit`, `X_begin`/`X_end`, `X_start`/`X_end` pair → a slice
//!   `X` (matched per lane as a stack); everything else → an instant with its fields as
//!   args. The category is the provider (the part before `:`), or the trace's domain.
//!
//! The CPU each event ran on (its packet's `cpu_id`) is kept per thread as a counter
//! track `cpu (tid N)` of the thread, sampled where the thread's CPU changes: a thread
//! moves between CPUs, so its lane cannot say it, and one sample per migration costs
//! far less than an arg per event. `ctf::export` writes it back as the `cpu_id` of the
//! packets of the thread's events. (Kernel traces' CPU lanes are their CPU already.)

use std::cell::Cell;
use std::rc::Rc;

use hashbrown::HashMap;

use opscope_model::args::ArgValue;
use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::{
    ArgsId, ClockDomain, CopyDirection, DeviceKind, InstantScope, LinearTransform, ProcessId,
    SliceKind, Source, SourceId, StrId, Trace, TrackId, TrackKind,
};

use super::allocations::{field_bit, Allocations, Libc};
use super::decode::{Event, IntNode, Layout, Node, Val};
use super::types::{EnumTy, EnvValue};
use crate::common::SliceStack;
use crate::ctf::export::ArgTag;
use crate::error::ImportError;

mod identify;
mod own;

use identify::{field_positions, int_at};
pub(super) use identify::{up_to_nul, Identify, Who};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lane {
    /// The emitting thread (or CPU lane).
    Thread,
    /// An async track of the process (overlapping operations).
    Async,
    /// A GPU track of the process.
    Gpu,
}

#[derive(Clone, Debug)]
enum Rule {
    Instant,
    /// Opens a slice. `name_field`: a string field naming it; `time_field`: an integer
    /// field holding the real time (clock value).
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
    End {
        key: StrId,
        lane: Lane,
        name_field: Option<usize>,
        time_field: Option<usize>,
    },
    CygEntry {
        addr: Option<usize>,
    },
    CygExit,
    Libc(Libc),
    /// Every numeric field is a counter `event.field` of the process.
    Counters,
    SchedSwitch {
        prev_tid: usize,
        next_tid: usize,
        prev_comm: Option<usize>,
        next_comm: Option<usize>,
    },
    Procname {
        field: usize,
    },
    /// `lttng_statedump_process_state`: tid → pid and name.
    ProcessState {
        tid: usize,
        pid: usize,
        name: Option<usize>,
    },
    /// opscope's own events (`ctf::export`): back to the slices, instants and counter
    /// samples they were written from. Field indexes in the payload.
    OwnBegin {
        id: usize,
        name: OwnText,
        category: OwnText,
        kind: OwnText,
        args: usize,
    },
    OwnEnd {
        id: usize,
    },
    OwnInstant {
        name: OwnText,
        category: OwnText,
        kind: Option<OwnText>,
        args: usize,
    },
    OwnCounter {
        name: usize,
        value: usize,
    },
    /// opscope's own slice begins and instants with typed args: `args` is the payload
    /// field of the struct whose fields are, in order, these keys of these types.
    OwnTyped {
        id: Option<usize>,
        name: OwnText,
        category: OwnText,
        kind: OwnText,
        args: usize,
        keys: Box<[(StrId, ArgTag)]>,
        /// Per key: its enumeration's labels, when its values are written so.
        labels: Box<[Option<Rc<LabelTable>>]>,
    },
}

/// A text field of opscope's own events: a string, or an enumeration whose labels are
/// the texts (`ctf::export` writes names, categories and kinds so).
#[derive(Clone, Debug)]
struct OwnText {
    field: usize,
    labels: Option<Rc<LabelTable>>,
}

/// Which label of an enumeration a value has: the entry of each value from 0 (as
/// `ctf::export` numbers them) in a vector, other entries searched in declaration
/// order. Shared by the mapper's [`LabelTable`] and opscope's own reader, which number
/// labels on its decoding thread.
#[derive(Debug)]
pub(super) struct LabelIndex {
    pub(super) labels: std::sync::Arc<EnumTy>,
    /// Per value from 0: its entry, or [`NO_ENTRY`].
    dense: Vec<u32>,
    /// Any other entries (their indexes), in declaration order.
    ranges: Vec<u32>,
}

/// No entry: a value of `LabelIndex::dense` that has no label.
const NO_ENTRY: u32 = u32::MAX;

impl LabelIndex {
    pub(super) fn new(labels: std::sync::Arc<EnumTy>) -> LabelIndex {
        let mut dense: Vec<u32> = Vec::new();
        let mut ranges = Vec::new();
        // Values beyond this are not dense: a corrupt value cannot make a huge table.
        let dense_limit = 4 * labels.entries.len() as i128 + 16;
        for (n, (_, lo, hi)) in labels.entries.iter().enumerate() {
            if lo == hi && (0..dense_limit).contains(lo) {
                let v = *lo as usize;
                if dense.len() <= v {
                    dense.resize(v + 1, NO_ENTRY);
                }
                // The first label of a value is the one shown, as for other enums.
                if dense[v] == NO_ENTRY {
                    dense[v] = n as u32;
                }
            } else {
                ranges.push(n as u32);
            }
        }
        LabelIndex {
            labels,
            dense,
            ranges,
        }
    }

    /// How many values from 0 have a place in the dense vector.
    pub(super) fn dense_len(&self) -> usize {
        self.dense.len()
    }

    /// The entry of value `v`, if it has a label.
    #[inline]
    pub(super) fn entry(&self, v: i128) -> Option<usize> {
        if let Some(&entry) = usize::try_from(v).ok().and_then(|v| self.dense.get(v)) {
            if entry != NO_ENTRY {
                return Some(entry as usize);
            }
        }
        let e = &self.labels.entries;
        self.ranges
            .iter()
            .map(|&n| n as usize)
            .find(|&n| e[n].1 <= v && v <= e[n].2)
    }

    /// The label of entry `n`.
    pub(super) fn label(&self, n: usize) -> &str {
        &self.labels.entries[n].0
    }
}

/// An enumeration's labels, by value, each interned at its first use (so that the
/// model holds the texts the events use, in the order they use them): built once per
/// enumeration, so that an event's text is one load, with nothing to scan or hash.
#[derive(Debug)]
struct LabelTable {
    index: LabelIndex,
    /// Per value of the dense vector: its text, once used.
    ids: Vec<Cell<Option<StrId>>>,
}

impl LabelTable {
    fn new(labels: std::sync::Arc<EnumTy>) -> LabelTable {
        let index = LabelIndex::new(labels);
        LabelTable {
            ids: vec![Cell::new(None); index.dense_len()],
            index,
        }
    }

    /// The text of value `v`, if it has a label.
    fn get(&self, trace: &mut Trace, v: i128) -> Option<StrId> {
        let cached = usize::try_from(v).ok().and_then(|v| self.ids.get(v));
        if let Some(id) = cached.and_then(Cell::get) {
            return Some(id);
        }
        let text = trace.intern(self.index.label(self.index.entry(v)?));
        // Values past the dense vector (rare: ranges, corrupt values) are not cached.
        if let Some(cell) = cached {
            cell.set(Some(text));
        }
        Some(text)
    }
}

struct Plan {
    name: StrId,
    category: StrId,
    rule: Rule,
    /// Interned payload field names.
    keys: Vec<StrId>,
    /// Payload fields that become args: all but those (among the first 64) whose
    /// values the rule's own args hold.
    arg_fields: Box<[usize]>,
    /// Instants of this event are process-scoped (statedump).
    process_scope: bool,
    /// The packet's `cpu_id` is noted on the thread's CPU counter (not for opscope's
    /// own events, whose CPU counters are events of their own).
    note_cpu: bool,
}

struct Open {
    key: StrId,
    name: StrId,
    ts: i64,
    kind: SliceKind,
    category: StrId,
    args: Vec<(StrId, ArgValue)>,
}

/// No row: an id of `own_rows` that is not open.
const NO_ROW: u32 = u32::MAX;

/// A lane: pid, tid, and whether the tid is a CPU number.
type LaneKey = (i64, i64, bool);

struct Mapper<'t> {
    trace: &'t mut Trace,
    source: SourceId,
    /// Built at an event class's first event; shared so that applying one does not
    /// borrow the mapper.
    plans: Vec<Option<Rc<Plan>>>,
    lanes: HashMap<LaneKey, (ProcessId, TrackId)>,
    /// The lane of the previous event: runs of events come from one thread.
    last_lane: Option<(LaneKey, (ProcessId, TrackId))>,
    stacks: SliceStack<TrackId, Open>,
    /// opscope's own slices still open (their rows), by the id the writer gave them:
    /// ids are the slices' indexes, so most fit `own_rows`; others go to `own_open`.
    own_rows: Vec<u32>,
    own_open: HashMap<u64, u32>,
    /// Rows of own slices begun again under the same id before they ended.
    own_replaced: Vec<u32>,
    /// The label tables of the enumerations of opscope's own events, by declaration.
    label_tables: HashMap<*const EnumTy, Rc<LabelTable>>,
    allocations: Allocations,
    /// The bytes-in-use counter track of each process (by index) with allocator events.
    libc_tracks: Vec<Option<TrackId>>,
    counters: HashMap<(ProcessId, StrId), TrackId>,
    /// Per CPU: the thread running there, since when, and its name.
    running: HashMap<u64, (i64, i64, StrId)>,
    tid_pid: HashMap<i64, i64>,
    named_processes: hashbrown::HashSet<ProcessId>,
    positions: Vec<u32>,
    scratch: Vec<(StrId, ArgValue)>,
    /// The last text of each (event class, slot) of opscope's typed classes.
    memo: Vec<StrId>,
    /// The last text of each string arg, per event class of opscope's typed classes.
    arg_memo: Vec<Vec<StrId>>,
    last_kind: Option<(StrId, SliceKind)>,
    /// Per track (by index): the CPU its thread last ran on, and its CPU counter track.
    cpu_of_track: Vec<(u64, Option<TrackId>)>,
    last_ts: i64,
    default_category: StrId,
    /// A kernel trace (domain `kernel`) and the style of its syscall events: only the
    /// kernel tracer's own pairs are slices ([`kernel_pair`]).
    kernel: Option<KernelStyle>,
    k_bytes: StrId,
    k_addr: StrId,
    s_running: StrId,
    s_cpus: StrId,
    s_libc_in_use: StrId,
}

fn hex(v: u64) -> String {
    format!("0x{v:x}")
}

/// `a:b` → (`a`, `b`); names without a provider keep the whole name.
fn split_name(full: &str) -> (Option<&str>, &str) {
    match full.split_once(':') {
        Some((p, n)) => (Some(p), n),
        None => (None, full),
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

/// Which syscall events a kernel trace has: LTTng's kernel tracer named them
/// `syscall_entry_X`/`syscall_exit_X` from 2.6 on, `sys_X` and `exit_syscall` before.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KernelStyle {
    Since26,
    Before26,
}

/// One half of a pair LTTng's kernel tracer makes.
struct KernelPair<'n> {
    begin: bool,
    /// What the two halves share (the end closes the innermost open slice of it).
    key: &'n str,
    /// The slice's name where it is not the key.
    name: Option<&'n str>,
    /// A string field naming the slice (an irq handler's `name`).
    name_field: Option<&'static str>,
}

/// The pairs of an LTTng kernel trace, by event name: its syscalls (in the style of
/// the trace's tracer version, `old_syscalls`), irq and softirq handlers, timer and
/// hrtimer expiries, workqueue items. `None`: an instant.
fn kernel_pair(name: &str, old_syscalls: bool) -> Option<KernelPair<'_>> {
    let pair = |begin, key, name_field| KernelPair {
        begin,
        key,
        name: None,
        name_field,
    };
    for (prefix, begin) in [
        ("syscall_entry_", true),
        ("syscall_exit_", false),
        ("compat_syscall_entry_", true),
        ("compat_syscall_exit_", false),
    ] {
        if let Some(x) = name.strip_prefix(prefix).filter(|x| !x.is_empty()) {
            return Some(pair(begin, x, None));
        }
    }
    if old_syscalls {
        if name == "exit_syscall" {
            return Some(pair(false, "syscall", None));
        }
        if let Some(x) = name.strip_prefix("sys_").filter(|x| !x.is_empty()) {
            return Some(KernelPair {
                begin: true,
                key: "syscall",
                name: Some(x),
                name_field: None,
            });
        }
    }
    Some(match name {
        "irq_handler_entry" => pair(true, "irq_handler", None),
        "irq_handler_exit" => pair(false, "irq_handler", None),
        "softirq_entry" | "irq_softirq_entry" => pair(true, "softirq", None),
        "softirq_exit" | "irq_softirq_exit" => pair(false, "softirq", None),
        "hrtimer_expire_entry" => pair(true, "hrtimer_expire", None),
        "hrtimer_expire_exit" => pair(false, "hrtimer_expire", None),
        "timer_expire_entry" => pair(true, "timer_expire", None),
        "timer_expire_exit" => pair(false, "timer_expire", None),
        "workqueue_execute_start" => pair(true, "workqueue_execute", None),
        "workqueue_execute_end" => pair(false, "workqueue_execute", None),
        _ => return None,
    })
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

impl<'t> Mapper<'t> {
    fn plan(&mut self, layout: &Layout, event: usize) -> Plan {
        let el = &layout.events[event];
        let (provider, short) = split_name(&el.name);
        let names: Vec<String> = match &el.fields {
            Some(Node::Struct { names, .. }) => names.to_vec(),
            _ => Vec::new(),
        };
        let field = |n: &str| names.iter().position(|f| f == n);
        let int_field = |n: &str| -> Option<usize> {
            let i = field(n)?;
            match &el.fields {
                Some(Node::Struct { fields, .. }) => matches!(fields[i], Node::Int(_)).then_some(i),
                _ => None,
            }
        };
        let str_field = |n: &str| -> Option<usize> {
            let i = field(n)?;
            match &el.fields {
                Some(Node::Struct { fields, .. }) => matches!(
                    fields[i],
                    Node::Str | Node::Array { text: true, .. } | Node::Seq { text: true, .. }
                )
                .then_some(i),
                _ => None,
            }
        };
        let keys = names.iter().map(|n| self.trace.intern(n)).collect();
        let category = match provider {
            Some(p) => self.trace.intern(p),
            None => self.default_category,
        };
        let name = self.trace.intern(short);
        let provider = provider.unwrap_or("");
        let mut process_scope = false;
        let typed_keys = |m: &mut Self| -> Option<Box<[(StrId, ArgTag)]>> {
            let Some(Node::Struct { fields, .. }) = &el.fields else {
                return None;
            };
            let args = fields.get(field("args")?)?;
            let Node::Struct { fields: typed, .. } = args else {
                return None;
            };
            let keys = m.typed_keys(layout, el, typed.len())?;
            // Every field a scalar value of the type the schema says.
            let fits = keys.len() == typed.len()
                && keys
                    .iter()
                    .zip(typed.iter())
                    .all(|((_, tag), f)| match tag {
                        ArgTag::Float => matches!(f, Node::Float { .. }),
                        ArgTag::Str | ArgTag::Json => matches!(
                            f,
                            Node::Str
                                | Node::Int(IntNode {
                                    labels: Some(_),
                                    ..
                                })
                        ),
                        _ => matches!(f, Node::Int(_)),
                    });
            fits.then_some(keys)
        };
        let typed = match (provider, short) {
            ("opscope", "slice_begin" | "instant") => typed_keys(self),
            _ => None,
        };
        // A text field of opscope's own: a string or an enumeration of its texts.
        let text_field = |m: &mut Self, n: &str| -> Option<OwnText> {
            if let Some(i) = str_field(n) {
                return Some(OwnText {
                    field: i,
                    labels: None,
                });
            }
            let i = field(n)?;
            let Some(Node::Struct { fields, .. }) = &el.fields else {
                return None;
            };
            let Node::Int(IntNode {
                labels: Some(e), ..
            }) = &fields[i]
            else {
                return None;
            };
            Some(OwnText {
                field: i,
                labels: Some(m.label_table(e)),
            })
        };
        let own = (|| {
            if provider != "opscope" {
                return None;
            }
            if let Some(keys) = typed {
                let Some(Node::Struct { fields, .. }) = &el.fields else {
                    return None;
                };
                let args = field("args")?;
                let Node::Struct { fields: typed, .. } = &fields[args] else {
                    return None;
                };
                let labels = typed
                    .iter()
                    .map(|f| match f {
                        Node::Int(IntNode {
                            labels: Some(e), ..
                        }) => Some(self.label_table(e)),
                        _ => None,
                    })
                    .collect();
                return Some(Rule::OwnTyped {
                    id: if short == "slice_begin" {
                        Some(int_field("id")?)
                    } else {
                        None
                    },
                    name: text_field(self, "name")?,
                    category: text_field(self, "category")?,
                    kind: text_field(self, "kind")?,
                    args,
                    keys,
                    labels,
                });
            }
            Some(match short {
                "slice_begin" => Rule::OwnBegin {
                    id: int_field("id")?,
                    name: text_field(self, "name")?,
                    category: text_field(self, "category")?,
                    kind: text_field(self, "kind")?,
                    args: str_field("args")?,
                },
                "slice_end" => Rule::OwnEnd {
                    id: int_field("id")?,
                },
                "instant" => Rule::OwnInstant {
                    name: text_field(self, "name")?,
                    category: text_field(self, "category")?,
                    kind: text_field(self, "kind"),
                    args: str_field("args")?,
                },
                "counter" => Rule::OwnCounter {
                    name: str_field("name")?,
                    value: field("value")?,
                },
                _ => return None,
            })
        })();
        let rule = match (provider, short) {
            ("opscope", _) if own.is_some() => own.unwrap_or(Rule::Instant),
            ("lttng_ust_cyg_profile" | "lttng_ust_cyg_profile_fast", "func_entry") => {
                Rule::CygEntry {
                    addr: int_field("addr"),
                }
            }
            ("lttng_ust_cyg_profile" | "lttng_ust_cyg_profile_fast", "func_exit") => Rule::CygExit,
            ("lttng_ust_libc", _) => Libc::of(el).map_or(Rule::Instant, Rule::Libc),
            ("lttng_ust_statedump", ev) => {
                process_scope = true;
                match (ev, str_field("procname")) {
                    ("procname", Some(field)) => Rule::Procname { field },
                    _ => Rule::Instant,
                }
            }
            ("tensorflowTracer", ev) if ev.ends_with("_stats") => Rule::Counters,
            ("tensorflowTracer", "memory_allocate" | "memory_deallocate") => Rule::Counters,
            (_, "sched_switch") => {
                let tid = |a: &str, b: &str| int_field(a).or_else(|| int_field(b));
                match (tid("prev_tid", "prev_pid"), tid("next_tid", "next_pid")) {
                    (Some(prev_tid), Some(next_tid)) => Rule::SchedSwitch {
                        prev_tid,
                        next_tid,
                        prev_comm: str_field("prev_comm"),
                        next_comm: str_field("next_comm"),
                    },
                    _ => Rule::Instant,
                }
            }
            (_, "lttng_statedump_process_state") => match (int_field("tid"), int_field("pid")) {
                (Some(tid), Some(pid)) => Rule::ProcessState {
                    tid,
                    pid,
                    name: str_field("name"),
                },
                _ => Rule::Instant,
            },
            (_, ev) if self.kernel.is_some() => {
                let old_syscalls = self.kernel == Some(KernelStyle::Before26);
                match kernel_pair(ev, old_syscalls) {
                    Some(pair) => {
                        let key = self.trace.intern(pair.key);
                        let named = pair.name.map(|n| self.trace.intern(n));
                        let name_field = pair.name_field.and_then(str_field);
                        if pair.begin {
                            Rule::Begin {
                                key,
                                kind: SliceKind::Other,
                                lane: Lane::Thread,
                                name_field,
                                time_field: None,
                                named,
                            }
                        } else {
                            Rule::End {
                                key,
                                lane: Lane::Thread,
                                name_field: None,
                                time_field: None,
                            }
                        }
                    }
                    None => Rule::Instant,
                }
            }
            (p, ev) => match pair_of(ev) {
                Some((begin, x)) => {
                    let key = self.trace.intern(x);
                    let (kind, lane) = family_kind(p, x);
                    let time_field = if p == "cuptiTracer" {
                        int_field("timestamp")
                    } else {
                        None
                    };
                    let name_field = if p.ends_with("Tracer") {
                        str_field("name")
                    } else {
                        None
                    };
                    if begin {
                        Rule::Begin {
                            key,
                            kind,
                            lane,
                            name_field,
                            time_field,
                            named: None,
                        }
                    } else {
                        Rule::End {
                            key,
                            lane,
                            name_field,
                            time_field,
                        }
                    }
                }
                None => Rule::Instant,
            },
        };
        // The `Bytes` and `Addr` of an allocation or a free say what its `size` and
        // `ptr` fields say: those are not repeated in its args.
        let covered = match &rule {
            Rule::Libc(libc) => libc.covered(),
            _ => 0,
        };
        let note_cpu = !matches!(
            rule,
            Rule::OwnBegin { .. }
                | Rule::OwnEnd { .. }
                | Rule::OwnInstant { .. }
                | Rule::OwnCounter { .. }
                | Rule::OwnTyped { .. }
        );
        Plan {
            name,
            category,
            rule,
            note_cpu,
            arg_fields: (0..names.len())
                .filter(|&i| covered & field_bit(i) == 0)
                .collect(),
            keys,
            process_scope,
        }
    }

    /// The keys and types of the `count` args of opscope's typed class `e`, from the
    /// trace's environment (`opscope_args_ID`).
    fn typed_keys(
        &mut self,
        layout: &Layout,
        e: &super::decode::EventLayout,
        count: usize,
    ) -> Option<Box<[(StrId, ArgTag)]>> {
        let schema = layout.meta.env_str(&format!("opscope_args_{}", e.id))?;
        let Ok(serde_json::Value::Array(list)) = serde_json::from_str(schema) else {
            return None;
        };
        let keys = list
            .iter()
            .map(|pair| {
                let key = pair.get(0)?.as_str()?;
                let code = pair.get(1)?.as_str()?;
                let tag = ArgTag::ALL.into_iter().find(|t| t.code() == code)?;
                Some((self.trace.intern(key), tag))
            })
            .collect::<Option<Box<[_]>>>()?;
        (keys.len() == count).then_some(keys)
    }

    fn text(&mut self, r: &Event, v: Val) -> StrId {
        match v {
            Val::Str { start, len } => {
                let bytes = r.text(start, len);
                match std::str::from_utf8(bytes) {
                    Ok(s) => self.trace.intern(s),
                    Err(_) => self.trace.intern(&String::from_utf8_lossy(bytes)),
                }
            }
            Val::U(u) => self.trace.intern(&u.to_string()),
            Val::I(i) => self.trace.intern(&i.to_string()),
            _ => StrId::EMPTY,
        }
    }

    /// A value as an arg: numbers as numbers, text interned, compound values as JSON.
    fn arg(&mut self, r: &Event, node: &Node, pos: usize) -> ArgValue {
        let vals = &r.vals;
        match (node, vals.get(pos).copied()) {
            (Node::Int(i), Some(v)) => {
                if let Some(labels) = &i.labels {
                    let x = match v {
                        Val::I(x) => x as i128,
                        Val::U(x) => x as i128,
                        _ => 0,
                    };
                    if let Some(l) = labels.entries.iter().find(|e| e.1 <= x && x <= e.2) {
                        return ArgValue::Str(self.trace.intern(&l.0));
                    }
                }
                match v {
                    Val::I(x) => ArgValue::Int(x),
                    Val::U(x) => match i64::try_from(x) {
                        Ok(x) => ArgValue::Int(x),
                        Err(_) => ArgValue::UInt(x),
                    },
                    _ => ArgValue::Null,
                }
            }
            (Node::Float { .. }, Some(Val::F(f))) => ArgValue::Float(f),
            (_, Some(v @ Val::Str { .. })) => ArgValue::Str(self.text(r, v)),
            (Node::Variant { options, .. }, Some(Val::Variant(o))) => match options.get(o as usize)
            {
                Some(opt) => self.arg(r, opt, pos + 1),
                None => ArgValue::Null,
            },
            (_, Some(_)) => {
                let mut s = String::new();
                json(r, node, vals, pos, &mut s);
                ArgValue::Json(self.trace.intern(&s))
            }
            _ => ArgValue::Null,
        }
    }

    fn lane(&mut self, pid: i64, tid: i64, cpu_lane: bool) -> (ProcessId, TrackId) {
        let key = (pid, tid, cpu_lane);
        if let Some((k, l)) = self.last_lane {
            if k == key {
                return l;
            }
        }
        if let Some(&l) = self.lanes.get(&key) {
            self.last_lane = Some((key, l));
            return l;
        }
        let process = self.trace.process(self.source, pid);
        let thread = self.trace.thread(process, tid);
        if cpu_lane {
            let name = self.trace.intern(&format!("CPU {tid}"));
            self.trace.threads[thread.index()].name = Some(name);
            if self.trace.processes[process.index()].name.is_none() {
                self.trace.processes[process.index()].name = Some(self.s_cpus);
            }
        }
        let track = self.trace.thread_track(thread, TrackKind::Thread);
        self.lanes.insert((pid, tid, cpu_lane), (process, track));
        (process, track)
    }

    fn event(
        &mut self,
        layout: &Layout,
        ident: &Identify,
        stream_index: usize,
        r: &Event,
        who: Who,
    ) {
        let ev = r.event;
        let plan = match &self.plans[ev] {
            Some(plan) => Rc::clone(plan),
            None => {
                let plan = Rc::new(self.plan(layout, ev));
                self.plans[ev] = Some(Rc::clone(&plan));
                plan
            }
        };
        let origin = ident.origin;
        let to_ns = |cycles: u64| match origin {
            Some(o) => o.ns(cycles),
            None => cycles as i64,
        };
        let Who {
            ts,
            pid,
            tid,
            procname,
        } = who;
        self.last_ts = self.last_ts.max(ts);
        let el = &layout.events[ev];
        field_positions(
            el.fields.as_ref(),
            &ident.offsets[ev].1,
            r.vals,
            r.scopes[3],
            &mut self.positions,
        );
        let cpu = r.cpu_id.unwrap_or(stream_index as u64);
        let cpu_lane = pid.is_none() && tid.is_none();
        let (process, track) = match (pid, tid) {
            (None, None) => self.lane(-1, cpu as i64, true),
            (p, t) => {
                let p = p.unwrap_or(0);
                self.lane(p, t.unwrap_or(p), false)
            }
        };
        if let Some(v) = procname {
            let thread = self.trace.tracks[track.index()].thread;
            if let Some(th) = thread {
                if self.trace.threads[th.index()].name.is_none() {
                    // Read from the context's bytes, the name is the whole text field.
                    let n = self.text(r, up_to_nul(r, v));
                    self.trace.threads[th.index()].name = Some(n);
                    if self.trace.processes[process.index()].name.is_none() {
                        self.trace.processes[process.index()].name = Some(n);
                    }
                }
            }
        }
        if let (Some(c), true, false) = (r.cpu_id, plan.note_cpu, cpu_lane) {
            self.note_cpu(process, track, ts, c);
        }
        // Kernel pairs (syscalls, irq handlers) belong to the thread running on the CPU.
        let (process, track) = match (&plan.rule, cpu_lane) {
            (Rule::Begin { .. } | Rule::End { .. }, true) => match self.running.get(&cpu) {
                Some(&(tid, _, _)) => self.thread_lane(tid),
                None => (process, track),
            },
            _ => (process, track),
        };
        self.apply(&plan, layout, r, ts, process, track, cpu, &to_ns);
    }

    fn payload_args(&mut self, plan: &Plan, layout: &Layout, r: &Event) -> Vec<(StrId, ArgValue)> {
        let mut out = Vec::new();
        self.push_payload_args(plan, layout, r, 0, &mut out);
        out
    }

    /// Pushes the plan's arg fields but those in the mask `leave_out`.
    fn push_payload_args(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        leave_out: u64,
        out: &mut Vec<(StrId, ArgValue)>,
    ) {
        let el = &layout.events[r.event];
        let Some(Node::Struct { fields, .. }) = &el.fields else {
            return;
        };
        for &i in plan.arg_fields.iter() {
            let (Some(&pos), Some(f)) = (self.positions.get(i), fields.get(i)) else {
                break;
            };
            if leave_out & field_bit(i) != 0 {
                continue;
            }
            let v = self.arg(r, f, pos as usize);
            out.push((plan.keys[i], v));
        }
    }

    /// An instant of the event with its payload's fields as args.
    fn instant(&mut self, plan: &Plan, layout: &Layout, r: &Event, ts: i64, track: TrackId) {
        let kind = SliceKind::Other;
        self.instant_leaving_out(plan, layout, r, ts, track, kind, &[], 0);
    }

    /// An instant with `extra` args and the payload's arg fields but those in the mask
    /// `leave_out`.
    #[allow(clippy::too_many_arguments)]
    fn instant_leaving_out(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        ts: i64,
        track: TrackId,
        kind: SliceKind,
        extra: &[(StrId, ArgValue)],
        leave_out: u64,
    ) {
        let args = if plan.arg_fields.is_empty() {
            self.trace.args.push_bag(extra)
        } else {
            // One buffer for every instant: millions of events must not allocate.
            let mut entries = std::mem::take(&mut self.scratch);
            entries.clear();
            entries.extend_from_slice(extra);
            self.push_payload_args(plan, layout, r, leave_out, &mut entries);
            let args = self.trace.args.push_bag(&entries);
            self.scratch = entries;
            args
        };
        self.trace.instants.push(InstantRow {
            track,
            ts,
            name: plan.name,
            category: plan.category,
            kind,
            scope: if plan.process_scope {
                InstantScope::Process
            } else {
                InstantScope::Thread
            },
            args,
        });
    }

    fn field_text(&mut self, r: &Event, i: usize) -> StrId {
        match self.positions.get(i).and_then(|&p| r.vals.get(p as usize)) {
            Some(&v) => self.text(r, v),
            None => StrId::EMPTY,
        }
    }

    /// A field holding the args as a JSON object (`ctf::export` writes them so).
    fn field_json_args(&mut self, r: &Event, i: usize) -> Vec<(StrId, ArgValue)> {
        let text = self.field_text(r, i);
        self.json_args(text)
    }

    /// Args held as the text of a JSON object.
    fn json_args(&mut self, text: StrId) -> Vec<(StrId, ArgValue)> {
        let Ok(serde_json::Value::Object(map)) =
            serde_json::from_str::<serde_json::Value>(self.trace.str(text))
        else {
            return Vec::new();
        };
        map.into_iter()
            .map(|(k, v)| {
                let value = match v {
                    serde_json::Value::Null => ArgValue::Null,
                    serde_json::Value::Bool(b) => ArgValue::Bool(b),
                    serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                        (Some(i), _, _) => ArgValue::Int(i),
                        (_, Some(u), _) => ArgValue::UInt(u),
                        (_, _, Some(f)) => ArgValue::Float(f),
                        _ => ArgValue::Null,
                    },
                    serde_json::Value::String(s) => ArgValue::Str(self.trace.intern(&s)),
                    other => ArgValue::Json(self.trace.intern(&other.to_string())),
                };
                (self.trace.intern(&k), value)
            })
            .collect()
    }

    /// Notes that the thread of `track` ran on `cpu` at `ts`: a sample of its CPU
    /// counter where that changed.
    fn note_cpu(&mut self, process: ProcessId, track: TrackId, ts: i64, cpu: u64) {
        let t = track.index();
        if self.cpu_of_track.len() <= t {
            self.cpu_of_track.resize(t + 1, (u64::MAX, None));
        }
        let (last, counter) = self.cpu_of_track[t];
        if last == cpu {
            return;
        }
        let counter = match counter {
            Some(c) => c,
            None => {
                let thread = self.trace.tracks[t].thread;
                let tid = thread.map_or(-1, |th| self.trace.threads[th.index()].tid);
                let name = self.trace.intern(&format!("cpu (tid {tid})"));
                let c = self
                    .trace
                    .named_track(Some(process), TrackKind::Counter, name, 0);
                self.trace.tracks[c.index()].thread = thread;
                c
            }
        };
        self.cpu_of_track[t] = (cpu, Some(counter));
        self.trace.counters.push(counter, ts, cpu as f64);
    }

    /// Field `i`'s text, as the previous event of its class in `slot` had it when its
    /// bytes are the same: the category and kind of one class rarely change, nor the
    /// name over runs of events, and comparing bytes is cheaper than checking and
    /// hashing them.
    fn memo_text(&mut self, r: &Event, slot: usize, i: usize) -> StrId {
        let at = r.event * 3 + slot;
        let Some(&Val::Str { start, len }) =
            self.positions.get(i).and_then(|&p| r.vals.get(p as usize))
        else {
            return self.field_text(r, i);
        };
        let bytes = r.text(start, len);
        if let Some(&prev) = self.memo.get(at) {
            if prev != StrId::EMPTY && self.trace.str(prev).as_bytes() == bytes {
                return prev;
            }
        }
        let id = self.field_text(r, i);
        if self.memo.len() <= at {
            self.memo.resize(at + 1, StrId::EMPTY);
        }
        self.memo[at] = id;
        id
    }

    /// The label table of an enumeration, built at its first use.
    fn label_table(&mut self, e: &std::sync::Arc<EnumTy>) -> Rc<LabelTable> {
        let key = std::sync::Arc::as_ptr(e);
        if let Some(t) = self.label_tables.get(&key) {
            return Rc::clone(t);
        }
        let table = Rc::new(LabelTable::new(std::sync::Arc::clone(e)));
        self.label_tables.insert(key, Rc::clone(&table));
        table
    }

    /// The text of one of opscope's own text fields (`slot`: its place among the
    /// event class's three, for [`Mapper::memo_text`]).
    fn own_text(&mut self, r: &Event, slot: usize, f: &OwnText) -> StrId {
        let Some(labels) = &f.labels else {
            return self.memo_text(r, slot, f.field);
        };
        let v = match self
            .positions
            .get(f.field)
            .and_then(|&p| r.vals.get(p as usize))
        {
            Some(Val::U(v)) => *v as i128,
            Some(Val::I(v)) => *v as i128,
            _ => return StrId::EMPTY,
        };
        match labels.get(self.trace, v) {
            Some(id) => id,
            // A value with no label (not ours): its number.
            None => self.trace.intern(&v.to_string()),
        }
    }

    /// One of opscope's own slices begins: its row is added now, in the order of
    /// begins, which is the model's order (by track, time, then longest first), so
    /// that finishing the trace finds each track sorted; its end sets its duration.
    #[allow(clippy::too_many_arguments)]
    fn begin_own(
        &mut self,
        id: u64,
        track: TrackId,
        ts: i64,
        name: StrId,
        category: StrId,
        kind: SliceKind,
        args: ArgsId,
    ) {
        let row = self.trace.slices.push(SliceRow {
            track,
            ts,
            dur: 0,
            name,
            category,
            kind,
            args,
        });
        self.open_own(id, row);
    }

    /// Slice `row` ends at `ts` (on `track`, where its end is).
    fn end_own(&mut self, row: u32, track: TrackId, ts: i64) {
        let s = &mut self.trace.slices;
        let i = row as usize;
        s.dur[i] = ts.saturating_sub(s.ts[i]);
        s.track[i] = track.0;
    }

    /// Notes that slice `row` is open under the writer's `id`.
    fn open_own(&mut self, id: u64, row: u32) {
        // Ids are slice indexes: a vector holds them, but for ids far beyond the
        // events seen (a corrupt or foreign file), which must not grow it.
        let dense_limit = 2 * self.trace.slices.len() as u64 + 4096;
        if id < dense_limit {
            let i = id as usize;
            if self.own_rows.len() <= i {
                self.own_rows.resize(i + 1, NO_ROW);
            }
            if self.own_rows[i] != NO_ROW {
                // Begun twice: the first is replaced, as a map would have it.
                self.own_replaced.push(self.own_rows[i]);
            }
            self.own_rows[i] = row;
        } else if let Some(old) = self.own_open.insert(id, row) {
            self.own_replaced.push(old);
        }
    }

    /// The row of the open slice of the writer's `id`, no longer open.
    fn take_own(&mut self, id: u64) -> Option<u32> {
        match self.own_rows.get_mut(id as usize) {
            Some(row) if *row != NO_ROW => Some(std::mem::replace(row, NO_ROW)),
            _ => self.own_open.remove(&id),
        }
    }

    /// The kind a kind's name says, remembering the last.
    fn memo_kind(&mut self, name: StrId) -> SliceKind {
        if let Some((n, k)) = self.last_kind {
            if n == name {
                return k;
            }
        }
        let text = self.trace.str(name);
        let kind = SliceKind::ALL
            .into_iter()
            .find(|k| k.name() == text)
            .unwrap_or(SliceKind::Other);
        self.last_kind = Some((name, kind));
        kind
    }

    /// The args of a typed class (`ctf::export`): payload field `field` is a struct
    /// whose fields hold `keys`' values, each of its type.
    fn typed_args(
        &mut self,
        r: &Event,
        field: usize,
        keys: &[(StrId, ArgTag)],
        labels: &[Option<Rc<LabelTable>>],
    ) -> ArgsId {
        let Some(&at) = self.positions.get(field) else {
            return ArgsId::NONE;
        };
        let mut entries = std::mem::take(&mut self.scratch);
        entries.clear();
        // The struct's own value, then one per field.
        let vals = r.vals.get(at as usize + 1..).unwrap_or(&[]);
        let mut memo = std::mem::take(&mut self.arg_memo);
        if memo.len() <= r.event {
            memo.resize_with(r.event + 1, Vec::new);
        }
        let memo_of_class = &mut memo[r.event];
        if memo_of_class.len() < keys.len() {
            memo_of_class.resize(keys.len(), StrId::EMPTY);
        }
        for (k, (&(key, tag), &v)) in keys.iter().zip(vals).enumerate() {
            // A string arg often repeats the previous event's of its class (an op's
            // input types and shapes): equal bytes are that string, as for names.
            let mut text = |m: &mut Self, v: Val| match v {
                Val::Str { start, len } => {
                    let prev = memo_of_class[k];
                    if prev != StrId::EMPTY && m.trace.str(prev).as_bytes() == r.text(start, len) {
                        return prev;
                    }
                    let id = m.text(r, v);
                    memo_of_class[k] = id;
                    id
                }
                _ => StrId::EMPTY,
            };
            // Written as an enumeration: its label.
            if let (Some(Some(table)), ArgTag::Str | ArgTag::Json, Val::U(x)) =
                (labels.get(k), tag, v)
            {
                let text = match table.get(self.trace, x as i128) {
                    Some(id) => id,
                    None => self.trace.intern(&x.to_string()),
                };
                let value = if tag == ArgTag::Str {
                    ArgValue::Str(text)
                } else {
                    ArgValue::Json(text)
                };
                entries.push((key, value));
                continue;
            }
            let value = match (tag, v) {
                (ArgTag::Int, Val::I(x)) => ArgValue::Int(x),
                (ArgTag::Int, Val::U(x)) => ArgValue::Int(x as i64),
                (ArgTag::UInt, Val::U(x)) => ArgValue::UInt(x),
                (ArgTag::UInt, Val::I(x)) => ArgValue::UInt(x as u64),
                (ArgTag::Float, Val::F(x)) => ArgValue::Float(x),
                (ArgTag::Bool, Val::U(x)) => ArgValue::Bool(x != 0),
                (ArgTag::Str, v @ Val::Str { .. }) => ArgValue::Str(text(self, v)),
                (ArgTag::Json, v @ Val::Str { .. }) => ArgValue::Json(text(self, v)),
                _ => ArgValue::Null,
            };
            entries.push((key, value));
        }
        self.arg_memo = memo;
        let args = self.trace.args.push_bag(&entries);
        self.scratch = entries;
        args
    }

    fn field_int(&self, r: &Event, i: usize) -> Option<i64> {
        int_at(r.vals, self.positions.get(i).copied())
    }

    fn field_u(&self, r: &Event, i: usize) -> u64 {
        match self.positions.get(i).and_then(|&p| r.vals.get(p as usize)) {
            Some(Val::U(v)) => *v,
            Some(Val::I(v)) => *v as u64,
            _ => 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        ts: i64,
        process: ProcessId,
        track: TrackId,
        cpu: u64,
        to_ns: &dyn Fn(u64) -> i64,
    ) {
        match &plan.rule {
            Rule::Instant => self.instant(plan, layout, r, ts, track),
            Rule::CygEntry { addr } => {
                let a = addr.map_or(0, |i| self.field_u(r, i));
                let name = self.trace.intern(&hex(a));
                let args = self.payload_args(plan, layout, r);
                let open = Open {
                    key: plan.name,
                    name,
                    ts,
                    kind: SliceKind::Other,
                    category: plan.category,
                    args,
                };
                self.stacks.begin(track, open);
            }
            Rule::CygExit => {
                let open = self.stacks.end(track, &mut self.trace.repairs);
                self.close_or_keep(open, plan, layout, r, ts, track);
            }
            Rule::Begin {
                key,
                kind,
                lane,
                name_field,
                time_field,
                named,
            } => {
                let ts = time_field.map_or(ts, |i| to_ns(self.field_u(r, i)));
                let name = match name_field.and_then(|i| self.positions.get(i).copied()) {
                    Some(p) => self.text(r, r.vals[p as usize]),
                    None => named.unwrap_or(*key),
                };
                let track = self.lane_track(*lane, process, track);
                let args = self.payload_args(plan, layout, r);
                let open = Open {
                    key: *key,
                    name,
                    ts,
                    kind: *kind,
                    category: plan.category,
                    args,
                };
                self.stacks.begin(track, open);
            }
            Rule::End {
                key,
                lane,
                name_field,
                time_field,
            } => {
                let ts = time_field.map_or(ts, |i| to_ns(self.field_u(r, i)));
                let name = name_field
                    .and_then(|i| self.positions.get(i).copied())
                    .map(|p| self.text(r, r.vals[p as usize]));
                let lane_track = self.lane_track(*lane, process, track);
                let found = self
                    .stacks
                    .end_where(lane_track, &mut self.trace.repairs, |o| {
                        o.key == *key && name.is_none_or(|n| n == o.name)
                    });
                match found {
                    Some(open) => {
                        let extra = self.payload_args(plan, layout, r);
                        self.close(open, lane_track, ts, &extra);
                    }
                    None => self.instant(plan, layout, r, ts, lane_track),
                }
            }
            Rule::Libc(libc) => self.libc(plan, layout, r, ts, process, track, libc),
            Rule::OwnBegin {
                id,
                name,
                category,
                kind,
                args,
            } => {
                let entries = self.field_json_args(r, *args);
                let args = self.trace.args.push_bag(&entries);
                let name = self.own_text(r, 0, name);
                let category = self.own_text(r, 1, category);
                let kind_text = self.own_text(r, 2, kind);
                let kind = self.memo_kind(kind_text);
                let id = self.field_u(r, *id);
                self.begin_own(id, track, ts, name, category, kind, args);
            }
            Rule::OwnEnd { id } => match self.take_own(self.field_u(r, *id)) {
                Some(row) => self.end_own(row, track, ts),
                None => {
                    self.trace.repairs.unmatched_ends += 1;
                    self.instant(plan, layout, r, ts, track);
                }
            },
            Rule::OwnInstant {
                name,
                category,
                kind,
                args,
            } => {
                let entries = self.field_json_args(r, *args);
                let args = self.trace.args.push_bag(&entries);
                let kind = match kind {
                    Some(k) => {
                        let text = self.own_text(r, 2, k);
                        self.memo_kind(text)
                    }
                    None => SliceKind::Other,
                };
                let row = InstantRow {
                    track,
                    ts,
                    name: self.own_text(r, 0, name),
                    category: self.own_text(r, 1, category),
                    kind,
                    scope: InstantScope::Thread,
                    args,
                };
                self.trace.instants.push(row);
            }
            Rule::OwnTyped {
                id,
                name,
                category,
                kind,
                args,
                keys,
                labels,
            } => {
                let args = self.typed_args(r, *args, keys, labels);
                let name = self.own_text(r, 0, name);
                let category = self.own_text(r, 1, category);
                let kind_text = self.own_text(r, 2, kind);
                let kind = self.memo_kind(kind_text);
                match id {
                    Some(id) => {
                        let id = self.field_u(r, *id);
                        self.begin_own(id, track, ts, name, category, kind, args);
                    }
                    None => {
                        self.trace.instants.push(InstantRow {
                            track,
                            ts,
                            name,
                            category,
                            kind,
                            scope: InstantScope::Thread,
                            args,
                        });
                    }
                }
            }
            Rule::OwnCounter { name, value } => {
                let name = self.field_text(r, *name);
                let counter = self.own_counter_track(process, track, name);
                let v = match self
                    .positions
                    .get(*value)
                    .and_then(|&p| r.vals.get(p as usize))
                {
                    Some(Val::F(v)) => *v,
                    Some(Val::I(v)) => *v as f64,
                    Some(Val::U(v)) => *v as f64,
                    _ => f64::NAN,
                };
                self.trace.counters.push(counter, ts, v);
            }
            Rule::Counters => {
                let el = &layout.events[r.event];
                if let Some(Node::Struct { fields, .. }) = &el.fields {
                    for (i, f) in fields.iter().enumerate() {
                        let Some(&pos) = self.positions.get(i) else {
                            break;
                        };
                        let v = match (f, r.vals.get(pos as usize)) {
                            (Node::Int(_), Some(Val::U(v))) => *v as f64,
                            (Node::Int(_), Some(Val::I(v))) => *v as f64,
                            (Node::Float { .. }, Some(Val::F(v))) => *v,
                            _ => continue,
                        };
                        let key = (process, plan.keys[i]);
                        let counter = match self.counters.get(&(process, plan.keys[i])) {
                            Some(&t) => t,
                            None => {
                                let name = format!(
                                    "{}.{}",
                                    self.trace.str(plan.name),
                                    self.trace.str(plan.keys[i])
                                );
                                let name = self.trace.intern(&name);
                                let t = self.trace.named_track(
                                    Some(process),
                                    TrackKind::Counter,
                                    name,
                                    0,
                                );
                                self.counters.insert(key, t);
                                t
                            }
                        };
                        self.trace.counters.push(counter, ts, v);
                    }
                }
                self.instant(plan, layout, r, ts, track);
            }
            Rule::SchedSwitch {
                prev_tid,
                next_tid,
                prev_comm,
                next_comm,
            } => {
                let prev = self.field_int(r, *prev_tid).unwrap_or(-1);
                let next = self.field_int(r, *next_tid).unwrap_or(-1);
                let comm = |m: &mut Self, f: &Option<usize>| {
                    f.and_then(|i| m.positions.get(i).copied())
                        .map(|p| m.text(r, r.vals[p as usize]))
                        .unwrap_or(m.s_running)
                };
                let prev_name = comm(self, prev_comm);
                let next_name = comm(self, next_comm);
                if let Some((tid, since, name)) = self.running.remove(&cpu) {
                    if tid == prev && tid > 0 {
                        let name = if name == self.s_running {
                            prev_name
                        } else {
                            name
                        };
                        self.running_slice(tid, since, ts, name, cpu);
                    }
                }
                if next > 0 {
                    self.running.insert(cpu, (next, ts, next_name));
                }
                self.instant(plan, layout, r, ts, track);
            }
            Rule::Procname { field } => {
                if let Some(&p) = self.positions.get(*field) {
                    let n = self.text(r, r.vals[p as usize]);
                    self.trace.processes[process.index()].name = Some(n);
                    self.named_processes.insert(process);
                }
                self.instant(plan, layout, r, ts, track);
            }
            Rule::ProcessState { tid, pid, name } => {
                if let (Some(t), Some(p)) = (self.field_int(r, *tid), self.field_int(r, *pid)) {
                    self.tid_pid.insert(t, p);
                    if let Some(n) = name.and_then(|i| self.positions.get(i).copied()) {
                        let n = self.text(r, r.vals[n as usize]);
                        let proc_ = self.trace.process(self.source, p);
                        let th = self.trace.thread(proc_, t);
                        self.trace.threads[th.index()].name.get_or_insert(n);
                        if t == p {
                            self.trace.processes[proc_.index()].name.get_or_insert(n);
                        }
                    }
                }
                self.instant(plan, layout, r, ts, track);
            }
        }
    }

    /// The counter track `name` of opscope's own counter events of `process` (written
    /// on `track`).
    fn own_counter_track(&mut self, process: ProcessId, track: TrackId, name: StrId) -> TrackId {
        if let Some(&t) = self.counters.get(&(process, name)) {
            return t;
        }
        let t = self
            .trace
            .named_track(Some(process), TrackKind::Counter, name, 0);
        // A thread's counter (its CPU) is written with the thread's tid, a process's
        // with -1.
        let thread = self.trace.tracks[track.index()]
            .thread
            .filter(|th| self.trace.threads[th.index()].tid != -1);
        self.trace.tracks[t.index()].thread = thread;
        self.counters.insert((process, name), t);
        t
    }

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

    /// The thread track of a kernel thread (its process from the statedump, else its
    /// own).
    fn thread_lane(&mut self, tid: i64) -> (ProcessId, TrackId) {
        let pid = self.tid_pid.get(&tid).copied().unwrap_or(tid);
        self.lane(pid, tid, false)
    }

    fn running_slice(&mut self, tid: i64, since: i64, ts: i64, name: StrId, cpu: u64) {
        let pid = self.tid_pid.get(&tid).copied().unwrap_or(tid);
        let process = self.trace.process(self.source, pid);
        let thread = self.trace.thread(process, tid);
        self.trace.threads[thread.index()].name.get_or_insert(name);
        if pid == tid {
            self.trace.processes[process.index()]
                .name
                .get_or_insert(name);
        }
        let track =
            self.trace
                .named_track(Some(process), TrackKind::Async, self.s_running, tid as u64);
        let key = self.trace.intern("cpu");
        let args = self
            .trace
            .args
            .push_bag(&[(key, ArgValue::Int(cpu as i64))]);
        let category = self.trace.intern("sched");
        self.trace.slices.push(SliceRow {
            track,
            ts: since,
            dur: ts.saturating_sub(since),
            name,
            category,
            kind: SliceKind::Other,
            args,
        });
    }

    /// Closes `open` at `ts`; an end that closed nothing (counted already) is kept as
    /// an instant.
    fn close_or_keep(
        &mut self,
        open: Option<Open>,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        ts: i64,
        track: TrackId,
    ) {
        match open {
            Some(open) => self.close(open, track, ts, &[]),
            None => self.instant(plan, layout, r, ts, track),
        }
    }

    fn close(&mut self, open: Open, track: TrackId, ts: i64, extra: &[(StrId, ArgValue)]) {
        let mut entries = open.args;
        for e in extra {
            if !entries.iter().any(|x| x.0 == e.0) {
                entries.push(*e);
            }
        }
        let args = self.trace.args.push_bag(&entries);
        self.trace.slices.push(SliceRow {
            track,
            ts: open.ts,
            dur: ts.saturating_sub(open.ts),
            name: open.name,
            category: open.category,
            kind: open.kind,
            args,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn libc(
        &mut self,
        plan: &Plan,
        layout: &Layout,
        r: &Event,
        ts: i64,
        process: ProcessId,
        track: TrackId,
        libc: &Libc,
    ) {
        let positions = &self.positions;
        let value = |i: usize| positions.get(i).and_then(|&p| r.vals.get(p as usize));
        let u = |i| match value(i) {
            Some(Val::U(v)) => *v,
            Some(Val::I(v)) => *v as u64,
            _ => 0,
        };
        let int = |i| int_at(r.vals, positions.get(i).copied());
        let effect = self.allocations.apply(process.index(), libc, u, int);
        let at = process.index();
        if self.libc_tracks.len() <= at {
            self.libc_tracks.resize(at + 1, None);
        }
        let counter = match self.libc_tracks[at] {
            Some(t) => t,
            None => {
                let name = self.s_libc_in_use;
                let t = self
                    .trace
                    .named_track(Some(process), TrackKind::Counter, name, 0);
                self.libc_tracks[at] = Some(t);
                t
            }
        };
        self.trace.counters.push(counter, ts, effect.in_use as f64);
        for change in effect.changes() {
            let extra = [
                (self.k_bytes, ArgValue::Int(change.bytes)),
                (self.k_addr, ArgValue::Int(change.addr as i64)),
            ];
            let (kind, covered) = (SliceKind::Alloc, change.covered);
            self.instant_leaving_out(plan, layout, r, ts, track, kind, &extra, covered);
        }
    }
}

/// A compound value as JSON text (arrays of small integers: `[1, 2]`).
fn json(r: &Event, node: &Node, vals: &[Val], pos: usize, out: &mut String) -> usize {
    use std::fmt::Write;
    match (node, vals.get(pos)) {
        (_, Some(Val::U(v))) => {
            let _ = write!(out, "{v}");
            pos + 1
        }
        (_, Some(Val::I(v))) => {
            let _ = write!(out, "{v}");
            pos + 1
        }
        (_, Some(Val::F(v))) => {
            if v.is_finite() {
                let _ = write!(out, "{v}");
            } else {
                out.push_str("null");
            }
            pos + 1
        }
        (_, Some(Val::Str { start, len })) => {
            let s = String::from_utf8_lossy(r.text(*start, *len));
            out.push_str(&serde_json::Value::String(s.into_owned()).to_string());
            pos + 1
        }
        (Node::Struct { names, fields, .. }, Some(Val::Compound(_))) => {
            out.push('{');
            let mut p = pos + 1;
            for (i, (n, f)) in names.iter().zip(fields.iter()).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&serde_json::Value::String(n.clone()).to_string());
                out.push_str(": ");
                p = json(r, f, vals, p, out);
            }
            out.push('}');
            p
        }
        (Node::Array { elem, .. } | Node::Seq { elem, .. }, Some(Val::Compound(n))) => {
            out.push('[');
            let mut p = pos + 1;
            for i in 0..*n {
                if i > 0 {
                    out.push_str(", ");
                }
                p = json(r, elem, vals, p, out);
            }
            out.push(']');
            p
        }
        (Node::Variant { options, .. }, Some(Val::Variant(o))) => match options.get(*o as usize) {
            Some(opt) => json(r, opt, vals, pos + 1, out),
            None => pos + 1,
        },
        _ => {
            out.push_str("null");
            pos + 1
        }
    }
}

/// The mapper as the decoding pipeline's sink.
struct MapperSink<'m, 't, 'l> {
    mapper: &'m mut Mapper<'t>,
    layout: &'l Layout,
    ident: &'l Identify,
}

impl<'a> super::pipeline::Sink<'a, Who> for MapperSink<'_, '_, '_> {
    fn event(&mut self, stream_index: usize, event: &Event<'a, '_>, who: Who) {
        self.mapper
            .event(self.layout, self.ident, stream_index, event, who);
    }

    fn spare_capacity(&mut self, out: &mut Vec<std::ops::Range<usize>>) {
        self.mapper.trace.spare_capacity(out);
    }
}

/// Which reader maps opscope's own CTF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// Its own reader ([`own`]), when the layout is exactly what `ctf::export` writes.
    Fast,
    /// The general reader, as for any CTF (for tests that compare the two).
    #[cfg_attr(not(test), allow(dead_code))]
    General,
}

/// Names the processes and threads of a trace opscope wrote as the environment says
/// (`opscope_processes`, `opscope_threads`; see `ctf::export`): the lanes its events
/// made, never new ones.
fn name_own_lanes(m: &mut Mapper, meta: &super::types::Metadata) {
    let list = |key: &str| -> Vec<serde_json::Value> {
        meta.env_str(key)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    };
    let source = m.source;
    let trace = &mut *m.trace;
    let processes: HashMap<i64, usize> = (0..trace.processes.len())
        .filter(|&p| trace.processes[p].source == source)
        .map(|p| (trace.processes[p].pid, p))
        .collect();
    for entry in list("opscope_processes") {
        if let (Some(pid), Some(name)) = (entry[0].as_i64(), entry[1].as_str()) {
            if let Some(&p) = processes.get(&pid) {
                if trace.processes[p].name.is_none() {
                    trace.processes[p].name = Some(trace.intern(name));
                }
            }
        }
    }
    let threads: HashMap<(i64, i64), usize> = (0..trace.threads.len())
        .filter(|&t| trace.processes[trace.threads[t].process.index()].source == source)
        .map(|t| {
            let th = &trace.threads[t];
            ((trace.processes[th.process.index()].pid, th.tid), t)
        })
        .collect();
    for entry in list("opscope_threads") {
        let (pid, tid, name) = (entry[0].as_i64(), entry[1].as_i64(), entry[2].as_str());
        if let (Some(pid), Some(tid), Some(name)) = (pid, tid, name) {
            if let Some(&t) = threads.get(&(pid, tid)) {
                if trace.threads[t].name.is_none() {
                    trace.threads[t].name = Some(trace.intern(name));
                }
            }
        }
    }
}

/// Imports one trace into a new source; returns it and the first stream error.
pub(super) fn import_layout(
    trace_name: &str,
    layout: &Layout,
    streams: &[(String, &[u8])],
    trace: &mut Trace,
    path: Path,
) -> (SourceId, Option<ImportError>) {
    let meta = &layout.meta;
    let clock_name = trace.intern(layout.clock.as_ref().map_or("ctf", |c| c.name.as_str()));
    let absolute = layout
        .clock
        .as_ref()
        .is_some_and(|c| c.offset_s != 0 || c.offset != 0);
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: absolute.then_some(0),
    });
    let host = meta
        .env_str("hostname")
        .or(meta.env_str("host"))
        .map(|h| trace.intern(h));
    let domain = meta.env_str("domain").unwrap_or("").to_string();
    let source = trace.add_source(Source {
        path: trace_name.to_string(),
        format: crate::importer::Importer::name(&crate::ctf::CtfFormat).into(),
        clock,
        host,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    let default_category = trace.intern(if domain.is_empty() { "ctf" } else { &domain });
    let mut m = Mapper {
        k_bytes: trace.intern("Bytes"),
        cpu_of_track: Vec::new(),
        memo: Vec::new(),
        arg_memo: Vec::new(),
        last_kind: None,
        k_addr: trace.intern("Addr"),
        s_running: trace.intern("running"),
        s_cpus: trace.intern("CPUs"),
        s_libc_in_use: trace.intern("bytes in use (lttng_ust_libc)"),
        trace,
        source,
        plans: (0..layout.events.len()).map(|_| None).collect(),
        lanes: HashMap::new(),
        last_lane: None,
        stacks: SliceStack::new(),
        own_open: HashMap::new(),
        own_rows: Vec::new(),
        own_replaced: Vec::new(),
        label_tables: HashMap::new(),
        allocations: Allocations::default(),
        libc_tracks: Vec::new(),
        counters: HashMap::new(),
        running: HashMap::new(),
        tid_pid: HashMap::new(),
        named_processes: hashbrown::HashSet::new(),
        positions: Vec::new(),
        scratch: Vec::new(),
        last_ts: i64::MIN,
        default_category,
        kernel: (domain == "kernel").then(|| {
            if layout.events.iter().any(|e| e.name == "exit_syscall") {
                KernelStyle::Before26
            } else {
                KernelStyle::Since26
            }
        }),
    };
    let ident = Identify::new(layout);
    let (readers, error) = if path == Path::Fast && own::applies(layout) {
        own::import(&mut m, layout, ident.origin, streams)
    } else {
        let mut positions = Vec::new();
        let mut sink = MapperSink {
            mapper: &mut m,
            layout,
            ident: &ident,
        };
        super::pipeline::read_merged_batched(
            layout,
            streams,
            !ident.context_by_bytes,
            |r| ident.who(layout, r, &mut positions),
            &mut sink,
        )
    };
    // Close what is still open at its lane's last event: a thread that called exit()
    // (whose syscall never returns) or was cut by the trace's end did nothing later.
    let end = m.last_ts;
    let mut open: Vec<(TrackId, Open)> = m
        .stacks
        .finish(&mut m.trace.repairs)
        .into_iter()
        .flat_map(|(t, v)| v.into_iter().map(move |o| (t, o)))
        .collect();
    open.sort_by_key(|(t, o)| (t.0, o.ts));
    let mut last_of_track: HashMap<u32, i64> = open.iter().map(|(t, o)| (t.0, o.ts)).collect();
    let trace = &m.trace;
    let events = (0..trace.slices.len())
        .map(|i| (trace.slices.track[i], trace.slices.end(i)))
        .chain((0..trace.instants.len()).map(|i| (trace.instants.track[i], trace.instants.ts[i])));
    for (track, at) in events {
        if let Some(last) = last_of_track.get_mut(&track) {
            *last = (*last).max(at);
        }
    }
    for (track, o) in open {
        let at = last_of_track
            .get(&track.0)
            .copied()
            .unwrap_or(end)
            .max(o.ts);
        m.close(o, track, at, &[]);
    }
    // opscope's own slices with no end (a cut trace) end there too, as the others.
    let mut own: Vec<u32> = std::mem::take(&mut m.own_replaced);
    own.extend(m.own_rows.iter().copied().filter(|&r| r != NO_ROW));
    own.extend(m.own_open.values().copied());
    for row in own {
        m.trace.repairs.unmatched_begins += 1;
        let s = &mut m.trace.slices;
        let i = row as usize;
        s.dur[i] = end.saturating_sub(s.ts[i]).max(0);
    }
    let running: Vec<(u64, (i64, i64, StrId))> = m.running.drain().collect();
    for (cpu, (tid, since, name)) in running {
        m.running_slice(tid, since, end.max(since), name, cpu);
    }
    let own_trace = meta.env_str("tracer_name") == Some("opscope");
    if own_trace {
        name_own_lanes(&mut m, meta);
    }
    // Source metadata: environment, clock, streams, discarded events.
    let trace = m.trace;
    let mut entries: Vec<(StrId, ArgValue)> = Vec::new();
    for (k, v) in &meta.env {
        // The keys and types of opscope's typed classes are the events' args already,
        // and the names are the processes' and threads'.
        let names = ["opscope_processes", "opscope_threads", "opscope_no_cpu"];
        if own_trace && (k.starts_with("opscope_args_") || names.contains(&k.as_str())) {
            continue;
        }
        let key = trace.intern(&format!("env.{k}"));
        let value = match v {
            EnvValue::Int(i) => ArgValue::Int(*i),
            EnvValue::Str(s) => ArgValue::Str(trace.intern(s)),
        };
        entries.push((key, value));
    }
    if let Some(c) = &layout.clock {
        let k = trace.intern("clock.freq");
        entries.push((k, ArgValue::Int(c.freq as i64)));
    }
    let total_events: u64 = readers.iter().map(|r| r.events).sum();
    let total_discarded: u64 = readers.iter().map(|r| r.events_discarded).sum();
    let k = trace.intern("streams");
    entries.push((k, ArgValue::Int(readers.len() as i64)));
    let k = trace.intern("events");
    entries.push((k, ArgValue::Int(total_events as i64)));
    let k = trace.intern("events_discarded");
    entries.push((k, ArgValue::Int(total_discarded as i64)));
    let mut per_stream = Vec::new();
    for (r, (path, _)) in readers.iter().zip(streams) {
        if r.events_discarded > 0 {
            let file = path.rsplit(['/', '\\']).next().unwrap_or(path);
            per_stream.push(format!("{file}: {}", r.events_discarded));
            let k = trace.intern(&format!("events_discarded.{file}"));
            entries.push((k, ArgValue::Int(r.events_discarded as i64)));
        }
    }
    let mut w = trace.args.writer();
    for (k, v) in entries {
        w.push(k, v);
    }
    let metadata = w.finish();
    trace.sources[source.index()].metadata = metadata;
    if total_discarded > 0 {
        trace.warnings.push((
            source,
            format!(
                "{trace_name}: the tracer discarded {total_discarded} events ({})",
                per_stream.join(", ")
            ),
        ));
    }
    (source, error)
}
