//! One module per subcommand that is not a report command of the engine's table: each
//! turns its clap arguments into plain options and runs. The table's commands are
//! added and run by [`reports`].

pub mod agent;
pub mod attach;
pub mod convert;
pub mod diff;
pub mod dump;
pub mod env;
pub mod flame;
pub mod merge;
pub mod record;
pub mod report;
pub mod reports;
pub mod sql;
pub mod top;
pub mod view;
