//! `opscope agent`: one per host, long-running. Recorded processes stream their chunks
//! to its Unix socket; it groups them into jobs, keeps each job's last minute in a
//! flight recorder and live aggregates, samples the processes' CPU and memory, answers
//! `top`, `dump` and `--live` queries, and dumps by itself on a slow step or a stall.
//! A thread per connection: a slow or hostile peer costs only its own thread.

pub mod client;
pub mod dump;
pub mod flight;
mod ingest;
pub mod metrics;
pub mod protocol;
pub mod snapshot;
mod state;
pub mod system;
pub mod triggers;
mod window;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use flight::Flight;
use protocol::{read_frame, write_frame, Query, ERROR, HELLO, QUERY, REPLY};
use state::State;
use triggers::Trigger;

/// What `opscope agent` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    pub socket: PathBuf,
    /// Serving every user: the socket is open to all, each sees their own jobs.
    pub system: bool,
    pub window: Duration,
    pub memory_bound: usize,
    pub triggers: Vec<Trigger>,
    pub dump_dir: PathBuf,
    /// Dumps kept per trigger (older ones removed).
    pub keep: usize,
    pub cooldown: Duration,
    /// Decode and search at the kernel's idle priority (`SCHED_IDLE`): the agent then
    /// takes only CPU time the jobs leave.
    pub idle_priority: bool,
    /// Also answer queries on this TCP address, to clients that give the token.
    pub listen: Option<std::net::SocketAddr>,
    pub quiet: bool,
}

/// What every connection's thread shares.
pub(crate) struct Shared {
    state: Mutex<State>,
    options: Options,
}

impl Shared {
    /// The state, even if a thread panicked while holding it (its update is lost, the
    /// agent goes on).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How long a job whose processes have all ended stays in `top` (at least the flight
/// recorder's window, so that it can still be dumped).
const ENDED_JOBS_KEPT: Duration = Duration::from_secs(600);

/// How long after the last snapshot asked for someone counts as looking.
const LOOKING: Duration = Duration::from_secs(10);

/// The agent's clock: `CLOCK_MONOTONIC` in ns.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs the agent until SIGINT or SIGTERM.
pub fn run(options: Options) -> Result<()> {
    let listener = bind(&options.socket, options.system)?;
    let shared = Arc::new(Shared {
        state: Mutex::new(State::new(
            Flight::new(options.memory_bound, options.window.as_nanos() as u64),
            now_ns(),
        )),
        options: options.clone(),
    });
    stop_on_signals(&options.socket);
    if !options.quiet {
        eprintln!(
            "opscope agent {} listening on {} (flight recorder: last {} s, {} MiB)",
            std::process::id(),
            options.socket.display(),
            options.window.as_secs_f64(),
            options.memory_bound >> 20
        );
    }
    if let Some(address) = options.listen {
        listen_tcp(address, &options, &shared)?;
    }
    {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || sample_loop(&shared))
            .context("cannot start the sampler thread")?;
    }
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            continue;
        };
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("peer".into())
            .spawn(move || serve(stream, &shared));
        if let Err(e) = spawned {
            eprintln!("opscope agent: cannot start a thread for a peer ({e}); dropped it");
        }
    }
    Ok(())
}

/// Also answers queries on TCP at `address`, to clients that give the token, which is
/// printed and written beside the socket (`agent.tcp`, readable by this user only).
fn listen_tcp(
    address: std::net::SocketAddr,
    options: &Options,
    shared: &Arc<Shared>,
) -> Result<()> {
    let listener = std::net::TcpListener::bind(address)
        .with_context(|| format!("cannot listen on {address}"))?;
    let bound = listener.local_addr()?;
    let token = new_token()?;
    let file = options.socket.with_extension("tcp");
    // Made anew, so that it is created 0600 rather than keeping an old file's mode.
    let _ = std::fs::remove_file(&file);
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
            .with_context(|| format!("{}: cannot write", file.display()))?;
        writeln!(f, "{bound}\n{token}")?;
    }
    if !options.quiet {
        eprintln!(
            "opscope agent: also on tcp {bound} (queries only); clients: opscope top --connect {bound} --token {token}  (also in {})",
            file.display()
        );
    }
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("tcp".into())
        .spawn(move || serve_tcp(listener, token, shared))
        .context("cannot start the TCP listener's thread")?;
    Ok(())
}

