//! What every function the program calls into needs: no panic may unwind into C, C
//! strings are read without copying, and messages to the user cannot fail.

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `default`: unwinding into the program's C frames
/// would be undefined behaviour, and a tracer must never take its host down.
#[inline]
pub fn guard<R>(default: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

/// The bytes of a NUL-terminated string; empty for a null pointer.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string that outlives `'a`.
pub unsafe fn cstr<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { CStr::from_ptr(p) }.to_bytes()
    }
}

/// Prints `opscope-record: MESSAGE` on the program's standard error. Never fails:
/// `eprintln!` panics when stderr is a closed pipe (Python ignores `SIGPIPE`), and some
/// callers (the exit hook) are outside any [`guard`].
pub fn tell(message: std::fmt::Arguments) {
    let line = format!("opscope-record: {message}\n");
    // SAFETY: writes bytes of a live buffer to fd 2; a failure is ignored.
    let _ = unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}
