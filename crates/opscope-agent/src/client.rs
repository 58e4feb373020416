//! Asking the agent: `top`'s snapshots, `dump`'s files, and `--live` (a dump read as a
//! trace by the same reports as files).

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::dump::{DumpFile, DumpMeta};
use super::protocol::{
    self, read_frame, write_frame, FrameError, Query, ERROR, FILE, QUERY, REPLY, TOKEN,
};
use super::snapshot::Snapshot;

/// Where to find the agent, as the commands that ask it take it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AgentAddress {
    /// The agent's socket [default: $OPSCOPE_AGENT, else this user's agent
    /// ($XDG_RUNTIME_DIR/opscope/agent.sock), else the system's (/run/opscope/agent.sock)].
    #[arg(long, value_name = "PATH", conflicts_with = "connect")]
    pub socket: Option<PathBuf>,
    /// Ask an agent over TCP (one started with --listen) instead.
    #[arg(long, value_name = "ADDR:PORT")]
    pub connect: Option<String>,
    /// The token the agent printed for TCP clients [default: $OPSCOPE_AGENT_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
}

/// [`AgentAddress`] for the commands that ask the agent only with `--live`: under a
/// heading of its own in their help, which ends with them. (A heading given where a
/// command flattens them, or on this struct, held every option declared after them:
/// `--format`, `--port`.)
#[derive(Clone, Debug, Default)]
pub struct LiveAgentAddress {
    pub address: AgentAddress,
}

impl LiveAgentAddress {
    const HEADING: &'static str = "Where the agent is (with --live)";
}

impl clap::Args for LiveAgentAddress {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        AgentAddress::augment_args(cmd.next_help_heading(Self::HEADING))
            .next_help_heading(None::<&'static str>)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        AgentAddress::augment_args_for_update(cmd.next_help_heading(Self::HEADING))
            .next_help_heading(None::<&'static str>)
    }
}

impl clap::FromArgMatches for LiveAgentAddress {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(LiveAgentAddress {
            address: AgentAddress::from_arg_matches(matches)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.address.update_from_arg_matches(matches)
    }
}

/// A connection to the agent.
enum Connection {
    Unix(UnixStream),
    Tcp(std::net::TcpStream),
}

impl std::io::Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Connection::Unix(s) => s.read(buf),
            Connection::Tcp(s) => s.read(buf),
        }
    }
}

impl std::io::Write for Connection {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Connection::Unix(s) => s.write(buf),
            Connection::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Connection::Unix(s) => s.flush(),
            Connection::Tcp(s) => s.flush(),
        }
    }
}