/// Binds the socket: its directory made private to the user (or, with `--system`,
/// open to all, who are told apart by their uid); a stale socket replaced, a live
/// agent's refused.
fn bind(socket: &Path, system: bool) -> Result<UnixListener> {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
        let mode = if system { 0o755 } else { 0o700 };
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("{}: cannot set its permissions", dir.display()))?;
    } else if !system {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir)?;
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        if meta.uid() != uid || meta.mode() & 0o022 != 0 {
            bail!(
                "{}: the socket's directory must be yours and not writable by others \
                 (another user could stand in for the agent)",
                dir.display()
            );
        }
    }
    if protocol::is_socket(socket) {
        if UnixStream::connect(socket).is_ok() {
            bail!(
                "an agent already runs at {} (`opscope top` shows it)",
                socket.display()
            );
        }
        std::fs::remove_file(socket)
            .with_context(|| format!("{}: cannot remove the stale socket", socket.display()))?;
    }
    let listener = UnixListener::bind(socket)
        .with_context(|| format!("{}: cannot listen", socket.display()))?;
    if system {
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))?;
    }
    Ok(listener)
}

/// SIGINT and SIGTERM end the agent: the socket is removed, so that recorded
/// processes stop trying it and a new agent can start.
fn stop_on_signals(socket: &Path) {
    static SOCKET: Mutex<Option<PathBuf>> = Mutex::new(None);
    *SOCKET.lock().unwrap_or_else(|e| e.into_inner()) = Some(socket.to_path_buf());
    // A thread waits for the signals (blocked everywhere else), so no work happens in
    // a handler.
    // SAFETY: signal sets on the stack; blocking SIGINT and SIGTERM for this thread,
    // before any other starts, so every thread inherits the mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let _ = std::thread::Builder::new()
        .name("signals".into())
        .spawn(|| {
            // SAFETY: as above; sigwait fills `signal`.
            let signal = unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGINT);
                libc::sigaddset(&mut set, libc::SIGTERM);
                let mut signal = 0;
                libc::sigwait(&set, &mut signal);
                signal
            };
            if let Some(path) = SOCKET.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = std::fs::remove_file(path.with_extension("tcp"));
                let _ = std::fs::remove_file(path);
            }
            std::process::exit(128 + signal);
        });
}

/// Puts the calling thread at `SCHED_IDLE`: on two cores, a recorded program's ITT
/// pairs took 1.9x as long while the agent decoded its stream at normal priority, 1.6x
/// at nice 19, and as long as without the agent at `SCHED_IDLE` (BENCHMARKS.md). Under
/// a saturated host the live view then lags and chunks drop from the live stream
/// (counted), never the jobs. Queries (`top`, `dump`) keep normal priority.
fn idle_priority() {
    // SAFETY: a zeroed sched_param is valid for SCHED_IDLE (priority 0); pid 0 is the
    // calling thread.
    unsafe {
        let param: libc::sched_param = std::mem::zeroed();
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
    }
}

/// The peer's pid and uid, from the kernel.
fn peer(stream: &UnixStream) -> Option<(u32, u32)> {
    use std::os::unix::io::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills a ucred of the length given, on a live socket.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some((cred.pid as u32, cred.uid))
}

/// The owner of process `pid` where a peer of user `peer_uid` may speak for it (root,
/// or its owner: who can read its memory to sample it); `None` where it may not or the
/// process is gone.
fn observed(pid: u32, peer_uid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    (peer_uid == 0 || peer_uid == owner).then_some(owner)
}

