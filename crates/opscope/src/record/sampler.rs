//! Samples every process of the recorded tree from `/proc` (CPU use, resident memory,
//! threads), so that every process appears in the session, even those that never
//! loaded the injected library, and each GPU through NVML where there is one (with the
//! memory each process of the tree holds on it, as the driver lists it); writes
//! the samples as counter tracks of a Perfetto file on the recording clock
//! (`CLOCK_MONOTONIC`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use opscope_agent::system::proc_stat::{read_stat, Stat};
use opscope_formats::perfetto::{ExportOptions, MonotonicClocks};
use opscope_model::{ArgsId, ClockDomain, DeviceKind, LinearTransform, Source, Trace, TrackKind};

/// One process as the sampler saw it.
#[derive(Default)]
struct Seen {
    name: String,
    /// (time ns, CPU % of one core, resident bytes, threads)
    samples: Vec<(i64, f64, f64, f64)>,
    last_ticks: Option<(i64, u64)>,
    /// Per GPU index: (time ns, bytes the driver says this process holds on it).
    gpu_memory: BTreeMap<usize, Vec<(i64, f64)>>,
}

/// What the sampler collected: per process, and per GPU (when NVML exists) the time,
/// utilisation % and memory used.
#[derive(Default)]
struct Samples {
    processes: BTreeMap<i32, Seen>,
    gpus: Vec<Vec<(i64, f64, f64)>>,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Samples>,
}

/// Starts sampling the processes descended from opscope (the program `child` and any
/// orphans it left to opscope as subreaper) every `interval_ms`.
pub fn start(child: i32, interval_ms: u64) -> Sampler {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        let mut samples = Samples::default();
        let nvml = opscope_agent::system::nvml::Nvml::open();
        let interval = Duration::from_millis(interval_ms.max(1));
        loop {
            sample(&mut samples.processes, child);
            if let Some(nvml) = &nvml {
                let now = monotonic_ns();
                let readings = nvml.read();
                samples.gpus.resize_with(readings.len(), Vec::new);
                for (gpu, r) in samples.gpus.iter_mut().zip(readings) {
                    if let Some(r) = r {
                        gpu.push((now, r.utilization_percent, r.memory_used_bytes));
                    }
                }
                held_on_gpus(&mut samples.processes, &nvml.users(), now);
            }
            if flag.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(interval);
        }
        samples
    });
    Sampler { stop, thread }
}

impl Sampler {
    /// Stops sampling and writes the samples to `path`.
    pub fn finish(self, path: &Path) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        let clocks = clocks_now();
        write_monotonic(&to_trace(&samples, path, &clocks), path, clocks)
    }
}

/// The clocks now, to place `CLOCK_MONOTONIC` times on Unix time.
pub(crate) fn clocks_now() -> MonotonicClocks {
    MonotonicClocks {
        monotonic_ns: monotonic_ns() as u64,
        realtime_ns: clock_ns(libc::CLOCK_REALTIME) as u64,
        boottime_ns: clock_ns(libc::CLOCK_BOOTTIME) as u64,
    }
}

/// A source of `trace` for a file opscope writes itself (`format`), its times on
/// `CLOCK_MONOTONIC` as the injected library's files are; the offset lets a session put
/// them beside Unix-time sources (Kineto, XPlane).
pub(crate) fn monotonic_source(
    trace: &mut Trace,
    path: &Path,
    format: &'static str,
    clocks: &MonotonicClocks,
) -> opscope_model::SourceId {
    let clock_name = trace.intern("CLOCK_MONOTONIC");
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        unix_offset_ns: Some(clocks.realtime_ns as i64 - clocks.monotonic_ns as i64),
    });
    let host = hostname().map(|h| trace.intern(&h));
    trace.add_source(Source {
        path: path.to_string_lossy().into_owned(),
        format: format.into(),
        clock,
        host,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    })
}

/// Writes `trace`, whose times are `CLOCK_MONOTONIC`, as a Perfetto file at `path`.
pub(crate) fn write_monotonic(trace: &Trace, path: &Path, clocks: MonotonicClocks) -> Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let options = ExportOptions {
        monotonic: Some(clocks),
    };
    opscope_formats::perfetto::export_with(trace, &mut file, &options)?;
    use std::io::Write;
    file.flush()?;
    Ok(())
}

pub(crate) fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

pub(crate) fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// This host's name.
pub(crate) fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

fn command_line(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let mut line = parts.join(" ");
    line.truncate(line.floor_char_boundary(256));
    line
}

