//! `opscope._opscope`, the extension module under the `opscope` Python package: loads
//! traces into the model, hands its tables to pyarrow through the Arrow C data
//! interface (the buffers built here are the ones Python reads: no copy), runs the
//! report commands on a loaded model, and runs the whole command line.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_pyarrow::{PyArrowType, Table as ArrowTable};
use opscope_formats::arrow::{Batches, Table};
use opscope_model::Trace;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

create_exception!(
    _opscope,
    Error,
    PyException,
    "A trace that cannot be read, or a command that fails, as opscope says it."
);

fn error(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// Runs `work` on a worker thread while this one waits without the GIL, looking for
/// Python's signals every 100 ms: Ctrl-C in a notebook interrupts a long load at once
/// (as `KeyboardInterrupt`), where the Rust side has nowhere to notice it. The work
/// itself cannot be stopped: it goes on to its end and its result is dropped.
fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (done, result) = channel();
    workers::run(Box::new(move || {
        let _ = done.send(work());
    }))
    .map_err(error)?;
    let mut result = result;
    loop {
        // The receiver goes into the wait and comes back with what it got.
        let (got, back) = py.detach(move || {
            let got = result.recv_timeout(std::time::Duration::from_millis(100));
            (got, result)
        });
        result = back;
        match got {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(error("opscope's work ended without an answer (a panic?)"))
            }
        }
    }
}

/// The threads the module's work runs on: an idle one when there is one, else a new
/// one. One after another, calls run on the same thread, so they reuse the memory its
/// malloc arena kept (a first `gpu(t)` on a 2 GB trace took 2.5× the next when each
/// call had a thread, and an arena, of its own); a call still running (a load that
/// Ctrl-C left behind) never holds up the next.
mod workers {
    use std::sync::mpsc::{channel, Sender};
    use std::sync::Mutex;

    type Job = Box<dyn FnOnce() + Send>;

    /// Idle workers, the most recent last.
    static IDLE: Mutex<Vec<Sender<Job>>> = Mutex::new(Vec::new());

    pub fn run(job: Job) -> std::io::Result<()> {
        let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let job = match idle {
            Some(worker) => match worker.send(job) {
                Ok(()) => return Ok(()),
                // The worker is gone (it panicked): a new one takes the job.
                Err(returned) => returned.0,
            },
            None => job,
        };
        let (sender, jobs) = channel::<Job>();
        sender.send(job).expect("the receiver is here");
        std::thread::Builder::new()
            .name("opscope".into())
            .spawn(move || {
                while let Ok(job) = jobs.recv() {
                    job();
                    IDLE.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(sender.clone());
                }
            })?;
        Ok(())
    }
}

/// The event table called `name`.
fn event_table(name: &str) -> PyResult<Table> {
    Table::ALL
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "no table {name:?} (slices, tracks, counters, instants, flows, samples, sources)"
            ))
        })
}

/// What every report of one trace needs, computed by the first: which call launched
/// which device work, and the step markers.
struct Shared {
    correlation: opscope_analysis::correlate::Correlation,
    step_markers: Vec<Vec<opscope_analysis::markers::Bounds>>,
}

/// A trace loaded into opscope's model.
#[pyclass(module = "opscope._opscope", frozen)]
struct Model {
    trace: Arc<Trace>,
    shared: Arc<std::sync::OnceLock<Shared>>,
    /// What it was loaded from, as the commands run on it name their TRACE.
    inputs: Vec<PathBuf>,
}

#[pymethods]
impl Model {
    /// The table `name` (slices, tracks, counters, instants, flows or sources) as a
    /// `pyarrow.Table`.
    fn table(&self, py: Python<'_>, name: &str) -> PyResult<PyArrowType<ArrowTable>> {
        let trace = Arc::clone(&self.trace);
        let batches: Vec<RecordBatch> = if name == "sources" {
            py.detach(|| Batches::new(&trace).sources().map(|b| vec![b]))
        } else {
            let table = event_table(name)?;
            py.detach(|| Batches::new(&trace).whole(table))
        }
        .map_err(error)?;
        // Every batch of a table has one schema; an empty list never happens.
        let schema = batches[0].schema();
        Ok(PyArrowType(
            ArrowTable::try_new(batches, schema).map_err(error)?,
        ))
    }

    /// Rows of each table, without building it.
    fn rows(&self, name: &str) -> PyResult<usize> {
        if name == "sources" {
            return Ok(self.trace.sources.len());
        }
        Ok(event_table(name)?.len(&self.trace))
    }

