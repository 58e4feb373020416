//! The lock of the few tables the program's threads add names to (ITT domains, string
//! handles and events; NVTX domains, strings and categories). `fork` copies a lock into
//! the child as it is, held or not, and a thread that held it does not exist there: so
//! the fork handlers (`session`) take every one of these locks before the fork and
//! release them on both sides after it, and a child can always add names.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A lock that is one atomic flag, so that a child can release what the parent's
/// threads held (here, or for the session's writer). A waiter yields at first (the
/// tables are held for a map insert, and only when a name is new, never per event),
/// then sleeps 200 µs at a time (the writer holds its lock for a whole drain).
pub struct RawLock(AtomicBool);

impl RawLock {
    pub const fn new() -> RawLock {
        RawLock(AtomicBool::new(false))
    }

    pub fn acquire(&self) {
        let mut tries = 0u32;
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
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
        self.0.store(false, Ordering::Release);
    }

    #[cfg(test)]
    pub fn is_held(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
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

/// Before a fork: waits for every table's holder. A `fork` from a signal handler that
/// interrupted a thread holding one would wait forever here; no lock is held across
/// anything that could raise such a signal but the program's own asynchronous ones.
pub extern "C" fn take_all() {
    for lock in every_lock() {
        lock.acquire();
    }
}

/// After a fork, in the parent and in the child: the forking thread took them all.
pub extern "C" fn release_all() {
    for lock in every_lock() {
        lock.release();
    }
}
