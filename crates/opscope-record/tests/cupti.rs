//! CUPTI's path without a GPU: activity records laid out byte by byte as libcupti 12.9
//! and 13.5 write them (offsets from `capture-abis.md` §1.3) go through the buffer walk
//! and the recorder into this process's file, which opscope's Perfetto importer reads
//! back: device work on GPU stream tracks of its device, API calls on their threads,
//! launch flows between them, exact times.

use std::ffi::{c_int, CString};
use std::sync::Mutex;

use opscope_model::{ArgValue, CopyDirection, DeviceKind, SliceKind, Trace, TrackKind};
use opscope_record::cupti::layout::Layout;
use opscope_record::cupti::{self, Walked};
use opscope_record::session;

// Sizes of the structs libcupti 12.9 / 13.5 write.
const KERNEL_12: usize = 208;
const KERNEL_13: usize = 248;
const MEMCPY_12: usize = 96;
const MEMCPY_13: usize = 112;
const MEMSET_13: usize = 104;
const API: usize = 40;
const SYNCHRONIZATION: usize = 56;
const EXTERNAL_CORRELATION: usize = 24;

struct KernelRecord<'a> {
    size: usize,
    start: u64,
    end: u64,
    device: u32,
    stream: u32,
    correlation: u32,
    name: &'a CString,
}

fn kernel(k: KernelRecord<'_>) -> Vec<u8> {
    Layout::new(k.size, 10) // CONCURRENT_KERNEL
        .u64(16, k.start)
        .u64(24, k.end)
        .u32(40, k.device)
        .u32(44, 1)
        .u32(48, k.stream)
        .i32(52, 128)
        .i32(56, 2)
        .i32(60, 1)
        .i32(64, 256)
        .i32(68, 1)
        .i32(72, 1)
        .i32(76, 1024)
        .i32(80, 0)
        .u32(92, k.correlation)
        .u64(104, k.name.as_ptr() as u64)
        .0
}

#[allow(clippy::too_many_arguments)]
fn memcpy(
    size: usize,
    copy_kind: u8,
    bytes: u64,
    start: u64,
    end: u64,
    device: u32,
    stream: u32,
    correlation: u32,
) -> Vec<u8> {
    Layout::new(size, 1)
        .u8(4, copy_kind)
        .u64(8, bytes)
        .u64(16, start)
        .u64(24, end)
        .u32(32, device)
        .u32(36, 1)
        .u32(40, stream)
        .u32(44, correlation)
        .0
}

fn api(kind: u32, cbid: u32, start: u64, end: u64, thread: u32, correlation: u32) -> Vec<u8> {
    Layout::new(API, kind)
        .u32(4, cbid)
        .u64(8, start)
        .u64(16, end)
        .u32(24, std::process::id())
        .u32(28, thread)
        .u32(32, correlation)
        .0
}

/// Offsets of the records in the buffer the stand-in walker walks.
static OFFSETS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Stands in for `cuptiActivityGetNextRecord`: the first record for a null `record`,
/// else the one after it; 12 (MAX_LIMIT_REACHED) past the last.
unsafe extern "C" fn next_record(buffer: *mut u8, valid: usize, record: *mut *mut u8) -> c_int {
    let offsets = OFFSETS.lock().unwrap();
    // SAFETY: the walker passes a valid out-pointer holding the previous record.
    let previous = unsafe { *record };
    let next = if previous.is_null() {
        offsets.first().copied()
    } else {
        let at = previous as usize - buffer as usize;
        offsets.iter().copied().find(|&o| o > at)
    };
    match next {
        Some(o) if o < valid => {
            // SAFETY: as above; `o` lies inside the buffer.
            unsafe { *record = buffer.add(o) };
            0
        }
        _ => 12,
    }
}

