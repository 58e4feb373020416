//! How the writer thread sleeps between drains and is woken early: a futex word that a
//! thread sets when its ring passes a quarter full (one system call per crossing, not
//! per event) and that the SIGTERM handler sets to have its last drain done at once.
//! Sleeping the whole interval otherwise keeps the writer's wake-ups, which cost a
//! program that keeps every core busy, down to one a drain interval.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The writer's futex word.
static WRITER: Futex = Futex::new();

/// Wakes the writer unless it has been woken already. Async-signal-safe.
pub fn wake_writer() {
    WRITER.wake();
}

/// Wakes the writer even when the word says it has been woken: a signal handler may
/// have interrupted a thread between its swap and its wake, and must not wait for a
/// writer that still sleeps. Async-signal-safe.
pub fn wake_writer_now() {
    WRITER.wake_now();
}

/// In a forked child, whose writer has not slept yet: a wake-up the parent's writer had
/// not taken would end the child writer's first sleep for nothing. Async-signal-safe.
pub fn reset_after_fork() {
    WRITER.0.store(0, Ordering::Relaxed);
}

/// Sleeps the writer up to `timeout`, less when woken (or interrupted by a signal).
pub fn sleep(timeout: Duration) {
    WRITER.sleep(timeout);
}

/// 1 once its sleeper has been woken, until the sleeper next goes to sleep.
struct Futex(AtomicU32);

impl Futex {
    const fn new() -> Futex {
        Futex(AtomicU32::new(0))
    }

    fn wake(&self) {
        if self.0.load(Ordering::Relaxed) == 0 && self.0.swap(1, Ordering::AcqRel) == 0 {
            self.futex_wake();
        }
    }

    fn wake_now(&self) {
        self.0.store(1, Ordering::Release);
        self.futex_wake();
    }

    fn futex_wake(&self) {
        // SAFETY: FUTEX_WAKE on a word that outlives the call; the kernel only reads
        // the address to find waiters.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.0.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }

    /// Then takes the wake-up, so that the next one wakes the next sleep.
    fn sleep(&self, timeout: Duration) {
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: FUTEX_WAIT on a word that outlives the call, with a valid relative
        // timeout; it returns at once when the word is no longer 0 (a wake-up came
        // first).
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.0.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                0u32,
                &timeout as *const libc::timespec,
            );
        }
        // A swap, not a store: it orders the drain that follows after whatever the
        // waking thread published before its wake-up.
        self.0.swap(0, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI32;
    use std::time::Instant;

    /// Whether thread `tid` of this process is asleep (state S in its stat file).
    fn asleep(tid: i32) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // The state follows the command name's closing parenthesis.
        let state = stat.rsplit_once(')').unwrap().1.trim_start();
        state.starts_with('S')
    }

    /// Runs `wake` on a futex whose sleeper, given a minute, is blocked in the kernel:
    /// how long it slept.
    fn sleep_woken_by(word: &'static Futex, wake: fn(&Futex)) -> Duration {
        let sleeper_tid: &'static AtomicI32 = Box::leak(Box::new(AtomicI32::new(0)));
        let sleeper = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            sleeper_tid.store(unsafe { libc::gettid() }, Ordering::Release);
            let started = Instant::now();
            word.sleep(Duration::from_secs(60));
            started.elapsed()
        });
        let tid = loop {
            match sleeper_tid.load(Ordering::Acquire) {
                0 => std::thread::yield_now(),
                tid => break tid,
            }
        };
        while !asleep(tid) {
            std::thread::sleep(Duration::from_millis(1));
        }
        wake(word);
        sleeper.join().unwrap()
    }

    /// One wake-up, given once the sleeper is blocked, ends its minute's sleep: the
    /// test would take a minute and fail if the wake did not reach the kernel.
    #[test]
    fn a_wake_up_ends_a_sleep_already_blocked() {
        // Its own word: tests run side by side.
        let word: &'static Futex = Box::leak(Box::new(Futex::new()));
        let slept = sleep_woken_by(word, Futex::wake);
        assert!(slept < Duration::from_secs(30), "slept {slept:?}");
        // The sleeper took the wake-up: the same word is ready for the next one (a word
        // left at 1 would make `wake` skip its call, and the second sleep would last).
        assert_eq!(word.0.load(Ordering::Acquire), 0);
        let slept = sleep_woken_by(word, Futex::wake);
        assert!(slept < Duration::from_secs(30), "slept {slept:?}");
    }

    /// The signal handler's wake reaches a sleeper even when the word already says
    /// woken (a thread interrupted between its swap and its system call).
    #[test]
    fn a_forced_wake_up_reaches_a_sleeper_the_word_calls_woken() {
        let word: &'static Futex = Box::leak(Box::new(Futex::new()));
        let slept = sleep_woken_by(word, |futex| {
            futex.0.store(1, Ordering::Release);
            futex.wake(); // sees 1: makes no call, as in the interrupted thread's case
            futex.wake_now();
        });
        assert!(slept < Duration::from_secs(30), "slept {slept:?}");
    }
}
