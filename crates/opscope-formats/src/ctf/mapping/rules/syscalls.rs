//! System calls in an LTTng kernel trace (domain `kernel`), in the style of the
//! tracer's version: lttng-modules names them `syscall_entry_X`/`syscall_exit_X` (and
//! `compat_` forms) from 2.6 on, `sys_X` closed by `exit_syscall` before. Each call is
//! a slice on the thread running on the CPU, applied as a pair ([`super::pairs`]).

use super::pairs::Pair;
use super::{Class, Rule};
use crate::ctf::decode::Layout;
use crate::ctf::mapping::Mapper;

/// Which syscall events a kernel trace has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::ctf::mapping) enum KernelStyle {
    Since26,
    Before26,
}

impl KernelStyle {
    /// The style of a trace of `domain`; `None` when it is not a kernel trace.
    pub(in crate::ctf::mapping) fn of(domain: &str, layout: &Layout) -> Option<KernelStyle> {
        (domain == "kernel").then(|| {
            // Only tracers before 2.6 declare `exit_syscall`.
            if layout.events.iter().any(|e| e.name == "exit_syscall") {
                KernelStyle::Before26
            } else {
                KernelStyle::Since26
            }
        })
    }
}

pub(super) fn plan(m: &mut Mapper, c: &Class) -> Option<Rule> {
    let style = m.kernel?;
    let (begin, key, named) = syscall(c.short, style == KernelStyle::Before26)?;
    let key = m.trace.intern(key);
    let named = named.map(|n| m.trace.intern(n));
    Some(Rule::Pair(Pair::on_thread(begin, key, named)))
}

/// A syscall event's half (begin or end), the key its halves share, and the slice's
/// name where it is not the key (an old-style `sys_read` is a `syscall` named `read`,
/// as its end, `exit_syscall`, does not say which call returned).
fn syscall(name: &str, old_syscalls: bool) -> Option<(bool, &str, Option<&str>)> {
    for (prefix, begin) in [
        ("syscall_entry_", true),
        ("syscall_exit_", false),
        ("compat_syscall_entry_", true),
        ("compat_syscall_exit_", false),
    ] {
        if let Some(x) = name.strip_prefix(prefix).filter(|x| !x.is_empty()) {
            return Some((begin, x, None));
        }
    }
    if old_syscalls {
        if name == "exit_syscall" {
            return Some((false, "syscall", None));
        }
        if let Some(x) = name.strip_prefix("sys_").filter(|x| !x.is_empty()) {
            return Some((true, "syscall", Some(x)));
        }
    }
    None
}
