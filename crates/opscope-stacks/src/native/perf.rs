//! The kernel's sampler (`perf_event_open`): one task-clock event per thread that
//! copies the thread's user registers and the top of its user stack into a ring
//! buffer `hz` times a second of the thread's running time, and the records read back
//! out of that buffer. Nothing here unwinds; it only hands over bytes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of user stack copied with each sample: enough for the native frames between
/// an interpreter's eval loop and the leaf (CPython 3.11+ runs Python calls without
/// recursing in C), well under the record's 64 KiB limit.
pub const STACK_BYTES: u32 = 16 * 1024;

// x86_64's `perf_regs.h`: the registers an unwinder needs.
const REG_BP: u32 = 6;
const REG_SP: u32 = 7;
const REG_IP: u32 = 8;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const SAMPLE_IP: u64 = 1 << 0;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const SAMPLE_STACK_USER: u64 = 1 << 13;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_FREQ: u64 = 1 << 10;
const FLAG_USE_CLOCKID: u64 = 1 << 25;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
pub const RECORD_LOST: u32 = 2;
pub const RECORD_SAMPLE: u32 = 9;

/// `struct perf_event_attr` as of `PERF_ATTR_SIZE_VER5` (112 bytes): the kernel takes
/// any size it knows and zero for what a smaller struct leaves out.
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_freq: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

/// One thread's event and the ring buffer the kernel writes its samples into.
pub struct ThreadEvent {
    // Dropped after the mapping (field order): the kernel keeps the buffer while
    // either lives.
    ring: Ring,
    _fd: OwnedFd,
}

struct Ring {
    base: *mut u8,
    len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value alone and only read through `&mut self`
// (the kernel writes to it concurrently, which the head/tail protocol orders).
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping `open` made and nothing else unmaps it.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

impl ThreadEvent {
    /// Samples thread `tid` `hz` times per second of its running time, stamped with
    /// `CLOCK_MONOTONIC`, into a buffer of `pages` pages (a power of two).
    pub fn open(tid: i32, hz: u32, pages: usize) -> io::Result<ThreadEvent> {
        // The registers asked for are x86_64's (other CPUs number theirs otherwise).
        if !cfg!(target_arch = "x86_64") {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        let attr = Attr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<Attr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_freq: u64::from(hz),
            sample_type: SAMPLE_IP
                | SAMPLE_TID
                | SAMPLE_TIME
                | SAMPLE_REGS_USER
                | SAMPLE_STACK_USER,
            flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | FLAG_FREQ | FLAG_USE_CLOCKID,
            sample_regs_user: (1 << REG_BP) | (1 << REG_SP) | (1 << REG_IP),
            sample_stack_user: STACK_BYTES,
            clockid: libc::CLOCK_MONOTONIC,
            ..Attr::default()
        };
        // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the size it
        // states, alive for the call; the kernel reads it and returns an fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const Attr,
                tid,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new file descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let page = page_size();
        let len = page * (1 + pages);
        // SAFETY: mapping a perf event fd as the kernel documents (one metadata page,
        // then 2^n data pages), shared and writable so the tail can be written back.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = Ring {
            base: base.cast(),
            len,
            data_offset: page,
            data_size: page * pages,
        };
        // Kernels since 4.1 say where the data is; older ones put it after one page.
        let (offset, size) = (ring.header_u64(1040), ring.header_u64(1048));
        if size != 0 && offset as usize + size as usize <= len {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        Ok(ThreadEvent { ring, _fd: fd })
    }

    /// Appends every record written since the last call to `out`, each whole (header
    /// included), and frees their space for the kernel.
    pub fn drain(&mut self, out: &mut Vec<u8>) {
        self.ring.drain(out)
    }
}

impl Ring {
    fn header(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is one of perf_event_mmap_page's 8-byte-aligned fields
        // inside the first page of the mapping, which lives as long as `self`; the
        // kernel updates them concurrently, hence atomic access.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    fn header_u64(&self, offset: usize) -> u64 {
        self.header(offset).load(Ordering::Acquire)
    }

    fn drain(&mut self, out: &mut Vec<u8>) {
        const DATA_HEAD: usize = 1024;
        const DATA_TAIL: usize = 1032;
        // Acquire: the records before `head` are fully written once it is seen.
        let head = self.header(DATA_HEAD).load(Ordering::Acquire);
        let tail = self.header(DATA_TAIL).load(Ordering::Relaxed);
        let size = self.data_size as u64;
        let available = head.wrapping_sub(tail).min(size) as usize;
        let start = (tail % size) as usize;
        let first = available.min(self.data_size - start);
        // SAFETY: both ranges lie inside the data area of the mapping; the kernel does
        // not write between tail and head until the tail is moved past them below.
        unsafe {
            let data = self.base.add(self.data_offset);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, available - first));
        }
        // Release: the bytes are copied before the kernel may overwrite them.
        self.header(DATA_TAIL).store(head, Ordering::Release);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// A sample as the kernel wrote it: where the thread was, its registers and the top
/// of its stack (`stack` begins at `sp`).
#[derive(Debug, PartialEq, Eq)]
pub struct RawSample<'a> {
    pub pid: i32,
    pub tid: i32,
    pub time: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub stack: &'a [u8],
}

