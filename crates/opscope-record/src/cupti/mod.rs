//! CUPTI activity tracing (experimental, not yet run on a GPU): the CUDA driver calls
//! [`InitializeInjection`] (`CUDA_INJECTION64_PATH`), which opens the program's libcupti
//! and records kernels, copies, memsets, API calls and host waits from its buffers.

pub mod activity;
mod external;
pub mod layout;
mod record;

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::event::{Kind, Value};
use crate::ffi::{cstr, guard};
use crate::session;

pub(crate) use external::{range_closed, range_opened};
pub use record::record_activity;

/// `CUptiResult`, a C enum.
type CuptiResult = c_int;
const SUCCESS: CuptiResult = 0;
/// `cuptiActivityGetNextRecord`: no more records in the buffer.
const MAX_LIMIT_REACHED: CuptiResult = 12;
const MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: CuptiResult = 39;
/// `cuptiActivityFlushAll`: also hand over buffers with records still being written.
const FLUSH_FORCED: u32 = 1;
/// `CUpti_CallbackDomain` values whose callback ids name API calls.
const DOMAIN_DRIVER_API: u32 = 1;
const DOMAIN_RUNTIME_API: u32 = 2;
/// Callback ids probed for names at start (12.x has under 900 of either).
const MAX_CBID: u32 = 2048;

/// Activity kinds enabled. CONCURRENT_KERNEL, never KERNEL: KERNEL serialises kernels.
const ENABLED_KINDS: [(u32, &str); 7] = [
    (activity::kind::CONCURRENT_KERNEL, "CONCURRENT_KERNEL"),
    (activity::kind::MEMCPY, "MEMCPY"),
    (activity::kind::MEMSET, "MEMSET"),
    (activity::kind::RUNTIME, "RUNTIME"),
    (activity::kind::DRIVER, "DRIVER"),
    (activity::kind::SYNCHRONIZATION, "SYNCHRONIZATION"),
    (activity::kind::EXTERNAL_CORRELATION, "EXTERNAL_CORRELATION"),
];

/// Activity buffers: CUPTI wants 8-byte alignment, 1–8 MiB.
const BUFFER_SIZE: usize = 8 << 20;
const BUFFER_ALIGN: usize = 8;
/// Buffers handed to CUPTI and not yet back, at most (512 MiB), unless
/// `OPSCOPE_CUPTI_MAX_BUFFERS` says otherwise: a program that makes records faster
/// than they are handed back (or a CUPTI that stops handing them back) must not take
/// the host's memory.
const MAX_BUFFERS: usize = 64;
/// The first `cuptiGetVersion` (CUPTI 12.9) that takes a refused buffer as "drop the
/// records and count them"; older ones crash on it (pytorch/kineto#1275, #1534).
const REFUSABLE_FROM_VERSION: u32 = 27;

/// Where libcupti may be when the program has not mapped it yet, newest first.
const LIBRARY_NAMES: [&str; 3] = ["libcupti.so.13", "libcupti.so.12", "libcupti.so"];

type BufferRequested = extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type BufferCompleted = extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type CallbackFunc = extern "C" fn(*mut c_void, u32, u32, *const c_void);
type Timestamp = extern "C" fn() -> u64;

/// `cuptiActivityGetNextRecord(buffer, valid_bytes, &record)`.
pub type GetNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> CuptiResult;

/// The libcupti functions used, resolved once.
struct Cupti {
    register_callbacks: unsafe extern "C" fn(BufferRequested, BufferCompleted) -> CuptiResult,
    enable: unsafe extern "C" fn(u32) -> CuptiResult,
    get_next_record: GetNextRecord,
    flush_all: unsafe extern "C" fn(u32) -> CuptiResult,
    dropped_records: Option<unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> CuptiResult>,
    result_string: Option<unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult>,
    register_timestamp: Option<unsafe extern "C" fn(Timestamp) -> CuptiResult>,
    get_timestamp: Option<unsafe extern "C" fn(*mut u64) -> CuptiResult>,
    subscribe: unsafe extern "C" fn(*mut *mut c_void, CallbackFunc, *mut c_void) -> CuptiResult,
    unsubscribe: unsafe extern "C" fn(*mut c_void) -> CuptiResult,
    callback_name: Option<unsafe extern "C" fn(u32, u32, *mut *const c_char) -> CuptiResult>,
    get_version: Option<unsafe extern "C" fn(*mut u32) -> CuptiResult>,
    push_external: Option<unsafe extern "C" fn(u32, u64) -> CuptiResult>,
    pop_external: Option<unsafe extern "C" fn(u32, *mut u64) -> CuptiResult>,
}

