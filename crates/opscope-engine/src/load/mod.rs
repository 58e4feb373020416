//! Loading: the TRACE arguments of a command become one model. Inputs are found
//! ([`walk`]), read and imported each through the format that claims it ([`read`]),
//! linked by the [`crate::passes`], and kept in the [`crate::cache`] for the next
//! command on the same files; long loads show a progress bar on a terminal.

#[allow(unsafe_code)]
pub mod cut_files;
#[allow(unsafe_code)]
mod read;
mod walk;

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use opscope_formats::{watch, ImportError};
use opscope_model::Trace;

use crate::cache;
use crate::passes;

pub use read::files_read;
pub use walk::{expand, Found, How, OWN_NOTES};

/// What loading was asked to do.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Never show a progress bar (it is shown only on a terminal, for big inputs).
    pub quiet: bool,
    /// Read the model from the model cache when it holds these very files, and save
    /// it there after parsing them (see [`crate::cache`]).
    pub cache: bool,
    /// A file named on the command line that cannot be read to its end (cut off while
    /// it was written, damaged) is a warning, and what was read before the error is
    /// analysed, as for a file found in a directory.
    pub partial: bool,
}

/// Why inputs could not be loaded. Each names the input (the file, or `standard
/// input`); the OS's or the format's reason is the error's source.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The system would not open, map, list or read an input.
    #[error("{shown}: {what}")]
    Io {
        shown: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A format could not read an input.
    #[error(transparent)]
    Import(#[from] ImportError),
    /// An input opscope does not read, and why.
    #[error("{0}")]
    Refused(String),
    /// A named file failed after part of it was read; how many events were.
    #[error("{} ({} came before the error: --partial analyses {})", .error.chain(), read_before(*.read), if *.read == 1 { "it" } else { "them" })]
    ReadInPart { error: Box<LoadError>, read: usize },
    /// Every file found in the directories given failed; the first one's error.
    #[error("none of the {n} trace files could be read; the first")]
    NoneRead {
        n: usize,
        #[source]
        first: Box<LoadError>,
    },
}

impl LoadError {
    /// The error and its causes on one line, outermost first.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// Maps an I/O error on the input shown as `shown` to a [`LoadError::Io`].
fn io(
    shown: impl std::fmt::Display,
    what: &'static str,
) -> impl FnOnce(std::io::Error) -> LoadError {
    move |source| LoadError::Io {
        shown: shown.to_string(),
        what,
        source,
    }
}

/// Returns a [`LoadError::Refused`] with the formatted text.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::load::LoadError::Refused(format!($($arg)*)))
    };
}
use refuse;

fn warn(message: &str) {
    eprintln!("opscope: warning: {message}");
}

/// Loads every file of `inputs` into one trace. A file found in a directory that
/// cannot be read is a warning, and the other files are read; a file named on the
/// command line that cannot be read is an error, as is a directory none of whose files
/// can be.
pub fn load(inputs: &[std::path::PathBuf], options: &LoadOptions) -> Result<Trace, LoadError> {
    load_found(&expand(inputs)?, options)
}

/// [`load`] for inputs [`expand`] found already.
pub fn load_found(files: &[Found], options: &LoadOptions) -> Result<Trace, LoadError> {
    let mut trace = load_model(files, options)?;
    passes::merge_hosts(&mut trace);
    Ok(trace)
}

