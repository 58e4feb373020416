//! The lock of the few tables the program's threads add names to (ITT domains, string
//! handles and events; NVTX domains, strings and categories). `fork` copies a lock into
//! the child as it is, held or not, and a thread that held it does not exist there: so
//! the fork handlers (registered in `session`) take these locks before the fork and
//! release them on both sides after it, and a child can always add names. The
//! session's writer sits behind the same kind of lock, which its child handler takes
//! back. A fork from a signal handler on a thread that holds one waits for no lock at
//! all (see [`take_all`]).

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// A waiter's sleep once yielding did not do.
const NAP: Duration = Duration::from_micros(200);

/// How long the fork handler waits for another thread's hold of a table before it
/// forks without it (the table then starts afresh in the child). With glibc before
/// 2.36 a fork from a signal handler on the holding thread waits inside glibc for this
/// fork's handlers to end, so the holder can only go on once this wait gives up.
#[cfg(not(test))]
const FORK_WAIT: Duration = Duration::from_millis(20);
/// Long enough in tests that a fork reliably waits for a short hold (the tests of the
/// give-up hold a table until the fork is over).
#[cfg(test)]
const FORK_WAIT: Duration = Duration::from_secs(1);

/// A lock that is one atomic word, the holder's thread id (0 when free), so that a
/// child can release what the parent's threads held (here, or for the session's
/// writer) and the fork handler can tell a lock the forking thread itself holds. A
/// waiter yields at first (the tables are held for a map insert, and only when a name
/// is new, never per event), then sleeps 200 µs at a time (the writer holds its lock
/// for a whole drain).
pub struct RawLock {
    holder: AtomicI32,
}

impl RawLock {
    pub const fn new() -> RawLock {
        RawLock {
            holder: AtomicI32::new(0),
        }
    }

    /// Takes it if it is free, without waiting.
    fn try_acquire(&self, me: i32) -> bool {
        self.holder
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// For tests, which hold locks the way the tables' users do.
    #[cfg(test)]
    pub fn acquire(&self) {
        self.acquire_as(current_tid(), None);
    }

    /// Takes it for thread `me`; with a `limit`, gives up (false) once that much time
    /// has passed.
    fn acquire_as(&self, me: i32, limit: Option<Duration>) -> bool {
        let mut tries = 0u32;
        let mut waited = Duration::ZERO;
        while self
            .holder
            .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if tries < 64 {
                std::thread::yield_now();
                tries += 1;
            } else {
                if limit.is_some_and(|limit| waited >= limit) {
                    return false;
                }
                std::thread::sleep(NAP);
                waited += NAP;
            }
        }
        true
    }

    pub fn release(&self) {
        self.holder.store(0, Ordering::Release);
    }

    /// Whether thread `tid` holds it: a signal handler that forks may have interrupted
    /// the forking thread's own hold.
    pub fn held_by(&self, tid: i32) -> bool {
        self.holder.load(Ordering::Relaxed) == tid
    }

    /// In a forked child: a hold of the forking thread (interrupted by the signal
    /// handler that forked) goes on under the thread's new id, so that a second fork
    /// in the child still knows it as its own.
    pub fn hand_over(&self, from: i32, to: i32) {
        let _ = self
            .holder
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub fn is_held(&self) -> bool {
        self.holder.load(Ordering::Acquire) != 0
    }
}

pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions and is async-signal-safe. A system call, but
    // a lock is taken only when a name is new and once a drain, never per event.
    unsafe { libc::gettid() }
}

/// A value behind a [`RawLock`] that `fork` leaves usable.
pub struct ForkLock<T> {
    raw: RawLock,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time
// (the raw lock is held while it lives), so sharing the lock shares no `&mut T`.
unsafe impl<T: Send> Sync for ForkLock<T> {}

impl<T> ForkLock<T> {
    pub const fn new(value: T) -> ForkLock<T> {
        ForkLock {
            raw: RawLock::new(),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, or none when the calling thread holds it already: a signal
    /// handler that adds a name on a thread inside such a call would wait for itself.
    pub fn lock(&self) -> Option<ForkGuard<'_, T>> {
        let me = current_tid();
        if self.raw.held_by(me) {
            return None;
        }
        self.raw.acquire_as(me, None);
        Some(ForkGuard {
            lock: self,
            _exclusive: PhantomData,
        })
    }
}

/// A table the fork handlers look after.
pub trait ForkTable: Sync {
    fn raw(&self) -> &RawLock;