/// One connection: a recorded process (it greets first) or a client (it asks first).
fn serve(stream: UnixStream, shared: &Shared) {
    let Some((pid, uid)) = peer(&stream) else {
        return;
    };
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, read_half);
    let mut buf = Vec::new();
    let Ok((kind, body)) = read_frame(&mut reader, &mut buf) else {
        return;
    };
    match kind {
        HELLO => {
            let Ok(hello) = serde_json::from_slice::<protocol::Hello>(body) else {
                return;
            };
            // An observer speaks for the process it samples from outside: that process
            // joins, under its own owner, where the observer may read it.
            let (pid, uid) = match hello.observed {
                false => (pid, uid),
                true => match observed(hello.pid, uid) {
                    Some(owner) => (hello.pid, owner),
                    None => return,
                },
            };
            if shared.options.idle_priority {
                idle_priority();
            }
            ingest::run(hello, pid, uid, reader, shared);
        }
        QUERY => {
            // A client that stops reading must not hold this thread for ever.
            let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
            reply(body, uid, shared, &stream);
        }
        _ => {} // not an opscope peer: dropped
    }
}

/// Answers the query in `body` as user `uid` on `out`.
fn reply(body: &[u8], uid: u32, shared: &Shared, out: impl std::io::Write) {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    let answered = match serde_json::from_slice::<Query>(body) {
        Ok(q) => answer(q, uid, shared, &mut out),
        Err(e) => Err(anyhow::anyhow!("not a query: {e}")),
    };
    if let Err(e) = answered {
        let _ = write_frame(&mut out, ERROR, &[format!("{e:#}").as_bytes()]);
    }
    let _ = std::io::Write::flush(&mut out);
}

/// Serves queries on TCP (`--listen`): a client first sends the token, then asks as
/// the agent's own user would. Recorded processes stream on the Unix socket only.
fn serve_tcp(listener: std::net::TcpListener, token: String, shared: Arc<Shared>) {
    // SAFETY: getuid has no preconditions.
    let owner = unsafe { libc::getuid() };
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            continue;
        };
        let (shared, token) = (shared.clone(), token.clone());
        let _ = std::thread::Builder::new()
            .name("tcp peer".into())
            .spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                let mut reader = std::io::BufReader::new(&stream);
                let mut buf = Vec::new();
                match read_frame(&mut reader, &mut buf) {
                    Ok((protocol::TOKEN, body)) if protocol::same_token(body, token.as_bytes()) => {
                    }
                    _ => return, // no token, no answer
                }
                if let Ok((QUERY, body)) = read_frame(&mut reader, &mut buf) {
                    reply(body, owner, &shared, &stream);
                }
            });
    }
}

/// A token of 128 random bits, in hex.
pub fn new_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)
        .context("cannot read /dev/urandom for the token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn answer(query: Query, uid: u32, shared: &Shared, out: &mut impl std::io::Write) -> Result<()> {
    match query {
        Query::Snapshot => {
            let now = now_ns();
            // The sampler runs the window analyses only while someone looks: a first
            // look (`top --once`) has them run first.
            let asked = shared.state().snapshot_asked_ns;
            if asked == 0 || now.saturating_sub(asked) >= LOOKING.as_nanos() as u64 {
                window::steps::refresh_unseen(shared, now, LOOKING);
                window::ops::refresh_unseen(shared, now, LOOKING);
                window::give_back_freed_memory();
            }
            let snapshot = {
                let mut state = shared.state();
                state.snapshot_asked_ns = now;
                state.snapshot(uid, now)
            };
            write_frame(out, REPLY, &[&serde_json::to_vec(&snapshot)?])?;
        }
        Query::Dump { job, last_ns } => {
            let dumped = dump::collect(&shared.state(), uid, &job, last_ns, now_ns())?;
            dump::send(&dumped, out)?;
        }
    }
    Ok(())
}

