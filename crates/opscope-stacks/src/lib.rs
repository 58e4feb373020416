//! Stacks of running programs, read from outside them: a Python interpreter's threads
//! and frames (`python`), found through the process's memory map (`maps`) and read
//! with `process_vm_readv` (`memory`), never stopping the target; and native stacks
//! sampled by the kernel and unwound here (`native`, x86_64).

pub mod maps;
pub mod memory;
pub mod native;
pub mod python;

pub use python::{Frame, PythonProcess, ThreadStack};

/// Why a process's stacks could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("process {pid}: {source}")]
    Proc {
        pid: i32,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "process {pid}: reading its memory is not permitted ({source}); run as its user with \
         ptrace rights: root, CAP_SYS_PTRACE, or kernel.yama.ptrace_scope 0"
    )]
    Permission {
        pid: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("process {pid}: no Python interpreter found (no libpython or python executable with _PyRuntime in its memory map)")]
    NotPython { pid: i32 },
    #[error("process {pid}: Python {version} is not supported yet (3.9 to 3.13 are)")]
    Unsupported { pid: i32, version: String },
    #[error("{path}: {message}")]
    Binary { path: String, message: String },
    #[error("process {pid}: reading {len} bytes at {addr:#x}: {source}")]
    Read {
        pid: i32,
        addr: u64,
        len: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("process {pid}: {what} at {addr:#x} is not what Python {version} lays out there")]
    Layout {
        pid: i32,
        what: &'static str,
        addr: u64,
        version: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
