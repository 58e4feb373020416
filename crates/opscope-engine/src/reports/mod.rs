//! The table of report commands: each has a name, an options struct (clap flags on the
//! command line, keywords in Python, query parameters in the viewer), a description,
//! and a run on an analysis [`Context`]. Every surface iterates [`REPORTS`]; none names
//! an analysis, so a new one is a module here and a line in the table.

mod advise;
mod critical_path;
mod gpu;
mod host;
mod hot;
mod info;
mod kernels;
mod memory;
pub mod ops;
mod steps;
mod tfprof;
mod trees;

use std::any::Any;
use std::io::Write;

use clap::{ArgMatches, Args, FromArgMatches};
use opscope_analysis::report::{Report, Reported};
use opscope_analysis::Context;
use serde::de::DeserializeOwned;

/// Every report command, in the order `opscope report` shows their sections.
pub static REPORTS: &[&dyn ReportCommand] = &[
    &advise::ADVISE,
    &info::INFO,
    &steps::STEPS,
    &gpu::GPU,
    &host::HOST,
    &ops::STATS_OP,
    &kernels::STATS_KERNEL,
    &trees::STATS_SCOPE,
    &trees::STATS_CODE,
    &hot::STATS_HOT,
    &memory::MEMORY,
    &critical_path::CRITICAL_PATH,
];

/// The groups of report commands, with their descriptions (`stats op`, `stats code`,
/// … are in `stats`).
pub static GROUPS: &[(&str, &str)] = &[(
    "stats",
    "Where the time goes: per op type, scope tree, Python call tree (tfprof options), per kernel, or hot functions of sampled stacks",
)];

/// The report command called `name` (`"gpu"`, `"stats kernel"`).
pub fn find(name: &str) -> Option<&'static dyn ReportCommand> {
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    REPORTS.iter().copied().find(|r| r.name() == name)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Options that do not make sense (a bad regex, an unknown keyword, a step the trace
    /// does not have).
    #[error("{0}")]
    Options(String),
    /// A report that could not be made (a flame graph that could not be drawn).
    #[error("{0}")]
    Failed(String),
}

impl Error {
    fn options(message: impl Into<String>) -> Error {
        Error::Options(message.into())
    }
}

/// A report command's result, whatever its type: its blocks for text and CSV, itself
/// serialized for JSON and Python.
pub trait Output: Send + Sync {
    /// What text and CSV show.
    fn blocks(&self) -> Report;
    /// The JSON document `--format json` prints (pretty, no final newline).
    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()>;
    /// The same document as values (for Python's dictionaries and the frames).
    fn value(&self) -> serde_json::Value;
    fn as_any(&self) -> &dyn Any;
}

impl<T: Reported + Send + Sync + 'static> Output for T {
    fn blocks(&self) -> Report {
        Reported::report(self)
    }

    fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        // `From` keeps an I/O error's kind: a closed pipe stays one (not an error to print).
        serde_json::to_writer_pretty(out, self).map_err(std::io::Error::from)
    }

    fn value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The output formats a command offers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Formats {
    /// Text and JSON (a report that is not one table).
    TextJson,
    /// Text, JSON and CSV (its first table).
    TextJsonCsv,
}

/// A table of a report's rows for DataFrames: the rows at `path` (a list of objects,
/// found by following object keys, `[]` going into every item of a list), each with
/// its nested objects flattened (`idle.host_wait_ns` → `idle_host_wait_ns`, or without
/// the prefix for the keys in `unprefixed`) and the `parent` keys of the object that
/// holds the list (`rank` of a rank's streams).
#[derive(Debug)]
pub struct Frame {
    pub name: &'static str,
    pub path: &'static [&'static str],
    pub parent: &'static [&'static str],
    pub unprefixed: &'static [&'static str],
    /// The columns of a frame without rows (a notebook indexes them all the same).
    pub columns: &'static [&'static str],
}

