//! The ITT collector (protocol v2): every DSO that links ittnotify's static part
//! (oneDNN in TensorFlow and PyTorch, PyTorch's `emit_itt`, the `ittapi` packages)
//! finds us through `INTEL_LIBITTNOTIFY64` and calls [`__itt_api_init`], where we fill
//! its function list by name. Tasks become slices of the calling thread (category
//! `itt/<domain>`), overlapped tasks and frames become ranges, markers instants,
//! counters counter tracks, metadata args of the open task.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::event::{Builder, Kind, Value, MAX_RECORD};
use crate::ffi::{cstr, guard};
use crate::fork_lock::{ForkLock, ForkTable};
use crate::names::NameTable;
use crate::session;
use crate::table::Map;

/// `__itt_global.magic`.
const MAGIC: [u8; 8] = [0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30];
/// Offset of `api_list_ptr` in `__itt_global` (x86-64; stable since 2010).
const API_LIST_OFFSET: usize = 120;
/// Set in `extra1` of the counters we make, to tell them from the static part's.
const OUR_COUNTER: c_int = 0x6f70_7363;

const SOURCE: &[u8] = b"itt/";
const FRAME_SOURCE: &[u8] = b"itt.frame/";

#[repr(C)]
pub struct Domain {
    flags: c_int,
    name_a: *const c_char,
    name_w: *const c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut Domain,
}

#[repr(C)]
pub struct StringHandle {
    str_a: *const c_char,
    str_w: *const c_void,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut StringHandle,
}

/// `__itt_id`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Id {
    d1: u64,
    d2: u64,
    d3: u64,
}

#[repr(C)]
pub struct Counter {
    name_a: *const c_char,
    name_w: *const c_void,
    domain_a: *const c_char,
    domain_w: *const c_void,
    kind: c_int,
    index: libc::c_long,
    extra1: c_int,
    extra2: *mut c_void,
    next: *mut Counter,
    /// Ours only (`extra1 == OUR_COUNTER`): the running value for inc/dec, as f64 bits.
    value: AtomicU64,
}

#[repr(C)]
struct ApiInfo {
    name: *const c_char,
    func_ptr: *mut *mut c_void,
    init_func: *mut c_void,
    null_func: *mut c_void,
    group: c_int,
}

/// Names are never freed: handles are created once per name and live for the process,
/// as ittnotify's static part does.
struct Handles {
    domains: Map<Vec<u8>, usize>,
    strings: Map<Vec<u8>, usize>,
}

static HANDLES: ForkLock<Option<Handles>> = ForkLock::new(None);

/// This module's tables, for the fork handlers (see `fork_lock`).
pub(crate) fn tables_for_fork() -> [&'static dyn ForkTable; 2] {
    [&HANDLES, EVENTS.fork_table()]
}

thread_local! {
    /// PyTorch creates a string handle on every push: look names up without the lock.
    static STRING_CACHE: RefCell<Map<Vec<u8>, usize>> = RefCell::new(Map::default());
}

fn leak_cstring(name: &[u8]) -> *const c_char {
    let mut owned = name.to_vec();
    owned.push(0);
    Box::leak(owned.into_boxed_slice()).as_ptr() as *const c_char
}

/// None on a thread that is inside `f` already (a signal handler naming something).
fn with_handles<R>(f: impl FnOnce(&mut Handles) -> R) -> Option<R> {
    let mut guard = HANDLES.lock()?;
    let handles = guard.get_or_insert_with(|| Handles {
        domains: Map::default(),
        strings: Map::default(),
    });
    Some(f(handles))
}

fn new_domain(name: &[u8]) -> usize {
    Box::leak(Box::new(Domain {
        // Calls through a domain are skipped while its flags are 0.
        flags: 1,
        name_a: leak_cstring(name),
        name_w: std::ptr::null(),
        extra1: 0,
        extra2: std::ptr::null_mut(),
        next: std::ptr::null_mut(),
    })) as *mut Domain as usize
}

fn new_string_handle(name: &[u8]) -> usize {
    let handle = Box::leak(Box::new(StringHandle {
        str_a: leak_cstring(name),
        str_w: std::ptr::null(),
        extra1: 0,
        extra2: std::ptr::null_mut(),
        next: std::ptr::null_mut(),
    })) as *mut StringHandle as usize;
    if name == WARM_UP_NAME {
        WARM_UP.store(handle, Ordering::Relaxed);
    }
    handle
}