/// Lays records one after the other, as CUPTI fills a buffer (sizes are multiples of 8).
fn buffer_of(records: &[Vec<u8>]) -> (Vec<u64>, usize) {
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    for r in records {
        offsets.push(bytes.len());
        bytes.extend_from_slice(r);
    }
    let valid = bytes.len();
    // u64 words: the buffer is 8-byte aligned, as CUPTI's are.
    let mut words = vec![0u64; valid.div_ceil(8)];
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        words[i] = u64::from_le_bytes(w);
    }
    *OFFSETS.lock().unwrap() = offsets;
    (words, valid)
}

fn arg(trace: &Trace, slice: usize, key: &str) -> Option<ArgValue> {
    let key = trace.strings.find(key)?;
    trace.args.find(trace.slices.args[slice], key)
}

fn arg_str(trace: &Trace, slice: usize, key: &str) -> String {
    match arg(trace, slice, key) {
        Some(ArgValue::Str(s)) => trace.str(s).to_string(),
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn cupti_records_become_gpu_streams_api_calls_and_launch_flows() {
    let dir = std::env::temp_dir().join(format!("opscope-cupti-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var(session::SESSION_DIR_ENV, &dir);
    std::env::set_var(session::FLUSH_MS_ENV, "2");
    session::start();

    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let t = opscope_record::clock::monotonic_ns();
    let gemm = CString::new("ampere_sgemm_128x64_nn").unwrap();
    let relu = CString::new("_Z4reluPfi").unwrap();

    // One buffer, walked as CUPTI would: a launch and its kernel (13.5 layout), a
    // copy and its call (12.9 layout), a call that launches nothing, an external
    // correlation (not recorded), a kind not read, and a record cut off at the end.
    let (mut buffer, valid) = buffer_of(&[
        api(5, 211, t + 100, t + 150, tid, 42),
        kernel(KernelRecord {
            size: KERNEL_13,
            start: t + 200,
            end: t + 300,
            device: 0,
            stream: 7,
            correlation: 42,
            name: &gemm,
        }),
        api(5, 41, t + 160, t + 190, tid, 43),
        memcpy(MEMCPY_12, 1, 4096, t + 310, t + 400, 0, 7, 43),
        api(4, 9999, t + 500, t + 510, tid, 50),
        Layout::new(EXTERNAL_CORRELATION, 39)
            .u32(4, 3)
            .u64(8, 777)
            .u32(16, 42)
            .0,
        Layout::new(56, 12).0, // MARKER
        Layout::new(API, 5).0[..32].to_vec(),
    ]);
    // SAFETY: `valid` bytes of records, walked inside them; the kernel names are
    // CStrings alive for the whole test.
    let walked =
        unsafe { cupti::record_buffer(buffer.as_mut_ptr() as *mut u8, valid, next_record) };
    assert_eq!(
        walked,
        Walked {
            recorded: 5,
            skipped: 2,
            malformed: 1
        }
    );

    // Records one by one, out of time order as buffers may come (calls before their
    // work, as CUPTI writes them when the call returns): more device work on
    // stream 7 (12.9 layout), a copy back on stream 13, a memset, a graph's second
    // kernel (same correlation as a kernel already tied to its launch), two kernels
    // overlapping on stream 9 of device 1, a host wait, and a kernel without times.
    let records = [
        api(5, 211, t + 600, t + 620, tid, 60),
        api(5, 41, t + 630, t + 640, tid, 61),
        memcpy(MEMCPY_13, 2, 512, t + 800, t + 900, 0, 13, 61),
        kernel(KernelRecord {
            size: KERNEL_12,
            start: t + 700,
            end: t + 750,
            device: 0,
            stream: 7,
            correlation: 60,
            name: &relu,
        }),
        Layout::new(MEMSET_13, 2)
            .u32(4, 0)
            .u64(8, 1 << 20)
            .u64(16, t + 910)
            .u64(24, t + 920)
            .u32(32, 0)
            .u32(36, 1)
            .u32(40, 7)
            .u32(44, 62)
            .0,
        kernel(KernelRecord {
            size: KERNEL_13,
            start: t + 760,
            end: t + 780,
            device: 0,
            stream: 7,
            correlation: 60,
            name: &relu,
        }),
        kernel(KernelRecord {
            size: KERNEL_13,
            start: t + 1000,
            end: t + 1100,
            device: 1,
            stream: 9,
            correlation: 70,
            name: &gemm,
        }),
        kernel(KernelRecord {
            size: KERNEL_13,
            start: t + 1050,
            end: t + 1150,
            device: 1,
            stream: 9,
            correlation: 71,
            name: &relu,
        }),
        Layout::new(SYNCHRONIZATION, 38)
            .u32(4, 3)
            .u64(8, t + 920)
            .u64(16, t + 990)
            .u32(24, 63)
            .u32(28, 1)
            .u32(32, 7)
            .0,
        kernel(KernelRecord {
            size: KERNEL_13,
            start: 0,
            end: 0,
            device: 0,
            stream: 7,
            correlation: 64,
            name: &relu,
        }),
    ];
    let recorded: Vec<bool> = records
        .iter()
        // SAFETY: the kernel names are CStrings alive for the whole test.
        .map(|r| unsafe { cupti::record_activity(r) }.unwrap())
        .collect();
    assert_eq!(recorded.iter().filter(|&&r| r).count(), records.len() - 1);
    assert!(!recorded[records.len() - 1], "no times, no event");
    let kernel_record = &records[3];
    assert_eq!(kernel_record.len(), KERNEL_12);
    for cut in [0, 3, 4, 39, 111] {
        // SAFETY: no name pointer is read from a record this short.
        assert!(unsafe { cupti::record_activity(&kernel_record[..cut]) }.is_err());
    }

    session::finish();

    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = std::fs::read(&files[0]).unwrap();
    let mut trace = Trace::new();
    opscope_formats::perfetto::import(&bytes, &files[0].to_string_lossy(), &mut trace).unwrap();

    let r = &trace.repairs;
    assert_eq!(
        (r.unmatched_begins, r.unmatched_ends, r.unbound_flow_events),
        (0, 0, 0),
        "every slice closes, every flow has both ends: {r:?}"
    );
    let s = &trace.slices;
    let find = |name: &str, ts: u64| -> usize {
        (0..s.len())
            .find(|&i| trace.str(s.name[i]) == name && s.ts[i] == ts as i64)
            .unwrap_or_else(|| panic!("no {name} at {ts}"))
    };
    let time = |i: usize| (s.ts[i] as u64 - t, s.dur[i] as u64);

    // Device work: on a GPU stream track of its device, a thread named after the
    // stream in the device's process.
    let on_stream = |i: usize, device: u32, stream: i64| {
        let track = &trace.tracks[s.track[i] as usize];
        assert_eq!(track.kind, TrackKind::GpuStream, "{}", trace.str(s.name[i]));
        let d = &trace.devices[track.device.expect("a device").index()];
        assert_eq!((d.kind, d.index), (DeviceKind::Gpu, device));
        let thread = &trace.threads[track.thread.expect("a stream thread").index()];
        assert_eq!(thread.tid, stream);
        assert_eq!(trace.str(thread.name.unwrap()), format!("stream {stream}"));
        let process = &trace.processes[thread.process.index()];
        assert_eq!(process.device, track.device);
        assert_ne!(process.pid, std::process::id() as i64);
        assert_eq!(trace.str(process.name.unwrap()), format!("GPU {device}"));
        s.track[i]
    };
    let gemm0 = find("ampere_sgemm_128x64_nn", t + 200);
    assert_eq!(s.kind(gemm0), SliceKind::Kernel);
    assert_eq!(time(gemm0), (200, 100));
    let stream7 = on_stream(gemm0, 0, 7);
    assert_eq!(trace.str(s.category[gemm0]), "cuda/kernel");
    assert_eq!(arg_str(&trace, gemm0, "grid"), "[128, 2, 1]");
    assert_eq!(arg_str(&trace, gemm0, "block"), "[256, 1, 1]");
    assert_eq!(arg(&trace, gemm0, "correlation"), Some(ArgValue::Int(42)));
    assert_eq!(
        arg(&trace, gemm0, "static_shared_memory"),
        Some(ArgValue::Int(1024))
    );

    let h2d = find("Memcpy HtoD", t + 310);
    assert_eq!(s.kind(h2d), SliceKind::Memcpy(CopyDirection::H2D));
    assert_eq!(time(h2d), (310, 90));
    assert_eq!(on_stream(h2d, 0, 7), stream7);
    assert_eq!(arg(&trace, h2d, "bytes"), Some(ArgValue::Int(4096)));

    let d2h = find("Memcpy DtoH", t + 800);
    assert_eq!(s.kind(d2h), SliceKind::Memcpy(CopyDirection::D2H));
    assert_ne!(on_stream(d2h, 0, 13), stream7);

    let memset = find("Memset", t + 910);
    assert_eq!(s.kind(memset), SliceKind::Memset);
    assert_eq!(time(memset), (910, 10));
    assert_eq!(on_stream(memset, 0, 7), stream7);

    // CUPTI names the kernel by its symbol; it is read demangled (as `c++filt` says).
    let relu0 = find("relu(float*, int)", t + 700);
    let relu1 = find("relu(float*, int)", t + 760);
    assert_eq!(on_stream(relu0, 0, 7), stream7);
    assert_eq!(on_stream(relu1, 0, 7), stream7);

    // Overlapping work of one stream: both kept, on the stream (the second on a lane
    // of it), with their own times.
    let a = find("ampere_sgemm_128x64_nn", t + 1000);
    let b = find("relu(float*, int)", t + 1050);
    assert_eq!(on_stream(a, 1, 9), on_stream(b, 1, 9));
    assert_eq!((time(a), time(b)), ((1000, 100), (1050, 100)));

    // API calls: on the calling thread, named, with their own times.
    let thread_of = |i: usize| {
        let track = &trace.tracks[s.track[i] as usize];
        assert_eq!(track.kind, TrackKind::Thread);
        trace.threads[track.thread.unwrap().index()].tid
    };
    let launch = find("cudaLaunchKernel", t + 100);
    assert_eq!(s.kind(launch), SliceKind::Runtime);
    assert_eq!(time(launch), (100, 50));
    assert_eq!(thread_of(launch), tid as i64);
    assert_eq!(trace.str(s.category[launch]), "cuda/runtime");
    assert_eq!(
        arg(&trace, launch, "thread"),
        Some(ArgValue::Int(tid as i64))
    );
    let copy = find("cudaMemcpyAsync", t + 160);
    let unknown = find("cuda driver cbid 9999", t + 500);
    assert_eq!(s.kind(unknown), SliceKind::Driver);
    assert_eq!(thread_of(unknown), tid as i64);
    let launch2 = find("cudaLaunchKernel", t + 600);
    let copy2 = find("cudaMemcpyAsync", t + 630);

    // Launch flows: call → its device work; one per correlation id.
    let mut flows: Vec<(u32, u32)> = trace
        .flows
        .from
        .iter()
        .copied()
        .zip(trace.flows.to.iter().copied())
        .collect();
    flows.sort();
    let mut expected: Vec<(u32, u32)> =
        [(launch, gemm0), (copy, h2d), (launch2, relu0), (copy2, d2h)]
            .iter()
            .map(|&(from, to)| (from as u32, to as u32))
            .collect();
    expected.sort();
    assert_eq!(flows, expected);

    // The host wait: a Sync slice of the process.
    let sync = find("Stream Sync", t + 920);
    assert_eq!(s.kind(sync), SliceKind::Sync);
    assert_eq!(time(sync), (920, 70));
    assert_eq!(trace.str(s.category[sync]), "cuda/sync");
}
