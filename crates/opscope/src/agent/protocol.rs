//! The agent's socket protocol (docs/agent.md): frames of `u32` little-endian length,
//! one byte of kind and a payload. Recorded processes send a greeting, a preamble and
//! chunks; clients (`top`, `dump`, `--live`) send one query and read the reply.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Sender to agent: who the process is (JSON, [`Hello`]).
pub const HELLO: u8 = 1;
/// Sender to agent: the Perfetto packets every chunk's reader needs first.
pub const PREAMBLE: u8 = 2;
/// Sender to agent: `u64` chunks dropped so far, then one chunk of Perfetto packets.
pub const CHUNK: u8 = 3;
/// Client to agent: one [`Query`] (JSON).
pub const QUERY: u8 = 16;
/// Agent to client: the answer (JSON), last frame of a reply.
pub const REPLY: u8 = 17;
/// Agent to client: one file of a dump: `u16` name length, name, contents.
pub const FILE: u8 = 18;
/// Agent to client: the query failed (UTF-8 message), last frame of a reply.
pub const ERROR: u8 = 19;
/// Client to agent, first on TCP: the token the agent printed.
pub const TOKEN: u8 = 20;

/// Whether `given` is the token, in time that does not depend on where they differ.
pub fn same_token(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len() && given.iter().zip(token).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// A frame longer than this ends the connection: a chunk is a flush interval of one
/// process (a few MB at most), and nothing a peer says may make the agent allocate more.
pub const MAX_FRAME: usize = 64 << 20;

/// The environment variable naming the agent's socket.
pub const AGENT_ENV: &str = "OPSCOPE_AGENT";

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the connection ended")]
    Closed,
    #[error("a frame of {0} bytes (more than {MAX_FRAME}): not an opscope peer?")]
    TooLong(usize),
    #[error("an empty frame")]
    Empty,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads one frame into `buf` (kept between calls); its kind and payload.
pub fn read_frame<'b, R: Read>(
    from: &mut R,
    buf: &'b mut Vec<u8>,
) -> Result<(u8, &'b [u8]), FrameError> {
    let mut len = [0u8; 4];
    match from.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 {
        return Err(FrameError::Empty);
    }
    if len > MAX_FRAME {
        return Err(FrameError::TooLong(len));
    }
    // Grown as the bytes come, not from the length: a peer that claims 64 MiB and
    // sends nothing costs nothing.
    buf.clear();
    let read = from.take(len as u64).read_to_end(buf)?;
    if read < len {
        return Err(FrameError::Closed);
    }
    Ok((buf[0], &buf[1..]))
}

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

/// What a recorded process says of itself (the record library writes it by hand:
/// `opscope-record`'s `live::Hello`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Hello {
    pub version: u32,
    pub pid: u32,
    #[serde(default)]
    pub ppid: u32,
    pub job: String,
    #[serde(default)]
    pub job_source: String,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub session: String,
    pub file: Option<String>,
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
    fn frames_read_back_and_bad_lengths_are_refused() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, CHUNK, &[b"ab", b"cd"]).unwrap();
        write_frame(&mut bytes, REPLY, &[]).unwrap();
        let mut r = &bytes[..];
        let mut buf = Vec::new();
        let (kind, body) = read_frame(&mut r, &mut buf).unwrap();
        assert_eq!((kind, body), (CHUNK, &b"abcd"[..]));
        let (kind, body) = read_frame(&mut r, &mut buf).unwrap();
        assert_eq!((kind, body), (REPLY, &b""[..]));
        assert!(matches!(
            read_frame(&mut r, &mut buf),
            Err(FrameError::Closed)
        ));

        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame(&mut &huge[..], &mut buf),
            Err(FrameError::TooLong(_))
        ));
        assert!(matches!(
            read_frame(&mut &[0u8, 0, 0, 0][..], &mut buf),
            Err(FrameError::Empty)
        ));
        // Cut inside the payload.
        assert!(matches!(
            read_frame(&mut &[9u8, 0, 0, 0, 3, 1][..], &mut buf),
            Err(FrameError::Closed)
        ));
    }

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