static CUPTI: OnceLock<Cupti> = OnceLock::new();
/// The process CUPTI was started in: a child forked from it inherits the exit handler,
/// but not CUPTI's threads, and must not flush.
static STARTED_IN: AtomicU32 = AtomicU32::new(0);
static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Called by the CUDA driver in `cuInit` when `CUDA_INJECTION64_PATH` names us. Always
/// returns 1 (success): the samples do, and the program must run on whatever happens.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    guard(1, || {
        if INITIALIZED.swap(true, Ordering::AcqRel) {
            return 1;
        }
        session::start();
        if let Err(e) = start() {
            crate::ffi::tell(format_args!("{e}; GPU activity is not recorded"));
        }
        1
    })
}

fn start() -> Result<(), String> {
    let cupti = open()?;
    let cupti = CUPTI.get_or_init(|| cupti);
    check_no_other_subscriber(cupti)?;
    bound_buffers(cupti);
    put_on_recording_clock(cupti);
    read_api_names(cupti);
    // SAFETY: both are `extern "C"` functions with the signatures CUPTI declares.
    let result = unsafe { (cupti.register_callbacks)(buffer_requested, buffer_completed) };
    if result != SUCCESS {
        return Err(failure(cupti, "cuptiActivityRegisterCallbacks", result));
    }
    for (kind, name) in ENABLED_KINDS {
        // SAFETY: a documented activity kind.
        let result = unsafe { (cupti.enable)(kind) };
        if result != SUCCESS {
            // Older libcuptis lack some kinds; the others still record.
            crate::ffi::tell(format_args!(
                "{}",
                failure(cupti, &format!("cuptiActivityEnable({name})"), result)
            ));
        }
    }
    // Registered after libcupti was loaded, so it runs before libcupti's own exit
    // handlers, and after `session::start`'s, so the writer is still there to take
    // what the flush hands over.
    STARTED_IN.store(std::process::id(), Ordering::Relaxed);
    external::activate(cupti);
    // SAFETY: registering a plain `extern "C" fn()`.
    unsafe { libc::atexit(flush_at_exit) };
    Ok(())
}

/// CUPTI allows one subscriber per process (Kineto, TF's tracer, Nsight): if another
/// one is there, its activity callbacks would fight ours, so stay out.
fn check_no_other_subscriber(cupti: &Cupti) -> Result<(), String> {
    let mut subscriber: *mut c_void = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local and a no-op callback with CUPTI's signature.
    let result =
        unsafe { (cupti.subscribe)(&mut subscriber, ignore_callback, std::ptr::null_mut()) };
    if result == MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
        return Err(format!(
            "CUPTI is already in use in process {} (a framework profiler or Nsight)",
            std::process::id()
        ));
    }
    if result != SUCCESS {
        return Err(failure(cupti, "cuptiSubscribe", result));
    }
    // Only the activity API is used, which needs no subscription.
    // SAFETY: the handle cuptiSubscribe just gave.
    unsafe { (cupti.unsubscribe)(subscriber) };
    Ok(())
}

/// How many buffers CUPTI may hold at once, and whether past that it can be refused one.
struct BufferBound {
    outstanding: AtomicUsize,
    max: AtomicUsize,
    refusable: AtomicBool,
    /// Whether the bound was told of (once).
    told: AtomicBool,
}

static BUFFERS: BufferBound = BufferBound {
    outstanding: AtomicUsize::new(0),
    max: AtomicUsize::new(MAX_BUFFERS),
    refusable: AtomicBool::new(false),
    told: AtomicBool::new(false),
};

/// Sets the bound on outstanding buffers: `OPSCOPE_CUPTI_MAX_BUFFERS`, else
/// [`MAX_BUFFERS`]; refused past it where CUPTI is 12.9 or newer.
fn bound_buffers(cupti: &Cupti) {
    if let Some(max) = std::env::var("OPSCOPE_CUPTI_MAX_BUFFERS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        BUFFERS.max.store(max.max(1), Ordering::Relaxed);
    }
    let mut version = 0u32;
    let known = cupti
        .get_version
        // SAFETY: an out-pointer to a local.
        .is_some_and(|get| unsafe { get(&mut version) } == SUCCESS);
    BUFFERS.refusable.store(
        known && version >= REFUSABLE_FROM_VERSION,
        Ordering::Relaxed,
    );
}

