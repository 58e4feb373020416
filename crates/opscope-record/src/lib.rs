//! `libopscope_record.so`, the library `opscope record` injects into the recorded
//! program. It collects ITT tasks ([`itt`]) and NVTX ranges ([`nvtx`]) into per-thread
//! rings ([`ring`]) on the hot path, CUDA activity from CUPTI's buffers ([`cupti`],
//! experimental), and one writer thread per process ([`session`], [`writer`]) turns
//! them into a Perfetto file in the session directory.
//!
//! Rules for everything here: no lock, allocation or system call per event; a full
//! buffer drops and counts, never blocks; no panic crosses into the program; `fork`
//! (with or without `exec`) and `SIGKILL` leave readable files.

mod alloc;
pub mod clock;
pub mod cupti;
pub mod event;
mod ffi;
mod fork_lock;
pub mod itt;
pub mod live;
mod names;
pub mod nvtx;
mod proto;
pub mod ring;
pub mod session;
mod table;
mod wake;
pub mod writer;

/// Writes what the program's threads recorded so far; for exits that skip `atexit`
/// (the Python bootstrap calls it from `os._exit`).
#[no_mangle]
pub extern "C" fn opscope_record_flush() {
    session::flush();
}

/// Loads and starts the recording now (opens the process's file, starts the writer),
/// rather than at the first ITT call, which a framework may make inside the program's
/// first step. The Python bootstrap calls it on the main thread before the program
/// runs, which also lets the file name the main thread's `pthread_t` (see
/// `session::start`).
#[no_mangle]
pub extern "C" fn opscope_record_start() {
    session::start();
}

/// Says that the bootstrap is about to enter its warm-up ranges (see `itt`), which are
/// not recorded.
#[no_mangle]
pub extern "C" fn opscope_record_expect_warm_up() {
    itt::expect_warm_up();
}

/// Begins a range of category `category` named `name` on the calling thread: the
/// Python bootstrap marks each call of Keras's train function with it (category
/// `opscope`), so that the live stream holds the steps that the framework's own
/// profile holds only in its XPlane, written when the profiler stops.
///
/// # Safety
/// `category` and `name` are null or NUL-terminated strings that outlive the call.
#[no_mangle]
pub unsafe extern "C" fn opscope_record_range_begin(
    category: *const std::ffi::c_char,
    name: *const std::ffi::c_char,
) {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { itt::range_begin(category, name) };
}

/// Labels this process `KEY=VALUE` (`rank=1`): the Python bootstrap gives the rank and
/// world size that `torch.distributed` was initialised with, which a process started
/// by `torch.multiprocessing.spawn` has in no variable. A label whose key the process
/// already has (from `RANK`, …) is ignored.
///
/// # Safety
/// `label` is null or a NUL-terminated string that outlives the call.
#[no_mangle]
pub unsafe extern "C" fn opscope_record_label(label: *const std::ffi::c_char) {
    if label.is_null() {
        return;
    }
    // SAFETY: the caller's guarantee: a NUL-terminated string alive for the call.
    let label = unsafe { std::ffi::CStr::from_ptr(label) };
    session::label(label.to_bytes());
}

/// Begins the time in which the Python bootstrap stands aside for a profiler the
/// program started itself (`framework`: `torch`, `tensorflow`, `jax`), named `name`
/// (`opscope stood aside for a PyTorch profiler`): `steps` says which steps the
/// program's own profile holds instead of calling them idle.
///
/// # Safety
/// `framework` and `name` are null or NUL-terminated strings that outlive the call.
#[no_mangle]
pub unsafe extern "C" fn opscope_record_aside_begin(
    framework: *const std::ffi::c_char,
    name: *const std::ffi::c_char,
) {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { itt::aside_begin(framework, name) };
}

/// Ends what `opscope_record_aside_begin` began for `framework`, on any thread.
///
/// # Safety
/// `framework` is null or a NUL-terminated string that outlives the call.
#[no_mangle]
pub unsafe extern "C" fn opscope_record_aside_end(framework: *const std::ffi::c_char) {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { itt::aside_end(framework) };
}

/// Ends the calling thread's innermost task (see `opscope_record_range_begin`).
#[no_mangle]
pub extern "C" fn opscope_record_range_end() {
    itt::range_end();
}

/// The library's Rust allocations stay out of the program's heap (see `alloc`).
#[global_allocator]
static OWN_MEMORY: alloc::OwnMemory = alloc::OwnMemory;
