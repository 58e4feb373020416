//! opscope's engine: inputs become a model ([`load`]: the files found, imported,
//! linked by the [`passes`] and kept in the model [`cache`]), the table of report
//! commands ([`reports::REPORTS`]) that the command line, Python, `opscope report`'s
//! page, the viewer's panels and `--live` all iterate, and the one renderer of their
//! results (text, CSV, JSON, HTML, and Arrow frames for Python).

// Only the modules that map files and ask the system about them allow it (the model
// cache, reading inputs, the SIGBUS handler for cut files).
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod cache;
pub mod diff_page;
#[cfg(feature = "arrow")]
pub mod frames;
pub mod html;
pub mod load;
pub mod page;
pub mod passes;
pub mod render;
pub mod reports;
mod timeline;

pub use reports::{find, Output, ReportCommand, REPORTS};
pub use timeline::selection as timeline_selection;