/// What a run of records holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Sample(RawSample<'a>),
    /// The kernel found the buffer full and dropped this many samples.
    Lost(u64),
    Other,
}

/// The records in `bytes` (as [`ThreadEvent::drain`] gives them), in order; a record
/// cut short or malformed ends the run (the kernel writes only whole ones, so that
/// is a buffer overwritten under the reader).
pub fn records(bytes: &[u8]) -> impl Iterator<Item = Record<'_>> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        let header = rest.get(..8)?;
        let kind = u32::from_ne_bytes(header[..4].try_into().ok()?);
        let size = u16::from_ne_bytes(header[6..8].try_into().ok()?) as usize;
        if size < 8 || size > rest.len() {
            rest = &[];
            return None;
        }
        let body = &rest[8..size];
        rest = &rest[size..];
        Some(match kind {
            RECORD_SAMPLE => sample(body).map_or(Record::Other, Record::Sample),
            // `u64 id; u64 lost`.
            RECORD_LOST => Record::Lost(read_u64(body, 8).unwrap_or(0)),
            _ => Record::Other,
        })
    })
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// A sample's body in `sample_type` order: ip; pid, tid; time; regs (abi, then the
/// masked registers in bit order); stack (size, bytes, dynamic size).
fn sample(body: &[u8]) -> Option<RawSample<'_>> {
    let ip = read_u64(body, 0)?;
    let ids = read_u64(body, 8)?;
    let time = read_u64(body, 16)?;
    let abi = read_u64(body, 24)?;
    let mut at = 32;
    let (mut bp, mut sp) = (0, 0);
    // ABI 0: no user registers (a kernel thread); then no stack follows either.
    if abi != 0 {
        bp = read_u64(body, at)?;
        sp = read_u64(body, at + 8)?;
        at += 24;
    }
    let size = read_u64(body, at)? as usize;
    let stack = if size == 0 {
        &[][..]
    } else {
        let bytes = body.get(at + 8..at.checked_add(8 + size)?)?;
        let dynamic = read_u64(body, at + 8 + size)? as usize;
        &bytes[..dynamic.min(size)]
    };
    Some(RawSample {
        pid: ids as u32 as i32,
        tid: (ids >> 32) as u32 as i32,
        time,
        ip,
        sp,
        bp,
        stack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    fn sample_body(tid: u32, stack: &[u8], dynamic: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [
            0x40_1000u64,
            (u64::from(tid) << 32) | 77,
            123_456,
            2,
            0x7ff0,
            0x7f00,
            0x40_1000,
        ] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(&(stack.len() as u64).to_ne_bytes());
        b.extend_from_slice(stack);
        b.extend_from_slice(&dynamic.to_ne_bytes());
        b
    }

    /// Samples, lost counts and other records come back in order; the stack is cut
    /// to the part the kernel filled; a record cut short ends the run.
    #[test]
    fn records_parse_in_order_and_stop_at_a_cut() {
        let mut bytes = record(
            RECORD_SAMPLE,
            &sample_body(78, &[1, 2, 3, 4, 5, 6, 7, 8], 4),
        );
        bytes.extend(record(
            RECORD_LOST,
            &[0; 8]
                .iter()
                .chain(&9u64.to_ne_bytes())
                .copied()
                .collect::<Vec<u8>>(),
        ));
        bytes.extend(record(3, &[0; 16]));
        let whole = bytes.len();
        bytes.extend(record(RECORD_SAMPLE, &sample_body(79, &[0; 8], 8)));
        bytes.truncate(whole + 20);
        let got: Vec<Record> = records(&bytes).collect();
        assert_eq!(
            got,
            vec![
                Record::Sample(RawSample {
                    pid: 77,
                    tid: 78,
                    time: 123_456,
                    ip: 0x40_1000,
                    sp: 0x7f00,
                    bp: 0x7ff0,
                    stack: &[1, 2, 3, 4],
                }),
                Record::Lost(9),
                Record::Other,
            ]
        );
    }

    /// A body too short for what its sample type promises is no sample.
    #[test]
    fn a_short_sample_is_not_read_past_its_end() {
        let mut body = sample_body(1, &[0; 16], 16);
        body.truncate(body.len() - 12);
        assert_eq!(
            records(&record(RECORD_SAMPLE, &body)).collect::<Vec<_>>(),
            vec![Record::Other]
        );
    }
}
