//! Kineto's on-demand trace, asked for as dynolog asks: a PyTorch process started with
//! `KINETO_USE_DAEMON=1` polls the abstract datagram socket `\0dynolog\0` every few
//! seconds ("req": its pid and its ancestors'), and traces with the config text it is
//! answered (`dynolog/src/ipcfabric`, Kineto's `IpcFabricConfigClient`). opscope binds
//! that socket for a while and answers the processes of the tree it attached to.

use std::collections::HashSet;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// `Metadata{size_t size; char type[32];}`, before each message's payload.
const HEADER: usize = 8 + 32;

/// A trace asked of one process: where Kineto writes it (`_<pid>` inserted before
/// `.json`, as Kineto names on-demand files).
pub struct Asked {
    pub pid: i32,
    pub file: PathBuf,
}

/// Serves `\0dynolog\0` until `until` or until `expected` processes have asked,
/// answering the first request of each process in `tree()` with a trace of `duration`
/// written under `dir` (`KINETO_ONDEMAND_TRACE_DIR` where the processes have it, else
/// `/tmp`); other processes are told there is nothing to do.
pub fn serve(
    tree: impl Fn() -> HashSet<i32>,
    expected: usize,
    duration: Duration,
    dir: &Path,
    token: &str,
    until: Instant,
) -> Result<Vec<Asked>> {
    let name = SocketAddr::from_abstract_name(b"dynolog\0")?;
    let socket = match UnixDatagram::bind_addr(&name) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "the dynolog socket is taken (a dynolog daemon runs here): ask it for the trace \
             (`dyno gputrace`) instead of --kineto"
        ),
        Err(e) => return Err(e).context("binding Kineto's daemon socket \\0dynolog\\0"),
    };
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut asked: Vec<Asked> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while Instant::now() < until && asked.len() < expected {
        let (len, peer) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("reading Kineto's request"),
        };
        let Some((kind, payload)) = parse(&buf[..len]) else {
            continue;
        };
        let reply: Vec<u8> = match kind {
            // A process on a GPU says so first; the answer is how many of the job's
            // processes use that GPU, which only dynolog keeps: one.
            "ctxt" => 1i32.to_ne_bytes().to_vec(),
            "req" => {
                let pid = request_pid(payload);
                let wanted = pid.is_some_and(|p| tree().contains(&p));
                match pid {
                    Some(pid) if wanted && !asked.iter().any(|a| a.pid == pid) => {
                        let file = dir.join(format!("opscope-kineto-{token}.json"));
                        let config = format!(
                            "ACTIVITIES_LOG_FILE={}\nACTIVITIES_DURATION_MSECS={}\n\
                             ACTIVITIES_WARMUP_PERIOD_SECS=0\nPROFILE_START_TIME=0\n",
                            file.display(),
                            duration.as_millis()
                        );
                        asked.push(Asked {
                            pid,
                            file: dir.join(format!("opscope-kineto-{token}_{pid}.json")),
                        });
                        config.into_bytes()
                    }
                    _ => Vec::new(),
                }
            }
            _ => continue,
        };
        let mut message = Vec::with_capacity(HEADER + reply.len());
        message.extend_from_slice(&(reply.len() as u64).to_ne_bytes());
        let mut kind_field = [0u8; 32];
        kind_field[..kind.len()].copy_from_slice(kind.as_bytes());
        message.extend_from_slice(&kind_field);
        message.extend_from_slice(&reply);
        // A client gone meanwhile is no error of ours.
        let _ = socket.send_to_addr(&message, &peer);
    }
    Ok(asked)
}

/// The processes of `pids` that poll for Kineto's on-demand traces: started with
/// `KINETO_USE_DAEMON` in their environment.
pub fn polling(pids: &HashSet<i32>) -> HashSet<i32> {
    pids.iter()
        .copied()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|&b| b == 0)
                    .any(|v| v.starts_with(b"KINETO_USE_DAEMON="))
            })
        })
        .collect()
}

/// A message's type and payload.
fn parse(message: &[u8]) -> Option<(&str, &[u8])> {
    let header = message.get(..HEADER)?;
    let size = u64::from_ne_bytes(header[..8].try_into().ok()?) as usize;
    let kind = &header[8..];
    let kind = std::str::from_utf8(&kind[..kind.iter().position(|&b| b == 0)?]).ok()?;
    Some((kind, message.get(HEADER..HEADER + size)?))
}

/// `LibkinetoRequest{int32 type; int32 n; int64 jobid; int32 pids[n]}`: the first pid
/// is the asking process's own.
fn request_pid(payload: &[u8]) -> Option<i32> {
    let n = i32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    (n > 0).then_some(())?;
    Some(i32::from_ne_bytes(payload.get(16..20)?.try_into().ok()?))
}

/// Waits until each asked trace is written whole (Kineto writes the file, then the
/// JSON's closing brace last), or `until`; gives those that were.
pub fn collect(asked: &[Asked], until: Instant) -> Vec<PathBuf> {
    let whole = |p: &Path| {
        std::fs::read(p).is_ok_and(|b| {
            b.iter()
                .rev()
                .find(|c| !c.is_ascii_whitespace())
                .is_some_and(|&c| c == b'}')
        })
    };
    loop {
        let done: Vec<PathBuf> = asked
            .iter()
            .filter(|a| whole(&a.file))
            .map(|a| a.file.clone())
            .collect();
        if done.len() == asked.len() || Instant::now() >= until {
            return done;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_as_kineto_writes_them() {
        let mut payload = Vec::new();
        payload.extend_from_slice(&2i32.to_ne_bytes());
        payload.extend_from_slice(&2i32.to_ne_bytes());
        payload.extend_from_slice(&0i64.to_ne_bytes());
        payload.extend_from_slice(&4242i32.to_ne_bytes());
        payload.extend_from_slice(&1i32.to_ne_bytes());
        let mut message = (payload.len() as u64).to_ne_bytes().to_vec();
        let mut kind = [0u8; 32];
        kind[..3].copy_from_slice(b"req");
        message.extend_from_slice(&kind);
        message.extend_from_slice(&payload);
        let (kind, body) = parse(&message).unwrap();
        assert_eq!(kind, "req");
        assert_eq!(request_pid(body), Some(4242));
        assert_eq!(parse(&message[..20]), None);
        assert_eq!(request_pid(&body[..12]), None);
    }
}
