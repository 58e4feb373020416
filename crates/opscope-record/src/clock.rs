//! The recording clock: `CLOCK_MONOTONIC` in nanoseconds (read through the vDSO, no
//! system call), with a snapshot of the wall and boot clocks taken beside it so that
//! sessions from several hosts can be put on one time line later.

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used are always present
    // on Linux, and on failure `ts` stays zero.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Now, on the recording clock.
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// The three clocks read back to back.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    pub monotonic: u64,
    pub realtime: u64,
    pub boottime: u64,
}

impl Snapshot {
    pub fn now() -> Snapshot {
        Snapshot {
            monotonic: monotonic_ns(),
            realtime: read(libc::CLOCK_REALTIME),
            boottime: read(libc::CLOCK_BOOTTIME),
        }
    }
}
