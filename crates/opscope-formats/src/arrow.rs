//! The model's tables as Arrow record batches: slices, tracks, counters, instants,
//! flows and sampled stacks, their columns the model's own (from its single column
//! declaration; samples with their stacks spelled out), as the Parquet dataset stores
//! them and the Python module hands them to pyarrow.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder, UInt32Builder};
use arrow_array::types::{Int32Type, UInt32Type};
use arrow_array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use opscope_model::events::Column;
use opscope_model::{ArgValue, ArgsId, InstantScope, SliceKind, SourceId, StrId, Trace, NONE};

use crate::error::ExportError;

/// The event tables.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Table {
    Slices,
    Tracks,
    Counters,
    Instants,
    Flows,
    Samples,
}

impl Table {
    pub const ALL: [Table; 6] = [
        Table::Slices,
        Table::Tracks,
        Table::Counters,
        Table::Instants,
        Table::Flows,
        Table::Samples,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Slices => "slices",
            Table::Tracks => "tracks",
            Table::Counters => "counters",
            Table::Instants => "instants",
            Table::Flows => "flows",
            Table::Samples => "samples",
        }
    }

    /// Rows in `trace`.
    pub fn len(self, trace: &Trace) -> usize {
        match self {
            Table::Slices => trace.slices.len(),
            Table::Tracks => trace.tracks.len(),
            Table::Counters => trace.counters.len(),
            Table::Instants => trace.instants.len(),
            Table::Flows => trace.flows.len(),
            Table::Samples => trace.samples.len(),
        }
    }
}

/// What the batches of one trace's tables share: computed once, when a batch first
/// needs it, and used by each batch.
pub struct Batches<'t> {
    trace: &'t Trace,
    depth: std::sync::OnceLock<Vec<i32>>,
    json: std::sync::OnceLock<JsonTexts<'t>>,
}

impl<'t> Batches<'t> {
    pub fn new(trace: &'t Trace) -> Self {
        Batches {
            trace,
            depth: std::sync::OnceLock::new(),
            json: std::sync::OnceLock::new(),
        }
    }

    fn json(&self) -> &JsonTexts<'t> {
        self.json.get_or_init(|| JsonTexts::new(self.trace))
    }

    /// The batch of `rows` (row numbers in the model) of `table`.
    pub fn batch(&self, table: Table, rows: &[u32]) -> Result<RecordBatch, ExportError> {
        let trace = self.trace;
        match table {
            Table::Slices => {
                slices_batch(self.json(), rows, self.depth.get_or_init(|| depths(trace)))
            }
            Table::Tracks => tracks_batch(trace, rows),
            Table::Counters => batch(model_columns(self.json(), rows, |f| {
                trace.counters.for_each_column(f)
            })),
            Table::Instants => batch(model_columns(self.json(), rows, |f| {
                trace.instants.for_each_column(f)
            })),
            Table::Flows => batch(model_columns(self.json(), rows, |f| {
                trace.flows.for_each_column(f)
            })),
            Table::Samples => samples_batch(trace, rows),
        }
    }
}

/// Rows per batch of a whole table: few enough batches for a reader to walk, and no
/// text column near the 2 GiB a batch's string offsets can address.
const BATCH_ROWS: usize = 1 << 18;

