//! opscope importers and exporters: one module per format, over byte slices and
//! `Write`rs, with no I/O policy of their own (the CLI opens, maps and decompresses
//! files). Importers add one source to a [`opscope_model::Trace`]; exporters read one.

pub mod chrome;
pub mod ctf;
pub mod error;
pub mod input;
pub mod perfetto;
pub mod xplane;

#[cfg(test)]
mod roundtrip_tests;

pub use error::{ExportError, ImportError};
pub use input::{detect, import_bytes, Format};
