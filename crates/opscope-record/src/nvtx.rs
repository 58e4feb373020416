//! The NVTX v3 injection: every DSO that uses NVTX (PyTorch, the `nvtx` package, TF/XLA
//! GPU builds) finds us through `NVTX_INJECTION64_PATH` and calls
//! [`InitializeInjectionNvtx2`], where we fill its CORE and CORE2 callback tables.
//! Push/pop ranges become slices of the calling thread, start/end ranges ranges that
//! may end elsewhere, marks instants; all in category `nvtx` or `nvtx/<domain>`, with
//! the message, payload, colour and category the program gave.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::{Builder, Kind, Value, MAX_RECORD, MAX_STRING};
use crate::ffi::{cstr, guard};
use crate::fork_lock::{ForkLock, ForkTable};
use crate::names::NameTable;
use crate::session;
use crate::table::Map;

const SOURCE: &[u8] = b"nvtx";

type FunctionPointer = Option<unsafe extern "C" fn()>;
type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
type GetModuleFunctionTable =
    unsafe extern "C" fn(c_int, *mut *mut *mut FunctionPointer, *mut c_uint) -> c_int;

const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
const MODULE_CORE: c_int = 1;
const MODULE_CORE2: c_int = 5;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: Option<unsafe extern "C" fn(u32)>,
}

/// An NVTX domain handle we gave out.
pub struct Domain {
    /// `nvtx/<name>`, the category of the domain's events.
    category: Box<[u8]>,
}

/// A registered string handle we gave out.
pub struct RegisteredString {
    text: Box<[u8]>,
}

static DOMAINS: ForkLock<Option<Map<Vec<u8>, usize>>> = ForkLock::new(None);
static STRINGS: ForkLock<Option<Map<Vec<u8>, usize>>> = ForkLock::new(None);
static NEXT_RANGE_ID: AtomicU64 = AtomicU64::new(1);

/// Category names (`nvtxNameCategory`), few per program, keyed by domain and id.
static CATEGORIES: NameTable<256> = NameTable::new();

/// This module's tables, for the fork handlers (see `fork_lock`).
pub(crate) fn tables_for_fork() -> [&'static dyn ForkTable; 3] {
    [&DOMAINS, &STRINGS, CATEGORIES.fork_table()]
}

fn name_category(domain: usize, id: u32, name: &[u8]) {
    let _ = CATEGORIES.add([domain as u64, id as u64], name);
}

/// The latest name given to category `id` of `domain`.
fn category_name(domain: usize, id: u32) -> Option<&'static [u8]> {
    CATEGORIES.find([domain as u64, id as u64])
}

fn category_of(domain: *const Domain) -> &'static [u8] {
    // SAFETY: non-null domain handles are the leaked `Domain`s we returned.
    unsafe {
        domain
            .as_ref()
            .map_or(SOURCE, |d| &*(&d.category[..] as *const [u8]))
    }
}

/// Called once by each NVTX-using DSO. Returns 1 (success) so NVTX keeps us loaded.
///
/// # Safety
/// `get_export_table` must be NVTX's export-table accessor, as the NVTX loader passes it.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(
    get_export_table: Option<GetExportTable>,
) -> c_int {
    guard(0, || {
        let Some(get) = get_export_table else {
            return 0;
        };
        session::start();
        // SAFETY: NVTX returns null or a table whose first field is its size.
        unsafe {
            let version = get(ETID_VERSIONINFO) as *const ExportTableVersionInfo;
            if let Some(v) = version.as_ref() {
                if v.struct_size >= std::mem::size_of::<ExportTableVersionInfo>() {
                    if let Some(set) = v.set_injection_nvtx_version {
                        set(3);
                    }
                }
            }
            let callbacks = get(ETID_CALLBACKS) as *const ExportTableCallbacks;
            let Some(callbacks) = callbacks.as_ref() else {
                return 0;
            };
            if callbacks.struct_size < std::mem::size_of::<ExportTableCallbacks>() {
                return 0;
            }
            let Some(get_table) = callbacks.get_module_function_table else {
                return 0;
            };
            fill(get_table, MODULE_CORE, &core_functions());
            fill(get_table, MODULE_CORE2, &core2_functions());
        }
        1
    })
}

