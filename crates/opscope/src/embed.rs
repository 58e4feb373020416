//! opscope inside another program (the Python module): load a model once, then run the
//! commands that report on a trace against it, as the command line would on the same
//! files, and take what they print. One code path, so the numbers are the CLI's.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Result};
use opscope_model::Trace;

use crate::{cli, load, output};

/// Loads `inputs` (files or directories of them) as `opscope info INPUTS…` would: from
/// the model cache when it holds them and `cache` is on, with hosts merged onto one
/// clock; no progress bar. With `partial`, a file that fails part way gives what was
/// read before the error, as `--partial` does. The process's malloc keeps freed memory
/// from then on, as the executable's does (see [`crate::malloc`]).
pub fn load(inputs: &[PathBuf], cache: bool, partial: bool) -> Result<Trace> {
    crate::malloc::keep_freed_memory();
    Ok(opscope_engine::load::load(
        inputs,
        &opscope_engine::load::LoadOptions {
            quiet: true,
            cache,
            partial,
        },
    )?)
}

/// Names the file that holds this code (the Python module's shared library), which
/// the model cache's keys name in place of the running executable.
pub fn set_code_file(path: PathBuf) {
    opscope_engine::cache::set_code_file(path);
}

/// The commands that report on a trace, and so can run on a loaded one from their
/// command line ([`run_on`]): the engine's report commands (which [`report_in`] runs
/// without one), `stats` (its tree views) and the two that write files.
pub fn commands() -> Vec<String> {
    let mut names: Vec<String> = opscope_engine::REPORTS
        .iter()
        .map(|r| r.name().split(' ').next().unwrap_or_default().to_string())
        .chain(["stats", "flame", "report"].map(String::from))
        .collect();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// A report command and what it reported.
pub type Reported = (
    &'static dyn opscope_engine::ReportCommand,
    Box<dyn opscope_engine::Output>,
);

/// Runs the report command `name` (`"gpu"`, `"stats kernel"`) on a loaded trace, in
/// `cx` (which the caller keeps, with the correlation and step markers several reports
/// share), with options by name (missing ones take the command line's defaults): no
/// command line, no printing.
pub fn report_in(
    cx: &opscope_analysis::Context,
    name: &str,
    keywords: &serde_json::Map<String, serde_json::Value>,
) -> Result<Reported> {
    let Some(command) = opscope_engine::find(name) else {
        let names: Vec<&str> = opscope_engine::REPORTS.iter().map(|r| r.name()).collect();
        bail!(
            "`{name}` is not a report command (those that are: {})",
            names.join(", ")
        );
    };
    Ok((command, command.run_keywords(cx, keywords)?))
}

/// The command-line flag of `command`'s keyword option: `stats`'s tfprof options keep
/// tfprof's spelling (`order_by` → `-order_by`), others take dashes
/// (`exclude_last_step` → `--exclude-last-step`).
pub fn flag(command: &str, option: &str) -> String {
    if command == "stats"
        && crate::commands::reports::tfprof_options()
            .iter()
            .any(|o| o == option)
    {
        format!("-{option}")
    } else {
        format!("--{}", option.replace('_', "-"))
    }
}

/// Runs the command line `args` (no program name, no TRACE: e.g. `["gpu", "--format",
/// "json"]`) on `trace`, loaded from `inputs` (the TRACE arguments the command is told
/// of, for what it prints of them), and gives what it printed. Files it is told to
/// write (`flame -o`, `report -o`) are written.
pub fn run_on(trace: Arc<Trace>, inputs: &[PathBuf], args: &[String]) -> Result<Vec<u8>> {
    let known = commands();
    let Some(name) = args.first() else {
        bail!("no command given (one of: {})", known.join(", "));
    };
    if !known.contains(name) {
        bail!(
            "`{name}` does not report on a loaded trace (those that do: {})",
            known.join(", ")
        );
    }
    // TRACE is required on the command line: the inputs are named, and the loaded
    // model stands in for reading them.
    let names: Vec<OsString> = if inputs.is_empty() {
        vec![OsString::from("loaded-trace")]
    } else {
        inputs.iter().map(|p| p.clone().into_os_string()).collect()
    };
    let argv = std::iter::once(OsString::from("opscope"))
        .chain(args.iter().map(OsString::from))
        .chain(std::iter::once(OsString::from("--")))
        .chain(names);
    let parsed = match cli::parse(argv) {
        Ok(parsed) => parsed,
        Err(e) => bail!("{}", e.render().to_string().trim_end()),
    };
    let (result, printed) = output::capture_stdout(|| load::with_preloaded(trace, || parsed.run()));
    result?;
    Ok(printed)
}

/// Writes `opscope report`'s page of a loaded trace (titled after `inputs`) to `output`,
/// as the command writes it; gives the line that says what was written.
pub fn write_page(
    trace: &Trace,
    inputs: &[PathBuf],
    output: &std::path::Path,
    top: usize,
    force: bool,
) -> Result<String> {
    let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    crate::commands::report::write(trace, &names.join(", "), output, top, force)
}

/// Writes `opscope flame`'s graph of a loaded trace to `output`; gives the line that
/// says what was written.
pub fn write_flame(
    trace: &Trace,
    output: &std::path::Path,
    cpu_only: bool,
    wall: bool,
    title: Option<&str>,
    force: bool,
) -> Result<String> {
    let options = crate::exporters::ExportOptions {
        device: !cpu_only,
        wall,
        title: title.unwrap_or(crate::commands::flame::TITLE).to_string(),
        force,
    };
    crate::commands::flame::write(trace, output, &options)
}

/// Writes a loaded trace to `output` in the format `to` names, else the one its file
/// name chooses, as `opscope convert` writes it; gives the line that says what was
/// written.
pub fn save(
    trace: &Trace,
    output: &std::path::Path,
    to: Option<&str>,
    force: bool,
) -> Result<String> {
    let exporter = crate::exporters::choose(output, to)?;
    let options = crate::exporters::ExportOptions {
        force,
        ..Default::default()
    };
    exporter.check(output, &options)?;
    exporter.write(trace, output, &options)
}

/// `opscope diff ARGS` on models loaded before (see
/// [`crate::commands::diff::compare_loaded`]): its JSON document.
pub fn diff(a: &Trace, b: Option<&Trace>, names: &[PathBuf], args: &[String]) -> Result<String> {
    crate::commands::diff::compare_loaded(a, b, names, args)
}