    /// In a forked child, for a table a thread that no longer exists held at the fork
    /// (maybe half-way through an insert): starts it afresh, the old content leaked
    /// (the handles it gave out stay valid; names given again get new ones), and
    /// unlocks it. Only the forking thread exists there: nothing else touches it.
    fn abandon_in_child(&self);
}

impl<T: Default + Send> ForkTable for ForkLock<T> {
    fn raw(&self) -> &RawLock {
        &self.raw
    }

    fn abandon_in_child(&self) {
        // SAFETY: the holder is gone and no other thread exists (see above); the old
        // value is overwritten without being dropped, as it may be half-updated.
        unsafe { std::ptr::write(self.value.get(), T::default()) };
        self.raw.release();
    }
}

pub struct ForkGuard<'a, T> {
    lock: &'a ForkLock<T>,
    /// Shared across threads only as a `&mut T` would be (`T: Sync`).
    _exclusive: PhantomData<&'a mut T>,
}

impl<T> Deref for ForkGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock: no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ForkGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ForkGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.raw.release();
    }
}

/// Every table of the library, in the one order the fork handler takes them. A new
/// table must be added here.
fn every_table() -> [&'static dyn ForkTable; TABLES] {
    let [a, b] = crate::itt::tables_for_fork();
    let [c, d, e] = crate::nvtx::tables_for_fork();
    [a, b, c, d, e]
}

const TABLES: usize = 5;

/// What one `fork`'s prepare handler did, for the handlers after it: the tables it
/// took (to release on both sides) and those it found held by another thread and did
/// not wait for (to abandon in the child). One bit per table of [`every_table`].
#[derive(Clone, Copy, Default)]
struct ForkFrame {
    took: u8,
    left_to_others: u8,
    /// The forking thread's id just before it forked (0: no prepare handler ran):
    /// its holds in the child are still under this id.
    tid: i32,
}

/// Nested forks (a signal handler that forks while the thread is in the fork
/// handlers) past this depth take and leave nothing.
const MAX_NESTED: usize = 4;

thread_local! {
    /// The forking thread's frames, innermost last, and how deep it is.
    static FRAMES: Cell<([ForkFrame; MAX_NESTED], usize)> = const {
        Cell::new(([ForkFrame { took: 0, left_to_others: 0, tid: 0 }; MAX_NESTED], 0))
    };
}

fn push_frame(frame: ForkFrame) {
    let _ = FRAMES.try_with(|frames| {
        let (mut stack, depth) = frames.get();
        if depth < MAX_NESTED {
            stack[depth] = frame;
        }
        frames.set((stack, depth + 1));
    });
}

fn pop_frame() -> ForkFrame {
    FRAMES
        .try_with(|frames| {
            let (stack, depth) = frames.get();
            let Some(depth) = depth.checked_sub(1) else {
                return ForkFrame::default();
            };
            frames.set((stack, depth));
            stack.get(depth).copied().unwrap_or_default()
        })
        .unwrap_or_default()
}

fn depth() -> usize {
    FRAMES.try_with(|frames| frames.get().1).unwrap_or(0)
}