/// What a report command is, to each surface.
pub trait ReportCommand: Sync {
    /// Its name: one word, or a group and a word (`stats kernel`).
    fn name(&self) -> &'static str;
    /// Its options as command-line flags, on a command named after its last word, with
    /// its description and examples.
    fn command(&self) -> clap::Command;
    /// The one-line description (`--help`'s list).
    fn about(&self) -> String {
        self.command()
            .get_about()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }
    fn formats(&self) -> Formats;
    /// Its options' names, as Python's keywords and the viewer's query parameters
    /// spell them.
    fn keywords(&self) -> Vec<String> {
        self.command()
            .get_arguments()
            .filter(|a| a.get_id() != "help")
            .map(|a| a.get_id().to_string())
            .collect()
    }
    /// Checks the options the command line parsed before any trace is read (a bad
    /// regex or column is said at once, not after a long load).
    fn check_matches(&self, matches: &ArgMatches) -> Result<(), Error>;
    /// Runs on the options the command line parsed.
    fn run_matches(&self, cx: &Context, matches: &ArgMatches) -> Result<Box<dyn Output>, Error>;
    /// Runs on options given by name (`{"kernel_wait_us": 10}`); missing ones take the
    /// command line's defaults.
    fn run_keywords(
        &self,
        cx: &Context,
        keywords: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Box<dyn Output>, Error>;
    /// The tables of its rows, for DataFrames (the first is the main one).
    fn frames(&self) -> &'static [Frame];
    /// Its section of `opscope report`'s page and the viewer's panels (title and
    /// HTML), with `top` rows in lists, if it has one.
    fn section(&self, cx: &Context, top: usize) -> Result<Option<(&'static str, String)>, Error>;
    /// For `-output timeline:outfile=F`: the slices of the trace that the result shows
    /// (ops and the work they launched), where the command has such a view.
    fn timeline(&self, _cx: &Context, _output: &dyn Output) -> Option<Vec<bool>> {
        None
    }
    /// Whether the command takes tfprof's `-output` destinations.
    fn tfprof_output(&self) -> bool {
        false
    }
}

/// What a report command's run gives.
pub type Run = Result<Box<dyn Output>, Error>;
/// A section of the page: its HTML, with `top` rows in lists.
pub type SectionHtml = fn(&Context, usize) -> Result<String, Error>;
/// The slices a result shows, for `-output timeline`.
pub type TimelineOf = fn(&Context, &dyn Output) -> Option<Vec<bool>>;

/// What can be checked of options before a trace is read.
pub type Check<O> = fn(&O) -> Result<(), Error>;

/// A report command made of functions: the usual way to write one.
pub struct Entry<O: 'static> {
    pub name: &'static str,
    pub formats: Formats,
    pub frames: &'static [Frame],
    pub run: fn(&Context, &O) -> Run,
    /// The section of the page: its title and its HTML from the trace.
    pub section: Option<(&'static str, SectionHtml)>,
    pub timeline: Option<TimelineOf>,
    /// What can be checked of the options without a trace.
    pub check: Option<Check<O>>,
}

impl<O> ReportCommand for Entry<O>
where
    O: Args + FromArgMatches + DeserializeOwned + Default + Sync + 'static,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn command(&self) -> clap::Command {
        let leaf = self.name.rsplit(' ').next().unwrap_or(self.name);
        O::augment_args(clap::Command::new(leaf))
    }

    fn formats(&self) -> Formats {
        self.formats
    }

    fn check_matches(&self, matches: &ArgMatches) -> Result<(), Error> {
        let options = O::from_arg_matches(matches).map_err(|e| Error::options(e.to_string()))?;
        self.check.map_or(Ok(()), |check| check(&options))
    }

    fn run_matches(&self, cx: &Context, matches: &ArgMatches) -> Result<Box<dyn Output>, Error> {
        let options = O::from_arg_matches(matches).map_err(|e| Error::options(e.to_string()))?;
        (self.run)(cx, &options)
    }

    fn run_keywords(
        &self,
        cx: &Context,
        keywords: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Box<dyn Output>, Error> {
        let known = self.keywords();
        if let Some(unknown) = keywords.keys().find(|k| !known.contains(k)) {
            return Err(Error::options(format!(
                "{}: no option `{unknown}` (--{}); its options: {}",
                self.name,
                unknown.replace('_', "-"),
                known.join(", ")
            )));
        }
        // A list is what the command line takes comma-separated (`-select a,b`).
        let keywords: serde_json::Map<String, serde_json::Value> = keywords
            .iter()
            .map(|(k, v)| (k.clone(), comma_separated(v)))
            .collect();
        let options: O = serde_json::from_value(serde_json::Value::Object(keywords))
            .map_err(|e| Error::options(format!("{}: {e}", self.name)))?;
        (self.run)(cx, &options)
    }

    fn frames(&self) -> &'static [Frame] {
        self.frames
    }

    fn section(&self, cx: &Context, top: usize) -> Result<Option<(&'static str, String)>, Error> {
        // A section with nothing to say (no samples to list) gives no HTML: left out.
        let section = self
            .section
            .map(|(title, html)| Ok((title, html(cx, top)?)))
            .transpose()?;
        Ok(section.filter(|(_, html)| !html.is_empty()))
    }

    fn timeline(&self, cx: &Context, output: &dyn Output) -> Option<Vec<bool>> {
        self.timeline.and_then(|t| t(cx, output))
    }

    fn tfprof_output(&self) -> bool {
        self.timeline.is_some()
    }
}

/// A list of scalars as one comma-separated string; anything else as it is.
fn comma_separated(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Array(items) => serde_json::Value::String(
            items
                .iter()
                .map(|item| match item {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        ),
        other => other.clone(),
    }
}

/// A regex option: `--NAME` names it in the error.
fn regex(name: &str, pattern: Option<&str>) -> Result<Option<regex::Regex>, Error> {
    pattern
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| Error::options(format!("--{name}: not a valid regex: {e}")))
}

/// The output of a report command whose result has type `R`.
fn boxed<R: Reported + Send + Sync + 'static>(result: R) -> Result<Box<dyn Output>, Error> {
    Ok(Box::new(result))
}
