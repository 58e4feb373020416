//! opscope importers and exporters: one module per format, over byte slices and
//! `Write`rs. Each importer implements [`importer::Importer`] (how it knows its inputs
//! and which files one input is made of); [`registry`] lists them and dispatches to
//! them; the CLI finds, opens and maps those files and hands over their bytes (SQLite
//! alone opens its database itself). Gzip'd input is inflated on the way (`input`),
//! streaming where the format allows; archives hold traces ([`archive`]). Importers
//! add sources to a [`opscope_model::Trace`]; exporters read one.

pub mod archive;
#[cfg(feature = "arrow")]
pub mod arrow;
pub mod chrome;
mod common;
pub mod ctf;
pub mod error;
pub mod gzip;
pub mod importer;
pub mod input;
pub mod kernel_names;
mod map_ahead;
#[cfg(feature = "nsys")]
pub mod nsys;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod perfetto;
mod prefault;
mod read_ahead;
pub mod registry;
pub mod run_metadata;
pub mod speedscope;
pub mod watch;
pub mod xplane;

#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod shared_data;

pub use error::{ExportError, ImportError};
pub use registry::import_bytes;