/// Installs `functions[i]` into slot `i` of `module`'s table.
///
/// # Safety
/// `get_table` must be NVTX's `GetModuleFunctionTable`.
unsafe fn fill(get_table: GetModuleFunctionTable, module: c_int, functions: &[FunctionPointer]) {
    let mut table: *mut *mut FunctionPointer = std::ptr::null_mut();
    let mut size: c_uint = 0;
    // SAFETY: out-pointers to locals; NVTX fills them with its table of slot addresses.
    if unsafe { get_table(module, &mut table, &mut size) } == 0 || table.is_null() {
        return;
    }
    for (i, f) in functions.iter().enumerate().skip(1) {
        if i >= size as usize || f.is_none() {
            continue;
        }
        // SAFETY: `table[i]` (i < size) is the address of the DSO's slot for callback i.
        unsafe {
            let slot = *table.add(i);
            if !slot.is_null() {
                *slot = *f;
            }
        }
    }
}

macro_rules! slot {
    ($f:expr, $t:ty) => {
        // SAFETY: NVTX calls each slot with the signature of its callback id; we cast
        // to the generic function-pointer type only to store it.
        Some(unsafe { std::mem::transmute::<$t, unsafe extern "C" fn()>($f) })
    };
}

type AttrFn = extern "C" fn(*const EventAttributes);
type AttrIntFn = extern "C" fn(*const EventAttributes) -> c_int;
type AttrU64Fn = extern "C" fn(*const EventAttributes) -> u64;
type StrFn = extern "C" fn(*const c_char);
type StrIntFn = extern "C" fn(*const c_char) -> c_int;
type StrU64Fn = extern "C" fn(*const c_char) -> u64;
type WStrFn = extern "C" fn(*const libc::wchar_t);
type WStrIntFn = extern "C" fn(*const libc::wchar_t) -> c_int;
type WStrU64Fn = extern "C" fn(*const libc::wchar_t) -> u64;

fn core_functions() -> [FunctionPointer; 16] {
    [
        None,
        slot!(mark_ex as AttrFn, AttrFn),
        slot!(mark_a as StrFn, StrFn),
        slot!(mark_w as WStrFn, WStrFn),
        slot!(range_start_ex as AttrU64Fn, AttrU64Fn),
        slot!(range_start_a as StrU64Fn, StrU64Fn),
        slot!(range_start_w as WStrU64Fn, WStrU64Fn),
        slot!(range_end as extern "C" fn(u64), extern "C" fn(u64)),
        slot!(range_push_ex as AttrIntFn, AttrIntFn),
        slot!(range_push_a as StrIntFn, StrIntFn),
        slot!(range_push_w as WStrIntFn, WStrIntFn),
        slot!(
            range_pop as extern "C" fn() -> c_int,
            extern "C" fn() -> c_int
        ),
        slot!(
            name_category_a as extern "C" fn(u32, *const c_char),
            extern "C" fn(u32, *const c_char)
        ),
        slot!(
            name_category_w as extern "C" fn(u32, *const libc::wchar_t),
            extern "C" fn(u32, *const libc::wchar_t)
        ),
        slot!(
            name_os_thread_a as extern "C" fn(u32, *const c_char),
            extern "C" fn(u32, *const c_char)
        ),
        slot!(
            name_os_thread_w as extern "C" fn(u32, *const libc::wchar_t),
            extern "C" fn(u32, *const libc::wchar_t)
        ),
    ]
}

type DomainAttrFn = extern "C" fn(*const Domain, *const EventAttributes);
type DomainAttrU64Fn = extern "C" fn(*const Domain, *const EventAttributes) -> u64;
type DomainAttrIntFn = extern "C" fn(*const Domain, *const EventAttributes) -> c_int;

fn core2_functions() -> [FunctionPointer; 16] {
    [
        None,
        slot!(domain_mark_ex as DomainAttrFn, DomainAttrFn),
        slot!(domain_range_start_ex as DomainAttrU64Fn, DomainAttrU64Fn),
        slot!(
            domain_range_end as extern "C" fn(*const Domain, u64),
            extern "C" fn(*const Domain, u64)
        ),
        slot!(domain_range_push_ex as DomainAttrIntFn, DomainAttrIntFn),
        slot!(
            domain_range_pop as extern "C" fn(*const Domain) -> c_int,
            extern "C" fn(*const Domain) -> c_int
        ),
        // Resources (6, 7) are not kept: NVTX treats a null handle as "not supported".
        None,
        None,
        slot!(
            domain_name_category_a as extern "C" fn(*const Domain, u32, *const c_char),
            extern "C" fn(*const Domain, u32, *const c_char)
        ),
        slot!(
            domain_name_category_w as extern "C" fn(*const Domain, u32, *const libc::wchar_t),
            extern "C" fn(*const Domain, u32, *const libc::wchar_t)
        ),
        slot!(
            domain_register_string_a
                as extern "C" fn(*const Domain, *const c_char) -> *const RegisteredString,
            extern "C" fn(*const Domain, *const c_char) -> *const RegisteredString
        ),
        slot!(
            domain_register_string_w
                as extern "C" fn(*const Domain, *const libc::wchar_t) -> *const RegisteredString,
            extern "C" fn(*const Domain, *const libc::wchar_t) -> *const RegisteredString
        ),
        slot!(
            domain_create_a as extern "C" fn(*const c_char) -> *const Domain,
            extern "C" fn(*const c_char) -> *const Domain
        ),
        slot!(
            domain_create_w as extern "C" fn(*const libc::wchar_t) -> *const Domain,
            extern "C" fn(*const libc::wchar_t) -> *const Domain
        ),
        slot!(
            domain_destroy as extern "C" fn(*const Domain),
            extern "C" fn(*const Domain)
        ),
        slot!(
            initialize as extern "C" fn(*const c_void),
            extern "C" fn(*const c_void)
        ),
    ]
}