impl Batches<'_> {
    /// The whole of `table`, in batches made on all cores, each row with the `host` and
    /// `rank` of its source, as a reader of the dataset sees them in its partitions
    /// (null where the trace names none).
    pub fn whole(&self, table: Table) -> Result<Vec<RecordBatch>, ExportError> {
        use rayon::prelude::*;
        let rows = table.len(self.trace);
        let partition = Partition::of(self.trace);
        let with_partition = |chunk: &[u32]| {
            let batch = self.batch(table, chunk)?;
            partition.add_to(self.trace, table, chunk, batch)
        };
        if rows == 0 {
            return Ok(vec![with_partition(&[])?]);
        }
        (0..rows)
            .step_by(BATCH_ROWS)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|start| {
                let end = (start + BATCH_ROWS).min(rows);
                let chunk: Vec<u32> = (start as u32..end as u32).collect();
                with_partition(&chunk)
            })
            .collect()
    }

    /// One row per source: [`source_columns`] with the rank each source names (the
    /// dataset's metadata has it as its partition instead).
    pub fn sources(&self) -> Result<RecordBatch, ExportError> {
        let trace = self.trace;
        let rows: Vec<u32> = (0..trace.sources.len() as u32).collect();
        let mut columns = source_columns(trace, &rows);
        let ranks: Int32Array = trace
            .sources
            .iter()
            .map(|s| s.rank.and_then(|r| i32::try_from(r).ok()))
            .collect();
        // Beside the host, as the dataset's partitions pair them; int32, as in the
        // event tables.
        columns.insert(
            4,
            (
                Field::new("rank", DataType::Int32, true),
                Arc::new(ranks) as ArrayRef,
            ),
        );
        batch(columns)
    }
}

/// Each track's host (an index into the host names) and rank, through its source.
struct Partition {
    hosts: Vec<String>,
    host_of_track: Vec<Option<i32>>,
    rank_of_track: Vec<Option<i32>>,
}

impl Partition {
    fn of(trace: &Trace) -> Self {
        let mut hosts: Vec<String> = Vec::new();
        let host_of_source: Vec<Option<i32>> = trace
            .sources
            .iter()
            .map(|s| {
                let name = trace.str(s.host?);
                let at = hosts.iter().position(|h| h == name).unwrap_or_else(|| {
                    hosts.push(name.to_string());
                    hosts.len() - 1
                });
                Some(at as i32)
            })
            .collect();
        let sources = track_sources(trace);
        Partition {
            hosts,
            host_of_track: sources
                .iter()
                .map(|s| s.and_then(|s| host_of_source[s.index()]))
                .collect(),
            rank_of_track: sources
                .iter()
                .map(|s| s.and_then(|s| trace.sources[s.index()].rank?.try_into().ok()))
                .collect(),
        }
    }

    /// `batch` (the rows `rows` of `table`) with `host` and `rank` columns after its own.
    fn add_to(
        &self,
        trace: &Trace,
        table: Table,
        rows: &[u32],
        batch: RecordBatch,
    ) -> Result<RecordBatch, ExportError> {
        let track_of = |row: u32| -> u32 {
            let row = row as usize;
            match table {
                Table::Slices => trace.slices.track[row],
                Table::Tracks => row as u32,
                Table::Counters => trace.counters.track[row],
                Table::Instants => trace.instants.track[row],
                // A flow goes with the slice it starts from, as in the dataset.
                Table::Flows => {
                    let from = trace.flows.from[row] as usize;
                    trace.slices.track.get(from).copied().unwrap_or(NONE)
                }
                Table::Samples => trace.samples.track[row],
            }
        };
        let at = |row: &u32, of: &[Option<i32>]| of.get(track_of(*row) as usize).copied().flatten();
        let keys: Int32Array = rows.iter().map(|r| at(r, &self.host_of_track)).collect();
        let ranks: Int32Array = rows.iter().map(|r| at(r, &self.rank_of_track)).collect();
        let names = arrow_array::StringArray::from_iter_values(&self.hosts);
        let hosts =
            DictionaryArray::<Int32Type>::try_new(keys, Arc::new(names)).map_err(arrow_error)?;
        let (schema, mut columns, _) = batch.into_parts();
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(
            "host",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        ));
        fields.push(Field::new("rank", DataType::Int32, true));
        columns.push(Arc::new(hosts));
        columns.push(Arc::new(ranks));
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(arrow_error)
    }
}

