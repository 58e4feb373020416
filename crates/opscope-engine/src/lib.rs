//! opscope's engine: the table of report commands ([`reports::REPORTS`]) that the
//! command line, Python, `opscope report`'s page, the viewer's panels and `--live` all
//! iterate, and the one renderer of their results (text, CSV, JSON, HTML, and Arrow
//! frames for Python).

#![forbid(unsafe_code)]

#[cfg(feature = "arrow")]
pub mod frames;
pub mod html;
pub mod page;
pub mod render;
pub mod reports;
mod timeline;

pub use reports::{find, Output, ReportCommand, REPORTS};
pub use timeline::selection as timeline_selection;