/// Counts a buffer handed to CUPTI, within the bound: `false` where it must be refused.
fn take_buffer() -> bool {
    let max = BUFFERS.max.load(Ordering::Relaxed);
    let before = BUFFERS.outstanding.fetch_add(1, Ordering::Relaxed);
    if before < max {
        return true;
    }
    let refuse = BUFFERS.refusable.load(Ordering::Relaxed);
    if !BUFFERS.told.swap(true, Ordering::Relaxed) {
        let mib = (max * BUFFER_SIZE) >> 20;
        if refuse {
            crate::ffi::tell(format_args!(
                "CUPTI holds {max} activity buffers ({mib} MiB) not yet handed back: records \
                 are dropped until it hands some back (counted, in the session)"
            ));
        } else {
            crate::ffi::tell(format_args!(
                "CUPTI holds {max} activity buffers ({mib} MiB) not yet handed back; this \
                 CUPTI (before 12.9) cannot be refused one, so memory grows"
            ));
        }
    }
    // (A refused buffer is given back to the count by the caller, as a failed one is.)
    !refuse
}

/// Has CUPTI take its times from the recording clock, or failing that, measures the
/// offset between its clock and ours once.
fn put_on_recording_clock(cupti: &Cupti) {
    if let Some(register) = cupti.register_timestamp {
        // SAFETY: an `extern "C" fn() -> u64`, as CUPTI declares the callback.
        if unsafe { register(timestamp) } == SUCCESS {
            return;
        }
    }
    // Their clock read between two reads of ours: the offset is taken at the middle
    // (PyTorch brackets CUPTI's clock the same way).
    let mut theirs = 0u64;
    let before = crate::clock::monotonic_ns();
    let read = cupti
        .get_timestamp
        // SAFETY: an out-pointer to a local.
        .is_some_and(|get| unsafe { get(&mut theirs) } == SUCCESS);
    let after = crate::clock::monotonic_ns();
    if read {
        let ours = before + (after - before) / 2;
        record::set_clock_offset(ours.wrapping_sub(theirs) as i64);
    } else {
        crate::ffi::tell(format_args!(
            "CUPTI can neither use nor tell its clock; GPU times may be off"
        ));
    }
}

/// Reads libcupti's names for all API callback ids now, so the completion callback
/// does not call into CUPTI for them.
fn read_api_names(cupti: &Cupti) {
    let Some(name_of) = cupti.callback_name else {
        return;
    };
    let table = |domain: u32| -> Vec<Option<Vec<u8>>> {
        let mut names: Vec<Option<Vec<u8>>> = (0..MAX_CBID)
            .map(|cbid| {
                let mut name: *const c_char = std::ptr::null();
                // SAFETY: an out-pointer to a local; CUPTI sets it to a static string.
                let result = unsafe { name_of(domain, cbid, &mut name) };
                // SAFETY: CUPTI returned null or a NUL-terminated static string.
                (result == SUCCESS).then(|| unsafe { cstr(name) }.to_vec())
            })
            .collect();
        while names.last().is_some_and(Option::is_none) {
            names.pop();
        }
        names
    };
    record::set_api_names(table(DOMAIN_DRIVER_API), table(DOMAIN_RUNTIME_API));
}

/// `what failed: CUPTI_ERROR_… (n)`.
fn failure(cupti: &Cupti, what: &str, result: CuptiResult) -> String {
    let mut text: *const c_char = std::ptr::null();
    let named = cupti
        .result_string
        // SAFETY: an out-pointer to a local.
        .is_some_and(|f| unsafe { f(result, &mut text) } == SUCCESS && !text.is_null());
    if named {
        // SAFETY: CUPTI returned a NUL-terminated static string.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{what} failed: {text} ({result})")
    } else {
        format!("{what} failed ({result})")
    }
}

/// Opens the libcupti the program uses (already mapped, e.g. by PyTorch), else one the
/// loader finds by name; never a build-time dependency.
fn open() -> Result<Cupti, String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let candidates = libcupti_candidates(&maps);
    let mut errors = Vec::new();
    for candidate in &candidates {
        let Ok(path) = CString::new(candidate.as_str()) else {
            continue;
        };
        // SAFETY: a NUL-terminated path; loading libcupti runs its initialisers, which
        // is what using it means.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            errors.push(dl_error());
            continue;
        }
        return resolve(handle).map_err(|missing| {
            format!(
                "{candidate} has no {missing} (process {})",
                std::process::id()
            )
        });
    }
    Err(format!(
        "cannot load libcupti in process {} (tried {}: {})",
        std::process::id(),
        candidates.join(", "),
        errors.join("; ")
    ))
}

