//! A job's flight recorder as a session directory: one Perfetto file per process (its
//! preamble, then its chunks still held) and `.opscope/dump.json` saying what it is.
//! The agent sends the files to `opscope dump`, which writes them where its user can;
//! a trigger's dump the agent writes itself.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::protocol::{write_frame, FILE, REPLY};
use super::state::{JobKey, State};
use super::Shared;

/// What a dump holds, written beside its files.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct DumpMeta {
    pub job: String,
    pub source: String,
    pub uid: u32,
    pub agent_pid: u32,
    /// The span asked for, in seconds (none: all the recorder held).
    pub last_s: Option<f64>,
    /// How far back the recorder held when dumped.
    pub held_s: f64,
    /// Why a trigger dumped (none when asked for).
    pub reason: Option<String>,
    pub processes: Vec<DumpedProcess>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct DumpedProcess {
    pub pid: u32,
    pub rank: Option<u32>,
    pub command: String,
    pub file: String,
    pub chunks: u64,
}

/// A file of a dump: its name and contents.
pub type DumpFile = (String, Vec<u8>);

pub struct Dumped {
    pub meta: DumpMeta,
    pub files: Vec<DumpFile>,
}

/// The job named `job` that `uid` may see.
fn find(state: &State, uid: u32, job: &str) -> Result<JobKey> {
    let visible: Vec<&JobKey> = state
        .jobs
        .keys()
        .filter(|k| uid == 0 || k.uid == uid)
        .collect();
    let named: Vec<&&JobKey> = visible.iter().filter(|k| k.name == job).collect();
    match named.as_slice() {
        [one] => Ok((**one).clone()),
        [] => {
            let names: Vec<&str> = visible.iter().map(|k| k.name.as_str()).collect();
            if names.is_empty() {
                bail!("no job `{job}`: the agent has no jobs of yours")
            }
            bail!("no job `{job}`; the agent has: {}", names.join(", "))
        }
        several => {
            let uids: Vec<String> = several.iter().map(|k| k.uid.to_string()).collect();
            bail!(
                "job `{job}` exists for several users (uids {}); dump as that user",
                uids.join(", ")
            )
        }
    }
}

/// The dump of job `job` as `uid` may see it: the chunks that arrived in the last
/// `last_ns` (all held, when none).
pub fn collect(
    state: &State,
    uid: u32,
    job: &str,
    last_ns: Option<u64>,
    now: u64,
) -> Result<Dumped> {
    let key = find(state, uid, job)?;
    Ok(collect_key(state, &key, last_ns, now))
}

fn collect_key(state: &State, key: &JobKey, last_ns: Option<u64>, now: u64) -> Dumped {
    let job = &state.jobs[key];
    let since = last_ns.map_or(0, |l| now.saturating_sub(l));
    let mut files = Vec::new();
    let mut processes = Vec::new();
    for (&process, p) in &job.processes {
        let mut bytes = p.preamble.clone();
        let mut chunks = 0;
        for chunk in state.flight.chunks_of(process, since) {
            bytes.extend_from_slice(chunk);
            chunks += 1;
        }
        if chunks == 0 && !p.connected {
            continue; // ended before the span: nothing of it is held
        }
        let mut name = format!("opscope-{}.pftrace", p.pid);
        let mut n = 1;
        while files.iter().any(|(f, _)| *f == name) {
            name = format!("opscope-{}-{n}.pftrace", p.pid);
            n += 1;
        }
        processes.push(DumpedProcess {
            pid: p.pid,
            rank: p.hello.rank,
            command: p.hello.command.clone(),
            file: name.clone(),
            chunks,
        });
        files.push((name, bytes));
    }
    Dumped {
        meta: DumpMeta {
            job: key.name.clone(),
            source: job.source.clone(),
            uid: key.uid,
            agent_pid: state.pid,
            last_s: last_ns.map(|l| l as f64 / 1e9),
            held_s: state.flight.held_ns(now) as f64 / 1e9,
            reason: None,
            processes,
        },
        files,
    }
}

/// Sends a dump to a client: a FILE frame per file, then the REPLY.
pub fn send(dumped: &Dumped, out: &mut impl std::io::Write) -> Result<()> {
    for (name, bytes) in &dumped.files {
        let len = (name.len() as u16).to_le_bytes();
        write_frame(out, FILE, &[&len, name.as_bytes(), bytes])?;
    }
    write_frame(out, REPLY, &[&serde_json::to_vec(&dumped.meta)?])?;
    Ok(())
}

/// Writes a dump as a session directory at `dir`, which must be new or empty.
pub fn write_session(dir: &Path, files: &[DumpFile], meta: &DumpMeta) -> Result<()> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("{}: cannot read", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{}: not empty; a dump goes into a new or empty directory",
                dir.display()
            );
        }
    }
    // Names come from the agent: never a path out of the directory.
    if let Some((name, _)) = files
        .iter()
        .find(|(name, _)| name.contains('/') || name.starts_with('.') || name.is_empty())
    {
        bail!("the agent sent a file named `{name}`: refused");
    }
    let own = dir.join(".opscope");
    std::fs::create_dir_all(&own).with_context(|| format!("{}: cannot create", own.display()))?;
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes)
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    let path = own.join("dump.json");
    std::fs::write(&path, serde_json::to_vec_pretty(meta)?)
        .with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
}