/// Before a fork: takes every table's lock so that none is copied into the child
/// half-way through an insert, waiting for their holders in one order, each for
/// [`FORK_WAIT`] at most. When the forking thread holds one itself (a signal handler
/// that forks interrupted it), it waits for nothing: that hold goes on in both
/// processes until the interrupted code ends it, and waiting in order past it could
/// wait for a thread that, forking too, waits for it. Tables it does not take are
/// started afresh in the child.
pub extern "C" fn take_all() {
    let me = current_tid();
    let tables = every_table();
    let mine = tables
        .iter()
        .enumerate()
        .filter(|(_, t)| t.raw().held_by(me))
        .fold(0u8, |mask, (i, _)| mask | 1 << i);
    let mut frame = ForkFrame::default();
    if depth() < MAX_NESTED {
        for (i, table) in tables.iter().enumerate() {
            let bit = 1u8 << i;
            if mine & bit != 0 {
                continue;
            }
            // Read again for each table: a fork nested in this loop (from a signal
            // handler) goes on here in its child under another id.
            let me = current_tid();
            let taken = if mine == 0 {
                table.raw().acquire_as(me, Some(FORK_WAIT))
            } else {
                table.raw().try_acquire(me)
            };
            if taken {
                frame.took |= bit;
            } else {
                frame.left_to_others |= bit;
            }
        }
    }
    // Read last: a fork nested in the one above ran its child with another id.
    frame.tid = current_tid();
    push_frame(frame);
}

/// After a fork, in the parent: releases what the prepare handler took.
pub extern "C" fn release_all() {
    let frame = pop_frame();
    for (i, table) in every_table().iter().enumerate() {
        if frame.took & 1 << i != 0 {
            table.raw().release();
        }
    }
}