/// The source each track belongs to, through its process or device.
pub fn track_sources(trace: &Trace) -> Vec<Option<SourceId>> {
    trace
        .tracks
        .iter()
        .map(|t| {
            t.process
                .map(|p| trace.processes[p.index()].source)
                .or_else(|| t.device.map(|d| trace.devices[d.index()].source))
        })
        .collect()
}

pub(crate) fn arrow_error(e: impl std::fmt::Display) -> ExportError {
    ExportError::Unsupported(format!("arrow: {e}"))
}

/// Every slice's nesting depth on its track, in one pass: a parent's row comes before
/// its children's in the model.
pub(crate) fn depths(trace: &Trace) -> Vec<i32> {
    let s = &trace.slices;
    let mut depth = vec![0i32; s.len()];
    for i in 0..s.len() {
        let p = s.parent[i];
        if p != NONE && (p as usize) < i {
            depth[i] = depth[p as usize] + 1;
        } else if p != NONE {
            depth[i] = s.depth(i) as i32;
        }
    }
    depth
}

/// The model's columns of `rows`, each as Arrow takes it: references (`u32`, with
/// `u32::MAX` for none) as nullable `uint32`, kinds and texts as strings, args as a
/// JSON object.
fn model_columns(
    json: &JsonTexts<'_>,
    rows: &[u32],
    each: impl FnOnce(&mut dyn FnMut(&'static str, Column<'_>)),
) -> Vec<(Field, ArrayRef)> {
    let trace = json.trace;
    let mut out: Vec<(Field, ArrayRef)> = Vec::new();
    let mut add = |name: &'static str, column: Column<'_>| {
        let at = |i: &u32| *i as usize;
        let (field, array): (Field, ArrayRef) = match column {
            Column::I64(v) => (
                Field::new(name, DataType::Int64, false),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|i| v[at(i)]))),
            ),
            Column::U32(v) => {
                let mut b = UInt32Builder::with_capacity(rows.len());
                for i in rows {
                    let x = v[at(i)];
                    b.append_option((x != NONE).then_some(x));
                }
                (
                    Field::new(name, DataType::UInt32, true),
                    Arc::new(b.finish()),
                )
            }
            Column::F64(v) => (
                Field::new(name, DataType::Float64, false),
                Arc::new(Float64Array::from_iter_values(
                    rows.iter().map(|i| v[at(i)]),
                )),
            ),
            Column::Kind(v) => strings(
                name,
                false,
                rows.iter()
                    .map(|i| Some(SliceKind::from_code(v[at(i)]).name())),
            ),
            Column::Text(v) => texts(trace, name, rows.iter().map(|i| v[at(i)])),
            Column::Args(v) => {
                // Sized once, from the bytes per row of the batches made before:
                // growing a column of many MB moves it again and again.
                let per_row = json.args_bytes_per_row.load(Ordering::Relaxed);
                // At most 64 MiB ahead: one row of huge args must not make every later
                // batch reserve gigabytes.
                let reserve = rows.len().saturating_mul(per_row).min(64 << 20);
                let mut b = StringBuilder::with_capacity(rows.len(), reserve);
                for i in rows {
                    // Written straight into the column; `append_value("")` ends it.
                    if json.args(v[at(i)], &mut b) {
                        b.append_value("");
                    } else {
                        b.append_null();
                    }
                }
                let array = b.finish();
                if !rows.is_empty() {
                    let made = array.value_data().len() / rows.len();
                    json.args_bytes_per_row
                        .fetch_max(made + made / 8, Ordering::Relaxed);
                }
                (Field::new(name, DataType::Utf8, true), Arc::new(array))
            }
            Column::Scope(v) => strings(
                name,
                false,
                rows.iter().map(|i| {
                    Some(match v[at(i)] {
                        InstantScope::Thread => "thread",
                        InstantScope::Process => "process",
                        InstantScope::Global => "global",
                    })
                }),
            ),
        };
        out.push((field, array));
    };
    each(&mut add);
    out
}