/// Where to look for libcupti, best first: a copy already mapped into this process
/// (the framework's own), then the copies pip's NVIDIA wheels put beside the CUDA
/// libraries mapped here (`site-packages/nvidia/cuda_cupti/lib/libcupti.so.12` for CUDA
/// 12, `nvidia/cu13/lib/libcupti.so.13` for 13), then the loader's search by name.
fn libcupti_candidates(maps: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut add = |path: String| {
        if !found.contains(&path) {
            found.push(path);
        }
    };
    let paths: Vec<&str> = maps
        .lines()
        // The path is the sixth column, and the only one starting with '/'.
        .filter_map(|line| line.find('/').map(|at| &line[at..]))
        .collect();
    for path in &paths {
        if path
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .starts_with("libcupti.so")
        {
            add(path.to_string());
        }
    }
    for path in &paths {
        if let Some(at) = path.find("/site-packages/nvidia/") {
            let root = &path[..at + "/site-packages/nvidia/".len()];
            add(format!("{root}cu13/lib/libcupti.so.13"));
            add(format!("{root}cuda_cupti/lib/libcupti.so.12"));
        }
    }
    for name in LIBRARY_NAMES {
        add(name.to_string());
    }
    found
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next
    // dl* call on this thread, copied at once.
    let text = unsafe { cstr(libc::dlerror()) };
    String::from_utf8_lossy(text).into_owned()
}

/// Looks up the functions used; the name of the first required one missing on error.
fn resolve(handle: *mut c_void) -> Result<Cupti, &'static str> {
    let symbol = |name: &'static str| -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: a handle from dlopen and a NUL-terminated name.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    macro_rules! function {
        ($name:literal) => {
            symbol($name).map(|p| {
                // SAFETY: the exported CUPTI function of that name; its C signature is
                // the one declared in `Cupti` (cupti_activity.h, cupti_callbacks.h).
                unsafe { std::mem::transmute::<*mut c_void, _>(p) }
            })
        };
    }
    macro_rules! required {
        ($name:literal) => {
            function!($name).ok_or($name)?
        };
    }
    Ok(Cupti {
        register_callbacks: required!("cuptiActivityRegisterCallbacks"),
        enable: required!("cuptiActivityEnable"),
        get_next_record: required!("cuptiActivityGetNextRecord"),
        flush_all: required!("cuptiActivityFlushAll"),
        dropped_records: function!("cuptiActivityGetNumDroppedRecords"),
        result_string: function!("cuptiGetResultString"),
        register_timestamp: function!("cuptiActivityRegisterTimestampCallback"),
        get_timestamp: function!("cuptiGetTimestamp"),
        subscribe: required!("cuptiSubscribe"),
        unsubscribe: required!("cuptiUnsubscribe"),
        callback_name: function!("cuptiGetCallbackName"),
        get_version: function!("cuptiGetVersion"),
        push_external: function!("cuptiActivityPushExternalCorrelationId"),
        pop_external: function!("cuptiActivityPopExternalCorrelationId"),
    })
}

/// Subscribing needs a callback; nothing is ever enabled for it (and nothing here can
/// panic).
extern "C" fn ignore_callback(_: *mut c_void, _: u32, _: u32, _: *const c_void) {}

extern "C" fn timestamp() -> u64 {
    guard(0, crate::clock::monotonic_ns)
}

fn buffer_layout() -> Layout {
    // Constant, valid size and alignment.
    Layout::from_size_align(BUFFER_SIZE, BUFFER_ALIGN).unwrap_or(Layout::new::<u64>())
}

/// CUPTI asks for an empty buffer; a null one (out of memory) makes it drop records.
extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    guard((), || {
        if buffer.is_null() || size.is_null() {
            return;
        }
        let layout = buffer_layout();
        let p = match take_buffer() {
            // SAFETY: a non-zero size; CUPTI hands the buffer back to
            // `buffer_completed`, which frees it with the same layout.
            true => unsafe { alloc(layout) },
            // A null buffer: CUPTI (12.9+) drops what it would have held, and counts it.
            false => std::ptr::null_mut(),
        };
        if p.is_null() {
            BUFFERS.outstanding.fetch_sub(1, Ordering::Relaxed);
        }
        // SAFETY: CUPTI passes valid out-pointers (checked non-null above).
        unsafe {
            *buffer = p;
            *size = if p.is_null() { 0 } else { layout.size() };
            if !max_records.is_null() {
                *max_records = 0; // as many as fit
            }
        }
    })
}

