//! The recording's life in one process: the first ITT, NVTX or CUDA initialisation opens
//! the process's file in the session directory and starts the writer thread; an `atexit`
//! handler writes what is left; after `fork` the child starts over with its own file
//! and writer. Nothing here may block the program for long or panic into it.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU8, Ordering};
use std::time::Duration;

use crate::event::{Builder, Kind, MAX_RECORD};
use crate::fork_lock::{self, ForkLock, ForkTable};
use crate::live;
use crate::ring;
use crate::wake;
use crate::writer::Writer;

/// Where the files go (set by `opscope record`).
pub const SESSION_DIR_ENV: &str = opscope_wire::env::SESSION_DIR;
/// Milliseconds between two drains of the threads' buffers (and file writes).
pub const FLUSH_MS_ENV: &str = opscope_wire::env::FLUSH_MS;
/// Each drain has a fixed cost (a zlib stream's reset and tables, a write): at
/// PyTorch's ~30,000 ops a second the writer took 1.1 % of a core draining every 10 ms
/// and 0.47 % every 50 ms, which a program keeping every core busy pays in step time
/// (BENCHMARKS.md). A SIGKILL loses at most the last interval. A thread whose ring
/// passes a quarter full wakes the writer sooner ([`wake`]).
const DEFAULT_FLUSH_MS: u64 = 50;

const IDLE: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
/// Recording ended (at exit) or could not start: events are ignored.
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
/// ITT `pause`/`resume`.
static PAUSED: AtomicBool = AtomicBool::new(false);
/// The writer's file descriptor, so a forked child can close its copy.
static WRITER_FD: AtomicI32 = AtomicI32::new(-1);
/// The process's writer, behind a lock that a forked child can take back from a thread
/// that no longer exists (a `std::sync::Mutex` held by the parent's writer thread at
/// `fork` would stay locked in the child forever).
static WRITER: ForkLock<Option<Writer>> = ForkLock::new(None);
/// Whether the process's exit and SIGTERM hooks are in place (it has recorded); no
/// `Once`, whose waiters a fork in the middle would leave waiting forever in the child.
static HOOKS: AtomicBool = AtomicBool::new(false);

/// Runs `f` on the writer's slot in `lock`. None when the calling thread holds the lock
/// already (a signal handler, say one that calls `exit`, interrupted its own drain:
/// waiting for that drain would never end), or when `f` panicked: the lock is released
/// all the same (the exit hook would wait on it forever), the writer, maybe
/// half-updated, is leaked and never used again, and recording turns off.
fn with_slot<R>(
    lock: &ForkLock<Option<Writer>>,
    f: impl FnOnce(&mut Option<Writer>) -> R,
) -> Option<R> {
    let mut slot = lock.lock()?;
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut slot))) {
        Ok(r) => Some(r),
        Err(_) => {
            std::mem::forget(slot.take());
            drop(slot);
            writer_panicked();
            None
        }
    }
}

/// Whether events should be recorded now; starts the recording on first use (and
/// again in a forked child). The common case is one relaxed load. Events of threads
/// that race the start go into their rings all the same: the writer drains them once
/// it runs.
#[inline]
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        RUNNING | STARTING => !PAUSED.load(Ordering::Relaxed),
        IDLE => {
            start();
            STATE.load(Ordering::Relaxed) != OFF && !PAUSED.load(Ordering::Relaxed)
        }
        _ => false,
    }
}

pub fn set_paused(paused: bool) {
    PAUSED.store(paused, Ordering::Relaxed);
}

/// Builds and records one event on the calling thread, if recording.
#[inline]
pub fn record(
    kind: Kind,
    id: u64,
    category: &[&[u8]],
    name: &[u8],
    args: impl FnOnce(&mut Builder),
) {
    if !enabled() {
        return;
    }
    let ts = crate::clock::now();
    if kind == Kind::End {
        return ring::emit_end(ts);
    }
    ring::emit(kind, MAX_RECORD, |bytes| {
        let mut b = Builder::new(bytes, kind, ts, id, category, name);
        args(&mut b);
        b.finish().len()
    });
}

