//! Turns decoded CUPTI activities into recorder events: kernels, copies and memsets
//! become device slices, driver and runtime calls API slices, host waits complete
//! slices (category `cuda/sync`), all at the times CUPTI measured.

use std::ffi::c_char;
use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use super::activity::{self, Activity, ApiKind, CopyKind, Graph, SyncKind, TooShort};
use super::external;
use crate::event::{Builder, Kind, Value};
use crate::ffi::cstr;
use crate::session;

/// Added to CUPTI's times: zero when CUPTI reads our clock, else the difference between
/// ours and CUPTI's measured at start.
static CLOCK_OFFSET: AtomicI64 = AtomicI64::new(0);

pub(crate) fn set_clock_offset(ns: i64) {
    CLOCK_OFFSET.store(ns, Ordering::Relaxed);
}

fn time(t: u64) -> u64 {
    t.wrapping_add_signed(CLOCK_OFFSET.load(Ordering::Relaxed))
}

/// API call names by callback id, as libcupti names them, without the version suffix.
struct ApiNames {
    driver: Vec<Option<Box<[u8]>>>,
    runtime: Vec<Option<Box<[u8]>>>,
}

static API_NAMES: OnceLock<ApiNames> = OnceLock::new();

/// Keeps libcupti's names for callback ids (index = cbid), read once at start so the
/// completion callback never calls into CUPTI for them.
pub(crate) fn set_api_names(driver: Vec<Option<Vec<u8>>>, runtime: Vec<Option<Vec<u8>>>) {
    let strip = |names: Vec<Option<Vec<u8>>>| {
        names
            .into_iter()
            .map(|n| n.map(|n| without_version(&n).to_vec().into_boxed_slice()))
            .collect()
    };
    let _ = API_NAMES.set(ApiNames {
        driver: strip(driver),
        runtime: strip(runtime),
    });
}

/// `cudaLaunchKernel_v7000` → `cudaLaunchKernel`, `cuMemcpyHtoD_v2` → `cuMemcpyHtoD`:
/// the names programs call (the suffix only tells ABI revisions apart).
fn without_version(name: &[u8]) -> &[u8] {
    if let Some(at) = name.iter().rposition(|&c| c == b'_') {
        let suffix = &name[at + 1..];
        if at > 0
            && suffix.len() > 1
            && suffix[0] == b'v'
            && suffix[1..].iter().all(u8::is_ascii_digit)
        {
            return &name[..at];
        }
    }
    name
}

/// Names of the most common calls, for a libcupti that cannot name them (ids from
/// `cupti_runtime_cbid.h` / `cupti_driver_cbid.h`, which only ever append).
fn known_name(api: ApiKind, cbid: u32) -> Option<&'static [u8]> {
    let name: &[u8] = match (api, cbid) {
        (ApiKind::Runtime, 13) => b"cudaLaunch",
        (ApiKind::Runtime, 20) => b"cudaMalloc",
        (ApiKind::Runtime, 22) => b"cudaFree",
        (ApiKind::Runtime, 31) => b"cudaMemcpy",
        (ApiKind::Runtime, 41) => b"cudaMemcpyAsync",
        (ApiKind::Runtime, 49) => b"cudaMemset",
        (ApiKind::Runtime, 51) => b"cudaMemsetAsync",
        (ApiKind::Runtime, 131) => b"cudaStreamSynchronize",
        (ApiKind::Runtime, 135) => b"cudaEventRecord",
        (ApiKind::Runtime, 137) => b"cudaEventSynchronize",
        (ApiKind::Runtime, 147) => b"cudaStreamWaitEvent",
        (ApiKind::Runtime, 165) => b"cudaDeviceSynchronize",
        (ApiKind::Runtime, 211) => b"cudaLaunchKernel",
        (ApiKind::Runtime, 214) => b"cudaLaunchKernel_ptsz",
        (ApiKind::Runtime, 225) => b"cudaMemcpyAsync_ptsz",
        (ApiKind::Runtime, 239) => b"cudaStreamSynchronize_ptsz",
        (ApiKind::Runtime, 269) => b"cudaLaunchCooperativeKernel",
        (ApiKind::Runtime, 311) => b"cudaGraphLaunch",
        (ApiKind::Driver, 307) => b"cuLaunchKernel",
        (ApiKind::Driver, 652) => b"cuLaunchKernelEx",
        _ => return None,
    };
    Some(name)
}

