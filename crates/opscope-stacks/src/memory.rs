//! Reading another process's memory with `process_vm_readv`: the target runs on; a
//! read racing its writes may see a half-changed structure, which the readers above
//! check for (a type pointer, a size bound) rather than trust.

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