pub(crate) fn strings<S: AsRef<str>>(
    name: &'static str,
    nullable: bool,
    values: impl Iterator<Item = Option<S>>,
) -> (Field, ArrayRef) {
    let mut b = StringBuilder::new();
    for v in values {
        b.append_option(v);
    }
    (
        Field::new(name, DataType::Utf8, nullable),
        Arc::new(b.finish()),
    )
}

/// A text column as a dictionary of the texts it uses, keyed by row: the model's
/// interned texts become Parquet's dictionary pages without a copy per row.
fn texts(trace: &Trace, name: &'static str, ids: impl Iterator<Item = StrId>) -> (Field, ArrayRef) {
    let mut local: hashbrown::HashMap<u32, u32> = hashbrown::HashMap::new();
    let mut values = StringBuilder::new();
    let keys: UInt32Array = ids
        .map(|id| {
            let next = local.len() as u32;
            *local.entry(id.0).or_insert_with(|| {
                values.append_value(trace.str(id));
                next
            })
        })
        .collect();
    let array = DictionaryArray::<UInt32Type>::try_new(keys, Arc::new(values.finish()))
        .expect("every key indexes the texts it was made with");
    let field = Field::new(
        name,
        DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8)),
        false,
    );
    (field, Arc::new(array))
}

/// Args as JSON text: which of the trace's texts need escaping is found once, not
/// for each of the many rows that repeat them (long call stacks, shapes).
struct JsonTexts<'t> {
    trace: &'t Trace,
    /// Per text: written as it is between quotes.
    plain: Vec<bool>,
    /// What a row's args took in the batches made so far (a column's first size).
    args_bytes_per_row: AtomicUsize,
}

impl<'t> JsonTexts<'t> {
    fn new(trace: &'t Trace) -> Self {
        let plain = (0..trace.strings.len() as u32)
            .map(|i| {
                let text = trace.str(StrId(i)).as_bytes();
                memchr::memchr2(b'"', b'\\', text).is_none() && !text.iter().any(|&b| b < 0x20)
            })
            .collect();
        JsonTexts {
            trace,
            plain,
            args_bytes_per_row: AtomicUsize::new(48),
        }
    }

    /// Writes the args `id` names as one JSON object; `false` (nothing written) for none.
    fn args(&self, id: ArgsId, out: &mut impl std::fmt::Write) -> bool {
        if id.is_none() {
            return false;
        }
        let mut numbers = itoa::Buffer::new();
        // Writing into a column's buffer cannot fail.
        let _ = (|| -> std::fmt::Result {
            out.write_char('{')?;
            for (k, (key, value)) in self.trace.args.get(id).enumerate() {
                if k > 0 {
                    out.write_char(',')?;
                }
                self.string(out, key)?;
                out.write_char(':')?;
                match value {
                    ArgValue::Null => out.write_str("null")?,
                    ArgValue::Bool(b) => out.write_str(if b { "true" } else { "false" })?,
                    ArgValue::Int(n) => out.write_str(numbers.format(n))?,
                    ArgValue::UInt(n) => out.write_str(numbers.format(n))?,
                    ArgValue::Float(x) if x.is_finite() => write!(out, "{x}")?,
                    ArgValue::Float(_) => out.write_str("null")?,
                    ArgValue::Str(s) => self.string(out, s)?,
                    // An array or object the importer kept as its JSON text.
                    ArgValue::Json(s) => out.write_str(self.trace.str(s))?,
                }
            }
            out.write_char('}')
        })();
        true
    }

    fn string(&self, out: &mut impl std::fmt::Write, id: StrId) -> std::fmt::Result {
        let text = self.trace.str(id);
        if self.plain.get(id.0 as usize).copied().unwrap_or(false) {
            out.write_char('"')?;
            out.write_str(text)?;
            out.write_char('"')
        } else {
            // Serialising a &str cannot fail.
            out.write_str(&serde_json::to_string(text).unwrap_or_default())
        }
    }
}