/// The name of call `cbid`, or `cuda runtime cbid <n>` written into `buf`.
fn api_name(api: ApiKind, cbid: u32, buf: &mut [u8; 48]) -> &[u8] {
    let from_cupti = API_NAMES.get().and_then(|names| {
        let table = match api {
            ApiKind::Driver => &names.driver,
            ApiKind::Runtime => &names.runtime,
        };
        table.get(cbid as usize)?.as_deref()
    });
    if let Some(name) = from_cupti.or_else(|| known_name(api, cbid)) {
        return name;
    }
    let api = match api {
        ApiKind::Driver => "driver",
        ApiKind::Runtime => "runtime",
    };
    let room = buf.len();
    let mut out = &mut buf[..];
    let _ = write!(out, "cuda {api} cbid {cbid}");
    let len = room - out.len();
    &buf[..len]
}

/// `[x, y, z]` written into `buf`.
fn dims(d: [i32; 3], buf: &mut [u8; 40]) -> &[u8] {
    let room = buf.len();
    let mut out = &mut buf[..];
    let _ = write!(out, "[{}, {}, {}]", d[0], d[1], d[2]);
    let len = room - out.len();
    &buf[..len]
}

fn copy_names(kind: CopyKind) -> (&'static [u8], &'static [u8]) {
    match kind {
        CopyKind::HtoD => (b"cuda/memcpy/htod", b"Memcpy HtoD"),
        CopyKind::DtoH => (b"cuda/memcpy/dtoh", b"Memcpy DtoH"),
        CopyKind::DtoD => (b"cuda/memcpy/dtod", b"Memcpy DtoD"),
        CopyKind::HtoH => (b"cuda/memcpy/htoh", b"Memcpy HtoH"),
        CopyKind::PtoP => (b"cuda/memcpy/ptop", b"Memcpy PtoP"),
        CopyKind::Other(_) => (b"cuda/memcpy/other", b"Memcpy"),
    }
}

fn sync_name(kind: SyncKind) -> &'static [u8] {
    match kind {
        SyncKind::EventSync => b"Event Sync",
        SyncKind::StreamWaitEvent => b"Stream Wait Event",
        SyncKind::StreamSync => b"Stream Sync",
        SyncKind::ContextSync => b"Context Sync",
        SyncKind::Other(_) => b"Sync",
    }
}

/// Where device work ran, the id of the call that launched it and the graph node it
/// ran as: the first args of every kernel, copy and memset.
fn placement<'b, 'a>(
    b: &'b mut Builder<'a>,
    device: u32,
    stream: u32,
    context: u32,
    correlation: u32,
    graph: Graph,
) -> &'b mut Builder<'a> {
    let u64_of = |v: u32| Value::U64(v as u64);
    b.arg(b"device", u64_of(device))
        .arg(b"stream", u64_of(stream))
        .arg(b"context", u64_of(context))
        .arg(b"correlation", u64_of(correlation));
    if let Some(range) = external::of(correlation) {
        b.arg(b"external_id", Value::U64(range));
    }
    if graph.id != 0 {
        b.arg(b"graph_id", u64_of(graph.id))
            .arg(b"graph_node_id", Value::U64(graph.node));
    }
    b
}

/// CUPTI leaves a time at zero when it could not take it (work still running at a
/// forced flush): such records have no place on a time line.
fn timed(start: u64, end: u64) -> bool {
    start != 0 && end != 0
}

