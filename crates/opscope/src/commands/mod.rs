//! One module per subcommand: each turns its clap arguments into plain options and runs.

pub mod agent;
pub mod convert;
pub mod dump;
pub mod env;
pub mod flame;
pub mod gpu;
pub mod info;
pub mod memory;
pub mod merge;
pub mod record;
pub mod report;
pub mod sql;
pub mod stats;
pub mod steps;
pub mod top;
pub mod view;