/// The model of `files`, from the cache or parsed and linked, with each host on its
/// own clock.
pub fn load_model(files: &[Found], options: &LoadOptions) -> Result<Trace, LoadError> {
    // A stream has no identity the cache could check again.
    let streams = files.iter().any(|f| f.how == How::Stream);
    let total: u64 = files.iter().map(|f| read::input_bytes(&f.path)).sum();
    let entry = (options.cache && !streams && total >= cache::MIN_INPUT_BYTES)
        .then(cache::directory)
        .flatten()
        .filter(|dir| match cache::why_not_private(dir) {
            None => true,
            Some(why) => {
                warn(&format!(
                    "the model cache {} {why}: it is not used (make it yours with \
                     mode 700, or set OPSCOPE_CACHE_DIR to another directory)",
                    dir.display()
                ));
                false
            }
        })
        .and_then(|dir| {
            let inputs = files
                .iter()
                .map(|f| (f.path.clone(), files_read(&f.path)))
                .collect();
            cache::Entry::for_inputs(&dir, inputs)
        });
    if let Some(trace) = entry.as_ref().and_then(cache::Entry::read) {
        print_warnings(&trace);
        return Ok(trace);
    }
    let parse_started = std::time::Instant::now();
    let bar = progress_bar(total, options);
    let mut trace = Trace::new();
    let mut failed = Vec::new();
    watch::begin(total);
    let mut base = 0;
    for (i, file) in files.iter().enumerate() {
        let shown = read::shown(&file.path);
        bar.set_message(shown.clone());
        watch::file_begins(base);
        let before = events_in(&trace);
        let sources_before = trace.sources.len();
        match read::load_file(file, &shown, &mut trace) {
            Ok(()) => {}
            Err(e) if file.how == How::InDirectory || options.partial => {
                // What the file held after the error is missing: analyses that read
                // the end of a run (its last step) must know.
                for source in sources_before..trace.sources.len() {
                    let source = opscope_model::SourceId(source as u32);
                    let warning = format!("{}{shown}", opscope_model::trace::CUT_SHORT);
                    trace.warnings.push((source, warning));
                }
                failed.push(e)
            }
            Err(e) => {
                // What was read before the error, for a watcher that shows it.
                if watch::is_watched() {
                    trace.finish();
                    watch::offer_last(&trace);
                }
                return Err(read_in_part(e, events_in(&trace) - before));
            }
        }
        let bytes = read::input_bytes(&file.path);
        bar.inc(bytes);
        base += bytes;
        watch::file_begins(base);
        // Formats that do not offer copies while they read are drawn file by file.
        if i + 1 < files.len() {
            watch::offer(&trace, |_| {});
        }
    }
    bar.finish_and_clear();
    // With --partial, what the failed files held before their errors is enough.
    let nothing_read = !options.partial || events_in(&trace) == 0;
    if !failed.is_empty() && failed.len() == files.len() && nothing_read {
        let n = failed.len();
        let first = failed.swap_remove(0);
        let error = if n == 1 {
            first
        } else {
            LoadError::NoneRead {
                n,
                first: Box::new(first),
            }
        };
        return Err(read_in_part(error, events_in(&trace)));
    }
    for e in &failed {
        let go_on = if options.partial {
            "what was read before it is analysed"
        } else {
            "the other files are still read"
        };
        warn(&format!("{}; {go_on}", e.chain()));
    }
    // Every import finishes the model it read (`every_import_leaves_its_model_finished`):
    // again, it would change nothing and cost 30 ms a GB of Kineto JSON. A failed one
    // may have stopped before.
    if !failed.is_empty() {
        trace.finish();
    }
    passes::run_all(&mut trace);
    print_warnings(&trace);
    trace.shrink_to_fit();
    // A model missing a file that could not be read is not saved: the next command
    // tries the file again, and tells of it again.
    if let Some(entry) = entry.filter(|_| failed.is_empty()) {
        entry.write(&trace, parse_started.elapsed());
    }
    Ok(trace)
}

/// `error`, saying that `--partial` would analyse the `read` events before it, if any.
fn read_in_part(error: LoadError, read: usize) -> LoadError {
    if read == 0 {
        return error;
    }
    LoadError::ReadInPart {
        error: Box::new(error),
        read,
    }
}

/// "1 slice, instant or sample", "N slices, instants and samples".
fn read_before(read: usize) -> String {
    if read == 1 {
        "1 slice, instant or sample".into()
    } else {
        format!("{read} slices, instants and samples")
    }
}

/// Events of every kind in `trace` (slices, instants, counter values, stack samples).
fn events_in(trace: &Trace) -> usize {
    trace.slices.len() + trace.instants.len() + trace.counters.len() + trace.samples.len()
}

