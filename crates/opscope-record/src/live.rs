//! The link from a recorded process to the per-host agent (`opscope agent`): the writer
//! thread sends each chunk it writes to the agent's Unix socket as well, without ever
//! waiting on it. A full socket or an absent agent costs that chunk in the live stream
//! (counted; the file still has it), and the link tries to connect again a second later.
//!
//! The stream is framed as `docs/agent.md` describes: `u32` little-endian length (of
//! what follows), one byte of kind, the payload.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use crate::clock;

pub use opscope_wire::Hello;
use opscope_wire::{env, frame};

/// How long after a failed connection or a broken one the link tries again.
const RETRY: Duration = Duration::from_secs(1);
/// Asked of the kernel for the socket's send buffer, so that a burst of chunks waits
/// there rather than being dropped (the kernel caps it at `wmem_max`).
const SEND_BUFFER: libc::c_int = 4 << 20;

/// The link's socket, so that a forked child can close its copy (see `session`).
static LINK_FD: AtomicI32 = AtomicI32::new(-1);

/// What the link counted, for the end-of-process summary and the agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTotals {
    pub chunks_sent: u64,
    pub chunks_dropped: u64,
}

pub struct Link {
    address: libc::sockaddr_un,
    address_len: libc::socklen_t,
    fd: libc::c_int,
    hello: Vec<u8>,
    /// Bytes queued for the socket and how many of them went out: a frame is always
    /// sent whole, so a partly sent one finishes before any other starts.
    pending: Vec<u8>,
    sent: usize,
    /// Monotonic time before which no connection is tried.
    retry_at: u64,
    /// Chunks count as lost only once there was an agent to lose them for.
    ever_connected: bool,
    totals: LinkTotals,
}

impl Link {
    /// The link named by the environment, or none (no agent asked for, or a path that
    /// does not fit a socket address).
    pub fn from_env(hello: &Hello) -> Option<Link> {
        let path = std::env::var_os(env::AGENT)?;
        let path = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
        if path.is_empty() || path == b"off" {
            return None;
        }
        Link::to(&path, hello)
    }

    /// A link to the socket at `path`.
    pub fn to(path: &[u8], hello: &Hello) -> Option<Link> {
        // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
        let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        if path.len() >= address.sun_path.len() {
            crate::ffi::tell(format_args!(
                "the agent's socket path is longer than {} bytes; not streaming to it",
                address.sun_path.len() - 1
            ));
            return None;
        }
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (to, &from) in address.sun_path.iter_mut().zip(path) {
            *to = from as libc::c_char;
        }
        let address_len = (std::mem::size_of::<libc::sa_family_t>() + path.len() + 1) as u32;
        let mut greeting = Vec::new();
        frame::push(&mut greeting, frame::HELLO, &[hello.to_json().as_bytes()]);
        Some(Link {
            address,
            address_len,
            fd: -1,
            hello: greeting,
            pending: Vec::new(),
            sent: 0,
            retry_at: 0,
            ever_connected: false,
            totals: LinkTotals::default(),
        })
    }

    pub fn totals(&self) -> LinkTotals {
        self.totals
    }

    pub fn is_connected(&self) -> bool {
        self.fd >= 0
    }

    /// Sends `chunk` (whole `Trace.packet` fields, decodable without the chunks before
    /// it but for the track descriptors, which `preamble` holds and a new connection
    /// sends first), or drops it.
    pub fn send(&mut self, chunk: &[u8], preamble: &[u8]) {
        if self.fd < 0 && !self.connect(preamble) {
            if self.ever_connected {
                self.totals.chunks_dropped += 1;
            }
            return;
        }
        if !self.push_pending() {
            self.totals.chunks_dropped += 1;
            return;
        }
        let dropped = self.totals.chunks_dropped.to_le_bytes();
        frame::push(&mut self.pending, frame::CHUNK, &[&dropped, chunk]);
        // A frame left pending goes out before any other; one on a broken connection
        // is lost.
        if self.push_pending() || self.fd >= 0 {
            self.totals.chunks_sent += 1;
        } else {
            self.totals.chunks_dropped += 1;
        }
    }

