//! The agent's socket protocol (docs/agent.md): frames of `u32` little-endian length,
//! one byte of kind and a payload. Recorded processes send a greeting, a preamble and
//! chunks; clients (`top`, `dump`, `--live`) send one query and read the reply.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

// The frames and the greeting are the recorder's contract too: written once, there.
pub use opscope_wire::frame::{
    read as read_frame, FrameError, CHUNK, ERROR, FILE, HELLO, HOT, PREAMBLE, QUERY, REPLY, TOKEN,
};
pub use opscope_wire::Hello;

/// Whether `given` is the token, in time that does not depend on where they differ.
pub fn same_token(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len() && given.iter().zip(token).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// The environment variable naming the agent's socket.
pub const AGENT_ENV: &str = opscope_wire::env::AGENT;

pub fn write_frame(to: &mut impl Write, kind: u8, parts: &[&[u8]]) -> std::io::Result<()> {
    let len: usize = 1 + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut head = (len as u32).to_le_bytes().to_vec();
    head.push(kind);
    to.write_all(&head)?;
    for p in parts {
        to.write_all(p)?;
    }
    Ok(())
}

/// What a client asks.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "query", rename_all = "snake_case")]
pub enum Query {
    /// Every job the asker may see, with its live aggregates.
    Snapshot,
    /// The flight recorder of one job as session files (FILE frames, then a REPLY).
    Dump {
        job: String,
        /// Only the last this many nanoseconds (default: all the recorder holds).
        last_ns: Option<u64>,
    },
}

/// The agent's socket for this user: `$XDG_RUNTIME_DIR/opscope/agent.sock`, else
/// `/tmp/opscope-UID/agent.sock`.
pub fn user_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Path::new(&dir).join("opscope").join("agent.sock"),
        // SAFETY: getuid has no preconditions.
        None => PathBuf::from(format!("/tmp/opscope-{}/agent.sock", unsafe {
            libc::getuid()
        })),
    }
}

/// The socket an administrator's agent (`opscope agent --system`) serves every user on.
pub const SYSTEM_SOCKET: &str = "/run/opscope/agent.sock";

/// The agent a client or a recording talks to: `--socket`, else `OPSCOPE_AGENT`, else
/// this user's agent if it runs, else the system's if it runs.
pub fn find_socket(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os(AGENT_ENV).filter(|p| !p.is_empty() && *p != "off") {
        return Some(PathBuf::from(p));
    }
    [user_socket(), PathBuf::from(SYSTEM_SOCKET)]
        .into_iter()
        .find(|p| is_socket(p))
}

pub fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_librarys_greeting_parses() {
        let json = r#"{"version":1,"pid":7,"ppid":1,"job":"j","job_source":"--job","rank":1,"command":"python t.py","session":"/s","file":"opscope-7.pftrace"}"#;
        let hello: Hello = serde_json::from_str(json).unwrap();
        assert_eq!(
            (hello.pid, hello.rank, hello.local_rank),
            (7, Some(1), None)
        );
        assert_eq!(hello.file.as_deref(), Some("opscope-7.pftrace"));
    }
}