/// The name of the range opscope's Python bootstrap enters before the program runs,
/// so that ITT's start (loading this library into PyTorch's ITT, the thread's buffer)
/// is paid then and not in the program's first step. Its tasks are not recorded.
const WARM_UP_NAME: &[u8] = b"opscope warm-up";

/// The bootstrap's warm-up: [`NO_WARM_UP`] in a program without it (the hot path then
/// pays one load and one compare), [`WARM_UP_EXPECTED`] once the bootstrap said one
/// comes ([`expect_warm_up`]), then the string handle this library made for it.
static WARM_UP: AtomicUsize = AtomicUsize::new(NO_WARM_UP);
const NO_WARM_UP: usize = 0;
const WARM_UP_EXPECTED: usize = 1;

/// Called by the bootstrap (through `opscope_record_start`) before its warm-up range.
pub fn expect_warm_up() {
    let _ = WARM_UP.compare_exchange(
        NO_WARM_UP,
        WARM_UP_EXPECTED,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
}

/// Whether a task is the bootstrap's warm-up. Its first handle is the one ITT's static
/// part makes while it is still loading this library, so until the library has made
/// its own, the name itself is compared (only in a process whose bootstrap said a
/// warm-up comes).
fn is_warm_up(name: *const StringHandle) -> bool {
    match WARM_UP.load(Ordering::Relaxed) {
        NO_WARM_UP => false,
        // SAFETY: string handles are never freed; their name is NUL-terminated.
        WARM_UP_EXPECTED => unsafe {
            name.as_ref()
                .is_some_and(|h| !h.str_a.is_null() && cstr(h.str_a) == WARM_UP_NAME)
        },
        ours => name as usize == ours,
    }
}

/// The name of a domain, whoever made it.
fn domain_name<'a>(domain: *const Domain) -> &'a [u8] {
    // SAFETY: ITT passes domains made by `domain_create` (ours or the static part's),
    // which stay alive for the whole process; a null pointer gives an empty name.
    unsafe { domain.as_ref().map_or(&[][..], |d| cstr(d.name_a)) }
}

fn handle_name<'a>(handle: *const StringHandle) -> &'a [u8] {
    // SAFETY: as for domains: string handles are never freed.
    unsafe { handle.as_ref().map_or(&[][..], |h| cstr(h.str_a)) }
}

/// Called by ittnotify's static part of each DSO once it loaded us.
///
/// # Safety
/// `global` must be that DSO's `__itt_global`, as the ITT loader passes it.
#[no_mangle]
pub unsafe extern "C" fn __itt_api_init(global: *mut c_void, _init_groups: c_int) {
    guard((), || {
        if global.is_null() {
            return;
        }
        // SAFETY: `global` points to an `__itt_global`, which starts with the magic and
        // has `api_list_ptr` at its fixed offset.
        let (magic, list) = unsafe {
            let magic = std::slice::from_raw_parts(global as *const u8, 8);
            let list = *((global as *const u8).add(API_LIST_OFFSET) as *const *const ApiInfo);
            (magic, list)
        };
        if magic != MAGIC || list.is_null() {
            return;
        }
        session::start();
        let mut entry = list;
        // SAFETY: the list ends with an entry whose name is null; each `func_ptr` is
        // the DSO's pointer variable for that API, which we may set.
        unsafe {
            while !(*entry).name.is_null() {
                let name = CStr::from_ptr((*entry).name).to_bytes();
                let api = name.strip_prefix(b"__itt_").and_then(function);
                if !(*entry).func_ptr.is_null() {
                    *(*entry).func_ptr = api.unwrap_or((*entry).null_func);
                }
                entry = entry.add(1);
            }
        }
    })
}

/// Our implementation of the ITT API `name`, if we have one.
fn function(name: &[u8]) -> Option<*mut c_void> {
    Some(match name {
        b"domain_create" => domain_create as *mut c_void,
        b"string_handle_create" => string_handle_create as *mut c_void,
        b"task_begin" => task_begin as *mut c_void,
        b"task_begin_fn" => task_begin_fn as *mut c_void,
        b"task_end" => task_end as *mut c_void,
        b"task_begin_overlapped" => task_begin_overlapped as *mut c_void,
        b"task_end_overlapped" => task_end_overlapped as *mut c_void,
        b"region_begin" => task_begin as *mut c_void,
        b"region_end" => region_end as *mut c_void,
        b"frame_begin_v3" => frame_begin_v3 as *mut c_void,
        b"frame_end_v3" => frame_end_v3 as *mut c_void,
        b"frame_submit_v3" => frame_submit_v3 as *mut c_void,
        b"marker" => marker as *mut c_void,
        b"thread_set_name" => thread_set_name as *mut c_void,
        b"counter_create" => counter_create as *mut c_void,
        b"counter_create_typed" => counter_create_typed as *mut c_void,
        b"counter_create_v3" => counter_create_v3 as *mut c_void,
        b"counter_set_value" => counter_set_value as *mut c_void,
        b"counter_set_value_ex" => counter_set_value_ex as *mut c_void,
        b"counter_inc" => counter_inc as *mut c_void,
        b"counter_inc_delta" => counter_inc_delta as *mut c_void,
        b"counter_dec" => counter_dec as *mut c_void,
        b"counter_dec_delta" => counter_dec_delta as *mut c_void,
        b"metadata_add" => metadata_add as *mut c_void,
        b"metadata_str_add" => metadata_str_add as *mut c_void,
        b"event_create" => event_create as *mut c_void,
        b"event_start" => event_start as *mut c_void,
        b"event_end" => event_end as *mut c_void,
        b"pause" => pause as *mut c_void,
        b"resume" => resume as *mut c_void,
        b"get_timestamp" => get_timestamp as *mut c_void,
        _ => return None,
    })
}

extern "C" fn domain_create(name: *const c_char) -> *mut Domain {
    guard(std::ptr::null_mut(), || {
        // SAFETY: ITT passes a NUL-terminated name.
        let name = unsafe { cstr(name) };
        let domain = with_handles(|h| {
            *h.domains
                .entry(name.to_vec())
                .or_insert_with(|| new_domain(name))
        });
        // Uncached: the thread is inside this table already.
        domain.unwrap_or_else(|| new_domain(name)) as *mut Domain
    })
}

extern "C" fn string_handle_create(name: *const c_char) -> *mut StringHandle {
    guard(std::ptr::null_mut(), || {
        // SAFETY: ITT passes a NUL-terminated name.
        let name = unsafe { cstr(name) };
        // `try_borrow`: a signal handler may name something while its thread is here.
        let cached = STRING_CACHE
            .try_with(|c| c.try_borrow().ok()?.get(name).copied())
            .ok()
            .flatten();
        if let Some(h) = cached {
            return h as *mut StringHandle;
        }
        let Some(handle) = with_handles(|h| {
            *h.strings
                .entry(name.to_vec())
                .or_insert_with(|| new_string_handle(name))
        }) else {
            // Uncached: the thread is inside this table already.
            return new_string_handle(name) as *mut StringHandle;
        };
        let _ = STRING_CACHE.try_with(|c| {
            if let Ok(mut cache) = c.try_borrow_mut() {
                cache.insert(name.to_vec(), handle);
            }
        });
        handle as *mut StringHandle
    })
}

/// The hot path (oneDNN primitives, PyTorch ops): a 16-byte record naming the task by
/// the id this thread gave its (domain, string handle) pair, both of which live as
/// long as the process; the names are copied once per thread.
extern "C" fn task_begin(domain: *const Domain, _id: Id, _parent: Id, name: *mut StringHandle) {
    guard((), || {
        if !session::enabled() {
            return;
        }
        if is_warm_up(name) {
            crate::ring::skip_begin();
            return;
        }
        let ts = crate::clock::now();
        crate::ring::emit_named_begin((domain as usize, name as usize), ts, |bytes, id| {
            let category = [SOURCE, domain_name(domain)];
            let mut b = Builder::new(
                bytes,
                Kind::DefineName,
                ts,
                id as u64,
                &category,
                handle_name(name),
            );
            b.finish().len()
        })
    })
}

extern "C" fn task_begin_fn(domain: *const Domain, _id: Id, _parent: Id, function: *mut c_void) {
    guard((), || {
        let mut text = [0u8; 24];
        let name = hex_name(function as u64, &mut text);
        session::record(Kind::Begin, 0, &[SOURCE, domain_name(domain)], name, |_| {})
    })
}

/// `fn 0x…` for a task named by its function's address.
fn hex_name(address: u64, out: &mut [u8; 24]) -> &[u8] {
    out[..5].copy_from_slice(b"fn 0x");
    let mut len = 5;
    let digits = (64 - address.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out[len] = b"0123456789abcdef"[((address >> (i * 4)) & 0xF) as usize];
        len += 1;
    }
    &out[..len]
}

/// A range of category `category` named `name` on the calling thread: for the Python
/// bootstrap, which marks calls ITT does not see (Keras's train function) through
/// `opscope_record_range_begin`.
///
/// # Safety
/// `category` and `name` are null or NUL-terminated strings that outlive the call.
pub unsafe fn range_begin(category: *const c_char, name: *const c_char) {
    guard((), || {
        // SAFETY: guaranteed by the caller.
        let (category, name) = unsafe { (cstr(category), cstr(name)) };
        // Device work queued inside takes the range's external id (CUPTI's stack).
        let external = crate::cupti::range_opened();
        session::record(Kind::Begin, 0, &[category], name, |b| {
            if let Some(external) = external {
                b.arg(b"external_id", Value::U64(external));
            }
        })
    })
}

/// The time in which the Python bootstrap stood aside for a profiler the program
/// started itself (its ops are in the program's profile, not here): an async range of
/// category `opscope`, one per framework, so that it may end on another thread.
///
/// # Safety
/// `framework` and `name` are null or NUL-terminated strings that outlive the call.
pub unsafe fn aside_begin(framework: *const c_char, name: *const c_char) {
    guard((), || {
        // SAFETY: guaranteed by the caller.
        let (framework, name) = unsafe { (cstr(framework), cstr(name)) };
        session::record(
            Kind::AsyncBegin,
            aside_key(framework),
            &[b"opscope"],
            name,
            |_| {},
        )
    })
}

/// Ends the range [`aside_begin`] began for `framework`.
///
/// # Safety
/// `framework` is null or a NUL-terminated string that outlives the call.
pub unsafe fn aside_end(framework: *const c_char) {
    guard((), || {
        // SAFETY: guaranteed by the caller.
        let framework = unsafe { cstr(framework) };
        session::record(
            Kind::AsyncEnd,
            aside_key(framework),
            &[b"opscope"],
            b"",
            |_| {},
        )
    })
}

/// One key per framework (FNV-1a), apart from ITT's ids by category.
fn aside_key(framework: &[u8]) -> u64 {
    framework.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Ends the calling thread's innermost task (see [`range_begin`]).
pub fn range_end() {
    guard((), || {
        session::record(Kind::End, 0, &[], b"", |_| {});
        crate::cupti::range_closed();
    })
}

extern "C" fn task_end(_domain: *const Domain) {
    guard((), || session::record(Kind::End, 0, &[], b"", |_| {}))
}

extern "C" fn region_end(_domain: *const Domain, _id: Id) {
    guard((), || session::record(Kind::End, 0, &[], b"", |_| {}))
}

fn range_key(id: &Id) -> u64 {
    // ITT ids are (d1, d2) made by `__itt_id_make(addr, extra)`: fold both.
    id.d1 ^ id.d2.rotate_left(32)
}

extern "C" fn task_begin_overlapped(
    domain: *const Domain,
    id: Id,
    _parent: Id,
    name: *mut StringHandle,
) {
    guard((), || {
        session::record(
            Kind::AsyncBegin,
            range_key(&id),
            &[SOURCE, domain_name(domain)],
            handle_name(name),
            |_| {},
        )
    })
}

extern "C" fn task_end_overlapped(domain: *const Domain, id: Id) {
    guard((), || {
        session::record(
            Kind::AsyncEnd,
            range_key(&id),
            &[SOURCE, domain_name(domain)],
            b"",
            |_| {},
        )
    })
}

fn frame_key(id: *const Id) -> u64 {
    // SAFETY: ITT passes either null (the domain's one frame) or a valid id.
    unsafe { id.as_ref().map_or(0, range_key) }
}

extern "C" fn frame_begin_v3(domain: *const Domain, id: *const Id) {
    guard((), || {
        session::record(
            Kind::AsyncBegin,
            frame_key(id),
            &[FRAME_SOURCE, domain_name(domain)],
            domain_name(domain),
            |_| {},
        )
    })
}

extern "C" fn frame_end_v3(domain: *const Domain, id: *const Id) {
    guard((), || {
        session::record(
            Kind::AsyncEnd,
            frame_key(id),
            &[FRAME_SOURCE, domain_name(domain)],
            b"",
            |_| {},
        )
    })
}

extern "C" fn frame_submit_v3(domain: *const Domain, _id: *const Id, begin: u64, end: u64) {
    guard((), || {
        // Times are from our `get_timestamp`, the recording clock; the record's own
        // time is the end, its id the begin.
        if !session::enabled() {
            return;
        }
        crate::ring::emit(Kind::Complete, MAX_RECORD, |bytes| {
            let category = [FRAME_SOURCE, domain_name(domain)];
            Builder::new(
                bytes,
                Kind::Complete,
                end,
                begin,
                &category,
                domain_name(domain),
            )
            .finish()
            .len()
        });
    })
}

extern "C" fn marker(domain: *const Domain, _id: Id, name: *mut StringHandle, scope: c_int) {
    guard((), || {
        // __itt_scope_global / track_group / track are process-wide; task, marker and
        // unknown belong to the thread.
        let process = matches!(scope, 1..=3) as u64;
        session::record(
            Kind::Instant,
            process,
            &[SOURCE, domain_name(domain)],
            handle_name(name),
            |_| {},
        )
    })
}

extern "C" fn thread_set_name(name: *const c_char) {
    guard((), || {
        // SAFETY: ITT passes a NUL-terminated name.
        let name = unsafe { cstr(name) };
        session::record(Kind::ThreadName, 0, &[], name, |_| {})
    })
}

fn new_counter(name: &[u8], domain: &[u8], kind: c_int) -> *mut Counter {
    Box::leak(Box::new(Counter {
        name_a: leak_cstring(name),
        name_w: std::ptr::null(),
        domain_a: leak_cstring(domain),
        domain_w: std::ptr::null(),
        kind,
        index: 0,
        extra1: OUR_COUNTER,
        extra2: std::ptr::null_mut(),
        next: std::ptr::null_mut(),
        value: AtomicU64::new(0f64.to_bits()),
    }))
}

/// `__itt_metadata_u64`, the type of counters made without one.
const METADATA_U64: c_int = 1;

extern "C" fn counter_create(name: *const c_char, domain: *const c_char) -> *mut Counter {
    counter_create_typed(name, domain, METADATA_U64)
}

extern "C" fn counter_create_typed(
    name: *const c_char,
    domain: *const c_char,
    kind: c_int,
) -> *mut Counter {
    guard(std::ptr::null_mut(), || {
        // SAFETY: ITT passes NUL-terminated names (the domain may be null).
        let (name, domain) = unsafe { (cstr(name), cstr(domain)) };
        new_counter(name, domain, kind)
    })
}

extern "C" fn counter_create_v3(
    domain: *const Domain,
    name: *const c_char,
    kind: c_int,
) -> *mut Counter {
    guard(std::ptr::null_mut(), || {
        // SAFETY: ITT passes a NUL-terminated name.
        let name = unsafe { cstr(name) };
        new_counter(name, domain_name(domain), kind)
    })
}

/// Reads one value of ITT metadata type `kind` at `data`.
///
/// # Safety
/// `data` must point to a value of that type (or be null).
unsafe fn read_value(kind: c_int, data: *const c_void) -> Option<Value<'static>> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees the type; reads are unaligned-safe.
    unsafe {
        Some(match kind {
            1 => Value::U64(std::ptr::read_unaligned(data as *const u64)),
            2 => Value::I64(std::ptr::read_unaligned(data as *const i64)),
            3 => Value::U64(std::ptr::read_unaligned(data as *const u32) as u64),
            4 => Value::I64(std::ptr::read_unaligned(data as *const i32) as i64),
            5 => Value::U64(std::ptr::read_unaligned(data as *const u16) as u64),
            6 => Value::I64(std::ptr::read_unaligned(data as *const i16) as i64),
            7 => Value::F64(std::ptr::read_unaligned(data as *const f32) as f64),
            8 => Value::F64(std::ptr::read_unaligned(data as *const f64)),
            _ => return None,
        })
    }
}

fn as_f64(v: Value<'_>) -> f64 {
    match v {
        Value::U64(u) => u as f64,
        Value::I64(i) => i as f64,
        Value::F64(f) => f,
        Value::Str(_) => 0.0,
    }
}

fn counter_sample(counter: *mut Counter, ts: Option<u64>, value: f64) {
    // SAFETY: counters come from `counter_create*` (ours or the static part's) and are
    // never freed.
    let Some(c) = (unsafe { counter.as_ref() }) else {
        return;
    };
    if c.extra1 == OUR_COUNTER {
        c.value.store(value.to_bits(), Ordering::Relaxed);
    }
    if !session::enabled() {
        return;
    }
    // SAFETY: names of live counters.
    let (name, domain) = unsafe { (cstr(c.name_a), cstr(c.domain_a)) };
    let ts = ts.unwrap_or_else(crate::clock::now);
    crate::ring::emit(Kind::Counter, MAX_RECORD, |bytes| {
        let mut b = Builder::new(bytes, Kind::Counter, ts, 0, &[domain], name);
        b.arg(b"value", Value::F64(value));
        b.finish().len()
    });
}

extern "C" fn counter_set_value(counter: *mut Counter, value: *mut c_void) {
    guard((), || {
        // SAFETY: see `counter_sample`; the value has the counter's type.
        let kind = unsafe { counter.as_ref() }.map_or(0, |c| c.kind);
        // SAFETY: ITT passes a value of the type the counter was made with.
        if let Some(v) = unsafe { read_value(kind, value) } {
            counter_sample(counter, None, as_f64(v));
        }
    })
}

extern "C" fn counter_set_value_ex(
    counter: *mut Counter,
    _clock: *mut c_void,
    ts: u64,
    value: *mut c_void,
) {
    guard((), || {
        // SAFETY: as in `counter_set_value`.
        let kind = unsafe { counter.as_ref() }.map_or(0, |c| c.kind);
        // SAFETY: as in `counter_set_value`.
        if let Some(v) = unsafe { read_value(kind, value) } {
            counter_sample(counter, (ts != 0).then_some(ts), as_f64(v));
        }
    })
}

fn counter_add(counter: *mut Counter, delta: f64) {
    // SAFETY: see `counter_sample`.
    let Some(c) = (unsafe { counter.as_ref() }) else {
        return;
    };
    if c.extra1 != OUR_COUNTER {
        return;
    }
    let mut now = 0.0;
    let _ = c
        .value
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            now = f64::from_bits(bits) + delta;
            Some(now.to_bits())
        });
    counter_sample(counter, None, now);
}