/// CUPTI hands a buffer back with `valid` bytes of records: record them, free it.
extern "C" fn buffer_completed(
    context: *mut c_void,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    guard((), || {
        if buffer.is_null() {
            return;
        }
        BUFFERS.outstanding.fetch_sub(1, Ordering::Relaxed);
        if let Some(cupti) = CUPTI.get() {
            guard((), || {
                // SAFETY: CUPTI filled `valid` bytes of our buffer with records whose
                // name strings it keeps alive at least until the buffer is freed.
                let walked = unsafe { record_buffer(buffer, valid, cupti.get_next_record) };
                note_losses(cupti, context, stream, &walked);
            });
        }
        // SAFETY: allocated by `buffer_requested` with this layout; CUPTI is done
        // with it.
        unsafe { dealloc(buffer, buffer_layout()) };
    })
}

/// What walking one buffer gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Walked {
    /// Records that became events.
    pub recorded: u64,
    /// Records of kinds not recorded, or without times.
    pub skipped: u64,
    /// Records cut short (or pointing outside the buffer).
    pub malformed: u64,
}

/// Walks the records of `buffer` with `next_record` (`cuptiActivityGetNextRecord`, or
/// a stand-in in tests) and records each.
///
/// # Safety
/// `buffer` must hold `valid` readable bytes, and `next_record` must return records
/// inside them; kernel name pointers in them must be null or point to NUL-terminated
/// strings that live through the call.
pub unsafe fn record_buffer(buffer: *mut u8, valid: usize, next_record: GetNextRecord) -> Walked {
    let mut walked = Walked::default();
    if buffer.is_null() || valid == 0 {
        return walked;
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(buffer as *const u8, valid) };
    let mut at: *mut u8 = std::ptr::null_mut();
    let mut previous: Option<usize> = None;
    loop {
        // SAFETY: the buffer and its valid length, and the previous record (or null
        // for the first), as cuptiActivityGetNextRecord takes them.
        let result = unsafe { next_record(buffer, valid, &mut at) };
        if result != SUCCESS || at.is_null() {
            // MAX_LIMIT_REACHED ends every buffer; anything else ends it early.
            if result != MAX_LIMIT_REACHED && result != SUCCESS {
                walked.malformed += 1;
            }
            break;
        }
        let offset = (at as usize).wrapping_sub(buffer as usize);
        let Some(record) = bytes
            .get(offset..)
            .filter(|r| !r.is_empty() && previous.is_none_or(|p| offset > p))
        else {
            // Outside the buffer, or not past the previous record: stop, never loop.
            walked.malformed += 1;
            break;
        };
        previous = Some(offset);
        // The record is read from its start to the end of the valid bytes: CUPTI does
        // not say where it ends, and only its kind's prefix is read.
        // SAFETY: guaranteed by the caller (name strings).
        match unsafe { record::record_activity(record) } {
            Ok(true) => walked.recorded += 1,
            Ok(false) => walked.skipped += 1,
            Err(_) => walked.malformed += 1,
        }
    }
    walked
}

/// Records what was lost with a buffer (CUPTI's drops, records we could not read) as
/// an instant of the process.
fn note_losses(cupti: &Cupti, context: *mut c_void, stream: u32, walked: &Walked) {
    let mut dropped = 0usize;
    if let Some(get) = cupti.dropped_records {
        // SAFETY: the context and stream of the completed buffer, an out-pointer to a
        // local.
        if unsafe { get(context, stream, &mut dropped) } != SUCCESS {
            dropped = 0;
        }
    }
    if dropped == 0 && walked.malformed == 0 {
        return;
    }
    session::record_at(
        Kind::Instant,
        crate::clock::monotonic_ns(),
        1,
        &[b"opscope"],
        b"opscope: CUPTI records lost",
        |b| {
            b.arg(b"dropped", Value::U64(dropped as u64))
                .arg(b"malformed", Value::U64(walked.malformed));
        },
    );
}

