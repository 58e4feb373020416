//! Errors of importers and exporters. Every import error names the file and where in
//! it the problem is (a byte offset or an event index), so one line tells the user
//! what to look at.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ImportError {
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// The bytes are not what the format says, at `offset` in the file.
    #[error("{path}: byte {offset}: {message}")]
    Syntax {
        path: String,
        offset: u64,
        message: String,
    },
    /// As `Syntax`, in a compressed file: `offset` is one into the decompressed data.
    #[error("{path}: byte {offset} of the decompressed data: {message}")]
    Decompressed {
        path: String,
        offset: u64,
        message: String,
    },
    /// A well-formed event that breaks the format's rules beyond repair.
    #[error("{path}: event {index}: {message}")]
    Event {
        path: String,
        index: u64,
        message: String,
    },
    #[error("{path}: not a trace opscope can read ({message})")]
    UnknownFormat { path: String, message: String },
}

#[derive(Debug, Error)]
pub enum ExportError {
    /// The caller names what was being written (the OS error alone, so that a chain of
    /// causes does not say it twice).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Writing `path` failed: the message names it, the source says why.
    #[error("{path}: cannot write")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
}