/// The pids of `root`'s descendants, each process found through its parent's threads'
/// `children` files: a sample reads the tree's own files, not every process's on the
/// machine (thousands on a shared server, each sample). `None` where the kernel
/// keeps no such files (built without CONFIG_PROC_CHILDREN).
fn descendants(root: i32) -> Option<HashSet<i32>> {
    if !Path::new(&format!("/proc/{root}/task/{root}/children")).exists() {
        return None;
    }
    Some(tree_below(root, |parent, found| {
        // A process or thread that exits meanwhile just ends its branch.
        let Ok(threads) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            return;
        };
        for thread in threads.flatten() {
            let text = std::fs::read_to_string(thread.path().join("children")).unwrap_or_default();
            found.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }))
}

/// `root`'s descendants from a scan of every process's parent.
fn descendants_by_scan(root: i32) -> HashSet<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            children.entry(stat.ppid).or_default().push(pid);
        }
    }
    tree_below(root, |parent, found| {
        found.extend(children.get(&parent).into_iter().flatten())
    })
}

/// Every process below `root`, where `children(parent, found)` adds a process's
/// children to `found`.
fn tree_below(root: i32, mut children: impl FnMut(i32, &mut Vec<i32>)) -> HashSet<i32> {
    let mut tree = HashSet::new();
    let mut stack = vec![root];
    let mut found = Vec::new();
    while let Some(parent) = stack.pop() {
        children(parent, &mut found);
        for child in found.drain(..) {
            if tree.insert(child) {
                stack.push(child);
            }
        }
    }
    tree
}

/// The pids of `root`'s descendants (not `root` itself).
pub(crate) fn process_tree(root: i32) -> HashSet<i32> {
    descendants(root).unwrap_or_else(|| descendants_by_scan(root))
}

fn sample(seen: &mut BTreeMap<i32, Seen>, child: i32) {
    let me = std::process::id() as i32;
    let tree = process_tree(me);
    // SAFETY: sysconf has no preconditions.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as f64,
        )
    };
    let now = monotonic_ns();
    for pid in tree {
        let Some(stat) = read_stat(pid) else {
            continue; // exited since
        };
        if stat.ppid == me && pid != child {
            // An orphan handed to us: reap it if it exited (never the program itself,
            // whose status `Child::wait` collects).
            // SAFETY: waitpid on our own child with WNOHANG does not block.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        }
        if !holds_memory(&stat) {
            continue;
        }
        let entry = seen.entry(pid).or_default();
        if entry.name.is_empty() {
            entry.name = command_line(pid);
        }
        let cpu = match entry.last_ticks {
            Some((t0, ticks0)) if now > t0 => {
                (stat.ticks.saturating_sub(ticks0) as f64 / hz) / ((now - t0) as f64 / 1e9) * 100.0
            }
            _ => 0.0,
        };
        entry.last_ticks = Some((now, stat.ticks));
        entry
            .samples
            .push((now, cpu, stat.rss_pages as f64 * page, stat.threads as f64));
    }
}

/// Each process of the tree (those sampled) that the driver lists on a GPU, with the
/// memory it holds there; others' processes on a shared GPU are not ours to show.
fn held_on_gpus(
    seen: &mut BTreeMap<i32, Seen>,
    users: &[Vec<opscope_agent::system::nvml::DeviceUser>],
    now: i64,
) {
    for (gpu, users) in users.iter().enumerate() {
        for user in users {
            let (Some(bytes), Some(process)) =
                (user.memory_bytes, seen.get_mut(&(user.pid as i32)))
            else {
                continue;
            };
            process
                .gpu_memory
                .entry(gpu)
                .or_default()
                .push((now, bytes as f64));
        }
    }
}

/// Whether `stat` reads a process whose memory exists: one that exited (`Z`, `X`)
/// or is between the two images of an `execve` (the new one not yet mapped) reads 0
/// resident bytes, which is no sample of the program (the memory report took such a 0
/// for where the run began).
fn holds_memory(stat: &Stat) -> bool {
    !matches!(stat.state, b'Z' | b'X') && stat.rss_pages > 0
}

/// This host's name as a process label (`host=NAME`), as the injected library labels
/// its processes: the importer takes the file to be this host's.
pub(crate) fn host_label(trace: &mut Trace) -> Option<opscope_model::StrId> {
    hostname().map(|h| trace.intern(&format!("host={h}")))
}