/// After a fork, in the child (the forking thread alone): releases what the prepare
/// handler took, abandons what other threads held, and hands the thread's own holds
/// over to its new id. Returns the thread's id before the fork (0 when no prepare
/// handler of ours ran).
pub fn release_all_in_child() -> i32 {
    let frame = pop_frame();
    let now = current_tid();
    for (i, table) in every_table().iter().enumerate() {
        let bit = 1u8 << i;
        if frame.took & bit != 0 {
            table.raw().release();
        } else if frame.left_to_others & bit != 0 {
            table.abandon_in_child();
        } else if frame.tid != 0 {
            table.raw().hand_over(frame.tid, now);
        }
    }
    frame.tid
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// Forking tests of the crate run one at a time: each holds tables the others'
    /// forks wait for, and each looks at who holds what.
    static ONE_FORK_TEST: Mutex<()> = Mutex::new(());

    pub(crate) fn one_fork_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        ONE_FORK_TEST.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table held in these tests: NVTX domains, third in the order.
    const HELD: usize = 2;

    fn table(i: usize) -> &'static dyn ForkTable {
        every_table()[i]
    }

    /// Forks a child that runs `check` and exits with what it returns; its pid. The
    /// caller holds [`one_fork_test_at_a_time`].
    pub(crate) fn fork_child(check: impl FnOnce() -> i32) -> libc::pid_t {
        // SAFETY: the child runs `check` alone and calls `_exit`, never returning into
        // the parent's test harness.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let code = check();
            // SAFETY: as above.
            unsafe { libc::_exit(code) };
        }
        child
    }

    /// Runs `check` in a child (whose recording state and limits are its own); its
    /// exit status, or a panic when it dies or hangs.
    pub(crate) fn in_a_child(check: impl FnOnce() -> i32) -> i32 {
        exit_status(fork_child(check))
    }

    /// Waits up to 10 s for `child`; its exit status, or a panic when it hangs.
    pub(crate) fn exit_status(child: libc::pid_t) -> i32 {
        let started = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child with a valid status pointer.
            if unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == child {
                assert!(libc::WIFEXITED(status), "the child died of a signal");
                return libc::WEXITSTATUS(status);
            }
            if started.elapsed() > Duration::from_secs(10) {
                // SAFETY: killing and reaping our own child.
                unsafe {
                    libc::kill(child, libc::SIGKILL);
                    libc::waitpid(child, &mut status, 0);
                }
                panic!("the child hung");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// In a child: 7 when the tables are as a signal handler's fork on the thread
    /// holding `HELD` must leave them (that hold now under the child's id, every other
    /// table free), else 8 + the first table that is not.
    fn check_tables_in_child() -> i32 {
        let me = current_tid();
        for i in 0..TABLES {
            let raw = table(i).raw();
            let fine = if i == HELD {
                raw.held_by(me)
            } else {
                let free = raw.try_acquire(me);
                raw.release();
                free
            };
            if !fine {
                return 8 + i as i32;
            }
        }
        7
    }

    static FORKED: AtomicI32 = AtomicI32::new(0);

    /// Forks from inside the handler, as a program's crash or watchdog handler may.
    extern "C" fn fork_in_handler(_: libc::c_int) {
        // SAFETY: the child only reads atomics, takes spin locks and calls `_exit`.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: ends the child without returning into the parent's test.
            unsafe { libc::_exit(check_tables_in_child()) };
        }
        FORKED.store(child, Ordering::Release);
    }

    fn install_fork_in_handler() {
        // SAFETY: installs a plain handler for SIGUSR2, which nothing else uses.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = fork_in_handler as extern "C" fn(libc::c_int) as usize;
            libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
        }
    }

    /// Runs `f` on a thread of its own; its result, or a panic after 10 s.
    fn within_10_s<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(f());
        });
        result
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what}"))
    }

    /// A child forked while another thread of the parent holds a table's lock can take
    /// it: the fork waits for the holder, and the child finds it free. With the lock
    /// copied held, the child would wait forever (killed after 10 s, and the test fails).
    #[test]
    fn a_child_forked_while_a_table_is_held_elsewhere_can_take_it() {
        let _one = one_fork_test_at_a_time();
        let holding = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                table(HELD).raw().acquire();
                holding.store(true, Ordering::Release);
                std::thread::sleep(Duration::from_millis(100));
                table(HELD).raw().release();
            });
            while !holding.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let taken = in_a_child(|| {
                table(HELD).raw().acquire();
                7
            });
            assert_eq!(taken, 7);
        });
    }

    /// A signal handler that forks on a thread holding a table's lock: the fork
    /// handler must not wait for that hold (it would never end), must not release it
    /// in either process (the interrupted code still counts on it; in the child it
    /// goes on under the thread's new id), and must leave the other tables usable.
    #[test]
    fn a_fork_from_a_signal_handler_on_the_thread_holding_a_table_goes_through() {
        let _one = one_fork_test_at_a_time();
        let still_held = within_10_s("the fork waited for the lock its own thread holds", || {
            install_fork_in_handler();
            table(HELD).raw().acquire();
            // SAFETY: raising a signal at the calling thread, which has its handler.
            unsafe { libc::raise(libc::SIGUSR2) };
            let still_held = table(HELD).raw().held_by(current_tid());
            table(HELD).raw().release();
            // Every table can be taken again in the parent (this would hang if not).
            for t in every_table() {
                t.raw().acquire();
                t.raw().release();
            }
            still_held
        });
        assert!(
            still_held,
            "the parent's interrupted hold was released under it"
        );
        assert_eq!(exit_status(FORKED.load(Ordering::Acquire)), 7);
    }

    /// A thread forks (its fork handler has taken the first tables and waits for the
    /// one another thread holds) while a signal handler on that other thread forks: the
    /// handler's fork must not wait in turn, or neither ever goes on. Its child finds
    /// the tables the first fork held started afresh and free.
    #[test]
    fn a_signal_handler_fork_does_not_wait_for_a_thread_that_forks_too() {
        let _one = one_fork_test_at_a_time();
        let holder_tid = Arc::new(AtomicI32::new(0));
        let (go, wait_for_go) = std::sync::mpsc::channel::<()>();
        let holder = {
            let holder_tid = holder_tid.clone();
            std::thread::spawn(move || {
                install_fork_in_handler();
                table(HELD).raw().acquire();
                holder_tid.store(current_tid(), Ordering::Release);
                wait_for_go.recv().unwrap();
                // SAFETY: raising a signal at the calling thread, which has its handler.
                unsafe { libc::raise(libc::SIGUSR2) };
                table(HELD).raw().release();
            })
        };
        while holder_tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let forker = within_10_s("the plain fork never went on", move || {
            // The plain fork: its handler takes tables 0 and 1, then waits for HELD.
            let forking_tid = Arc::new(AtomicI32::new(0));
            let tid = forking_tid.clone();
            let forking = std::thread::spawn(move || {
                tid.store(current_tid(), Ordering::Release);
                // SAFETY: the child calls `_exit` at once.
                let child = unsafe { libc::fork() };
                if child == 0 {
                    // SAFETY: as above.
                    unsafe { libc::_exit(5) };
                }
                child
            });
            let started = Instant::now();
            let forking = (forking, forking_tid);
            while !(forking.1.load(Ordering::Acquire) != 0
                && table(1).raw().held_by(forking.1.load(Ordering::Acquire)))
            {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "the fork took nothing"
                );
                std::thread::yield_now();
            }
            go.send(()).unwrap();
            holder.join().unwrap();
            forking.0.join().unwrap()
        });
        assert_eq!(exit_status(forker), 5);
        assert_eq!(
            exit_status(FORKED.load(Ordering::Acquire)),
            7,
            "in the handler's child a table was left held or the interrupted hold lost"
        );
    }

    /// A thread that holds a table for long (preempted, or waiting itself) does not
    /// hold a fork up for longer than `FORK_WAIT`: the fork goes on without that
    /// table, which the child starts afresh and can take.
    #[test]
    fn a_fork_waits_a_bounded_time_for_a_table_held_elsewhere() {
        let _one = one_fork_test_at_a_time();
        let (held, wait_until_held) = std::sync::mpsc::channel::<()>();
        let (release, wait_for_release) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            table(HELD).raw().acquire();
            held.send(()).unwrap();
            // Until the fork is over: a fork that waited for this would never end.
            wait_for_release.recv().unwrap();
            table(HELD).raw().release();
        });
        wait_until_held.recv().unwrap();
        let child = within_10_s("the fork waited for the holder", || {
            fork_child(|| {
                let free = table(HELD).raw().try_acquire(current_tid());
                if free {
                    7
                } else {
                    8
                }
            })
        });
        assert!(table(HELD).raw().is_held(), "the parent's hold goes on");
        release.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(exit_status(child), 7, "the child could not take the table");
    }

    /// A name given on a thread inside the same table's call (a signal handler that
    /// names something, interrupting it) gets a handle of its own instead of waiting
    /// for itself forever.
    #[test]
    fn a_thread_inside_a_tables_call_can_still_name_things() {
        let _one = one_fork_test_at_a_time();
        let named = within_10_s("a thread waited for its own hold", || {
            let itt = crate::itt::tests::domain_and_handle_while_holding_the_itt_table();
            let nvtx = crate::nvtx::tests::domain_and_string_while_holding_the_nvtx_tables();
            (itt, nvtx)
        });
        assert_eq!(named, (true, true), "(ITT, NVTX) names came out null");
    }

    /// A fork inside the fork handlers (a signal handler forking while its thread runs
    /// the prepare handler of another fork) releases only what its own prepare took:
    /// the outer fork's tables stay held until the outer fork's own handlers run.
    #[test]
    fn a_fork_nested_in_the_fork_handlers_releases_only_its_own_tables() {
        let _one = one_fork_test_at_a_time();
        let held_between = within_10_s("the nested fork hung", || {
            // The outer fork's prepare handler.
            take_all();
            let child = fork_child(|| {
                let me = current_tid();
                let all_mine = every_table().iter().all(|t| t.raw().held_by(me));
                if all_mine {
                    7
                } else {
                    8
                }
            });
            let held_between = every_table().iter().all(|t| t.raw().is_held());
            release_all(); // the outer fork's parent handler
            (child, held_between)
        });
        let (child, held_between) = held_between;
        assert!(
            held_between,
            "the nested fork released the outer fork's tables"
        );
        for t in every_table() {
            assert!(
                !t.raw().is_held(),
                "the outer fork's tables were not released"
            );
        }
        assert_eq!(
            exit_status(child),
            7,
            "the child's holds are not under its own id"
        );
    }
}