/// A trigger's dump of `job`, written under the agent's dump directory; the oldest of
/// that trigger's dumps beyond the number kept are removed.
pub(crate) fn on_trigger(
    shared: &Shared,
    job: &JobKey,
    trigger: &str,
    reason: &str,
    now: u64,
) -> Result<PathBuf> {
    let mut dumped = {
        let state = shared.state();
        if !state.jobs.contains_key(job) {
            bail!("the job ended");
        }
        collect_key(&state, job, None, now)
    };
    dumped.meta.reason = Some(reason.to_string());
    let base = &shared.options.dump_dir;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let safe: String = job
        .name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let prefix = format!("{safe}-{trigger}-");
    let dir = base.join(format!("{prefix}{stamp}"));
    write_session(&dir, &dumped.files, &dumped.meta)?;
    prune(base, &prefix, shared.options.keep);
    Ok(dir)
}

/// Writes, into a slow-step dump's `.opscope/`, what its slowest step spent more time
/// on than the steps before it: `opscope diff`'s matched lines of the slowest step
/// against every other (`diff.txt` as the command prints it, `diff.json`). Where the
/// dump cannot be compared (no steps found in it), `diff.txt` says why. Run off the
/// agent's sampler: loading a large dump takes seconds.
pub fn write_slow_step_diff(dir: &Path) {
    use opscope_analysis::diff::{matched, Side, Span};
    let said = dir.join(".opscope");
    // Renamed into place: a reader never sees half a file.
    let write = |name: &str, bytes: &[u8]| {
        let aside = said.join(format!(".{name}.tmp"));
        if std::fs::write(&aside, bytes).is_ok() {
            let _ = std::fs::rename(&aside, said.join(name));
        }
    };
    let compared = (|| -> Result<matched::MatchedDiff> {
        let options = opscope_engine::load::LoadOptions {
            quiet: true,
            cache: false,
            partial: false,
        };
        let trace = opscope_engine::load::load(&[dir.to_path_buf()], &options)?;
        let cx = opscope_analysis::Context::new(&trace);
        let side = |label: &str, span| Side {
            cx: &cx,
            label: label.to_string(),
            rank: None,
            steps: None,
            span: Some(span),
        };
        matched::matched(
            &side("the other steps", Span::AllButSlowest),
            &side("the slowest step", Span::Slowest),
            &matched::MatchedOptions::default(),
        )
        .map_err(anyhow::Error::msg)
    })();
    match compared {
        Ok(diff) => {
            let mut text = Vec::new();
            let _ = opscope_engine::render::render(
                &diff,
                opscope_engine::render::Format::Text,
                None,
                &mut text,
            );
            write("diff.txt", &text);
            if let Ok(json) = serde_json::to_vec_pretty(&diff) {
                write("diff.json", &json);
            }
        }
        Err(e) => {
            write("diff.txt", format!("no diff: {e:#}\n").as_bytes());
        }
    }
}

/// Keeps the newest `keep` directories under `base` whose names start with `prefix`.
fn prune(base: &Path, prefix: &str, keep: usize) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let mut dumps: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stamp = name.strip_prefix(prefix)?;
            stamp
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| (format!("{stamp:0>20}"), e.path()))
        })
        .collect();
    dumps.sort();
    let extra = dumps.len().saturating_sub(keep);
    for (_, path) in dumps.into_iter().take(extra) {
        let _ = std::fs::remove_dir_all(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_dumps_of_a_trigger_are_kept() {
        let base = std::env::temp_dir().join(format!("opscope-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        for name in [
            "j-stall-5",
            "j-stall-40",
            "j-stall-300",
            "j-slow-step-1",
            "other",
        ] {
            std::fs::create_dir_all(base.join(name)).unwrap();
        }
        prune(&base, "j-stall-", 2);
        let mut left: Vec<String> = std::fs::read_dir(&base)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["j-slow-step-1", "j-stall-300", "j-stall-40", "other"]
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_dump_refuses_a_directory_with_files_and_names_that_leave_it() {
        let base = std::env::temp_dir().join(format!("opscope-dumpdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("x"), b"").unwrap();
        let meta = DumpMeta::default();
        assert!(write_session(&base, &[], &meta).is_err());
        let fresh = base.join("fresh");
        let evil = [("../escape".to_string(), Vec::new())];
        assert!(write_session(&fresh, &evil, &meta).is_err());
        assert!(!base.join("escape").exists());
        write_session(
            &fresh,
            &[("opscope-1.pftrace".into(), b"x".to_vec())],
            &meta,
        )
        .unwrap();
        assert_eq!(
            std::fs::read(fresh.join("opscope-1.pftrace")).unwrap(),
            b"x"
        );
        assert!(fresh.join(".opscope/dump.json").exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
