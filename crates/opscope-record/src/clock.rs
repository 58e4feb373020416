//! The recording clock. Events are stamped with [`now`]: the CPU's time-stamp counter
//! where the kernel itself keeps time with it (a third of the cost of a vDSO
//! `clock_gettime`), else `CLOCK_MONOTONIC` nanoseconds; the writer maps ticks onto
//! `CLOCK_MONOTONIC` with a [`Calibration`]. Each file also holds a snapshot of the wall
//! and boot clocks, so that sessions from several hosts can be put on one time line.

use std::sync::atomic::{AtomicBool, Ordering};

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

/// Whether [`now`] reads the time-stamp counter.
static USE_TSC: AtomicBool = AtomicBool::new(false);
/// Whether [`USE_TSC`] holds the choice.
static CHOSEN: AtomicBool = AtomicBool::new(false);

/// Picks the recording clock, once per process: the TSC only on x86-64 and only when
/// the kernel's own clocksource is `tsc` (so it is invariant and synchronised across
/// CPUs on this machine). Threads that get here together each make the same choice
/// rather than wait for one another: a `Once` that a fork interrupted in another thread
/// would make the child wait forever.
pub fn choose() {
    if CHOSEN.load(Ordering::Acquire) {
        return;
    }
    let kernel =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    let tsc = cfg!(target_arch = "x86_64")
        && kernel.trim() == "tsc"
        && std::env::var_os(opscope_wire::env::NO_TSC).is_none();
    USE_TSC.store(tsc, Ordering::Release);
    CHOSEN.store(true, Ordering::Release);
}

/// Now, in ticks of the recording clock (see the module docs).
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if USE_TSC.load(Ordering::Relaxed) {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no preconditions.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

/// A tick count and the `CLOCK_MONOTONIC` time read together.
#[derive(Clone, Copy, Debug)]
struct Point {
    ticks: u64,
    ns: u64,
}

impl Point {
    fn now() -> Point {
        // The clock read between two tick reads: its tick is their midpoint. Of a few
        // tries, the tightest pair wins (a preemption in between would skew it).
        let mut best = (u64::MAX, Point { ticks: 0, ns: 0 });
        for _ in 0..7 {
            let before = now();
            let ns = monotonic_ns();
            let after = now();
            let window = after.wrapping_sub(before);
            if window < best.0 {
                best = (
                    window,
                    Point {
                        ticks: before + window / 2,
                        ns,
                    },
                );
            }
        }
        best.1
    }
}

/// Maps recording-clock ticks onto `CLOCK_MONOTONIC` nanoseconds: a line through the
/// latest calibration point, with the slope measured from the first one (the longer the
/// base, the finer the slope).
#[derive(Clone, Debug)]
pub struct Calibration {
    ticks_are_ns: bool,
    first: Point,
    latest: Point,
    ns_per_tick: f64,
}

/// The shortest base a slope is measured over.
const MIN_BASE_NS: u64 = 2_000_000;

impl Calibration {
    pub fn new() -> Calibration {
        choose();
        let first = Point::now();
        Calibration {
            ticks_are_ns: !USE_TSC.load(Ordering::Acquire),
            first,
            latest: first,
            ns_per_tick: 1.0,
        }
    }

    /// Takes a new calibration point (before converting a batch of records). Waits for
    /// the base to reach 2 ms the first time, if it must.
    pub fn update(&mut self) {
        if self.ticks_are_ns {
            return;
        }
        let mut point = Point::now();
        while point.ns.saturating_sub(self.first.ns) < MIN_BASE_NS {
            std::thread::sleep(std::time::Duration::from_micros(200));
            point = Point::now();
        }
        let ticks = point.ticks.wrapping_sub(self.first.ticks);
        if ticks > 0 {
            self.ns_per_tick = (point.ns - self.first.ns) as f64 / ticks as f64;
        }
        self.latest = point;
    }

    /// The `CLOCK_MONOTONIC` time of `ticks`.
    pub fn ns(&self, ticks: u64) -> u64 {
        if self.ticks_are_ns {
            return ticks;
        }
        // Signed: a record may predate the latest calibration point. i64 and f64
        // convert in one instruction each (i128 went through library calls).
        let delta = ticks.wrapping_sub(self.latest.ticks) as i64;
        let offset = (delta as f64 * self.ns_per_tick) as i64;
        (self.latest.ns as i64).saturating_add(offset).max(0) as u64
    }
}

impl Default for Calibration {
    fn default() -> Calibration {
        Calibration::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_map_onto_the_monotonic_clock() {
        let mut c = Calibration::new();
        std::thread::sleep(std::time::Duration::from_millis(3));
        c.update();
        for _ in 0..5 {
            let (before, ticks, after) = (monotonic_ns(), now(), monotonic_ns());
            let ns = c.ns(ticks);
            // Within a few µs of the clock read around it (calibration and scheduling
            // noise on a shared machine).
            assert!(
                ns + 20_000 >= before && ns <= after + 20_000,
                "{before} <= {ns} <= {after}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The conversion itself, on a line set by hand (the tests above pass trivially
    /// where the kernel's clock is not the TSC and ticks are already ns).
    #[test]
    fn conversion_follows_the_line_both_ways_and_stops_at_zero() {
        let point = Point {
            ticks: 1_000_000,
            ns: 5_000_000,
        };
        let c = Calibration {
            ticks_are_ns: false,
            first: point,
            latest: point,
            ns_per_tick: 0.4,
        };
        assert_eq!(c.ns(1_000_000), 5_000_000);
        assert_eq!(c.ns(1_250_000), 5_100_000);
        assert_eq!(c.ns(750_000), 4_900_000);
        assert_eq!(c.ns(0), 4_600_000);
        // A line through a point near the top of the tick range, and a time before the
        // clock's zero: 0, not a wrapped-around time.
        let early = Calibration {
            latest: Point {
                ticks: u64::MAX - 10,
                ns: 100,
            },
            ..c
        };
        assert_eq!(early.ns(u64::MAX - 1010), 0);
    }

    /// A record drained after a newer calibration point lies before it: converted
    /// backwards from that point, it still lands where the clock read it.
    #[test]
    fn ticks_older_than_the_latest_point_map_backwards() {
        let mut c = Calibration::new();
        let (before, ticks, after) = (monotonic_ns(), now(), monotonic_ns());
        std::thread::sleep(std::time::Duration::from_millis(5));
        c.update();
        let ns = c.ns(ticks);
        assert!(
            ns + 20_000 >= before && ns <= after + 20_000,
            "{before} <= {ns} <= {after}"
        );
    }
}
