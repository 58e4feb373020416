//! Input files cut short while they are mapped. Another process truncating a trace
//! that opscope is reading (a profiler writing it again) makes the kernel send SIGBUS
//! at the next read past the file's new end. The executable turns that into a message
//! naming the file and the byte, instead of "Bus error (core dumped)".
//!
//! Each mapped input is registered here with its address range; the signal handler
//! finds the range holding the faulting address and writes the message with
//! async-signal-safe calls only.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Inputs mapped at once that can be named (more are read all the same, and a fault in
/// one of them gets the default SIGBUS).
const SLOTS: usize = 64;

struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    name: AtomicPtr<u8>,
    name_len: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)] // only to repeat it in the array below
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    name: AtomicPtr::new(std::ptr::null_mut()),
    name_len: AtomicUsize::new(0),
};

static MAPPED: [Slot; SLOTS] = [EMPTY; SLOTS];
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The exit status after a cut file, as for any other error.
const STATUS: i32 = 1;

/// Handles SIGBUS for this process from now on (the executable calls it; a library
/// leaves its host's signals alone).
pub fn install() {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: a zeroed sigaction is a valid one; the handler has the SA_SIGINFO
    // signature and does only async-signal-safe things.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

/// A mapped input named for the handler while this lives.
pub struct Registered(Option<usize>);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            MAPPED[i].len.store(0, Ordering::SeqCst);
            MAPPED[i].start.store(0, Ordering::SeqCst);
        }
    }
}

/// Names `bytes` (a mapped input) as `name` for the handler, while the result lives.
pub fn register(bytes: &[u8], name: &str) -> Registered {
    if !INSTALLED.load(Ordering::SeqCst) || bytes.is_empty() {
        return Registered(None);
    }
    for (i, slot) in MAPPED.iter().enumerate() {
        if slot
            .len
            .compare_exchange(0, usize::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // The name is leaked: the handler may read it at any time, and a process
            // maps few inputs.
            let name: &'static mut [u8] = Box::leak(name.as_bytes().to_vec().into_boxed_slice());
            slot.name_len.store(name.len(), Ordering::SeqCst);
            slot.name.store(name.as_mut_ptr(), Ordering::SeqCst);
            slot.start.store(bytes.as_ptr() as usize, Ordering::SeqCst);
            slot.len.store(bytes.len(), Ordering::SeqCst);
            return Registered(Some(i));
        }
    }
    Registered(None)
}

extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo; only atomics, write(2), signal(2) and
    // _exit(2) follow, all async-signal-safe.
    let address = unsafe { (*info).si_addr() } as usize;
    for slot in &MAPPED {
        let (start, len) = (
            slot.start.load(Ordering::SeqCst),
            slot.len.load(Ordering::SeqCst),
        );
        if len == 0 || len == usize::MAX || address < start || address - start >= len {
            continue;
        }
        let name_len = slot.name_len.load(Ordering::SeqCst);
        let name = slot.name.load(Ordering::SeqCst);
        // SAFETY: the name was leaked by `register` before the range was stored.
        let name = unsafe { std::slice::from_raw_parts(name, name_len) };
        let mut at = [0u8; 20];
        let mut size = [0u8; 20];
        let parts: [&[u8]; 7] = [
            b"opscope: ",
            name,
            b": the file was cut short while it was read (reading byte ",
            decimal(address - start, &mut at),
            b" of the ",
            decimal(len, &mut size),
            b" it had when opened); read it again once it is whole\n",
        ];
        for part in parts {
            // SAFETY: writing a valid buffer to stderr.
            unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
        }
        // SAFETY: ends the process at once, as an error does.
        unsafe { libc::_exit(STATUS) };
    }
    // Not an input's range: the default action, once the faulting access runs again.
    // SAFETY: resetting a signal's disposition is async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
}

/// `n` in decimal, written into `buffer`, without allocating.
fn decimal(mut n: usize, buffer: &mut [u8; 20]) -> &[u8] {
    let mut i = buffer.len();
    loop {
        i -= 1;
        buffer[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buffer[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_in_decimal() {
        let mut buffer = [0u8; 20];
        assert_eq!(decimal(0, &mut buffer), b"0");
        assert_eq!(decimal(4096, &mut buffer), b"4096");
        assert_eq!(
            decimal(usize::MAX, &mut buffer),
            usize::MAX.to_string().as_bytes()
        );
    }
}