    /// Writes the trace to `output` in the format `to` names (else the one its name
    /// chooses), through the exporters `opscope convert` writes with; gives the line
    /// that says what was written.
    #[pyo3(signature = (output, to = None, force = false))]
    fn save(
        &self,
        py: Python<'_>,
        output: PathBuf,
        to: Option<String>,
        force: bool,
    ) -> PyResult<String> {
        let trace = Arc::clone(&self.trace);
        interruptible(py, move || {
            opscope::embed::save(&trace, &output, to.as_deref(), force)
        })?
        .map_err(|e| error(format!("{e:#}")))
    }

    /// Runs the report command `name` (`"gpu"`, `"stats kernel"`) with `options` by
    /// name (a dict; missing ones take the command line's defaults), on this model:
    /// no command line, no printing. The result renders as the CLI's and gives Arrow
    /// frames.
    fn report(
        &self,
        py: Python<'_>,
        name: String,
        options: &Bound<'_, PyDict>,
    ) -> PyResult<Report> {
        let keywords = keywords(options)?;
        let trace = Arc::clone(&self.trace);
        let shared = Arc::clone(&self.shared);
        let (command, output) = interruptible(py, move || {
            let shared = shared.get_or_init(|| Shared {
                correlation: opscope_analysis::correlate::correlate(&trace),
                step_markers: opscope_analysis::markers::step_markers(&trace),
            });
            let cx = opscope_analysis::Context::sharing(
                &trace,
                &shared.correlation,
                &shared.step_markers,
            );
            opscope::embed::report_in(&cx, &name, &keywords)
        })?
        .map_err(|e| error(format!("{e:#}")))?;
        Ok(Report { command, output })
    }

    /// Writes `opscope report`'s page of this model to `output` (the top `top` rows in
    /// lists); gives the line that says what was written.
    #[pyo3(signature = (output, top = 20, force = false))]
    fn page(&self, py: Python<'_>, output: PathBuf, top: usize, force: bool) -> PyResult<String> {
        let trace = Arc::clone(&self.trace);
        let inputs = self.inputs.clone();
        interruptible(py, move || {
            opscope::embed::write_page(&trace, &inputs, &output, top, force)
        })?
        .map_err(|e| error(format!("{e:#}")))
    }

    /// Writes `opscope flame`'s graph of this model to `output`; gives the line that
    /// says what was written.
    #[pyo3(signature = (output, cpu_only = false, title = None, force = false, wall = false))]
    fn flame(
        &self,
        py: Python<'_>,
        output: PathBuf,
        cpu_only: bool,
        title: Option<String>,
        force: bool,
        wall: bool,
    ) -> PyResult<String> {
        let trace = Arc::clone(&self.trace);
        interruptible(py, move || {
            opscope::embed::write_flame(&trace, &output, cpu_only, wall, title.as_deref(), force)
        })?
        .map_err(|e| error(format!("{e:#}")))
    }

    /// Runs an opscope command that reports on a trace (`["gpu", "--format", "json"]`)
    /// on this model, and gives what it printed.
    fn run(&self, py: Python<'_>, args: Vec<String>) -> PyResult<String> {
        let trace = Arc::clone(&self.trace);
        let inputs = self.inputs.clone();
        let printed = interruptible(py, move || opscope::embed::run_on(trace, &inputs, &args))?
            .map_err(|e| error(format!("{e:#}")))?;
        String::from_utf8(printed).map_err(error)
    }
}

/// Options from Python's keywords, as JSON values: None is left out (the default).
fn keywords(options: &Bound<'_, PyDict>) -> PyResult<serde_json::Map<String, serde_json::Value>> {
    let mut out = serde_json::Map::new();
    for (key, value) in options.iter() {
        let key: String = key.extract()?;
        if value.is_none() {
            continue;
        }
        let value = json_of(&value)
            .map_err(|kind| error(format!("option {key}: a {kind} is not an option's value")))?;
        out.insert(key, value);
    }
    Ok(out)
}

/// A Python scalar, or a list or tuple of them, as a JSON value; else its type's name.
fn json_of(value: &Bound<'_, PyAny>) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    // `bool` first: Python's booleans are integers too.
    if value.is_instance_of::<PyBool>() {
        return value
            .extract::<bool>()
            .map(Value::Bool)
            .map_err(|e| e.to_string());
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = value.extract::<u64>() {
            return Ok(Value::from(n));
        }
    }
    if value.is_instance_of::<PyFloat>() {
        if let Ok(f) = value.extract::<f64>() {
            return Ok(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number));
        }
    }
    if value.is_instance_of::<PyString>() {
        return value
            .extract::<String>()
            .map(Value::String)
            .map_err(|e| e.to_string());
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for item in value.try_iter().map_err(|e| e.to_string())? {
            items.push(json_of(&item.map_err(|e| e.to_string())?)?);
        }
        return Ok(Value::Array(items));
    }
    Err(value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "value".to_string()))
}

