//! What a process is, for people, and the one name every command gives it: `rank 1
//! (pid 4562)`, `DataLoader worker (pid 4570)`, `python train.py (pid 88)`.
//! What is known of a pid is gathered across the files that describe it (a recorded
//! process's own file, the sampler's, its framework's profile).

use opscope_model::{ProcessId, SourceId, Trace};

/// PyTorch names a DataLoader worker process's main thread so.
const DATALOADER_WORKER_THREAD: &str = "pt_data_worker";

/// What is known of one process of a host, from every file that has it.
struct Facts {
    rank: Option<u32>,
    loader: bool,
    command: Option<String>,
}

fn facts(trace: &Trace, process: ProcessId) -> Facts {
    let me = &trace.processes[process.index()];
    let host = trace.sources[me.source.index()].host;
    // A made-up pid names a process of its own file only: rank 1's "Spans" is not
    // rank 0's, though both files number it alike.
    let same: Vec<usize> = match me.has_synthetic_pid() {
        true => vec![process.index()],
        false => (0..trace.processes.len())
            .filter(|&i| {
                let p = &trace.processes[i];
                p.pid == me.pid
                    && p.device.is_none()
                    && trace.sources[p.source.index()].host == host
            })
            .collect(),
    };
    let loader = trace.threads.iter().any(|t| {
        same.contains(&t.process.index())
            && t.tid == me.pid
            && t.name
                .is_some_and(|n| trace.str(n) == DATALOADER_WORKER_THREAD)
    });
    let rank = same
        .iter()
        .find_map(|&i| trace.sources[trace.processes[i].source.index()].rank);
    // The longest name: a command line rather than the short name a file gave.
    let command = same
        .iter()
        .filter_map(|&i| trace.processes[i].name)
        .map(|n| trace.str(n))
        .max_by_key(|n| n.len())
        .map(str::to_string);
    Facts {
        rank,
        loader,
        command,
    }
}

/// A command line for people: each path cut to its file name, at most 60 characters.
pub fn short_command(command: &str) -> String {
    let short: Vec<&str> = command
        .split_whitespace()
        .map(|word| {
            word.rsplit('/')
                .next()
                .filter(|w| !w.is_empty())
                .unwrap_or(word)
        })
        .collect();
    let text = short.join(" ");
    if text.chars().count() > 60 {
        text.chars().take(59).collect::<String>() + "…"
    } else {
        text
    }
}

/// The one name of a process in every command: a device's (Kineto's GPU "process") by
/// the device; a DataLoader worker by its main thread's name (it inherits its rank's
/// environment, rank included); a rank's process by its rank; any other by its command
/// line; each with its pid. A process a file names by a string has that name.
pub fn process_name(trace: &Trace, process: ProcessId) -> String {
    let p = &trace.processes[process.index()];
    let rank = trace.sources[p.source.index()].rank;
    if let Some(d) = p.device {
        let d = &trace.devices[d.index()];
        return match rank {
            Some(r) => format!("rank {r}'s {} {}", d.kind.name(), d.index),
            None => format!("{} {}", d.kind.name(), d.index),
        };
    }
    let facts = facts(trace, process);
    let pid = p.pid;
    // A process a file names by a string (Kineto's "Spans", "Traces") is that name; its
    // number was made up on reading.
    if p.has_synthetic_pid() {
        if let Some(name) = facts.command.as_deref().filter(|n| !n.is_empty()) {
            return match rank {
                Some(r) => format!("rank {r}'s {name}"),
                None => name.to_string(),
            };
        }
    }
    match (facts.loader, facts.rank.or(rank), facts.command) {
        (true, _, _) => format!("DataLoader worker (pid {pid})"),
        (false, Some(r), _) => format!("rank {r} (pid {pid})"),
        (false, None, Some(command)) => format!("{} (pid {pid})", short_command(&command)),
        (false, None, None) => format!("process {pid}"),
    }
}

/// The host processes of a source.
fn host_processes(trace: &Trace, src: SourceId) -> impl Iterator<Item = ProcessId> + '_ {
    (0..trace.processes.len())
        .filter(move |&i| trace.processes[i].source == src && trace.processes[i].device.is_none())
        .map(|i| ProcessId(i as u32))
}

/// The name of what a source describes: its (first) host process's name; a framework
/// profile whose process another file of the session names, by what it is.
pub fn role(trace: &Trace, src: SourceId) -> String {
    let source = &trace.sources[src.index()];
    let process = host_processes(trace, src).next();
    // An XSpace names its host's plane (`/host:CPU`), not a process, and its pid is
    // made up; one that `opscope record` took describes the recorded process.
    let plane = process.is_none_or(|p| {
        facts(trace, p)
            .command
            .is_none_or(|c| c.starts_with("/host:"))
    });
    if source.format == "xplane" && plane {
        let what = "TensorFlow/JAX profile";
        return match source.host {
            Some(host) if process.is_some() => format!("{what} of {}", trace.str(host)),
            _ => what.to_string(),
        };
    }
    if let Some(process) = process {
        return process_name(trace, process);
    }
    match source.rank {
        Some(rank) => format!("rank {rank}"),
        None => "trace".to_string(),
    }
}

