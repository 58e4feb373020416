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

/// Restores the actions it replaced when dropped: whole, flags included (those of the
/// Python interpreter, when the command line runs inside one).
pub struct Forwarding {
    replaced: Vec<(libc::c_int, libc::sigaction)>,
}

/// Installs `handler` (a function or SIG_IGN) for `signal`; the action it replaced.
fn replace(signal: libc::c_int, handler: libc::sighandler_t) -> Option<libc::sigaction> {
    // SAFETY: sigaction structs are plain data, zero is a valid empty one; the handler
    // installed is `forward` (which only calls kill, async-signal-safe) or SIG_IGN.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = handler;
        new.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(signal, &new, &mut old) == 0).then_some(old)
    }
}

/// Passes termination signals on to `child` until the returned guard is dropped.
pub fn forward_to(child: i32) -> Forwarding {
    CHILD.store(child, Ordering::Relaxed);
    let forward = forward as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let mut replaced = Vec::new();
    for s in FORWARDED {
        replaced.extend(replace(s, forward).map(|old| (s, old)));
    }
    for s in LEFT_TO_THE_PROGRAM {
        replaced.extend(replace(s, libc::SIG_IGN).map(|old| (s, old)));
    }
    Forwarding { replaced }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        CHILD.store(0, Ordering::Relaxed);
        for (s, old) in &self.replaced {
            // SAFETY: putting back an action sigaction itself gave.
            unsafe { libc::sigaction(*s, old, std::ptr::null_mut()) };
        }
    }
}

/// Puts back whether this process reaped its orphaned descendants when dropped.
pub struct Subreaper {
    was: libc::c_int,
}

/// Makes opscope the reaper of the program's orphans, so processes whose parent exited
/// early (daemonised workers) stay in the tree the sampler follows; until the guard
/// is dropped (a Python process running `record` goes back to what it was).
pub fn become_subreaper() -> Subreaper {
    let mut was: libc::c_int = 0;
    // SAFETY: prctl with PR_GET/SET_CHILD_SUBREAPER reads into a c_int we own or sets
    // a flag on this process.
    unsafe {
        libc::prctl(
            libc::PR_GET_CHILD_SUBREAPER,
            &mut was as *mut libc::c_int,
            0,
            0,
            0,
        );
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    Subreaper { was }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        // SAFETY: as in `become_subreaper`.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, self.was, 0, 0, 0) };
    }
}