    /// Connects and queues the greeting; false when the agent is not there.
    fn connect(&mut self, preamble: &[u8]) -> bool {
        let now = clock::monotonic_ns();
        if now < self.retry_at {
            return false;
        }
        self.retry_at = now + RETRY.as_nanos() as u64;
        // SAFETY: plain system calls on a socket this link owns; the address is a
        // valid sockaddr_un of the length given.
        let fd = unsafe {
            let fd = libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            );
            if fd < 0 {
                return false;
            }
            if libc::connect(
                fd,
                (&self.address as *const libc::sockaddr_un).cast(),
                self.address_len,
            ) != 0
            {
                libc::close(fd);
                return false;
            }
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&SEND_BUFFER as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            fd
        };
        self.fd = fd;
        self.ever_connected = true;
        LINK_FD.store(fd, Ordering::Relaxed);
        self.pending.clear();
        self.sent = 0;
        self.pending.extend_from_slice(&self.hello);
        frame::push(&mut self.pending, frame::PREAMBLE, &[preamble]);
        true
    }

    /// Sends what is pending as far as the socket takes it; true when nothing is left.
    fn push_pending(&mut self) -> bool {
        while self.sent < self.pending.len() {
            let rest = &self.pending[self.sent..];
            // SAFETY: sends bytes of a live buffer on the link's own socket.
            let n = unsafe {
                libc::send(
                    self.fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                self.sent += n as usize;
                continue;
            }
            let error = std::io::Error::last_os_error();
            match error.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return false,
                _ => {
                    self.disconnect();
                    return false;
                }
            }
        }
        self.pending.clear();
        self.sent = 0;
        true
    }

    fn disconnect(&mut self) {
        if self.fd >= 0 {
            LINK_FD.store(-1, Ordering::Relaxed);
            // SAFETY: the link's own socket, closed once.
            unsafe { libc::close(self.fd) };
        }
        self.fd = -1;
        self.pending.clear();
        self.sent = 0;
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.disconnect();
    }
}

/// In a forked child: the parent's connection is the parent's. Async-signal-safe.
pub(crate) fn forget_in_child() {
    let fd = LINK_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the child's copy of the parent's socket; a drain the fork interrupted
        // never sends (the writer checks its owner's pid first).
        unsafe { libc::close(fd) };
    }
}

/// This process, from the environment and `/proc`, as it greets the agent.
pub fn hello_of_this_process(session: &str, file: Option<String>, command: &[u8]) -> Hello {
    let (job, job_source) = job_of_environment(&|name| std::env::var(name).ok())
        .unwrap_or_else(|| (session.to_string(), "session"));
    let number = |name: &str| std::env::var(name).ok()?.trim().parse::<u32>().ok();
    Hello {
        version: Hello::VERSION,
        pid: std::process::id(),
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        job,
        job_source: job_source.to_string(),
        rank: number("RANK"),
        local_rank: number("LOCAL_RANK"),
        world_size: number("WORLD_SIZE"),
        command: String::from_utf8_lossy(command).into_owned(),
        session: session.to_string(),
        file,
        observed: false,
    }
}

/// The job this process belongs to, by what its launcher says (its variables, then
/// its cgroup's pod).
pub fn job_of_environment(var: &dyn Fn(&str) -> Option<String>) -> Option<(String, &'static str)> {
    let cgroup = || std::fs::read_to_string("/proc/self/cgroup").ok();
    opscope_wire::job::job_of(var, &cgroup)
}

