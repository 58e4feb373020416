//! How the writer thread sleeps between drains and is woken early: a futex word that a
//! thread sets when its ring passes a quarter full (one system call per crossing, not
//! per event) and that the SIGTERM handler sets to have its last drain done at once.
//! Sleeping the whole interval otherwise keeps the writer's wake-ups, which cost a
//! program that keeps every core busy, down to one a drain interval.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// 1 once the writer has been woken, until it next goes to sleep.
static WORD: AtomicU32 = AtomicU32::new(0);

/// Wakes the writer unless it has been woken already. Async-signal-safe.
pub fn wake_writer() {
    if WORD.load(Ordering::Relaxed) == 0 && WORD.swap(1, Ordering::AcqRel) == 0 {
        // SAFETY: FUTEX_WAKE on a static word of this process; the kernel only reads
        // the address to find waiters.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                WORD.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }
}

/// Sleeps up to `timeout`, less when woken (or interrupted by a signal), then takes the
/// wake-up so that the next one wakes the next sleep.
pub fn sleep(timeout: Duration) {
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a static word with a valid relative timeout; it returns at
    // once when the word is no longer 0 (a wake-up came first).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            WORD.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            0u32,
            &timeout as *const libc::timespec,
        );
    }
    WORD.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sleeper with a minute to wait is woken: the test ends in a moment, and would
    /// take a minute and fail without the wake-up.
    #[test]
    fn a_wake_up_ends_the_writers_sleep() {
        let sleeper = std::thread::spawn(|| {
            let started = std::time::Instant::now();
            sleep(Duration::from_secs(60));
            started.elapsed()
        });
        // Until the sleeper takes one: a wake-up before it sleeps ends its sleep at once,
        // one while it sleeps wakes it.
        while !sleeper.is_finished() {
            wake_writer();
            std::thread::sleep(Duration::from_millis(5));
        }
        let slept = sleeper.join().unwrap();
        assert!(slept < Duration::from_secs(30), "slept {slept:?}");
    }
}