extern "C" fn counter_inc(counter: *mut Counter) {
    guard((), || counter_add(counter, 1.0))
}

extern "C" fn counter_inc_delta(counter: *mut Counter, delta: u64) {
    guard((), || counter_add(counter, delta as f64))
}

extern "C" fn counter_dec(counter: *mut Counter) {
    guard((), || counter_add(counter, -1.0))
}

extern "C" fn counter_dec_delta(counter: *mut Counter, delta: u64) {
    guard((), || counter_add(counter, -(delta as f64)))
}

extern "C" fn metadata_add(
    _domain: *const Domain,
    _id: Id,
    key: *mut StringHandle,
    kind: c_int,
    count: usize,
    data: *mut c_void,
) {
    guard((), || {
        let key = handle_name(key);
        session::record(Kind::Args, 0, &[], b"", |b| {
            let size = match kind {
                1 | 2 | 8 => 8,
                3 | 4 | 7 => 4,
                5 | 6 => 2,
                _ => return,
            };
            // Arrays become one arg per element (`key[i]`), up to the record's limit.
            for i in 0..count.min(crate::event::MAX_ARGS) {
                // SAFETY: ITT passes `count` values of type `kind` at `data`.
                let v = unsafe {
                    read_value(
                        kind,
                        (data as *const u8).wrapping_add(i * size) as *const c_void,
                    )
                };
                let Some(v) = v else { return };
                if count == 1 {
                    b.arg(key, v);
                } else {
                    let mut k = [0u8; 80];
                    let n = key.len().min(64);
                    k[..n].copy_from_slice(&key[..n]);
                    let idx = format_index(i, &mut k[n..]);
                    b.arg(&k[..n + idx], v);
                }
            }
        })
    })
}