/// Once a second: each process's CPU and memory, the GPUs (NVML), the flight
/// recorder's expiry, the triggers, and while someone looks, the period search.
fn sample_loop(shared: &Shared) {
    // SAFETY: sysconf and getpagesize have no preconditions.
    let (ticks_per_s, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    let nvml = system::nvml::Nvml::open();
    if shared.options.idle_priority {
        idle_priority();
    }
    for tick in 1u64.. {
        if tick > 1 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let now = now_ns();
        // The search costs far more than taking the stream in: it runs only while
        // someone looks (a snapshot asked for in the last seconds).
        let asked = shared.state().snapshot_asked_ns;
        if asked > 0 && now.saturating_sub(asked) < LOOKING.as_nanos() as u64 {
            window::refresh(shared, tick, now);
        }
        let mut fired = Vec::new();
        {
            // Which process uses which GPU: NVML lists each device's compute processes
            // by pid, and a job's processes are known by pid from their sockets.
            let mut users: HashMap<u32, Vec<snapshot::GpuUse>> = HashMap::new();
            if let Some(nvml) = &nvml {
                for (index, device) in nvml.users().into_iter().enumerate() {
                    for user in device {
                        users.entry(user.pid).or_default().push(snapshot::GpuUse {
                            index,
                            memory_bytes: user.memory_bytes,
                        });
                    }
                }
            }
            let gpus: Vec<snapshot::GpuState> = nvml.as_ref().map_or_else(Vec::new, |nvml| {
                nvml.read()
                    .into_iter()
                    .enumerate()
                    .filter_map(|(index, r)| {
                        let r = r?;
                        Some(snapshot::GpuState {
                            index,
                            utilization_percent: r.utilization_percent,
                            memory_used_bytes: r.memory_used_bytes as u64,
                        })
                    })
                    .collect()
            });
            let mut state = shared.state();
            state.gpus = gpus;
            state.flight.expire(now);
            let keep = (shared.options.window.max(ENDED_JOBS_KEPT)).as_nanos() as u64;
            state.forget_ended(now, keep);
            for (key, job) in state.jobs.iter_mut() {
                // A process's own entry is sampled, not an observer's beside it.
                let shadowed: Vec<_> = (job.processes.iter())
                    .filter(|(_, p)| job.shadowed(p))
                    .map(|(&k, _)| k)
                    .collect();
                let sampled = (job.processes.iter_mut())
                    .filter(|(k, p)| p.connected && !shadowed.contains(k))
                    .map(|(_, p)| p);
                for p in sampled {
                    if let Some(stat) = system::proc_stat::read_stat(p.pid as i32) {
                        p.cpu.sample(now, stat.ticks, ticks_per_s);
                        p.rss_bytes = stat.rss_pages * page;
                    }
                    if !p.loader {
                        // PyTorch names a DataLoader worker once it starts, after its
                        // greeting: its name tells it from the process that forked it.
                        let comm = std::fs::read_to_string(format!("/proc/{}/comm", p.pid));
                        p.loader = comm.is_ok_and(|c| c.trim_end() == "pt_data_worker");
                    }
                    p.gpus = users.get(&p.pid).cloned().unwrap_or_default();
                }
                for trigger in &shared.options.triggers {
                    if let Some(reason) =
                        triggers::check(trigger, job, now, shared.options.cooldown)
                    {
                        job.triggers.fired(trigger.name(), now);
                        fired.push((key.clone(), trigger.name(), reason));
                    }
                }
            }
        }
        for (job, trigger, reason) in fired {
            match dump::on_trigger(shared, &job, trigger, &reason, now) {
                Ok(dir) => {
                    if trigger == "slow-step" {
                        let dir = dir.clone();
                        let _ = std::thread::Builder::new()
                            .name("opscope-dump-diff".into())
                            .spawn(move || dump::write_slow_step_diff(&dir));
                    }
                    if !shared.options.quiet {
                        eprintln!(
                            "opscope agent: job {}: {reason}; dumped to {}",
                            job.name,
                            dir.display()
                        );
                    }
                    shared.state().dumps.push(dir.display().to_string());
                }
                Err(e) => eprintln!(
                    "opscope agent: job {}: {reason}; dump failed: {e:#}",
                    job.name
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A peer speaks for a process it owns (or as root); not for another user's, nor
    /// for one that is gone.
    #[test]
    fn an_observer_speaks_only_for_processes_it_may_read() {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id();
        let owner = std::fs::metadata(format!("/proc/{me}")).unwrap().uid();
        assert_eq!(super::observed(me, owner), Some(owner));
        assert_eq!(super::observed(me, 0), Some(owner));
        let stranger = owner.wrapping_add(4242).max(1);
        assert_eq!(super::observed(me, stranger), None);
        assert_eq!(super::observed(u32::MAX - 1, 0), None);
    }
}