pub(crate) fn batch(columns: Vec<(Field, ArrayRef)>) -> Result<RecordBatch, ExportError> {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(arrow_error)
}

/// Slices: `id` (the row in the whole trace, which `parent` and the flows name), the
/// model's columns, then `depth` and the `correlation` id the trace gave the slice.
fn slices_batch(
    json: &JsonTexts<'_>,
    rows: &[u32],
    depth: &[i32],
) -> Result<RecordBatch, ExportError> {
    let trace = json.trace;
    let s = &trace.slices;
    let mut columns = vec![(
        Field::new("id", DataType::UInt32, false),
        Arc::new(UInt32Array::from(rows.to_vec())) as ArrayRef,
    )];
    columns.extend(model_columns(json, rows, |f| s.for_each_column(f)));
    columns.push((
        Field::new("depth", DataType::Int32, false),
        Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|&i| depth[i as usize]),
        )),
    ));
    let keys: Vec<_> = ["correlation", "correlation_id"]
        .iter()
        .filter_map(|k| trace.strings.find(k))
        .collect();
    let mut correlation = Int64Builder::with_capacity(rows.len());
    for &i in rows {
        let id = keys
            .iter()
            .find_map(|&k| trace.args.find(s.args[i as usize], k))
            .and_then(ArgValue::as_i64);
        correlation.append_option(id);
    }
    columns.push((
        Field::new("correlation", DataType::Int64, true),
        Arc::new(correlation.finish()),
    ));
    batch(columns)
}

/// Tracks: `id` (what the other tables' `track` names), kind, name, and the process,
/// thread and device they belong to.
/// Sampled stacks, one row each: when, on which thread track, the time it stands for,
/// whether the thread ran and held the GIL (null where not known), its innermost
/// frame, and the whole stack outermost first (`function (file:line);…`, the folded
/// spelling flame-graph tools read).
fn samples_batch(trace: &Trace, rows: &[u32]) -> Result<RecordBatch, ExportError> {
    use opscope_model::samples::state;
    let (s, frames) = (&trace.samples, &trace.stacks.frames);
    let innermost = |r: u32| trace.stacks.frames_of(s.stack[r as usize]).next();
    let known = |r: u32| s.state[r as usize] & state::ACTIVE_KNOWN != 0;
    let flag = |r: u32, bit: u32| known(r).then_some(s.state[r as usize] & bit != 0);
    let mut stack_text = String::new();
    let mut chain = Vec::new();
    let mut stacks = StringBuilder::new();
    for &r in rows {
        chain.clear();
        chain.extend(trace.stacks.frames_of(s.stack[r as usize]));
        stack_text.clear();
        for (i, &f) in chain.iter().rev().enumerate() {
            if i > 0 {
                stack_text.push(';');
            }
            let f = f as usize;
            let (function, file) = (trace.str(frames.function[f]), trace.str(frames.file[f]));
            stack_text.push_str(&format!("{function} ({file}:{})", frames.line[f]));
        }
        stacks.append_value(&stack_text);
    }
    let columns = vec![
        (
            Field::new("ts", DataType::Int64, false),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|&r| s.ts[r as usize]),
            )) as ArrayRef,
        ),
        (
            Field::new("track", DataType::UInt32, false),
            Arc::new(UInt32Array::from_iter_values(
                rows.iter().map(|&r| s.track[r as usize]),
            )),
        ),
        (
            Field::new("period", DataType::Int64, false),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|&r| s.period[r as usize]),
            )),
        ),
        (
            Field::new("running", DataType::Boolean, true),
            Arc::new(arrow_array::BooleanArray::from(
                rows.iter()
                    .map(|&r| flag(r, state::ACTIVE))
                    .collect::<Vec<_>>(),
            )),
        ),
        (
            Field::new("holds_gil", DataType::Boolean, true),
            Arc::new(arrow_array::BooleanArray::from(
                rows.iter()
                    .map(|&r| flag(r, state::GIL))
                    .collect::<Vec<_>>(),
            )),
        ),
        strings(
            "function",
            true,
            rows.iter()
                .map(|&r| innermost(r).map(|f| trace.str(frames.function[f as usize]))),
        ),
        strings(
            "file",
            true,
            rows.iter()
                .map(|&r| innermost(r).map(|f| trace.str(frames.file[f as usize]))),
        ),
        (
            Field::new("line", DataType::UInt32, true),
            Arc::new(UInt32Array::from(
                rows.iter()
                    .map(|&r| innermost(r).map(|f| frames.line[f as usize]))
                    .collect::<Vec<_>>(),
            )),
        ),
        (
            Field::new("stack", DataType::Utf8, false),
            Arc::new(stacks.finish()),
        ),
    ];
    batch(columns)
}