/// Decodes one activity record (its bytes may run on past its end) and records it.
/// Returns whether it became an event: records of other kinds, external correlations
/// and records without times do not.
///
/// # Safety
/// A kernel record's name pointer must be null or point to a NUL-terminated string
/// that lives through the call (CUPTI's live at least until the buffer is handed back).
pub unsafe fn record_activity(bytes: &[u8]) -> Result<bool, TooShort> {
    let u64_of = |v: u32| Value::U64(v as u64);
    match activity::decode(bytes)? {
        Activity::Kernel(k) if timed(k.start, k.end) => {
            // SAFETY: guaranteed by the caller; the string is copied into the record
            // before this returns.
            let name = unsafe { cstr(k.name as usize as *const c_char) };
            let name: &[u8] = if name.is_empty() { b"kernel" } else { name };
            let (mut grid, mut block) = ([0u8; 40], [0u8; 40]);
            let (grid, block) = (dims(k.grid, &mut grid), dims(k.block, &mut block));
            session::record_at(
                Kind::DeviceSlice,
                time(k.end),
                time(k.start),
                &[b"cuda/kernel"],
                name,
                |b| {
                    placement(b, k.device, k.stream, k.context, k.correlation, k.graph)
                        .arg(b"grid", Value::Str(grid))
                        .arg(b"block", Value::Str(block))
                        .arg(
                            b"static_shared_memory",
                            Value::I64(k.static_shared_memory as i64),
                        )
                        .arg(
                            b"dynamic_shared_memory",
                            Value::I64(k.dynamic_shared_memory as i64),
                        );
                },
            );
        }
        Activity::Memcpy(m) if timed(m.start, m.end) => {
            let (category, name) = copy_names(m.copy_kind);
            session::record_at(
                Kind::DeviceSlice,
                time(m.end),
                time(m.start),
                &[category],
                name,
                |b| {
                    placement(b, m.device, m.stream, m.context, m.correlation, m.graph)
                        .arg(b"bytes", Value::U64(m.bytes));
                    if let CopyKind::Other(raw) = m.copy_kind {
                        b.arg(b"copy_kind", Value::U64(raw as u64));
                    }
                },
            );
        }
        Activity::Memset(m) if timed(m.start, m.end) => {
            session::record_at(
                Kind::DeviceSlice,
                time(m.end),
                time(m.start),
                &[b"cuda/memset"],
                b"Memset",
                |b| {
                    placement(b, m.device, m.stream, m.context, m.correlation, m.graph)
                        .arg(b"bytes", Value::U64(m.bytes))
                        .arg(b"value", u64_of(m.value));
                },
            );
        }
        Activity::Api(a) if timed(a.start, a.end) => {
            let mut buf = [0u8; 48];
            let name = api_name(a.api, a.cbid, &mut buf);
            let category: &[u8] = match a.api {
                ApiKind::Driver => b"cuda/driver",
                ApiKind::Runtime => b"cuda/runtime",
            };
            session::record_at(
                Kind::ApiSlice,
                time(a.end),
                time(a.start),
                &[category],
                name,
                |b| {
                    b.arg(b"correlation", u64_of(a.correlation))
                        .arg(b"thread", u64_of(a.thread))
                        .arg(b"cbid", u64_of(a.cbid));
                    if a.return_value != 0 {
                        b.arg(b"result", u64_of(a.return_value));
                    }
                },
            );
        }
        Activity::Synchronization(s) if timed(s.start, s.end) => {
            session::record_at(
                Kind::Complete,
                time(s.end),
                time(s.start),
                &[b"cuda/sync"],
                sync_name(s.sync),
                |b| {
                    b.arg(b"correlation", u64_of(s.correlation))
                        .arg(b"context", u64_of(s.context))
                        .arg(b"stream", u64_of(s.stream))
                        .arg(b"cuda_event", u64_of(s.cuda_event));
                },
            );
        }
        Activity::ExternalCorrelation(e) if e.external_kind == external::KIND => {
            external::correlated(e.correlation, e.external_id);
            return Ok(false);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_suffixes_are_dropped_and_nothing_else() {
        for (name, expected) in [
            (&b"cudaLaunchKernel_v7000"[..], &b"cudaLaunchKernel"[..]),
            (b"cudaMemcpyAsync_ptsz_v7000", b"cudaMemcpyAsync_ptsz"),
            (b"cuMemcpyHtoD_v2", b"cuMemcpyHtoD"),
            (b"cuLaunchKernel", b"cuLaunchKernel"),
            (b"cuda_v", b"cuda_v"),
            (b"_v2", b"_v2"),
            (b"cuCtx_vX2", b"cuCtx_vX2"),
            (b"", b""),
        ] {
            assert_eq!(without_version(name), expected);
        }
    }

    #[test]
    fn calls_are_named_from_the_table_or_by_number() {
        let mut buf = [0u8; 48];
        assert_eq!(
            api_name(ApiKind::Runtime, 211, &mut buf),
            b"cudaLaunchKernel"
        );
        assert_eq!(api_name(ApiKind::Driver, 307, &mut buf), b"cuLaunchKernel");
        assert_eq!(
            api_name(ApiKind::Runtime, 4_000_000_000, &mut buf),
            b"cuda runtime cbid 4000000000"
        );
        assert_eq!(
            api_name(ApiKind::Driver, 9999, &mut buf),
            b"cuda driver cbid 9999"
        );
        let mut buf = [0u8; 40];
        assert_eq!(
            dims([i32::MIN, i32::MIN, i32::MIN], &mut buf),
            b"[-2147483648, -2147483648, -2147483648]"
        );
    }
}

#[cfg(test)]
mod external_tests {
    use super::*;

    #[test]
    fn an_external_correlation_record_is_kept_for_its_call() {
        let mut record = [0u8; 24];
        record[..4].copy_from_slice(&activity::kind::EXTERNAL_CORRELATION.to_le_bytes());
        record[4..8].copy_from_slice(&external::KIND.to_le_bytes());
        record[8..16].copy_from_slice(&99u64.to_le_bytes());
        record[16..20].copy_from_slice(&17u32.to_le_bytes());
        // SAFETY: no name pointer in this kind.
        assert_eq!(unsafe { record_activity(&record) }, Ok(false));
        assert_eq!(external::of(17), Some(99));
    }
}
