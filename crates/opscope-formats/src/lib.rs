//! opscope importers and exporters: one module per format, over byte slices and
//! `Write`rs, with no I/O of their own (the CLI finds, opens and maps the files and
//! hands over their bytes; gzip'd input is inflated here, by `input`, streaming where
//! the format allows). Importers add one source to a [`opscope_model::Trace`];
//! exporters read one.

pub mod chrome;
pub mod ctf;
pub mod error;
pub mod input;
#[cfg(feature = "nsys")]
pub mod nsys;
pub mod perfetto;
mod prefault;
mod read_ahead;
pub mod run_metadata;
pub mod xplane;

#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod shared_data;

pub use error::{ExportError, ImportError};
pub use input::{detect, import_bytes, Format};
