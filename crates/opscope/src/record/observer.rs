//! An outside sampler's place in the agent (`attach`, `record --pid`): it greets the
//! running agent for the process it samples, named as that process's own recorder
//! would name its job (from its environment), so `opscope top` lists the job, with
//! the CPU and memory the agent samples, for as long as the sampling lasts.

use std::os::unix::net::UnixStream;
use std::path::Path;

use opscope_agent::protocol::{write_frame, CHUNK, HELLO, HOT};
use opscope_wire::Hello;

/// The agent's connection for an observed process: the process leaves the agent's
/// live jobs when this is dropped.
pub struct Joined {
    stream: UnixStream,
    pub job: String,
}

impl Joined {
    /// Sends the hot functions sampled since the last call: (function, file, running
    /// ns). False once the agent is gone (nothing more is sent).
    pub fn send_hot(&mut self, functions: &[(String, String, u64)]) -> bool {
        let list: Vec<serde_json::Value> = functions
            .iter()
            .map(|(function, file, ns)| {
                serde_json::json!({"function": function, "file": file, "ns": ns})
            })
            .collect();
        let body = serde_json::to_vec(&list).unwrap_or_default();
        write_frame(&mut self.stream, HOT, &[&body]).is_ok()
    }
}

impl Joined {
    /// Sends a chunk of Perfetto packets (a whole small file: the sampled stacks of
    /// the last second), which the agent keeps in its flight recorder for `dump`.
    /// False once the agent is gone.
    pub fn send_chunk(&mut self, packets: &[u8]) -> bool {
        write_frame(&mut self.stream, CHUNK, &[&0u64.to_le_bytes(), packets]).is_ok()
    }
}

/// Greets the agent at `agent` (else the running one, if any) for process `pid`;
/// `None` where no agent answers.
pub fn join(agent: Option<&Path>, pid: i32, job: Option<&str>, session: &Path) -> Option<Joined> {
    let socket = agent.map(Path::to_path_buf).or_else(super::running_agent)?;
    let hello = hello_of(pid, job, session);
    let mut stream = UnixStream::connect(&socket).ok()?;
    write_frame(&mut stream, HELLO, &[hello.to_json().as_bytes()]).ok()?;
    Some(Joined {
        stream,
        job: hello.job,
    })
}

/// What process `pid` would say of itself: its job by its launcher's variables (or
/// `job` when given, else the session), its ranks, command and parent.
fn hello_of(pid: i32, job: Option<&str>, session: &Path) -> Hello {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let var = |name: &str| {
        environ.split(|&b| b == 0).find_map(|pair| {
            let (key, value) = std::str::from_utf8(pair).ok()?.split_once('=')?;
            (key == name).then(|| value.to_string())
        })
    };
    let cgroup = || std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok();
    let (job, job_source) = match job {
        Some(job) => (job.to_string(), "--job"),
        None => opscope_wire::job::job_of(&var, &cgroup)
            .unwrap_or_else(|| (session.display().to_string(), "session")),
    };
    let number = |name: &str| var(name)?.trim().parse::<u32>().ok();
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let args: Vec<String> = c
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            args.join(" ")
        })
        .unwrap_or_default();
    // `pid (comm) state ppid …`: the name may hold spaces and parentheses.
    let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Hello {
        version: Hello::VERSION,
        pid: pid as u32,
        ppid,
        job,
        job_source: job_source.to_string(),
        rank: number("RANK"),
        local_rank: number("LOCAL_RANK"),
        world_size: number("WORLD_SIZE"),
        command,
        session: session.display().to_string(),
        file: None,
        observed: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own process, as an observer would describe it: its pid, parent,
    /// command line and the job its variables give.
    #[test]
    fn a_process_is_described_from_its_proc_files() {
        let me = std::process::id() as i32;
        let hello = hello_of(me, None, Path::new("/s"));
        assert_eq!(hello.pid, me as u32);
        // SAFETY: getppid has no preconditions.
        assert_eq!(hello.ppid, unsafe { libc::getppid() } as u32);
        let first = std::env::args().next().unwrap();
        assert!(hello.command.starts_with(&first), "{}", hello.command);
        assert!(hello.observed);
        let expected = opscope_wire::job::job_of(&|n| std::env::var(n).ok(), &|| {
            std::fs::read_to_string("/proc/self/cgroup").ok()
        })
        .map_or("/s".to_string(), |j| j.0);
        assert_eq!(hello.job, expected);
        assert_eq!(hello_of(me, Some("named"), Path::new("/s")).job, "named");
    }
}
