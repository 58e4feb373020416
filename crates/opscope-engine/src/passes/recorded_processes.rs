//! One process per pid in a recording session: the recorder's, the sampler's and the
//! frameworks' own profiles (written by the bootstrap) of one run on one machine
//! describe each process in several files, which become one process.

use std::path::{Path, PathBuf};

use opscope_formats::registry;
use opscope_model::{SourceId, Trace};

/// The session and pid of an XPlane the recording bootstrap had TensorFlow's or JAX's
/// profiler write: `SESSION/{tensorflow,jax}/PID.N/plugins/profile/RUN/HOST.xplane.pb`.
fn profiled_by_the_bootstrap(path: &Path) -> Option<(PathBuf, i64)> {
    if !path.to_string_lossy().ends_with(".xplane.pb") {
        return None;
    }
    let run_dir = path.ancestors().nth(4)?;
    let framework = run_dir.parent()?;
    let pid = run_dir
        .file_name()?
        .to_str()?
        .split_once('.')?
        .0
        .parse()
        .ok()?;
    let is_framework = framework
        .file_name()
        .is_some_and(|n| n == "tensorflow" || n == "jax");
    let in_profile_dir = path.ancestors().nth(2)?.file_name()? == "profile";
    (is_framework && in_profile_dir).then(|| {
        (
            framework.parent().unwrap_or(Path::new("")).to_path_buf(),
            pid,
        )
    })
}

/// The files of one `opscope record` session (`opscope-<pid>.pftrace` from the
/// recorded processes, `opscope-processes-<pid>.pftrace` and `opscope-stacks-<pid>`
/// from the samplers; `opscope-kineto-*.json` of `attach --kineto`) were written on one
/// machine over one run: a pid there is one process, not one per file.
pub(super) fn run(trace: &mut Trace) {
    let mut sessions: std::collections::BTreeMap<PathBuf, Vec<SourceId>> = Default::default();
    let mut profiled: Vec<(SourceId, i64, PathBuf)> = Vec::new();
    for (i, source) in trace.sources.iter().enumerate() {
        let path = Path::new(&source.path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let recorded = source.format
            == registry::Importer::name(&opscope_formats::perfetto::PerfettoFormat)
            && name.starts_with("opscope-")
            && name.ends_with(".pftrace");
        // The traces `attach --kineto` had PyTorch's profiler write into the session
        // name the process and threads the sampled stacks name.
        let asked_of_kineto = name.starts_with("opscope-kineto-") && name.ends_with(".json");
        if recorded || asked_of_kineto {
            let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
            sessions.entry(dir).or_default().push(SourceId(i as u32));
        } else if let Some((session, pid)) = profiled_by_the_bootstrap(path) {
            sessions
                .entry(session.clone())
                .or_default()
                .push(SourceId(i as u32));
            profiled.push((SourceId(i as u32), pid, session));
        }
    }
    // The framework's profile of a recorded process describes that process, and its
    // lines the threads the recorder saw (by their `pthread_t`).
    for (source, pid, session) in profiled {
        let session = &sessions[&session];
        let known: Vec<(u64, opscope_model::ThreadId)> = (trace.threads.iter().enumerate())
            .filter(|(_, t)| {
                let p = &trace.processes[t.process.index()];
                p.pid == pid && p.source != source && session.contains(&p.source)
            })
            .filter_map(|(i, t)| Some((t.handle?, opscope_model::ThreadId(i as u32))))
            .collect();
        let host: Vec<opscope_model::ProcessId> = (0..trace.processes.len())
            .filter(|&p| trace.processes[p].source == source && trace.processes[p].device.is_none())
            .map(|p| opscope_model::ProcessId(p as u32))
            .collect();
        for process in host {
            trace.set_pid(process, pid);
            opscope_formats::xplane::threads::adopt_tids(trace, process, &known);
        }
    }
    for sources in sessions.into_values().filter(|s| s.len() > 1) {
        trace.unite_processes(&sources);
    }
}