/// `nvtxEventAttributes_t` (version 3): read field by field after checking `size`.
#[repr(C)]
pub struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved0: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}

/// The message of an event, decoded into `buf` when it must be converted.
fn message<'a>(attr: &'a EventAttributes, buf: &'a mut [u8; MAX_STRING]) -> &'a [u8] {
    if (attr.size as usize) < std::mem::size_of::<EventAttributes>() {
        return &[];
    }
    match attr.message_type {
        // SAFETY: ASCII messages are NUL-terminated strings the caller keeps alive
        // during the call.
        1 => unsafe { cstr(attr.message as *const c_char) },
        2 => wide(attr.message as *const libc::wchar_t, buf),
        // SAFETY: registered messages are handles we returned (never freed).
        3 => unsafe {
            (attr.message as *const RegisteredString)
                .as_ref()
                .map_or(&[][..], |s| &s.text[..])
        },
        _ => &[],
    }
}

/// A `wchar_t` (UTF-32 on Linux) string as UTF-8 in `buf`.
fn wide(p: *const libc::wchar_t, buf: &mut [u8; MAX_STRING]) -> &[u8] {
    if p.is_null() {
        return &[];
    }
    let mut len = 0;
    let mut i = 0;
    loop {
        // SAFETY: a NUL-terminated wide string from the caller.
        let c = unsafe { *p.add(i) };
        if c == 0 {
            break;
        }
        let ch = char::from_u32(c as u32).unwrap_or(char::REPLACEMENT_CHARACTER);
        if len + ch.len_utf8() > buf.len() {
            break;
        }
        len += ch.encode_utf8(&mut buf[len..]).len();
        i += 1;
    }
    &buf[..len]
}

/// Adds the payload, colour and category of `attr` as args.
fn attribute_args(b: &mut Builder, attr: &EventAttributes, domain: *const Domain) {
    if (attr.size as usize) < std::mem::size_of::<EventAttributes>() {
        return;
    }
    let p = attr.payload;
    let payload = match attr.payload_type {
        1 => Some(Value::U64(p)),
        2 => Some(Value::I64(p as i64)),
        3 => Some(Value::F64(f64::from_bits(p))),
        4 => Some(Value::U64(p as u32 as u64)),
        5 => Some(Value::I64(p as u32 as i32 as i64)),
        6 => Some(Value::F64(f32::from_bits(p as u32) as f64)),
        _ => None,
    };
    if let Some(v) = payload {
        b.arg(b"payload", v);
    }
    if attr.color_type == 1 {
        b.arg(b"color", Value::U64(attr.color as u64));
    }
    if attr.category != 0 {
        match category_name(domain as usize, attr.category) {
            Some(name) => b.arg(b"category", Value::Str(name)),
            None => b.arg(b"category", Value::U64(attr.category as u64)),
        };
    }
}

/// Records an NVTX event; a push range with the external id CUPTI took for it.
fn event(
    kind: Kind,
    id: u64,
    domain: *const Domain,
    attr: *const EventAttributes,
    external: Option<u64>,
) {
    if !session::enabled() {
        return;
    }
    // SAFETY: NVTX passes a valid attributes struct (or null) for the call's duration.
    let Some(attr) = (unsafe { attr.as_ref() }) else {
        return;
    };
    let ts = crate::clock::now();
    let mut buf = [0u8; MAX_STRING];
    let text = message(attr, &mut buf);
    crate::ring::emit(kind, MAX_RECORD, |bytes| {
        let mut b = Builder::new(bytes, kind, ts, id, &[category_of(domain)], text);
        attribute_args(&mut b, attr, domain);
        if let Some(external) = external {
            b.arg(b"external_id", Value::U64(external));
        }
        b.finish().len()
    });
}