/// The process a file describes, as a key that every file of that process shares: its
/// host, the pid of its first host process with a pid of the system's and the rank
/// known of that pid (an XSpace, whose pid is made up, by the threads it shows:
/// [`xspace_process`]). Files with one key are one process seen more than once (a
/// profiler schedule's successive windows, a recorded file beside the profile its
/// program wrote): one rank, not ranks to compare with each other. `None` for a file
/// that names no host (pids repeat across machines and containers) or no pid of the
/// system's. `opscope sql`'s `stragglers` keys files the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessKey {
    host: opscope_model::StrId,
    pid: i64,
    rank: Option<u32>,
}

pub fn process_key(trace: &Trace, src: SourceId) -> Option<ProcessKey> {
    let source = &trace.sources[src.index()];
    let host = source.host?;
    if source.format == "xplane" {
        return Some(ProcessKey {
            host,
            pid: xspace_process(trace, src),
            rank: source.rank,
        });
    }
    let process =
        host_processes(trace, src).find(|&p| !trace.processes[p.index()].has_synthetic_pid())?;
    Some(ProcessKey {
        host,
        pid: trace.processes[process.index()].pid,
        rank: source.rank.or(facts(trace, process).rank),
    })
}

/// Which process of its host an XSpace is, as a number of its own below any pid: an
/// XSpace's pid is made up, but its host lines are ids of the process's threads (TSL's
/// hash of each `pthread_t`, or, from older profilers, the tid), which a process keeps
/// from one profiling session to the next and no other process has. So the XSpaces of
/// one host and rank that share a thread are one process profiled more than once;
/// ones that share none are processes of their own (two JAX processes on one host).
/// Each is numbered by the first XSpace it shares a thread with, itself if none, as
/// `opscope sql`'s `stragglers` does; one with no host lines is its host's (`-1`).
fn xspace_process(trace: &Trace, src: SourceId) -> i64 {
    let source = &trace.sources[src.index()];
    let lines = |s: SourceId| -> std::collections::HashSet<i64> {
        trace
            .threads
            .iter()
            .filter(|t| {
                let p = &trace.processes[t.process.index()];
                p.source == s && p.device.is_none() && !is_derived_line(t.tid)
            })
            .map(|t| t.tid)
            .collect()
    };
    let own = lines(src);
    if own.is_empty() {
        return -1;
    }
    let first = (0..trace.sources.len())
        .map(|i| SourceId(i as u32))
        .find(|&other| {
            let o = &trace.sources[other.index()];
            other == src
                || (o.format == "xplane"
                    && o.host == source.host
                    && o.rank == source.rank
                    && !own.is_disjoint(&lines(other)))
        })
        .unwrap_or(src);
    -2 - i64::from(first.0)
}

/// The ids xprof gives the lines it derives (steps, XLA modules and ops), the same in
/// every XSpace: 0xdeadbeef and the few after it.
fn is_derived_line(id: i64) -> bool {
    (0xdead_beef..0xdead_beef + 4096).contains(&id)
}

/// Whether a source's process is a DataLoader worker: its batches are its training
/// process's steps, not steps of its own.
pub fn is_loader(trace: &Trace, src: SourceId) -> bool {
    host_processes(trace, src).any(|p| facts(trace, p).loader)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every Kineto file numbers its "Spans" and "Traces" processes alike: rank 1's
    /// are rank 1's, not rank 0's (they were named by the first file's rank), and are
    /// called by their names, not by the numbers reading gave them; the one of the
    /// trace-wide instants (`"pid": ""`) is called "global", not by its number.
    #[test]
    fn processes_named_by_strings_belong_to_their_own_file() {
        let mut trace = Trace::new();
        for rank in [0, 1] {
            let json = format!(
                r#"{{"distributedInfo":{{"backend":"gloo","rank":{rank},"world_size":2}},
                "traceEvents":[
                {{"ph":"X","name":"aten::mm","cat":"cpu_op","pid":{pid},"tid":{pid},"ts":1,"dur":5}},
                {{"ph":"X","name":"a span","cat":"user_annotation","pid":"Spans","tid":"x","ts":2,"dur":1}},
                {{"ph":"i","s":"g","name":"Record Window End","pid":"","tid":"","ts":9}}]}}"#,
                pid = 100 + rank
            );
            let path = format!("rank{rank}.json");
            opscope_formats::chrome::import(json.as_bytes(), &path, &mut trace).unwrap();
        }
        let mut names: Vec<String> = (0..trace.processes.len())
            .map(|p| process_name(&trace, ProcessId(p as u32)))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "rank 0 (pid 100)",
                "rank 0's Spans",
                "rank 0's global",
                "rank 1 (pid 101)",
                "rank 1's Spans",
                "rank 1's global"
            ]
        );
    }

    #[test]
    fn command_lines_are_shortened() {
        assert_eq!(
            short_command("/venv/bin/python /repo/tests/train.py --out /tmp/a/b.log"),
            "python train.py --out b.log"
        );
        assert_eq!(short_command(&"x".repeat(80)).chars().count(), 60);
    }
}