fn tracks_batch(trace: &Trace, rows: &[u32]) -> Result<RecordBatch, ExportError> {
    let tracks: Vec<_> = rows.iter().map(|&t| &trace.tracks[t as usize]).collect();
    let process = |t: &opscope_model::Track| t.process.map(|p| &trace.processes[p.index()]);
    let thread = |t: &opscope_model::Track| t.thread.map(|th| &trace.threads[th.index()]);
    let device = |t: &opscope_model::Track| {
        t.device
            .or_else(|| process(t).and_then(|p| p.device))
            .map(|d| &trace.devices[d.index()])
    };
    let name = |id: Option<StrId>| id.map(|n| trace.str(n));
    let int64 = |values: Vec<Option<i64>>| Arc::new(Int64Array::from(values)) as ArrayRef;
    let columns = vec![
        (
            Field::new("id", DataType::UInt32, false),
            Arc::new(UInt32Array::from(rows.to_vec())) as ArrayRef,
        ),
        strings("kind", false, tracks.iter().map(|t| Some(t.kind.name()))),
        strings(
            "name",
            false,
            tracks.iter().map(|t| Some(trace.str(t.name))),
        ),
        (
            Field::new("pid", DataType::Int64, true),
            int64(tracks.iter().map(|t| process(t).map(|p| p.pid)).collect()),
        ),
        strings(
            "process_name",
            true,
            tracks.iter().map(|t| name(process(t).and_then(|p| p.name))),
        ),
        (
            Field::new("tid", DataType::Int64, true),
            int64(tracks.iter().map(|t| thread(t).map(|th| th.tid)).collect()),
        ),
        strings(
            "thread_name",
            true,
            tracks
                .iter()
                .map(|t| name(thread(t).and_then(|th| th.name))),
        ),
        strings(
            "device_kind",
            true,
            tracks.iter().map(|t| device(t).map(|d| d.kind.name())),
        ),
        (
            Field::new("device_index", DataType::Int64, true),
            int64(
                tracks
                    .iter()
                    .map(|t| device(t).map(|d| i64::from(d.index)))
                    .collect(),
            ),
        ),
        // Several sources can share a partition (the processes of one recording); the
        // analyses keep them apart, as the CLI does.
        (
            Field::new("source", DataType::UInt32, true),
            Arc::new(UInt32Array::from(
                tracks
                    .iter()
                    .map(|t| process(t).map(|p| p.source.index() as u32))
                    .collect::<Vec<_>>(),
            )) as ArrayRef,
        ),
    ];
    batch(columns)
}

