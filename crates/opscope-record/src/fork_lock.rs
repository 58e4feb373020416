//! The lock of the few tables the program's threads add names to (ITT domains, string
//! handles and events; NVTX domains, strings and categories). `fork` copies a lock into
//! the child as it is, held or not, and a thread that held it does not exist there: so
//! the fork handlers (`session`) take every one of these locks before the fork and
//! release them on both sides after it, and a child can always add names.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// A lock that is one atomic word, the holder's thread id (0 when free), so that a
/// child can release what the parent's threads held (here, or for the session's
/// writer) and the fork handler can tell a lock the forking thread itself holds. A
/// waiter yields at first (the tables are held for a map insert, and only when a name
/// is new, never per event), then sleeps 200 µs at a time (the writer holds its lock
/// for a whole drain).
pub struct RawLock {
    holder: AtomicI32,
    /// Taken by the fork handler (not held by the forking thread already): released
    /// after the fork.
    taken_for_fork: AtomicBool,
}

impl RawLock {
    pub const fn new() -> RawLock {
        RawLock {
            holder: AtomicI32::new(0),
            taken_for_fork: AtomicBool::new(false),
        }
    }

    pub fn acquire(&self) {
        let me = current_tid();
        let mut tries = 0u32;
        while self
            .holder
            .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if tries < 64 {
                std::thread::yield_now();
                tries += 1;
            } else {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
    }

    pub fn release(&self) {
        self.holder.store(0, Ordering::Release);
    }

    /// Whether the calling thread holds it: a signal handler that forks may have
    /// interrupted that thread's own hold.
    fn held_by(&self, tid: i32) -> bool {
        self.holder.load(Ordering::Relaxed) == tid
    }

    #[cfg(test)]
    pub fn is_held(&self) -> bool {
        self.holder.load(Ordering::Acquire) != 0
    }
}

fn current_tid() -> i32 {
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

    pub fn lock(&self) -> ForkGuard<'_, T> {
        self.raw.acquire();
        ForkGuard {
            lock: self,
            _exclusive: PhantomData,
        }
    }

    pub fn raw(&self) -> &RawLock {
        &self.raw
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

/// Every [`ForkLock`] of the library, in the one order the fork handler takes them.
/// A new table's lock must be added here.
fn every_lock() -> impl Iterator<Item = &'static RawLock> {
    crate::itt::locks_for_fork()
        .into_iter()
        .chain(crate::nvtx::locks_for_fork())
}

/// Before a fork: waits for every table's holder, but for a lock the forking thread
/// holds itself (a signal handler that forks interrupted it while it held the lock:
/// waiting would never end). That hold goes on, in both processes, until the
/// interrupted code ends it; the forking thread is the one that goes on in the child.
pub extern "C" fn take_all() {
    let me = current_tid();
    for lock in every_lock() {
        if !lock.held_by(me) {
            lock.acquire();
            lock.taken_for_fork.store(true, Ordering::Relaxed);
        }
    }
}

/// After a fork, in the parent and in the child: releases what `take_all` took.
pub extern "C" fn release_all() {
    for lock in every_lock() {
        if lock.taken_for_fork.swap(false, Ordering::Relaxed) {
            lock.release();
        }
    }
}