fn print_warnings(trace: &Trace) {
    // A file cut short was told of with its error.
    let told = |w: &str| w.starts_with(opscope_model::trace::CUT_SHORT);
    for (_, warning) in trace.warnings.iter().filter(|(_, w)| !told(w)) {
        eprintln!("opscope: warning: {warning}");
    }
}

fn progress_bar(total: u64, options: &LoadOptions) -> ProgressBar {
    use std::io::IsTerminal;
    // Small inputs load in well under a second: a bar would only flicker.
    if options.quiet || !std::io::stderr().is_terminal() || total < 32 << 20 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} loading {bytes}/{total_bytes} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    use opscope_model::Trace;

    /// What finishing decides about a model: the slices' order, nesting, durations and
    /// kinds, the order of instants and counter samples, the flows' ends, the repairs.
    fn finished_state(t: &Trace) -> String {
        let s = &t.slices;
        let slices: Vec<_> = (0..s.len())
            .map(|i| {
                (
                    s.ts[i],
                    s.dur[i],
                    s.track[i],
                    s.parent[i],
                    s.name[i],
                    s.kind(i),
                )
            })
            .collect();
        let instants: Vec<_> = (0..t.instants.len())
            .map(|i| (t.instants.ts[i], t.instants.track[i]))
            .collect();
        let counters: Vec<_> = (0..t.counters.len())
            .map(|i| (t.counters.ts[i], t.counters.track[i]))
            .collect();
        let flows: Vec<_> = (0..t.flows.len())
            .map(|i| (t.flows.from[i], t.flows.to[i]))
            .collect();
        format!(
            "{slices:?}\n{instants:?}\n{counters:?}\n{flows:?}\n{:?}",
            t.repairs
        )
    }

    /// The import alone, without the loader's finishing after it, leaves the model
    /// finished: finishing it again changes nothing finishing decides.
    fn assert_import_leaves_its_model_finished(file: &super::Found) {
        let mut trace = Trace::new();
        let shown = super::read::shown(&file.path);
        if super::read::load_file(file, &shown, &mut trace).is_err() {
            return;
        }
        let mut again = trace.clone();
        again.finish();
        assert!(
            finished_state(&trace) == finished_state(&again),
            "{}: finishing the loaded model again changed it",
            file.path.display()
        );
    }

    /// Every format's import leaves the model it read finished, as
    /// `registry::import_bytes` says (the loader relies on it and does not finish
    /// again): on every shared trace, and on Parquet datasets of some.
    #[test]
    fn every_import_leaves_its_model_finished() {
        let Some(traces) = opscope_corpus::traces() else {
            return;
        };
        let found = super::expand(std::slice::from_ref(&traces)).unwrap();
        let formats: std::collections::HashSet<_> = found
            .iter()
            .filter_map(|f| opscope_formats::registry::for_path(&f.path).ok().flatten())
            .map(|i| i.looks_for())
            .collect();
        // Chrome JSON, RunMetadata, XPlane and CTF (Nsight Systems where that feature is on).
        assert!(
            formats.len() >= 4,
            "fewer formats than the corpus holds: {formats:?}"
        );
        for file in &found {
            assert_import_leaves_its_model_finished(file);
        }
        #[cfg(feature = "parquet")]
        {
            let dir = std::env::temp_dir().join(format!("opscope-finished-{}", std::process::id()));
            for input in [
                "kineto/hta/trace_filter",
                "xplane/GPU-multi-worker",
                "ctf/tracecompass/memory",
            ] {
                let options = super::LoadOptions {
                    quiet: true,
                    cache: false,
                    partial: false,
                };
                let trace = super::load(&[traces.join(input)], &options).unwrap();
                let dataset = dir.join(input.replace('/', "_"));
                opscope_formats::parquet::export_dataset(&trace, &dataset, "test", false).unwrap();
                let found = super::expand(&[dataset]).unwrap();
                assert_eq!(found.len(), 1, "{input}: one dataset");
                assert_import_leaves_its_model_finished(&found[0]);
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