/// One row per source of `rows`: its id, file and format, the host it names, its world
/// size, its clock, and where hosts were merged onto one clock the correction put on it.
pub fn source_columns(trace: &Trace, rows: &[u32]) -> Vec<(Field, ArrayRef)> {
    let sources: Vec<_> = rows.iter().map(|&s| &trace.sources[s as usize]).collect();
    let clock = |s: &opscope_model::Source| trace.clocks.get(s.clock.0 as usize);
    // A merged host's clock (not a shift to Unix time, which other clocks get too).
    let merged = |s: &opscope_model::Source| {
        clock(s).filter(|c| {
            trace
                .str(c.name)
                .starts_with(opscope_model::clock::MERGED_CLOCK_PREFIX)
        })
    };
    let int64 = |name: &'static str, value: &dyn Fn(&opscope_model::Source) -> Option<i64>| {
        let values: Vec<Option<i64>> = sources.iter().map(|s| value(s)).collect();
        (
            Field::new(name, DataType::Int64, true),
            Arc::new(Int64Array::from(values)) as ArrayRef,
        )
    };
    vec![
        (
            Field::new("source", DataType::UInt32, false),
            Arc::new(UInt32Array::from(rows.to_vec())) as ArrayRef,
        ),
        strings("path", false, sources.iter().map(|s| Some(s.path.as_str()))),
        strings(
            "format",
            false,
            sources.iter().map(|s| Some(s.format.as_ref())),
        ),
        // As the trace names it; the partition's `host` is it made fit for a path.
        strings(
            "host_name",
            true,
            sources.iter().map(|s| s.host.map(|h| trace.str(h))),
        ),
        int64("world_size", &|s| s.world_size.map(i64::from)),
        strings(
            "clock",
            true,
            sources.iter().map(|s| clock(s).map(|c| trace.str(c.name))),
        ),
        int64("unix_offset_ns", &|s| {
            clock(s).and_then(|c| c.unix_offset_ns)
        }),
        // Where hosts were merged onto one clock: the correction put on this source's
        // host (`t + offset + t·drift`, from its time 0), and its bound; else null.
        int64("clock_offset_ns", &|s| {
            merged(s).map(|c| c.to_global.offset_ns)
        }),
        (
            Field::new("clock_drift_ppm", DataType::Float64, true),
            Arc::new(Float64Array::from(
                sources
                    .iter()
                    .map(|s| merged(s).map(|c| c.to_global.drift_ppb / 1e3))
                    .collect::<Vec<_>>(),
            )),
        ),
        int64("clock_bound_ns", &|s| {
            merged(s).and_then(|c| c.to_global.error_bound_ns)
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The args column is the JSON the trace gave, escapes and all, and each row knows
    /// its rank.
    #[test]
    fn args_are_the_traces_json_and_rows_their_rank() {
        let given = serde_json::json!({
            "quoted": "say \"hi\"\n\tback\\slash",
            "big": 18446744073709551615u64,
            "negative": -42,
            "ratio": 0.25,
            "flag": true,
            "nothing": null,
            "dims": [[1, 2], [3]],
        });
        let json = serde_json::json!({
            "distributedInfo": {"rank": 3, "world_size": 4},
            "traceEvents": [
                {"ph": "X", "name": "op", "ts": 1, "dur": 2, "pid": 1, "tid": 1, "args": given},
                {"ph": "X", "name": "plain", "ts": 5, "dur": 1, "pid": 1, "tid": 1},
            ],
        });
        let mut trace = Trace::new();
        crate::chrome::import(json.to_string().as_bytes(), "t.json", &mut trace).unwrap();
        trace.finish();
        let batches = Batches::new(&trace).whole(Table::Slices).unwrap();
        let batch = &batches[0];
        let column = |name: &str| batch.column(batch.schema().index_of(name).unwrap()).clone();
        let args = column("args");
        let args = args
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        let ours: serde_json::Value = serde_json::from_str(args.value(0)).unwrap();
        assert_eq!(ours, given);
        assert!(arrow_array::Array::is_null(args, 1));
        let ranks = column("rank");
        let ranks = ranks.as_any().downcast_ref::<Int32Array>().unwrap();
        assert_eq!(ranks.values().to_vec(), vec![3, 3]);
    }
}