/// A JSON value as Python's: dicts, lists, numbers, text, None.
fn python_of<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(python_of(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(fields) => {
            let dict = PyDict::new(py);
            for (k, v) in fields {
                dict.set_item(k, python_of(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// What a report command reported on a model: rendered as the CLI renders it, or as
/// Arrow frames and Python values built from the result itself.
#[pyclass(module = "opscope._opscope", frozen)]
struct Report {
    command: &'static dyn opscope_engine::ReportCommand,
    output: Box<dyn opscope_engine::Output>,
}

impl Report {
    fn rendered(&self, format: opscope_engine::render::Format) -> PyResult<String> {
        let mut out = Vec::new();
        opscope_engine::render::render(&*self.output, format, None, &mut out).map_err(error)?;
        String::from_utf8(out).map_err(error)
    }
}

#[pymethods]
impl Report {
    /// The JSON document `opscope COMMAND --format json` prints.
    fn json(&self) -> PyResult<String> {
        self.rendered(opscope_engine::render::Format::Json)
    }

    /// The text `opscope COMMAND --wide` prints.
    fn text(&self) -> PyResult<String> {
        self.rendered(opscope_engine::render::Format::Text)
    }

    /// The CSV `opscope COMMAND --format csv` prints (empty for a report that is not a
    /// table).
    fn csv(&self) -> PyResult<String> {
        self.rendered(opscope_engine::render::Format::Csv)
    }

    /// The result's field `key` (the whole result without one) as Python values.
    #[pyo3(signature = (key = None))]
    fn value<'py>(&self, py: Python<'py>, key: Option<&str>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.output.value();
        match key {
            Some(key) => python_of(py, value.get(key).unwrap_or(&serde_json::Value::Null)),
            None => python_of(py, &value),
        }
    }

    /// The command's frames of rows, by name, each a `pyarrow.RecordBatch`.
    fn frames<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let frames = opscope_engine::frames::frames(self.command, &*self.output).map_err(error)?;
        let dict = PyDict::new(py);
        for (name, batch) in frames {
            dict.set_item(name, PyArrowType(batch).into_pyobject(py)?)?;
        }
        Ok(dict)
    }
}

/// Loads traces (files, or directories of them) into one model, as the command line
/// reads them: from the model cache when it holds them and `cache` is true; with
/// `partial`, a file that fails part way gives what was read before the error.
#[pyfunction]
#[pyo3(signature = (inputs, cache = true, partial = false))]
fn load(py: Python<'_>, inputs: Vec<PathBuf>, cache: bool, partial: bool) -> PyResult<Model> {
    let reading = inputs.clone();
    let trace = interruptible(py, move || opscope::embed::load(&reading, cache, partial))?
        .map_err(|e| error(format!("{e:#}")))?;
    Ok(Model {
        trace: Arc::new(trace),
        shared: Arc::default(),
        inputs,
    })
}

/// Runs the `opscope` command line (`argv[0]` is the program's name) and gives its exit
/// status.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| opscope::cli::run(argv.into_iter().map(Into::into)))
}

/// `opscope diff ARGS` of two loaded models (`b` none: parts of `a`, by `--rank` or
/// `--steps` given twice): the JSON document it prints.
#[pyfunction]
#[pyo3(signature = (a, b, args))]
fn diff(py: Python<'_>, a: &Model, b: Option<&Model>, args: Vec<String>) -> PyResult<String> {
    let ta = Arc::clone(&a.trace);
    let tb = b.map(|m| Arc::clone(&m.trace));
    let name = |m: &Model| {
        let mut inputs = m
            .inputs
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>();
        if inputs.is_empty() {
            inputs.push("loaded-trace".into());
        }
        PathBuf::from(inputs.join(","))
    };
    let mut names = vec![name(a)];
    names.extend(b.map(name));
    interruptible(py, move || {
        opscope::embed::diff(&ta, tb.as_deref(), &names, &args)
    })?
    .map_err(|e| error(format!("{e:#}")))
}

/// The command-line flag of `command`'s keyword option (`order_by` → `-order_by`).
#[pyfunction]
fn flag(command: &str, option: &str) -> String {
    opscope::embed::flag(command, option)
}

/// Names the file this module was loaded from, for the model cache's keys.
#[pyfunction]
fn set_code_file(path: PathBuf) {
    opscope::embed::set_code_file(path);
}

#[pymodule]
fn _opscope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add_class::<Report>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(set_code_file, m)?)?;
    m.add_function(wrap_pyfunction!(flag, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("REPORTS", opscope::embed::commands())?;
    let table: Vec<(String, String, Vec<String>, Vec<String>)> = opscope_engine::REPORTS
        .iter()
        .map(|r| {
            (
                r.name().to_string(),
                r.about(),
                r.keywords(),
                r.frames().iter().map(|f| f.name.to_string()).collect(),
            )
        })
        .collect();
    // The report commands: name, description, options, frames.
    m.add("REPORT_COMMANDS", table)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
