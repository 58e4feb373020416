//! The rules that map CTF event classes onto the model, one module each, and the two
//! dispatchers over them. [`Mapper::plan`] asks the rules in turn, once per event
//! class, which one takes the class and what it needs of it (field indexes, interned
//! keys): its [`Rule`]. [`Mapper::apply`] then hands each event to its class's rule
//! with one `match`: a static call per event, with no boxing or dynamic dispatch.

use opscope_model::{ProcessId, StrId, TrackId};

use super::Mapper;
use crate::ctf::decode::{Event, EventLayout, Layout, Node};

mod cyg_profile;
mod instant;
mod kernel_handlers;
mod kernel_statedump;
pub(super) mod libc;
pub(super) mod opscope;
mod pairs;
pub(super) mod sched;
pub(super) mod syscalls;
mod tracers;
mod ust_statedump;

/// What the events of a class become: the rule that took the class, with what it
/// planned.
#[derive(Clone, Debug)]
pub(super) enum Rule {
    /// An instant with the payload's fields as args ([`instant`]).
    Instant,
    /// opscope's own events ([`opscope`]).
    Opscope(opscope::Own),
    /// Function entries and exits ([`cyg_profile`]).
    Cyg(cyg_profile::Cyg),
    /// Allocator events ([`libc`]).
    Libc(libc::Libc),
    /// lttng-ust statedump events ([`ust_statedump`]).
    UstStatedump(ust_statedump::UstStatedump),
    /// Every numeric field a counter ([`tracers`]).
    Counters,
    /// A context switch ([`sched`]).
    SchedSwitch(sched::SchedSwitch),
    /// A thread's process and name ([`kernel_statedump`]).
    ProcessState(kernel_statedump::ProcessState),
    /// One half of a pair ([`pairs`]; planned by [`syscalls`], [`kernel_handlers`] and
    /// [`pairs`] itself).
    Pair(pairs::Pair),
}

/// How the events of a class are mapped: built at the class's first event.
pub(super) struct Plan {
    pub(super) name: StrId,
    pub(super) category: StrId,
    pub(super) rule: Rule,
    /// Interned payload field names.
    pub(super) keys: Vec<StrId>,
    /// Payload fields that become args: all but those (among the first 64) whose
    /// values the rule's own args hold.
    pub(super) arg_fields: Box<[usize]>,
    /// Instants of this event are process-scoped (statedump).
    pub(super) process_scope: bool,
    /// The packet's `cpu_id` is noted on the thread's CPU counter (not for opscope's
    /// own events, whose CPU counters are events of their own).
    pub(super) note_cpu: bool,
}

impl Rule {
    /// Its events belong to the thread running on the CPU when they come from a CPU
    /// lane (the kernel's pairs: syscalls, irq handlers).
    pub(super) fn on_running_thread(&self) -> bool {
        matches!(self, Rule::Pair(_))
    }
}

/// An event class as the rules see it when planning.
pub(super) struct Class<'a> {
    layout: &'a Layout,
    el: &'a EventLayout,
    /// The part of the name before `:` (`""` when there is none).
    provider: &'a str,
    /// The rest of the name.
    short: &'a str,
    /// The payload's field names.
    names: &'a [String],
}

impl Class<'_> {
    fn fields(&self) -> Option<&[Node]> {
        match &self.el.fields {
            Some(Node::Struct { fields, .. }) => Some(fields),
            _ => None,
        }
    }

    fn field(&self, n: &str) -> Option<usize> {
        self.names.iter().position(|f| f == n)
    }

    fn int_field(&self, n: &str) -> Option<usize> {
        let i = self.field(n)?;
        matches!(self.fields()?[i], Node::Int(_)).then_some(i)
    }

    fn str_field(&self, n: &str) -> Option<usize> {
        let i = self.field(n)?;
        matches!(
            self.fields()?[i],
            Node::Str | Node::Array { text: true, .. } | Node::Seq { text: true, .. }
        )
        .then_some(i)
    }
}

/// A rule's planner: its [`Rule`] for a class it takes, `None` for one it leaves to the
/// rules after it.
type Planner = fn(&mut Mapper, &Class) -> Option<Rule>;

/// The rules in the order they are asked: the first that takes a class maps it. Those
/// keyed by provider come first; in a kernel trace, only the pairs the kernel tracer
/// makes are slices, so that a kernel event ending in `_start` or `_exit` is no pair
/// (`hrtimer_start` arms a timer, `sched_process_exit` ends a process).
const PLANNERS: [Planner; 12] = [
    opscope::plan,
    cyg_profile::plan,
    libc::plan,
    ust_statedump::plan,
    tracers::plan,
    sched::plan,
    kernel_statedump::plan,
    syscalls::plan,
    kernel_handlers::plan,
    other_kernel_events,
    pairs::plan,
    instant::plan,
];

/// Every other event of a kernel trace is an instant.
fn other_kernel_events(m: &mut Mapper, _: &Class) -> Option<Rule> {
    m.kernel.map(|_| Rule::Instant)
}

impl Mapper<'_> {
    /// The plan of event class `event`.
    pub(super) fn plan(&mut self, layout: &Layout, event: usize) -> Plan {
        let el = &layout.events[event];
        let (provider, short) = super::split_name(&el.name);
        let names: &[String] = match &el.fields {
            Some(Node::Struct { names, .. }) => names,
            _ => &[],
        };
        let keys = names.iter().map(|n| self.trace.intern(n)).collect();
        let category = match provider {
            Some(p) => self.trace.intern(p),
            None => self.default_category,
        };
        let name = self.trace.intern(short);
        let class = Class {
            layout,
            el,
            provider: provider.unwrap_or(""),
            short,
            names,
        };
        let rule = PLANNERS
            .iter()
            .find_map(|plan| plan(self, &class))
            .unwrap_or(Rule::Instant);
        // The `Bytes` and `Addr` of an allocation or a free say what its `size` and
        // `ptr` fields say: those are not repeated in its args.
        let covered = match &rule {
            Rule::Libc(libc) => libc.covered(),
            _ => 0,
        };
        Plan {
            name,
            category,
            process_scope: matches!(rule, Rule::UstStatedump(_)),
            note_cpu: !matches!(rule, Rule::Opscope(_)),
            rule,
            arg_fields: (0..names.len())
                .filter(|&i| covered & libc::field_bit(i) == 0)
                .collect(),
            keys,
        }
    }

    /// Maps one event of a class planned as `plan`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply(
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
            Rule::Opscope(own) => opscope::apply(self, own, plan, layout, r, ts, process, track),
            Rule::Cyg(cyg) => cyg_profile::apply(self, cyg, plan, layout, r, ts, track),
            Rule::Libc(libc) => libc::apply(self, libc, plan, layout, r, ts, process, track),
            Rule::UstStatedump(s) => {
                ust_statedump::apply(self, s, plan, layout, r, ts, process, track)
            }
            Rule::Counters => tracers::apply(self, plan, layout, r, ts, process, track),
            Rule::SchedSwitch(s) => sched::apply(self, s, plan, layout, r, ts, track, cpu),
            Rule::ProcessState(s) => kernel_statedump::apply(self, s, plan, layout, r, ts, track),
            Rule::Pair(pair) => {
                pairs::apply(self, pair, plan, layout, r, ts, process, track, to_ns)
            }
        }
    }
}