fn to_trace(samples: &Samples, path: &Path, clocks: &MonotonicClocks) -> Trace {
    let mut trace = Trace::new();
    let source = monotonic_source(&mut trace, path, "opscope-sampler", clocks);
    let host_label = host_label(&mut trace);
    let names = [
        trace.intern("CPU %"),
        trace.intern("resident bytes"),
        trace.intern("threads"),
    ];
    for (&pid, s) in &samples.processes {
        let process = trace.process(source, pid as i64);
        if !s.name.is_empty() {
            let name = trace.intern(&s.name);
            trace.processes[process.index()].name = Some(name);
        }
        trace.processes[process.index()].labels = host_label;
        let tracks = names.map(|n| trace.named_track(Some(process), TrackKind::Counter, n, 0));
        for &(ts, cpu, rss, threads) in &s.samples {
            for (track, value) in tracks.iter().zip([cpu, rss, threads]) {
                trace.counters.push(*track, ts, value);
            }
        }
        for (gpu, held) in &s.gpu_memory {
            let name = trace.intern(&format!("GPU {gpu} memory bytes"));
            let track = trace.named_track(Some(process), TrackKind::Counter, name, 0);
            for &(ts, bytes) in held {
                trace.counters.push(track, ts, bytes);
            }
        }
    }
    let gpu_names = [
        trace.intern("GPU utilisation %"),
        trace.intern("GPU memory used bytes"),
    ];
    for (index, readings) in samples.gpus.iter().enumerate() {
        let device = trace.device(source, DeviceKind::Gpu, index as u32);
        // Devices are "processes" of their own, with pids no process has.
        let process = trace.process(source, -(index as i64) - 1);
        let name = trace.intern(&format!("GPU {index}"));
        trace.processes[process.index()].name = Some(name);
        trace.processes[process.index()].device = Some(device);
        let tracks = gpu_names.map(|n| trace.named_track(Some(process), TrackKind::Counter, n, 0));
        for &(ts, utilization, memory) in readings {
            trace.counters.push(tracks[0], ts, utilization);
            trace.counters.push(tracks[1], ts, memory);
        }
    }
    trace.finish();
    trace
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    /// The tree found through the `children` files is the one a scan of every
    /// process's parent finds: a shell, a sleep, a subshell and the subshell's sleep.
    #[test]
    fn the_tree_from_children_files_is_the_tree_from_a_full_scan() {
        let me = std::process::id() as i32;
        let mut shell = Command::new("sh")
            .args(["-c", "sleep 30 & (sleep 30 & echo ready; wait) & wait"])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh runs");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(shell.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let walked = descendants(me).expect("this kernel lists children");
        let scanned = descendants_by_scan(me);
        let shell_pid = shell.id() as i32;
        // Test threads of this process may have children of their own meanwhile:
        // compare the shell's subtree.
        let subtree = |tree: &HashSet<i32>| -> Vec<i32> {
            let mut pids: Vec<i32> = tree
                .iter()
                .copied()
                .filter(|&p| p == shell_pid || ancestors(p).contains(&shell_pid))
                .collect();
            pids.sort_unstable();
            pids
        };
        let (walked, scanned) = (subtree(&walked), subtree(&scanned));
        // SAFETY: killing the process group the shell leads (it and everything it
        // started), then reaping the shell.
        unsafe { libc::kill(-shell_pid, libc::SIGKILL) };
        let _ = shell.wait();
        assert_eq!(walked, scanned);
        assert_eq!(walked.len(), 4, "{walked:?}");
    }

    fn ancestors(mut pid: i32) -> Vec<i32> {
        let mut out = Vec::new();
        while let Some(stat) = read_stat(pid) {
            if stat.ppid <= 1 {
                break;
            }
            out.push(stat.ppid);
            pid = stat.ppid;
        }
        out
    }

    /// A process mid-`execve` (running, nothing resident yet) and an exited one give no
    /// memory sample; this process, which reads its own stat, does.
    #[test]
    fn only_a_process_with_memory_is_a_memory_sample() {
        let stat = |state: u8, rss_pages: u64| Stat {
            state,
            ppid: 1,
            ticks: 0,
            threads: 1,
            rss_pages,
        };
        assert!(!holds_memory(&stat(b'R', 0)));
        assert!(!holds_memory(&stat(b'Z', 100)));
        assert!(holds_memory(&stat(b'S', 100)));
        let me = read_stat(std::process::id() as i32).expect("reads its own stat");
        assert!(holds_memory(&me));
    }
}
