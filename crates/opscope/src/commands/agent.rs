//! `opscope agent`: the per-host agent that recorded processes stream to (see
//! [`crate::agent`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use opscope_agent::{self as agent, protocol, triggers};

#[derive(clap::Args)]
#[command(
    about = "Run the per-host agent: a live view of every recorded job, a flight recorder of their last minute, dumps on demand or on a slow step or a stall",
    long_about = "Run the per-host agent in the foreground (until SIGINT or SIGTERM).\n\n\
                  Processes recorded by `opscope record` (or started with the variables \
                  `opscope env` prints) stream what they record to it as well as to their \
                  files, never waiting on it. It groups them into jobs (--job, SLURM_JOB_ID, \
                  TORCHELASTIC_RUN_ID, a Kubernetes pod, else the session), keeps each job's \
                  last minute in a flight recorder, and answers `opscope top`, `opscope dump` \
                  and the `--live JOB` option of the analysis commands.\n\n\
                  It listens on a Unix socket only, private to its user; with --system, on \
                  /run/opscope/agent.sock for every user, each of whom sees only their own \
                  jobs (root sees all).",
    after_help = "Examples:\n  opscope agent &\n  opscope agent --dump-on slow-step=2x --dump-on stall=60s\n  sudo opscope agent --system --memory 1GiB"
)]
pub struct Args {
    /// The socket to listen on [default: $XDG_RUNTIME_DIR/opscope/agent.sock, or
    /// /tmp/opscope-UID/agent.sock; with --system, /run/opscope/agent.sock].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Serve every user of the host (run as root): each sees and dumps only their own jobs.
    #[arg(long)]
    system: bool,
    /// How much of each job the flight recorder keeps.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    window: Duration,
    /// The flight recorder's memory for all jobs together; the oldest chunks go first.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = size)]
    memory: usize,
    /// Dump a job by itself when: slow-step=FACTORx (a step slower than FACTOR times
    /// the median of those before it) or stall=DURATION (no step completes for that
    /// long). Repeatable.
    #[arg(long = "dump-on", value_name = "TRIGGER", value_parser = trigger)]
    dump_on: Vec<triggers::Trigger>,
    /// Where triggered dumps go [default: $XDG_STATE_HOME/opscope/dumps, or
    /// ~/.local/state/opscope/dumps; with --system, /var/lib/opscope/dumps].
    #[arg(long, value_name = "DIR")]
    dump_dir: Option<PathBuf>,
    /// Triggered dumps kept per trigger and job; older ones are removed.
    #[arg(long, value_name = "N", default_value_t = 5)]
    keep: usize,
    /// At most one triggered dump per trigger and job in this time.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration)]
    cooldown: Duration,
    /// Also answer `top`, `dump` and `--live` on this TCP address (e.g. 127.0.0.1:7878),
    /// to clients that give the token the agent prints (and writes beside its socket,
    /// as agent.tcp). Recorded processes always use the Unix socket.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<std::net::SocketAddr>,
    /// Let --listen take an address other machines can reach. Nothing on that port is
    /// encrypted: the token and everything clients ask for (the jobs' command lines,
    /// op and kernel names, timings, whole dumps) cross the network in clear.
    #[arg(long, requires = "listen")]
    listen_on_network: bool,
    /// Decode the jobs' streams at normal priority rather than the kernel's idle one
    /// (by default the agent takes only CPU time the jobs leave; on a busy host its
    /// view then lags and its live stream may drop chunks, counted, but no job slows).
    #[arg(long)]
    normal_priority: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    quiet: bool,
}

fn duration(text: &str) -> Result<Duration> {
    triggers::parse_duration(text)
}

fn trigger(text: &str) -> Result<triggers::Trigger> {
    triggers::Trigger::parse(text)
}

/// `256MiB`, `1GiB`, `512M`, `100k`, or bytes.
fn size(text: &str) -> Result<usize> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        other => bail!("`{text}`: unknown unit `{other}` (use KiB, MiB or GiB)"),
    };
    let v: f64 = number
        .parse()
        .with_context(|| format!("`{text}`: expected a size such as 256MiB"))?;
    if v * scale < 1.0 {
        bail!("`{text}`: the size must be at least a byte");
    }
    Ok((v * scale) as usize)
}

fn state_dir(system: bool) -> PathBuf {
    if system {
        return PathBuf::from("/var/lib/opscope/dumps");
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("opscope").join("dumps");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/state/opscope/dumps")
}

pub fn run(args: Args) -> Result<()> {
    if let Some(address) = args.listen.filter(|a| !a.ip().is_loopback()) {
        if !args.listen_on_network {
            bail!(
                "--listen {address}: other machines could reach the agent there, and \
                 nothing on that port is encrypted (the token, the jobs' command lines, \
                 op names and timings, whole dumps); use 127.0.0.1:PORT with an SSH \
                 tunnel, or add --listen-on-network if the network is trusted"
            );
        }
        if !args.quiet {
            eprintln!(
                "opscope agent: warning: --listen {address} is reachable from the network; \
                 its token and answers (command lines, op names, timings, dumps) travel \
                 unencrypted"
            );
        }
    }
    let socket = args.socket.unwrap_or_else(|| {
        if args.system {
            PathBuf::from(protocol::SYSTEM_SOCKET)
        } else {
            protocol::user_socket()
        }
    });
    agent::run(agent::Options {
        socket,
        system: args.system,
        window: args.window,
        memory_bound: args.memory,
        triggers: args.dump_on,
        dump_dir: args.dump_dir.unwrap_or_else(|| state_dir(args.system)),
        keep: args.keep.max(1),
        cooldown: args.cooldown,
        idle_priority: !args.normal_priority,
        listen: args.listen,
        quiet: args.quiet,
    })
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size("256MiB").unwrap(), 256 << 20);
        assert_eq!(size("1GiB").unwrap(), 1 << 30);
        assert_eq!(size("512k").unwrap(), 512 << 10);
        assert_eq!(size("4096").unwrap(), 4096);
        assert!(size("12 parsecs").is_err());
        assert!(size("0").is_err());
    }
}
