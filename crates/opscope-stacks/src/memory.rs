//! Reading another process's memory with `process_vm_readv`: the target runs on; a
//! read racing its writes may see a half-changed structure, which the readers above
//! check for (a type pointer, a size bound) rather than trust. A [`Snapshot`] keeps the
//! pages a walk read ([`Recorder`]), to walk them again where that interpreter is not
//! installed (the tests of every supported version).

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::{Error, Result};

/// Memory to read stacks from: a live process here; a core file or snapshot could
/// stand in for tests.
pub trait Memory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()>;

    fn u64_at(&self, addr: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    fn i64_at(&self, addr: u64) -> Result<i64> {
        Ok(self.u64_at(addr)? as i64)
    }

    fn u32_at(&self, addr: u64) -> Result<u32> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_ne_bytes(b))
    }

    fn u8_at(&self, addr: u64) -> Result<u8> {
        let mut b = [0u8; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }

    fn bytes_at(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        self.read(addr, &mut b)?;
        Ok(b)
    }
}

/// A running process's memory.
pub struct Process {
    pub pid: i32,
}

impl Memory for Process {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: `local` describes `buf`, which we own mutably for the call; the
        // remote iovec is only an address in the other process, which the kernel
        // checks (an unmapped one fails with EFAULT, no memory of ours is touched).
        let got = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        if got < 0 {
            let source = std::io::Error::last_os_error();
            return Err(match source.raw_os_error() {
                Some(libc::EPERM) => Error::Permission {
                    pid: self.pid,
                    source,
                },
                _ => Error::Read {
                    pid: self.pid,
                    addr,
                    len: buf.len(),
                    source,
                },
            });
        }
        if got as usize != buf.len() {
            return Err(Error::Read {
                pid: self.pid,
                addr,
                len: buf.len(),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("only {got} bytes readable"),
                ),
            });
        }
        Ok(())
    }
}

/// Snapshots keep memory by pages of this size (what was not read in them is zero).
const PAGE: u64 = 4096;

/// Pages of a process's memory as they were when read: a [`Memory`] whose reads of
/// anything else fail.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pages: BTreeMap<u64, Vec<u8>>,
}

impl Snapshot {
    /// The pages as one file: each page's address (8 bytes, little-endian) and its
    /// 4096 bytes, in address order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pages.len() * (8 + PAGE as usize));
        for (addr, page) in &self.pages {
            out.extend_from_slice(&addr.to_le_bytes());
            out.extend_from_slice(page);
        }
        out
    }

    /// The pages of [`Snapshot::to_bytes`]'s file; `None` when it is not one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Snapshot> {
        let record = 8 + PAGE as usize;
        if !bytes.len().is_multiple_of(record) {
            return None;
        }
        let pages = bytes
            .chunks_exact(record)
            .map(|r| {
                let (addr, page) = r.split_at(8);
                (
                    u64::from_le_bytes(addr.try_into().unwrap_or_default()),
                    page.to_vec(),
                )
            })
            .collect();
        Some(Snapshot { pages })
    }

    pub fn pages(&self) -> usize {
        self.pages.len()
    }
}

impl Memory for Snapshot {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        let missing = || Error::Read {
            pid: 0,
            addr,
            len,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not in the snapshot"),
        };
        let mut done = 0;
        while done < buf.len() {
            let at = addr.checked_add(done as u64).ok_or_else(missing)?;
            let base = at - at % PAGE;
            let page = self.pages.get(&base).ok_or_else(missing)?;
            let from = (at - base) as usize;
            let n = (PAGE as usize - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&page[from..from + n]);
            done += n;
        }
        Ok(())
    }
}

/// A memory that keeps every page it reads in a [`Snapshot`].
pub struct Recorder<M> {
    inner: M,
    snapshot: RefCell<Snapshot>,
}

impl<M: Memory> Recorder<M> {
    pub fn new(inner: M) -> Recorder<M> {
        Recorder {
            inner,
            snapshot: RefCell::new(Snapshot::default()),
        }
    }

    /// The pages read so far.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.borrow().clone()
    }
}

impl<M: Memory> Memory for Recorder<M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(addr, buf)?;
        // Only the bytes read: the rest of each page stays zero, so a snapshot holds the
        // structures a walk read and nothing else of the process (its environment,
        // other objects' strings).
        let mut snapshot = self.snapshot.borrow_mut();
        let mut done = 0;
        while done < buf.len() {
            let at = addr.wrapping_add(done as u64);
            let base = at - at % PAGE;
            let page = snapshot
                .pages
                .entry(base)
                .or_insert_with(|| vec![0u8; PAGE as usize]);
            let from = (at - base) as usize;
            let n = (PAGE as usize - from).min(buf.len() - done);
            page[from..from + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory where byte `a` holds `a % 251`.
    struct Counting;

    impl Memory for Counting {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = ((addr + i as u64) % 251) as u8;
            }
            Ok(())
        }
    }

    #[test]
    fn a_snapshot_gives_back_what_was_read_across_pages_and_nothing_else() {
        let recorder = Recorder::new(Counting);
        let mut first = [0u8; 100];
        recorder.read(PAGE * 3 - 50, &mut first).unwrap();
        let snapshot = Snapshot::from_bytes(&recorder.snapshot().to_bytes()).unwrap();
        assert_eq!(snapshot.pages(), 2);
        let mut again = [0u8; 100];
        snapshot.read(PAGE * 3 - 50, &mut again).unwrap();
        assert_eq!(first, again);
        // The rest of those pages is zero, and no other page is there.
        assert_eq!(snapshot.u32_at(PAGE * 2).unwrap(), 0);
        assert!(snapshot.u64_at(PAGE * 4).is_err());
        assert!(Snapshot::from_bytes(&[0u8; 10]).is_none());
    }
}