/// Writes `[i]` into `out` (without allocating: this runs inside the program's
/// calls), returning its length; cut short if `out` is.
fn format_index(i: usize, out: &mut [u8]) -> usize {
    use std::io::Write;
    let room = out.len();
    let mut cursor = std::io::Cursor::new(out);
    let _ = write!(cursor, "[{i}]");
    (cursor.position() as usize).min(room)
}

extern "C" fn metadata_str_add(
    _domain: *const Domain,
    _id: Id,
    key: *mut StringHandle,
    data: *const c_char,
    length: usize,
) {
    guard((), || {
        let key = handle_name(key);
        // SAFETY: ITT passes a string of `length` bytes, or NUL-terminated when 0.
        let text = unsafe {
            if length == 0 {
                cstr(data)
            } else if data.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(data as *const u8, length)
            }
        };
        session::record(Kind::Args, 0, &[], b"", |b| {
            b.arg(key, Value::Str(text));
        })
    })
}

/// ITT "events" (`__itt_event_create` gives an int the program starts and ends): their
/// names, by that int, read without a lock on each start.
static EVENTS: NameTable<4096> = NameTable::new();
const EVENT_SOURCE: &[u8] = b"itt/events";

extern "C" fn event_create(name: *const c_char, length: c_int) -> c_int {
    guard(-1, || {
        // SAFETY: ITT passes `length` bytes, or a NUL-terminated name when not positive.
        let name = unsafe {
            if length > 0 && !name.is_null() {
                std::slice::from_raw_parts(name as *const u8, length as usize)
            } else {
                cstr(name)
            }
        };
        EVENTS.add([0, 0], name).map_or(-1, |i| i as c_int)
    })
}

