//! opscope as a library: the command line ([`cli`]) that the `opscope` executable and
//! the Python module both run, and [`embed`], which loads a model once and runs the
//! report commands on it (what `import opscope` is built on).

pub mod cli;
mod commands;
pub mod embed;
pub mod exporters;
mod load;
pub mod malloc;
mod output;
mod record;
mod view;