pub use opscope_wire::job::pod_of_cgroup;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_comes_from_opscope_then_the_scheduler() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let both = env(&[("SLURM_JOB_ID", "4242"), ("OPSCOPE_JOB", "mine")]);
        assert_eq!(
            job_of_environment(&both),
            Some(("mine".to_string(), "--job"))
        );
        let slurm = env(&[("SLURM_JOB_ID", "4242"), ("TORCHELASTIC_RUN_ID", "x")]);
        assert_eq!(
            job_of_environment(&slurm),
            Some(("4242".to_string(), "SLURM_JOB_ID"))
        );
        let elastic = env(&[("TORCHELASTIC_RUN_ID", "none-1"), ("OPSCOPE_JOB", " ")]);
        assert_eq!(
            job_of_environment(&elastic),
            Some(("none-1".to_string(), "TORCHELASTIC_RUN_ID"))
        );
    }

    #[test]
    fn pods_are_found_under_both_cgroup_drivers() {
        let cgroupfs = "0::/kubepods/burstable/pod0f3c1f4e-9d1b-4c1e-8a55-6a1f2b3c4d5e/abc123\n";
        assert_eq!(
            pod_of_cgroup(cgroupfs).as_deref(),
            Some("0f3c1f4e-9d1b-4c1e-8a55-6a1f2b3c4d5e")
        );
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f3c1f4e_9d1b_4c1e_8a55_6a1f2b3c4d5e.slice/cri-containerd-1.scope\n";
        assert_eq!(
            pod_of_cgroup(systemd).as_deref(),
            Some("0f3c1f4e-9d1b-4c1e-8a55-6a1f2b3c4d5e")
        );
        assert_eq!(
            pod_of_cgroup("0::/user.slice/user-0.slice/session-1.scope\n"),
            None
        );
        assert_eq!(pod_of_cgroup("0::/system.slice/podman.service\n"), None);
    }

    #[test]
    fn a_link_without_an_agent_neither_waits_nor_counts_chunks_lost() {
        let hello = Hello::default();
        let mut link = Link::to(b"/nonexistent/opscope-test/agent.sock", &hello).unwrap();
        link.send(b"chunk", b"");
        link.send(b"chunk", b"");
        // Nothing is lost from a live stream that never was.
        assert_eq!(link.totals(), LinkTotals::default());
        assert!(!link.is_connected());
    }

    #[test]
    fn chunks_are_lost_while_the_agent_that_was_there_is_gone() {
        let dir = std::env::temp_dir().join(format!("opscope-link-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
        let mut link = Link::to(bytes, &Hello::default()).unwrap();
        link.send(b"one", b"");
        drop(listener.accept().unwrap());
        drop(listener);
        std::fs::remove_file(&path).unwrap();
        // The agent is gone: the next sends find the connection broken, then no agent.
        for _ in 0..3 {
            link.send(b"more", b"");
        }
        assert!(!link.is_connected());
        assert_eq!(
            link.totals(),
            LinkTotals {
                chunks_sent: 1,
                chunks_dropped: 3
            }
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_link_sends_greeting_preamble_and_chunks_framed() {
        use std::io::Read;
        let dir = std::env::temp_dir().join(format!("opscope-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let hello = Hello {
            pid: 3,
            job: "j".into(),
            ..Hello::default()
        };
        let mut link = Link::to(
            std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()),
            &hello,
        )
        .unwrap();
        link.send(b"CHUNK1", b"PRE");
        let (mut peer, _) = listener.accept().unwrap();
        drop(link); // closes: the reader sees the end
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        let mut frames = Vec::new();
        let mut rest = &got[..];
        while rest.len() >= 5 {
            let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            frames.push((rest[4], rest[5..4 + len].to_vec()));
            rest = &rest[4 + len..];
        }
        assert!(rest.is_empty());
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].0, frame::HELLO);
        assert_eq!(frames[0].1, hello.to_json().into_bytes());
        assert_eq!(frames[1], (frame::PREAMBLE, b"PRE".to_vec()));
        let mut chunk = 0u64.to_le_bytes().to_vec();
        chunk.extend_from_slice(b"CHUNK1");
        assert_eq!(frames[2], (frame::CHUNK, chunk));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