fn plain(kind: Kind, id: u64, text: &[u8]) {
    session::record(kind, id, &[SOURCE], text, |_| {})
}

/// A push range named by a plain message, with the external id CUPTI took for it.
fn pushed_plain(text: &[u8]) {
    let external = crate::cupti::range_opened();
    session::record(Kind::Begin, 0, &[SOURCE], text, |b| {
        if let Some(external) = external {
            b.arg(b"external_id", Value::U64(external));
        }
    })
}

/// A push range's end: its id leaves CUPTI's stack.
fn popped() {
    session::record(Kind::End, 0, &[], b"", |_| {});
    crate::cupti::range_closed();
}

thread_local! {
    static DEPTH: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

/// Push: the 0-based level of the new range. Pop: the level of the ended one, or -1
/// when none was open.
fn push_level() -> c_int {
    DEPTH
        .try_with(|d| {
            let level = d.get();
            d.set(level + 1);
            level
        })
        .unwrap_or(0)
}

fn pop_level() -> c_int {
    DEPTH
        .try_with(|d| {
            let level = d.get() - 1;
            d.set(level.max(0));
            level
        })
        .unwrap_or(-1)
}

extern "C" fn mark_ex(attr: *const EventAttributes) {
    guard((), || event(Kind::Instant, 0, std::ptr::null(), attr, None))
}
extern "C" fn mark_a(text: *const c_char) {
    // SAFETY: a NUL-terminated message.
    guard((), || plain(Kind::Instant, 0, unsafe { cstr(text) }))
}
extern "C" fn mark_w(text: *const libc::wchar_t) {
    guard((), || {
        plain(Kind::Instant, 0, wide(text, &mut [0; MAX_STRING]))
    })
}
fn next_range_id() -> u64 {
    NEXT_RANGE_ID.fetch_add(1, Ordering::Relaxed)
}
extern "C" fn range_start_ex(attr: *const EventAttributes) -> u64 {
    guard(0, || {
        let id = next_range_id();
        event(Kind::AsyncBegin, id, std::ptr::null(), attr, None);
        id
    })
}
extern "C" fn range_start_a(text: *const c_char) -> u64 {
    guard(0, || {
        let id = next_range_id();
        // SAFETY: a NUL-terminated message.
        plain(Kind::AsyncBegin, id, unsafe { cstr(text) });
        id
    })
}
extern "C" fn range_start_w(text: *const libc::wchar_t) -> u64 {
    guard(0, || {
        let id = next_range_id();
        plain(Kind::AsyncBegin, id, wide(text, &mut [0; MAX_STRING]));
        id
    })
}
extern "C" fn range_end(id: u64) {
    guard((), || plain(Kind::AsyncEnd, id, b""))
}
extern "C" fn range_push_ex(attr: *const EventAttributes) -> c_int {
    guard(-2, || {
        event(
            Kind::Begin,
            0,
            std::ptr::null(),
            attr,
            crate::cupti::range_opened(),
        );
        push_level()
    })
}
extern "C" fn range_push_a(text: *const c_char) -> c_int {
    guard(-2, || {
        // SAFETY: a NUL-terminated message.
        pushed_plain(unsafe { cstr(text) });
        push_level()
    })
}
extern "C" fn range_push_w(text: *const libc::wchar_t) -> c_int {
    guard(-2, || {
        pushed_plain(wide(text, &mut [0; MAX_STRING]));
        push_level()
    })
}
extern "C" fn range_pop() -> c_int {
    guard(-2, || {
        popped();
        pop_level()
    })
}
extern "C" fn name_category_a(id: u32, name: *const c_char) {
    // SAFETY: a NUL-terminated name.
    guard((), || name_category(0, id, unsafe { cstr(name) }))
}
extern "C" fn name_category_w(id: u32, name: *const libc::wchar_t) {
    guard((), || {
        name_category(0, id, wide(name, &mut [0; MAX_STRING]))
    })
}
extern "C" fn name_os_thread_a(tid: u32, name: *const c_char) {
    guard((), || {
        session::record(
            Kind::OtherThreadName,
            tid as u64,
            &[],
            // SAFETY: a NUL-terminated name.
            unsafe { cstr(name) },
            |_| {},
        )
    })
}
extern "C" fn name_os_thread_w(tid: u32, name: *const libc::wchar_t) {
    guard((), || {
        session::record(
            Kind::OtherThreadName,
            tid as u64,
            &[],
            wide(name, &mut [0; MAX_STRING]),
            |_| {},
        )
    })
}

extern "C" fn domain_mark_ex(domain: *const Domain, attr: *const EventAttributes) {
    guard((), || event(Kind::Instant, 0, domain, attr, None))
}
extern "C" fn domain_range_start_ex(domain: *const Domain, attr: *const EventAttributes) -> u64 {
    guard(0, || {
        let id = next_range_id();
        event(Kind::AsyncBegin, id, domain, attr, None);
        id
    })
}
extern "C" fn domain_range_end(domain: *const Domain, id: u64) {
    guard((), || {
        session::record(Kind::AsyncEnd, id, &[category_of(domain)], b"", |_| {})
    })
}
extern "C" fn domain_range_push_ex(domain: *const Domain, attr: *const EventAttributes) -> c_int {
    guard(-2, || {
        event(Kind::Begin, 0, domain, attr, crate::cupti::range_opened());
        push_level()
    })
}
extern "C" fn domain_range_pop(_domain: *const Domain) -> c_int {
    guard(-2, || {
        popped();
        pop_level()
    })
}
extern "C" fn domain_name_category_a(domain: *const Domain, id: u32, name: *const c_char) {
    guard((), || {
        // SAFETY: NVTX passes a NUL-terminated name.
        let name = unsafe { cstr(name) };
        name_category(domain as usize, id, name)
    })
}
extern "C" fn domain_name_category_w(domain: *const Domain, id: u32, name: *const libc::wchar_t) {
    guard((), || {
        name_category(domain as usize, id, wide(name, &mut [0; MAX_STRING]))
    })
}

fn register_string(text: &[u8]) -> *const RegisteredString {
    let new = || {
        Box::leak(Box::new(RegisteredString {
            text: text.to_vec().into_boxed_slice(),
        })) as *const RegisteredString as usize
    };
    // Uncached when the thread is inside this table already (a signal handler).
    let Some(mut strings) = STRINGS.lock() else {
        return new() as *const RegisteredString;
    };
    *strings
        .get_or_insert_with(Map::default)
        .entry(text.to_vec())
        .or_insert_with(new) as *const RegisteredString
}

extern "C" fn domain_register_string_a(
    _domain: *const Domain,
    text: *const c_char,
) -> *const RegisteredString {
    // SAFETY: a NUL-terminated string.
    guard(std::ptr::null(), || register_string(unsafe { cstr(text) }))
}
extern "C" fn domain_register_string_w(
    _domain: *const Domain,
    text: *const libc::wchar_t,
) -> *const RegisteredString {
    guard(std::ptr::null(), || {
        register_string(wide(text, &mut [0; MAX_STRING]))
    })
}

fn create_domain(name: &[u8]) -> *const Domain {
    let new = || {
        let category = [SOURCE, b"/", name].concat().into_boxed_slice();
        Box::leak(Box::new(Domain { category })) as *const Domain as usize
    };
    // Uncached when the thread is inside this table already (a signal handler).
    let Some(mut domains) = DOMAINS.lock() else {
        return new() as *const Domain;
    };
    *domains
        .get_or_insert_with(Map::default)
        .entry(name.to_vec())
        .or_insert_with(new) as *const Domain
}

extern "C" fn domain_create_a(name: *const c_char) -> *const Domain {
    // SAFETY: a NUL-terminated name.
    guard(std::ptr::null(), || create_domain(unsafe { cstr(name) }))
}
extern "C" fn domain_create_w(name: *const libc::wchar_t) -> *const Domain {
    guard(std::ptr::null(), || {
        create_domain(wide(name, &mut [0; MAX_STRING]))
    })
}
extern "C" fn domain_destroy(_domain: *const Domain) {
    // Domains live for the process: events already recorded refer to their names.
}
extern "C" fn initialize(_reserved: *const c_void) {}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// For `fork_lock`'s test: a domain and a registered string made while the calling
    /// thread holds their tables; whether both came out usable.
    pub(crate) fn domain_and_string_while_holding_the_nvtx_tables() -> bool {
        let domain = {
            let _held = DOMAINS.lock().unwrap();
            create_domain(b"held")
        };
        let string = {
            let _held = STRINGS.lock().unwrap();
            register_string(b"held")
        };
        // SAFETY: both are leaked objects of ours, alive for the process.
        unsafe {
            !domain.is_null()
                && !string.is_null()
                && &*(*domain).category == [SOURCE, b"/held"].concat().as_slice()
                && &*(*string).text == b"held"
        }
    }
}