/// Records an event that happened at `ts` (`CLOCK_MONOTONIC` nanoseconds, not now),
/// from a collector's own thread: CUPTI reports device work and API calls after the
/// fact, in batches larger than a thread's buffer, so a full buffer makes the writer
/// drain (the collector waits) instead of dropping. Never for `Begin`/`End`, whose
/// nesting the ring tracks.
pub fn record_at(
    kind: Kind,
    ts: u64,
    id: u64,
    category: &[&[u8]],
    name: &[u8],
    args: impl Fn(&mut Builder),
) {
    debug_assert!(!matches!(kind, Kind::Begin | Kind::End));
    if !enabled() {
        return;
    }
    let write = |bytes: &mut [u8]| {
        let mut b = Builder::new(bytes, kind, ts, id, category, name);
        b.times_in_ns();
        args(&mut b);
        b.finish().len()
    };
    ring::emit_or_make_room(MAX_RECORD, write, drain_now);
}

/// Has the writer drain every thread's buffer now.
fn drain_now() {
    if STATE.load(Ordering::Acquire) != RUNNING {
        return;
    }
    with_writer(|writer| {
        let _ = writer.drain();
    });
}

/// Runs `f` on this process's writer, if there is one (see [`with_slot`]): a panic in
/// the writer (a bug) turns recording off, rather than unwinding into the program.
fn with_writer(f: impl FnOnce(&mut Writer)) {
    let _ = with_slot(&WRITER, |w| w.as_mut().map(f));
}

fn writer_panicked() {
    STATE.store(OFF, Ordering::Release);
    crate::ffi::tell(format_args!(
        "internal error in the trace writer; recording is off in process {}",
        std::process::id()
    ));
}

/// Labels the process from now on (see [`Writer::label`]), whether or not recording
/// is paused; nothing when it does not record. Only `KEY=VALUE` labels of a sane
/// length are taken (the importer splits labels at commas).
pub fn label(label: &[u8]) {
    let sane = label.len() <= 256 && label.contains(&b'=') && !label.contains(&b',');
    if !sane {
        return;
    }
    if STATE.load(Ordering::Acquire) == IDLE {
        start();
    }
    with_writer(|w| w.label(label));
}

