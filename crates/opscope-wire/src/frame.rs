//! The agent's socket protocol (docs/agent.md): frames of `u32` little-endian length
//! (of what follows), one byte of kind and a payload. Recorded processes send a
//! greeting, a preamble and chunks; clients (`top`, `dump`, `--live`) send one query
//! and read the reply.

use std::fmt;
use std::io::Read;

/// Sender to agent: who the process is (JSON, [`crate::Hello`]).
pub const HELLO: u8 = 1;
/// Sender to agent: the Perfetto packets every chunk's reader needs first.
pub const PREAMBLE: u8 = 2;
/// Sender to agent: `u64` chunks dropped so far, then one chunk of Perfetto packets.
pub const CHUNK: u8 = 3;
/// Observer to agent (`opscope attach`, `record --pid`): the sampled stacks' hot
/// functions since the last such frame, JSON `[{"function", "file", "ns"}]` (the
/// running time sampled in each innermost Python function).
pub const HOT: u8 = 4;
/// Client to agent: one query (JSON).
pub const QUERY: u8 = 16;
/// Agent to client: the answer (JSON), last frame of a reply.
pub const REPLY: u8 = 17;
/// Agent to client: one file of a dump: `u16` name length, name, contents.
pub const FILE: u8 = 18;
/// Agent to client: the query failed (UTF-8 message), last frame of a reply.
pub const ERROR: u8 = 19;
/// Client to agent, first on TCP: the token the agent printed.
pub const TOKEN: u8 = 20;

/// A frame longer than this ends the connection: a chunk is a flush interval of one
/// process (a few MB at most), and nothing a peer says may make the agent allocate more.
pub const MAX_FRAME: usize = 64 << 20;

/// Appends one frame of `kind` whose payload is `parts` one after the other.
pub fn push(out: &mut Vec<u8>, kind: u8, parts: &[&[u8]]) {
    let len = 1 + parts.iter().map(|p| p.len()).sum::<usize>();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(kind);
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The connection ended, between frames or inside one.
    Closed,
    /// A length over [`MAX_FRAME`].
    TooLong(usize),
    /// A length of 0 (a frame has at least its kind).
    Empty,
    Io(std::io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => write!(f, "the connection ended"),
            FrameError::TooLong(n) => {
                write!(
                    f,
                    "a frame of {n} bytes (more than {MAX_FRAME}): not an opscope peer?"
                )
            }
            FrameError::Empty => write!(f, "an empty frame"),
            FrameError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FrameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FrameError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> FrameError {
        FrameError::Io(e)
    }
}

/// Reads one frame into `buf` (kept between calls); its kind and payload.
pub fn read<'b, R: Read>(from: &mut R, buf: &'b mut Vec<u8>) -> Result<(u8, &'b [u8]), FrameError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_and_bad_lengths_are_refused() {
        let mut bytes = Vec::new();
        push(&mut bytes, CHUNK, &[b"ab", b"cd"]);
        push(&mut bytes, REPLY, &[]);
        let mut r = &bytes[..];
        let mut buf = Vec::new();
        let (kind, body) = read(&mut r, &mut buf).unwrap();
        assert_eq!((kind, body), (CHUNK, &b"abcd"[..]));
        let (kind, body) = read(&mut r, &mut buf).unwrap();
        assert_eq!((kind, body), (REPLY, &b""[..]));
        assert!(matches!(read(&mut r, &mut buf), Err(FrameError::Closed)));

        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read(&mut &huge[..], &mut buf),
            Err(FrameError::TooLong(_))
        ));
        assert!(matches!(
            read(&mut &[0u8, 0, 0, 0][..], &mut buf),
            Err(FrameError::Empty)
        ));
        // Cut inside the payload.
        assert!(matches!(
            read(&mut &[9u8, 0, 0, 0, 3, 1][..], &mut buf),
            Err(FrameError::Closed)
        ));
    }
}
