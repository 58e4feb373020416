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

create_exception!(
    _opscope,
    Error,
    PyException,
    "A trace that cannot be read, or a command that fails, as opscope says it."
);

fn error(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// Runs `work` on a thread of its own while this one waits without the GIL, looking
/// for Python's signals every 100 ms: Ctrl-C in a notebook interrupts a long load at
/// once (as `KeyboardInterrupt`), where the Rust side has nowhere to notice it. The
/// work itself cannot be stopped: it goes on to its end and its result is dropped.
fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (done, result) = channel();
    std::thread::Builder::new()
        .name("opscope".into())
        .spawn(move || {
            let _ = done.send(work());
        })
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

/// The event table called `name`.
fn event_table(name: &str) -> PyResult<Table> {
    Table::ALL
        .into_iter()
        .find(|t| t.name() == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "no table {name:?} (slices, tracks, counters, instants, flows, sources)"
            ))
        })
}

/// A trace loaded into opscope's model.
#[pyclass(module = "opscope._opscope", frozen)]
struct Model {
    trace: Arc<Trace>,
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

/// Loads traces (files, or directories of them) into one model, as the command line
/// reads them: from the model cache when it holds them and `cache` is true.
#[pyfunction]
#[pyo3(signature = (inputs, cache = true))]
fn load(py: Python<'_>, inputs: Vec<PathBuf>, cache: bool) -> PyResult<Model> {
    let reading = inputs.clone();
    let trace = interruptible(py, move || opscope::embed::load(&reading, cache))?
        .map_err(|e| error(format!("{e:#}")))?;
    Ok(Model {
        trace: Arc::new(trace),
        inputs,
    })
}

/// Runs the `opscope` command line (`argv[0]` is the program's name) and gives its exit
/// status.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| opscope::cli::run(argv.into_iter().map(Into::into)))
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
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(set_code_file, m)?)?;
    m.add_function(wrap_pyfunction!(flag, m)?)?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("REPORTS", opscope::embed::REPORTS.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
