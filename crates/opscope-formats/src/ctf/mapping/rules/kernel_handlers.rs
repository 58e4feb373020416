//! The other pairs lttng-modules makes in a kernel trace: irq and softirq handlers,
//! timer and hrtimer expiries, workqueue items (the `irq_*`, `timer_*` and
//! `workqueue_*` tracepoints) → slices on the thread running on the CPU, applied as a
//! pair ([`super::pairs`]). Other kernel events ending so (`hrtimer_start` arms a
//! timer, `sched_process_exit` ends a process) are no pairs.

use super::pairs::Pair;
use super::{Class, Rule};
use crate::ctf::mapping::Mapper;

pub(super) fn plan(m: &mut Mapper, c: &Class) -> Option<Rule> {
    m.kernel?;
    let (begin, key) = handler(c.short)?;
    let key = m.trace.intern(key);
    Some(Rule::Pair(Pair::on_thread(begin, key, None)))
}

/// A handler event's half (begin or end) and the key its halves share.
fn handler(name: &str) -> Option<(bool, &'static str)> {
    Some(match name {
        "irq_handler_entry" => (true, "irq_handler"),
        "irq_handler_exit" => (false, "irq_handler"),
        "softirq_entry" | "irq_softirq_entry" => (true, "softirq"),
        "softirq_exit" | "irq_softirq_exit" => (false, "softirq"),
        "hrtimer_expire_entry" => (true, "hrtimer_expire"),
        "hrtimer_expire_exit" => (false, "hrtimer_expire"),
        "timer_expire_entry" => (true, "timer_expire"),
        "timer_expire_exit" => (false, "timer_expire"),
        "workqueue_execute_start" => (true, "workqueue_execute"),
        "workqueue_execute_end" => (false, "workqueue_execute"),
        _ => return None,
    })
}