/// Has CUPTI hand over every buffer, also those still filling, before the process (and
/// then our writer) goes.
extern "C" fn flush_at_exit() {
    guard((), || {
        // A forked child (a DataLoader worker) has CUPTI's state but none of its
        // threads: flushing there could hang, or hand over the parent's records again.
        if STARTED_IN.load(Ordering::Relaxed) != std::process::id() {
            return;
        }
        // glibc runs the exiting thread's thread-local destructors before the atexit
        // handlers: a thread that recorded anything (an NVTX range, an op) has lost
        // its event buffer by now, and what the flush hands over would be dropped
        // there. A thread of its own records it; the writer drains that thread's
        // buffer at its own exit handler, which runs after this one.
        let on_its_own = std::thread::Builder::new()
            .name("opscope-cupti".into())
            .spawn(flush_all)
            .map(|thread| thread.join());
        if on_its_own.is_err() {
            flush_all();
        }
    })
}

/// The process is about to end without exit handlers (SIGTERM, `os._exit`): CUPTI
/// hands over what it holds now, before the writer's last drain.
pub(crate) fn flush_before_terminate() {
    if STARTED_IN.load(Ordering::Relaxed) == std::process::id() {
        flush_all();
    }
}

fn flush_all() {
    guard((), || {
        if let Some(cupti) = CUPTI.get() {
            // SAFETY: a documented flag; the completion callbacks run before it returns.
            unsafe { (cupti.flush_all)(FLUSH_FORCED) };
            // Drops told after the last buffer came back (every one refused) are told
            // here, never lost.
            note_losses(cupti, std::ptr::null_mut(), 0, &Walked::default());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A walker stuck on the first record (returns it again and again).
    unsafe extern "C" fn stuck(buffer: *mut u8, _: usize, record: *mut *mut u8) -> CuptiResult {
        // SAFETY: the walker passes a valid out-pointer.
        unsafe { *record = buffer };
        SUCCESS
    }

    /// A walker that fails at once with an error other than the end of the buffer.
    unsafe extern "C" fn failing(_: *mut u8, _: usize, _: *mut *mut u8) -> CuptiResult {
        1 // CUPTI_ERROR_INVALID_PARAMETER
    }

    /// A walker that points before the buffer.
    unsafe extern "C" fn outside(buffer: *mut u8, _: usize, record: *mut *mut u8) -> CuptiResult {
        // SAFETY: the walker passes a valid out-pointer; the pointer is only compared.
        unsafe { *record = buffer.wrapping_sub(64) };
        SUCCESS
    }

    #[test]
    fn a_misbehaving_walker_ends_the_walk_and_is_counted() {
        // Records of a kind not recorded (MARKER), so nothing reaches a session.
        let mut buffer = [0u64; 14];
        buffer[0] = 12;
        let p = buffer.as_mut_ptr() as *mut u8;
        // SAFETY: 112 valid bytes; the walkers point inside them or are checked.
        let walks = unsafe {
            [
                record_buffer(p, 112, stuck),
                record_buffer(p, 112, failing),
                record_buffer(p, 112, outside),
                record_buffer(std::ptr::null_mut(), 112, stuck),
                record_buffer(p, 0, stuck),
            ]
        };
        let expected = [
            Walked {
                recorded: 0,
                skipped: 1,
                malformed: 1,
            },
            Walked {
                recorded: 0,
                skipped: 0,
                malformed: 1,
            },
            Walked {
                recorded: 0,
                skipped: 0,
                malformed: 1,
            },
            Walked::default(),
            Walked::default(),
        ];
        assert_eq!(walks, expected);
    }

    #[test]
    fn libcupti_is_looked_for_where_the_program_and_its_wheels_have_it() {
        let maps = "\
7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f02-7f03 r-xp 00000000 08:01 2 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
7f04-7f05 r-xp 00000000 08:01 3 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
7f06-7f07 rw-p 00000000 00:00 0 [heap]
";
        assert_eq!(
            libcupti_candidates(maps),
            [
                "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcupti.so.13",
                "/venv/lib/python3.11/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12",
                "libcupti.so.13",
                "libcupti.so.12",
                "libcupti.so",
            ]
        );
        let mapped = "7f00-7f01 r-xp 00000000 08:01 1 /opt/cuda/lib64/libcupti.so.2024.1\n";
        assert_eq!(
            libcupti_candidates(mapped)[0],
            "/opt/cuda/lib64/libcupti.so.2024.1"
        );
        // This process maps no libcupti and no NVIDIA wheel: names only.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert_eq!(libcupti_candidates(&maps), LIBRARY_NAMES);
    }
}