/// Opens this process's file and starts the writer thread, once per process.
pub fn start() {
    // Before any thread may record: the clock decides what the events' times mean.
    crate::clock::choose();
    if STATE
        .compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Only the thread that moved STATE to STARTING gets here.
    if !HOOKS.swap(true, Ordering::AcqRel) {
        // SAFETY: registering a plain `extern "C"` function without arguments.
        unsafe { libc::atexit(at_exit) };
        flush_on_terminate();
    }
    let pid = std::process::id();
    match open_writer() {
        Ok(mut writer) => {
            // Started on the main thread (the Python bootstrap does so): its `pthread_t`
            // goes in the file even if the thread never records, so that a framework's
            // profile naming the thread by it (TSL's XPlane) joins this process's main
            // thread.
            // SAFETY: gettid and pthread_self have no preconditions.
            let (tid, handle) = unsafe { (libc::gettid(), libc::pthread_self() as u64) };
            if tid as u32 == pid {
                writer.describe_thread(tid, handle);
            }
            with_slot(&WRITER, |w| {
                // Unless a signal handler forked since, and this is the child: its
                // fork handler closed the file and set the state back to idle, and the
                // child's own start makes its own writer. Never dropped: a writer
                // closes its file, whose number may be another file's by then.
                if STATE.load(Ordering::Acquire) == STARTING && std::process::id() == pid {
                    std::mem::forget(w.replace(writer));
                } else {
                    std::mem::forget(writer);
                }
            });
            // RUNNING before the writer runs: it stops as soon as it sees anything else.
            if STATE
                .compare_exchange(STARTING, RUNNING, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            let spawned = with_signals_blocked(|| {
                std::thread::Builder::new()
                    .name("opscope-writer".into())
                    .spawn(writer_loop)
            });
            if let Err(e) = spawned {
                WRITER_FD.store(-1, Ordering::Relaxed);
                with_slot(&WRITER, |w| *w = None);
                crate::ffi::tell(format_args!(
                    "cannot start the writer thread ({e}); recording is off in process {}",
                    std::process::id()
                ));
                STATE.store(OFF, Ordering::Release);
            }
        }
        Err(e) => {
            crate::ffi::tell(format_args!(
                "{e}; recording is off in process {}",
                std::process::id()
            ));
            STATE.store(OFF, Ordering::Release);
        }
    }
}

/// Runs `f` (which starts a thread, inheriting the mask) with every signal blocked on
/// the calling thread. The program's signals must never run on the writer: SIGTERM's
/// handler waits for the writer, and a handler that calls `exit` there would run the
/// exit hook, which waits for the drain that handler interrupted.
fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: signal sets on the stack, filled and installed for this thread only, and
    // the old mask put back.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

fn session_dir() -> PathBuf {
    std::env::var_os(SESSION_DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("opscope-session"))
}

fn open_writer() -> Result<Writer, String> {
    let dir = session_dir();
    let pid = std::process::id() as i32;
    let command = process_name();
    let mut labels = distributed_labels();
    labels.extend(host_label());
    let session = std::path::absolute(&dir).unwrap_or_else(|_| dir.clone());
    let session = session.to_string_lossy().into_owned();
    let link = |file: Option<String>| {
        live::Link::from_env(&live::hello_of_this_process(&session, file, &command))
    };
    let live_only = std::env::var_os(opscope_wire::env::LIVE_ONLY).is_some_and(|v| v == "1");
    if live_only {
        if let Some(link) = link(None) {
            return Ok(Writer::new_with(None, Some(link), pid, &command, &labels));
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // A pid can come back in a long session: never overwrite another process's file.
    for n in 0..1000 {
        let name = match n {
            0 => format!("opscope-{pid}.pftrace"),
            n => format!("opscope-{pid}-{n}.pftrace"),
        };
        let path = dir.join(&name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(file) => {
                WRITER_FD.store(file.as_raw_fd(), Ordering::Relaxed);
                return Ok(Writer::new_with(
                    Some(file),
                    link(Some(name)),
                    pid,
                    &command,
                    &labels,
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot write {}: {e}", path.display())),
        }
    }
    Err(format!("too many files for pid {pid} in {}", dir.display()))
}

/// The process's place in a distributed job as its launcher set it (torchrun, and
/// `torch.distributed`'s env:// initialisation: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`),
/// as Perfetto process labels `rank=N`…; none outside one.
fn distributed_labels() -> Vec<Vec<u8>> {
    ["RANK", "WORLD_SIZE", "LOCAL_RANK"]
        .iter()
        .filter_map(|name| {
            let value = std::env::var(name).ok()?;
            let value: u32 = value.trim().parse().ok()?;
            Some(format!("{}={value}", name.to_ascii_lowercase()).into_bytes())
        })
        .collect()
}

/// The host's name as a Perfetto process label `host=NAME`: the file is that host's
/// (its Parquet partition, its place beside other hosts' files).
fn host_label() -> Option<Vec<u8>> {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let failed = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } != 0;
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    (!failed && len > 0).then(|| [b"host=".as_slice(), &name[..len]].concat())
}

/// The command line, arguments joined by spaces (cut to 256 bytes).
fn process_name() -> Vec<u8> {
    let mut cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    while cmdline.last() == Some(&0) {
        cmdline.pop();
    }
    for b in cmdline.iter_mut() {
        if *b == 0 {
            *b = b' ';
        }
    }
    cmdline.truncate(256);
    cmdline
}

fn flush_interval() -> Duration {
    let ms = std::env::var(FLUSH_MS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_FLUSH_MS)
        .clamp(1, 10_000);
    Duration::from_millis(ms)
}

fn writer_loop() {
    let interval = flush_interval();
    let pid = std::process::id();
    // Runs with every signal blocked (see `start`).
    loop {
        let requested = FLUSH_REQUESTS.load(Ordering::Acquire);
        // A ring still a quarter full after a drain (its thread kept writing while the
        // writer worked) will not cross a quarter again to wake the writer: drain on.
        let behind = ring::registry().any(|buffer| buffer.at_least_a_quarter_full());
        if requested == FLUSHES_DONE.load(Ordering::Acquire) && !behind {
            // Until the interval is up or a ring passes a quarter full.
            wake::sleep(interval);
        }
        let requested = FLUSH_REQUESTS.load(Ordering::Acquire).max(requested);
        if STATE.load(Ordering::Acquire) != RUNNING {
            return;
        }
        // The SIGTERM handler is waiting: the process ends once this drain is done.
        let terminating = requested > FLUSHES_DONE.load(Ordering::Acquire);
        if terminating {
            // What CUPTI still holds, recorded on this thread before the drain (outside
            // the writer's lock: a ring filled by it has the writer drain it).
            crate::cupti::flush_before_terminate();
        }
        let failed = with_slot(&WRITER, |w| {
            // Checked again under the lock: after `finish` wrote the last chunk, no
            // more may follow it.
            if STATE.load(Ordering::Acquire) != RUNNING {
                return None;
            }
            w.as_mut().and_then(|writer| {
                let drained = writer.drain();
                // Calls held for device work that will not come now are written as they are.
                let held = if terminating {
                    writer.write_held()
                } else {
                    Ok(())
                };
                drained.and(held).err()
            })
        });
        FLUSHES_DONE.fetch_max(requested, Ordering::Release);
        let Some(failed) = failed else {
            return; // the writer panicked
        };
        if let Some(e) = failed {
            crate::ffi::tell(format_args!(
                "writing the trace failed ({e}); recording is off in process {pid}"
            ));
            STATE.store(OFF, Ordering::Release);
            return;
        }
    }
}

/// Writes what the threads' buffers hold now, for exits that skip `atexit` (Python's
/// `os._exit`, which multiprocessing's forked workers end with). Exported to C as
/// `opscope_record_flush`.
pub fn flush() {
    if STATE.load(Ordering::Acquire) != RUNNING {
        return;
    }
    // No exit handler will flush CUPTI either: what it holds is recorded now, on this
    // thread (still whole: `os._exit` has not begun), before the drain.
    crate::cupti::flush_before_terminate();
    with_writer(|writer| {
        let _ = writer.drain().and_then(|()| writer.write_held());
    });
}

/// Writes what is left and stops recording. Runs at exit (and at `dlclose`).
pub fn finish() {
    let was = STATE.swap(OFF, Ordering::AcqRel);
    if was != RUNNING {
        return;
    }
    with_writer(|writer| {
        let _ = writer.finish();
    });
}

/// Flushes asked for by the SIGTERM handler, and flushes done by the writer since.
static FLUSH_REQUESTS: AtomicU32 = AtomicU32::new(0);
static FLUSHES_DONE: AtomicU32 = AtomicU32::new(0);
/// How long SIGTERM waits for the writer before the program dies as it would have.
const TERMINATE_WAIT: Duration = Duration::from_millis(200);

/// `SIGTERM` (multiprocessing's `terminate()`, `kill`, job schedulers) ends a program
/// without `atexit`: when the program left it at its default, a handler has the writer
/// drain once more (bounded wait), then lets the signal kill the process as before.
fn flush_on_terminate() {
    // SAFETY: reading the current disposition into a zeroed sigaction, and installing
    // ours only where it was the default; the handler is async-signal-safe.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_terminate as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// Only async-signal-safe calls: atomics, a futex wake, `nanosleep`, `raise`. The writer
/// thread has every signal blocked, so it is never the one waiting here.
extern "C" fn on_terminate(signal: libc::c_int) {
    if STATE.load(Ordering::Acquire) == RUNNING {
        let wanted = FLUSH_REQUESTS.fetch_add(1, Ordering::AcqRel) + 1;
        wake::wake_writer_now();
        let step = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        let mut waited = Duration::ZERO;
        while FLUSHES_DONE.load(Ordering::Acquire) < wanted && waited < TERMINATE_WAIT {
            // SAFETY: nanosleep is async-signal-safe; `step` is valid.
            unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
            waited += Duration::from_millis(1);
        }
    }
    // SA_RESETHAND restored the default: the signal now ends the process as it would
    // have without us.
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(signal) };
}

extern "C" fn at_exit() {
    finish();
}

/// The fork handlers are registered when the library is loaded (an ELF constructor),
/// before any of its code runs: registered at first use, they would leave a window in
/// which another thread holds a table's lock that a fork does not wait for.
#[used]
#[link_section = ".init_array"]
static REGISTER_AT_LOAD: extern "C" fn() = register_fork_handlers;

extern "C" fn register_fork_handlers() {
    // SAFETY: registering plain `extern "C"` functions without arguments.
    unsafe {
        libc::pthread_atfork(
            Some(fork_lock::take_all),
            Some(fork_lock::release_all),
            Some(after_fork_in_child),
        );
    }
}

extern "C" fn after_fork_in_child() {
    let forker = fork_lock::release_all_in_child();
    if STATE.load(Ordering::Relaxed) == IDLE {
        return; // never started: nothing of the parent's to forget
    }
    live::forget_in_child();
    // Only async-signal-safe work here: forget state, close our copy of the parent's
    // file, and let the first event in the child start a new recording.
    if forker != 0 && WRITER.raw().held_by(forker) {
        // A signal handler forked on a thread in the middle of a drain, which goes on
        // in the child once the handler returns: its writer cannot be taken from under
        // it. What it writes goes nowhere (the parent's file is the parent's) and this
        // child records nothing.
        WRITER.raw().hand_over(forker, fork_lock::current_tid());
        discard_writes_in_child();
        STATE.store(OFF, Ordering::Release);
        return;
    }
    let fd = WRITER_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: `fd` is the writer's file, which the child inherited and never uses.
        unsafe { libc::close(fd) };
    }
    // Leaked, not dropped: its state may be half-updated.
    WRITER.abandon_in_child();
    ring::reset_after_fork();
    wake::reset_after_fork();
    let was = STATE.load(Ordering::Relaxed);
    if was == RUNNING || was == STARTING {
        STATE.store(IDLE, Ordering::Release);
    }
}

/// Points the child's copy of the writer's file descriptor at `/dev/null`, so that a
/// drain the fork interrupted writes nothing into the parent's file (and nothing into
/// a file of the child's that a closed number would have been reused for).
fn discard_writes_in_child() {
    let fd = WRITER_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // SAFETY: open, dup3 and close are plain system calls, async-signal-safe; the path is NUL-terminated
    // and `fd` is the writer's descriptor, which only the interrupted drain uses.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup3(null, fd, libc::O_CLOEXEC);
            libc::close(null);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fork_lock::tests::{in_a_child, one_fork_test_at_a_time};

    /// The blocked-signal mask of this process's writer thread, from `/proc`.
    fn writer_thread_mask() -> Option<u64> {
        std::fs::read_dir("/proc/self/task")
            .ok()?
            .flatten()
            .find(|task| {
                std::fs::read(task.path().join("comm")).is_ok_and(|c| c == b"opscope-writer\n")
            })
            .and_then(|task| std::fs::read_to_string(task.path().join("status")).ok())
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("SigBlk:"))?;
                u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).ok()
            })
    }

    /// The program's signals never run on the writer thread: a process-directed signal
    /// whose handler calls `exit` would otherwise run the exit hook there, in the middle
    /// of a drain.
    #[test]
    fn the_writer_thread_blocks_every_signal() {
        let dir = std::env::temp_dir().join(format!("opscope-mask-{}", std::process::id()));
        let _one = one_fork_test_at_a_time();
        let code = in_a_child(|| {
            std::env::set_var(SESSION_DIR_ENV, &dir);
            start();
            if STATE.load(Ordering::Acquire) != RUNNING {
                return 9;
            }
            // The thread names itself once it runs.
            let writer_mask = (0..2000).find_map(|_| {
                let mask = writer_thread_mask();
                if mask.is_none() {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                mask
            });
            let blocked =
                |signal: libc::c_int| writer_mask.is_some_and(|m| m & 1 << (signal - 1) != 0);
            let mine_unblocked = {
                // SAFETY: a zeroed set is a valid empty one.
                let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
                // SAFETY: no new set (null): reads this thread's mask into `now`.
                unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now) };
                // SAFETY: a valid set and signal number.
                unsafe { libc::sigismember(&now, libc::SIGINT) == 0 }
            };
            let all = [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGUSR1,
                libc::SIGCHLD,
                libc::SIGALRM,
            ];
            match (writer_mask, all.iter().all(|&s| blocked(s)), mine_unblocked) {
                (None, _, _) => 10,
                (Some(_), false, _) => 11,
                (Some(_), true, false) => 12,
                (Some(_), true, true) => 7,
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
        match code {
            7 => {}
            9 => panic!("recording did not start in the child"),
            10 => panic!("no writer thread, or no SigBlk line for it"),
            11 => panic!("the writer thread takes some of the program's signals"),
            12 => panic!("the thread that started recording kept the writer's mask"),
            other => panic!("the child exited with {other}"),
        }
    }

    /// A signal handler that calls `exit` on a thread in the middle of its own drain
    /// (holding the writer's lock): the exit hook must return, not wait for that drain.
    #[test]
    fn the_exit_hook_on_a_thread_inside_its_own_drain_returns() {
        let _one = one_fork_test_at_a_time();
        let code = in_a_child(|| {
            STATE.store(RUNNING, Ordering::Release);
            WRITER.raw().acquire(); // the drain the handler interrupted
            finish();
            flush();
            7
        });
        assert_eq!(code, 7);
    }

    /// In the grandchild of the test below: 7 when the child handler left the drain it
    /// interrupted its writer and lock, sent its writes nowhere and turned recording
    /// off; 8 if not.
    extern "C" fn fork_during_drain(_: libc::c_int) {
        // SAFETY: the grandchild reads atomics, writes one byte and calls `_exit`.
        let grandchild = unsafe { libc::fork() };
        if grandchild == 0 {
            let fd = WRITER_FD.load(Ordering::Relaxed);
            let fine = STATE.load(Ordering::Relaxed) == OFF
                && WRITER.raw().held_by(fork_lock::current_tid())
                // SAFETY: one byte from a live buffer to the writer's descriptor.
                && unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) } == 1;
            // SAFETY: ends the grandchild.
            unsafe { libc::_exit(if fine { 7 } else { 8 }) };
        }
        GRANDCHILD.store(grandchild, Ordering::Release);
    }

    static GRANDCHILD: AtomicI32 = AtomicI32::new(0);

    /// A signal handler that forks on a thread in the middle of a drain (holding the
    /// writer's lock): the child must neither take that writer from under the drain
    /// nor let it write into the parent's file. Set up in a child of the test, whose
    /// recording state is its own.
    #[test]
    fn a_fork_from_a_signal_handler_during_a_drain_leaves_the_drain_alone() {
        let _one = one_fork_test_at_a_time();
        let path = std::env::temp_dir().join(format!("opscope-drain-fork-{}", std::process::id()));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .unwrap();
        let code = in_a_child(|| {
            WRITER_FD.store(file.as_raw_fd(), Ordering::Relaxed);
            STATE.store(RUNNING, Ordering::Release);
            // The drain the signal interrupts.
            WRITER.raw().acquire();
            // SAFETY: a plain handler for SIGUSR2, raised at this thread.
            let status = unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = fork_during_drain as extern "C" fn(libc::c_int) as usize;
                libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
                libc::raise(libc::SIGUSR2);
                let mut status = 0;
                libc::waitpid(GRANDCHILD.load(Ordering::Acquire), &mut status, 0);
                status
            };
            let nothing_written = file.metadata().map(|m| m.len()).ok() == Some(0);
            match (
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
                nothing_written,
            ) {
                (true, true) => 7,
                (false, _) => 8,
                (true, false) => 9,
            }
        });
        let _ = std::fs::remove_file(&path);
        match code {
            7 => {}
            8 => panic!("the grandchild took the drain's writer or kept recording"),
            9 => panic!("the interrupted drain's write reached the parent's file"),
            other => panic!("the child exited with {other}"),
        }
    }

    /// In a child: the panic turns recording off, which the test process must not.
    #[test]
    fn a_panic_under_the_writer_lock_releases_it_and_retires_the_writer() {
        let _one = one_fork_test_at_a_time();
        let code = in_a_child(|| {
            let file = OpenOptions::new().write(true).open("/dev/null").unwrap();
            let lock = ForkLock::new(Some(Writer::new(file, 1, b"test", &[])));
            if with_slot(&lock, |w| w.is_some()) != Some(true) {
                return 8;
            }
            let panicked = with_slot(&lock, |_| -> () { panic!("a bug in the writer") });
            match (
                panicked.is_none(),
                !lock.raw().is_held(),
                with_slot(&lock, |w| w.is_none()) == Some(true),
                STATE.load(Ordering::Acquire) == OFF,
            ) {
                (false, ..) => 9,
                (_, false, ..) => 10,
                (_, _, false, _) => 11,
                (_, _, _, false) => 12,
                _ => 7,
            }
        });
        match code {
            7 => {}
            9 => panic!("the panic was not reported"),
            10 => panic!("the lock was left taken"),
            11 => panic!("the writer was not retired"),
            12 => panic!("recording stayed on"),
            other => panic!("the child exited with {other}"),
        }
    }
}