fn event_name(event: c_int) -> &'static [u8] {
    usize::try_from(event)
        .ok()
        .and_then(|i| EVENTS.get(i))
        .unwrap_or(b"")
}

extern "C" fn event_start(event: c_int) -> c_int {
    guard(-1, || {
        session::record(Kind::Begin, 0, &[EVENT_SOURCE], event_name(event), |_| {});
        0
    })
}

extern "C" fn event_end(_event: c_int) -> c_int {
    guard(-1, || {
        session::record(Kind::End, 0, &[], b"", |_| {});
        0
    })
}

extern "C" fn pause() {
    session::set_paused(true)
}

extern "C" fn resume() {
    session::set_paused(false)
}

extern "C" fn get_timestamp() -> u64 {
    crate::clock::now()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// For `fork_lock`'s test: a domain and a string handle made while the calling
    /// thread holds the handles' table; whether both came out usable.
    pub(crate) fn domain_and_handle_while_holding_the_itt_table() -> bool {
        let _held = HANDLES.lock().unwrap();
        let domain = domain_create(c"held".as_ptr());
        let handle = string_handle_create(c"held".as_ptr());
        // SAFETY: both are leaked objects of ours, alive for the process.
        unsafe {
            !domain.is_null()
                && !handle.is_null()
                && cstr((*domain).name_a) == b"held"
                && cstr((*handle).str_a) == b"held"
        }
    }

    #[test]
    fn function_addresses_print_as_hex() {
        let mut out = [0u8; 24];
        assert_eq!(hex_name(0x7f3a_0012, &mut out), b"fn 0x7f3a0012");
        assert_eq!(hex_name(0, &mut out), b"fn 0x0");
    }

    #[test]
    fn every_api_we_fill_is_known_by_its_itt_name() {
        for name in [
            "task_begin",
            "task_end",
            "domain_create",
            "string_handle_create",
            "counter_set_value",
            "frame_submit_v3",
        ] {
            assert!(function(name.as_bytes()).is_some(), "{name}");
        }
        assert!(
            function(b"formatted_metadata_add").is_none(),
            "C-variadic: left to null_func"
        );
    }
}
