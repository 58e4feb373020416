//! Signals while the program runs: termination requests sent to opscope are passed to
//! the program (so `kill <opscope>` stops the program, and opscope still writes its
//! summary), and terminal signals that already reach the whole foreground process
//! group are left to the program alone.

use std::sync::atomic::{AtomicI32, Ordering};

/// The program's pid, read by the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Signals passed on to the program.
const FORWARDED: [libc::c_int; 4] = [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];
/// Signals the terminal sends to the program too: opscope ignores them and waits for
/// the program to decide.
const LEFT_TO_THE_PROGRAM: [libc::c_int; 2] = [libc::SIGINT, libc::SIGQUIT];

extern "C" fn forward(signal: libc::c_int) {
    let child = CHILD.load(Ordering::Relaxed);
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, signal) };
    }
}

/// Restores the dispositions it replaced when dropped (those of the Python
/// interpreter, when the command line runs inside one).
pub struct Forwarding {
    replaced: Vec<(libc::c_int, libc::sighandler_t)>,
}

/// Passes termination signals on to `child` until the returned guard is dropped.
pub fn forward_to(child: i32) -> Forwarding {
    CHILD.store(child, Ordering::Relaxed);
    // SAFETY: installing a handler that only calls kill (async-signal-safe), and
    // ignoring signals; both with plain `signal` dispositions.
    let mut replaced = Vec::new();
    unsafe {
        for s in FORWARDED {
            let old = libc::signal(
                s,
                forward as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
            replaced.push((s, old));
        }
        for s in LEFT_TO_THE_PROGRAM {
            replaced.push((s, libc::signal(s, libc::SIG_IGN)));
        }
    }
    Forwarding { replaced }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        CHILD.store(0, Ordering::Relaxed);
        // SAFETY: putting back the dispositions `signal` gave when replaced (SIG_ERR,
        // for a failed replacement, is never put back).
        unsafe {
            for &(s, old) in &self.replaced {
                if old != libc::SIG_ERR {
                    libc::signal(s, old);
                }
            }
        }
    }
}

/// Makes opscope the reaper of the program's orphans, so processes whose parent exited
/// early (daemonised workers) stay in the tree the sampler follows.
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}