/// How long a client waits for the agent at each read or write before it says so: an
/// agent that is stopped (SIGSTOP), or hung, never answers.
fn wait_limit() -> std::time::Duration {
    std::env::var(opscope_wire::env::AGENT_TIMEOUT)
        .ok()
        .and_then(|v| crate::triggers::parse_duration(&v).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(std::time::Duration::from_secs(15))
}

impl AgentAddress {
    fn connect(&self) -> Result<Connection> {
        let limit = Some(wait_limit());
        if let Some(address) = &self.connect {
            let mut stream = std::net::TcpStream::connect(address)
                .with_context(|| format!("cannot reach the agent at {address}"))?;
            stream.set_read_timeout(limit)?;
            stream.set_write_timeout(limit)?;
            let token = self
                .token
                .clone()
                .or_else(|| std::env::var(opscope_wire::env::AGENT_TOKEN).ok())
                .context("--connect needs the agent's token (--token, or OPSCOPE_AGENT_TOKEN)")?;
            write_frame(&mut stream, TOKEN, &[token.as_bytes()])
                .map_err(|e| dropped(e, "sending the token"))?;
            return Ok(Connection::Tcp(stream));
        }
        let stream = self.connect_unix()?;
        stream.set_read_timeout(limit)?;
        stream.set_write_timeout(limit)?;
        Ok(Connection::Unix(stream))
    }

    fn connect_unix(&self) -> Result<UnixStream> {
        let Some(path) = protocol::find_socket(self.socket.as_deref()) else {
            bail!(
                "no opscope agent is running (looked for {} and {}); start one with `opscope agent`",
                protocol::user_socket().display(),
                protocol::SYSTEM_SOCKET
            );
        };
        UnixStream::connect(&path).with_context(|| {
            format!(
                "cannot reach the agent at {} (is `opscope agent` running?)",
                path.display()
            )
        })
    }

    fn ask(&self, query: &Query) -> Result<(Connection, Vec<u8>)> {
        let mut stream = self.connect()?;
        write_frame(&mut stream, QUERY, &[&serde_json::to_vec(query)?])
            .map_err(|e| dropped(e, "sending the query"))?;
        Ok((stream, Vec::new()))
    }

    pub fn snapshot(&self) -> Result<Snapshot> {
        let (stream, mut buf) = self.ask(&Query::Snapshot)?;
        let mut reader = std::io::BufReader::new(stream);
        let answer =
            read_frame(&mut reader, &mut buf).map_err(|e| dropped(e, "waiting for the answer"))?;
        match answer {
            (REPLY, body) => serde_json::from_slice(body).context("the agent's answer"),
            (ERROR, body) => bail!("the agent says: {}", String::from_utf8_lossy(body)),
            (kind, _) => bail!("the agent answered with a frame of kind {kind}"),
        }
    }

    /// The flight recorder of `job` (its last `last_ns`, or all it holds): the files
    /// and what they are.
    pub fn dump(&self, job: &str, last_ns: Option<u64>) -> Result<(Vec<DumpFile>, DumpMeta)> {
        let query = Query::Dump {
            job: job.to_string(),
            last_ns,
        };
        let (stream, mut buf) = self.ask(&query)?;
        let mut reader = std::io::BufReader::with_capacity(1 << 20, stream);
        let mut files = Vec::new();
        loop {
            let frame =
                read_frame(&mut reader, &mut buf).map_err(|e| dropped(e, "reading the dump"))?;
            match frame {
                (FILE, body) if body.len() >= 2 => {
                    let len = u16::from_le_bytes([body[0], body[1]]) as usize;
                    let name = body
                        .get(2..2 + len)
                        .context("a file frame shorter than its name")?;
                    let name = String::from_utf8_lossy(name).into_owned();
                    files.push((name, body[2 + len..].to_vec()));
                }
                (REPLY, body) => {
                    let meta = serde_json::from_slice(body).context("the agent's answer")?;
                    return Ok((files, meta));
                }
                (ERROR, body) => bail!("{}", String::from_utf8_lossy(body)),
                (kind, _) => bail!("the agent answered with a frame of kind {kind}"),
            }
        }
    }
}

/// The agent ended the connection (a wrong token over TCP, an agent stopping). Said as
/// text: the I/O error itself, a broken pipe, would pass for a closed stdout, which
/// ends a command quietly.
fn dropped(e: impl Into<FrameError>, doing: &str) -> anyhow::Error {
    let e = e.into();
    if matches!(&e, FrameError::Io(io) if matches!(
        io.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )) {
        return anyhow::anyhow!(
            "the agent did not answer within {:.0} s while {doing}: is it stopped or hung? \
             (`kill -CONT` a stopped agent; OPSCOPE_AGENT_TIMEOUT sets the wait)",
            wait_limit().as_secs_f64()
        );
    }
    anyhow::anyhow!(
        "the agent ended the connection while {doing} ({e}); over TCP, is the token the one it printed?"
    )
}

/// A dump in a temporary directory, removed when dropped: `--live` reads it as a trace.
pub struct LiveDump {
    dir: PathBuf,
}

impl LiveDump {
    pub fn fetch(address: &AgentAddress, job: &str, last_ns: Option<u64>) -> Result<LiveDump> {
        let (files, meta) = address.dump(job, last_ns)?;
        if files.is_empty() {
            bail!("job `{job}`: the agent holds nothing of it in that span");
        }
        let dir = std::env::temp_dir().join(format!(
            "opscope-live-{}-{}",
            std::process::id(),
            super::now_ns()
        ));
        super::dump::write_session(&dir, &files, &meta)?;
        Ok(LiveDump { dir })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LiveDump {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
