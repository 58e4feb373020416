//! The model as a Parquet dataset that DuckDB, Spark, Polars and pandas read: a
//! directory partitioned Hive's way by host and rank (`host=H/rank=R/slices.parquet`,
//! `tracks`, `counters`, `instants`, `flows`, `metadata`). Each partition is complete in
//! itself, so that many conversions (one per rank, on many hosts) fill one dataset. The
//! event tables' columns are the model's own, from its single column declaration;
//! `docs/parquet.md` is the schema.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder, UInt32Builder};
use arrow_array::types::UInt32Type;
use arrow_array::{
    ArrayRef, DictionaryArray, Float64Array, Int32Array, Int64Array, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use opscope_model::events::Column;
use opscope_model::{ArgValue, ArgsId, InstantScope, SliceKind, SourceId, StrId, Trace, NONE};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::error::ExportError;

/// The version of the dataset's layout; `metadata.parquet` says it.
pub const SCHEMA_VERSION: u32 = 2;

/// What was written.
#[derive(Debug, Default)]
pub struct Written {
    pub partitions: usize,
    pub files: usize,
    pub bytes: u64,
    pub rows: BTreeMap<&'static str, u64>,
}

/// Writes `trace` as a dataset into `dir`: a new or empty directory, or a dataset that
/// other conversions write into too. Each partition (`host=H/rank=R`) is written
/// aside and renamed into place whole, so a reader never sees half of one; one that
/// exists already is an error, or with `replace` is replaced. `version` is the
/// writer's, kept in the metadata.
pub fn export_dataset(
    trace: &Trace,
    dir: &Path,
    version: &str,
    replace: bool,
) -> Result<Written, ExportError> {
    let shown = dir.display();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let ours = name.starts_with("host=") || name.starts_with(STAGING);
            if !ours || !entry.path().is_dir() {
                return Err(ExportError::Unsupported(format!(
                    "{shown}: exists and is not a Parquet dataset (it holds {name}); \
                     write the dataset into a new directory"
                )));
            }
        }
    }
    let parts = Partitions::of(trace);
    for key in parts.parts.keys() {
        if dir.join(key).exists() && !replace {
            return Err(ExportError::Unsupported(format!(
                "{shown}: already holds partition {key} (another conversion of this host \
                 and rank?); pass --force to replace it"
            )));
        }
    }
    let depth = depths(trace);
    let mut written = Written::default();
    // Partitions are written in a staging directory of this conversion's own, one
    // level deeper than any reader's `*/*/` glob reaches (DuckDB's glob does not skip
    // hidden names), then renamed into place; whatever happens, it goes at the end.
    let staging = Staging(dir.join(format!(
        "{STAGING}{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )));
    let aside = |key: &str| -> PathBuf { staging.0.join(key) };
    for key in parts.parts.keys() {
        std::fs::create_dir_all(aside(key))?;
        written.partitions += 1;
    }
    // One job per table of each partition, the largest first, on every core.
    let mut jobs: Vec<(&String, &Part, Table)> = parts
        .parts
        .iter()
        .flat_map(|(key, part)| Table::ALL.into_iter().map(move |t| (key, part, t)))
        .collect();
    jobs.sort_by_key(|&(_, part, table)| std::cmp::Reverse(table.rows(part).len()));
    let results = on_all_cores(jobs, |(key, part, table)| {
        let rows = table.rows(part);
        let make = |rows: &[u32]| match table {
            Table::Slices => slices_batch(trace, rows, &depth),
            Table::Tracks => tracks_batch(trace, rows),
            Table::Counters => batch(model_columns(trace, rows, |f| {
                trace.counters.for_each_column(f)
            })),
            Table::Instants => batch(model_columns(trace, rows, |f| {
                trace.instants.for_each_column(f)
            })),
            Table::Flows => batch(model_columns(trace, rows, |f| {
                trace.flows.for_each_column(f)
            })),
            Table::Metadata => metadata_batch(trace, rows, key, version),
        };
        let file = aside(key).join(format!("{}.parquet", table.name()));
        let bytes = write(&file, rows, make)?;
        Ok((table.name(), rows.len() as u64, bytes))
    });
    let results = results?;
    for (name, rows, bytes) in results {
        *written.rows.entry(name).or_default() += rows;
        written.bytes += bytes;
        written.files += 1;
    }
    for key in parts.parts.keys() {
        let place = dir.join(key);
        std::fs::create_dir_all(place.parent().unwrap_or(dir))?;
        if replace && place.exists() {
            // The old partition goes into the staging directory (and with it), so that
            // a failure leaves one of the two in place.
            let old = staging.0.join("replaced").join(key);
            std::fs::create_dir_all(old.parent().unwrap_or(&staging.0))?;
            std::fs::rename(&place, &old)?;
        }
        std::fs::rename(aside(key), &place)?;
    }
    Ok(written)
}

/// How a conversion's staging directory in a dataset begins.
const STAGING: &str = ".staging-";

/// A directory removed when dropped, on every path out.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Rows per row group: what DuckDB and Spark read in parallel, one group per task.
const ROW_GROUP_ROWS: usize = 1 << 20;

/// Rows made into Arrow arrays at a time: the arrays of a whole table (its args text
/// above all) cost more in fresh pages and copies as they grow than in encoding, and
/// chunks are made on all cores at once.
const CHUNK_ROWS: usize = 1 << 14;

/// Writes the table of `rows` to `path`, `make` giving the Arrow batch of some of them.
fn write(
    path: &PathBuf,
    rows: &[u32],
    make: impl Fn(&[u32]) -> Result<RecordBatch, ExportError> + Sync,
) -> Result<u64, ExportError> {
    let file = File::create(path)?;
    let schema = make(&[])?.schema();
    let writer = ArrowWriter::try_new(file, schema.clone(), Some(properties(&schema)?))
        .map_err(parquet_error)?;
    // A trace of one rank is one partition, whose slices table is most of the work:
    // its chunks are made on all cores (the args' JSON text above all), then each
    // chunk's columns are encoded on all cores.
    let (mut file_writer, columns) = writer.into_serialized_writer().map_err(parquet_error)?;
    let cores = rayon::current_num_threads();
    let chunks: Vec<&[u32]> = rows.chunks(CHUNK_ROWS).collect();
    let mut group = 0;
    let mut in_group = 0;
    let mut writers: Option<Vec<ArrowColumnWriter>> = None;
    for wave in chunks.chunks(cores) {
        for batch in on_all_cores(wave.to_vec(), &make)? {
            let mut list = match writers.take() {
                Some(list) => list,
                None => columns
                    .create_column_writers(group)
                    .map_err(parquet_error)?,
            };
            let mut leaves = Vec::new();
            for (field, array) in schema.fields().iter().zip(batch.columns()) {
                leaves.extend(compute_leaves(field, array).map_err(parquet_error)?);
            }
            list = on_all_cores(list.into_iter().zip(leaves).collect(), |(mut w, leaf)| {
                w.write(&leaf).map_err(parquet_error)?;
                Ok(w)
            })?;
            in_group += batch.num_rows();
            if in_group >= ROW_GROUP_ROWS {
                close_group(&mut file_writer, list)?;
                group += 1;
                in_group = 0;
            } else {
                writers = Some(list);
            }
        }
    }
    if let Some(list) = writers {
        close_group(&mut file_writer, list)?;
    }
    file_writer.close().map_err(parquet_error)?;
    Ok(std::fs::metadata(path)?.len())
}

/// Ends a row group: each column's last page compressed (on all cores), then the
/// column chunks written in order.
fn close_group(
    file: &mut parquet::file::writer::SerializedFileWriter<File>,
    writers: Vec<ArrowColumnWriter>,
) -> Result<(), ExportError> {
    let chunks = on_all_cores(writers, |w| w.close().map_err(parquet_error))?;
    let mut row_group = file.next_row_group().map_err(parquet_error)?;
    for chunk in chunks {
        chunk
            .append_to_row_group(&mut row_group)
            .map_err(parquet_error)?;
    }
    row_group.close().map_err(parquet_error)?;
    Ok(())
}

/// `work` done on every core; the results in order, or the first error.
fn on_all_cores<T: Send, R: Send>(
    work: Vec<T>,
    each: impl Fn(T) -> Result<R, ExportError> + Sync,
) -> Result<Vec<R>, ExportError> {
    use rayon::prelude::*;
    work.into_par_iter().map(&each).collect()
}

/// How each column is stored.
fn properties(schema: &Schema) -> Result<WriterProperties, ExportError> {
    // zstd's level 3: as fast as the Perfetto export, and smaller than gzip'd JSON.
    let mut props = WriterProperties::builder().set_compression(Compression::ZSTD(
        ZstdLevel::try_new(3).map_err(parquet_error)?,
    ));
    // Ids and times mostly grow row by row: stored as differences, not as dictionaries
    // of values that never repeat.
    for field in schema.fields() {
        // Args are JSON objects that rarely repeat whole: zstd finds their repeated
        // keys in plain pages better than a dictionary of whole values would.
        // zstd's level 1 there: the args are most of the bytes and of the time to
        // compress (level 3 took 1.6× the Perfetto export's time on resnet50).
        if field.name() == "args" {
            let path = parquet::schema::types::ColumnPath::from("args");
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_compression(
                    path,
                    Compression::ZSTD(ZstdLevel::try_new(1).map_err(parquet_error)?),
                );
        }
        if DELTA_COLUMNS.contains(&field.name().as_str()) {
            let path = parquet::schema::types::ColumnPath::from(field.name().as_str());
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, parquet::basic::Encoding::DELTA_BINARY_PACKED);
        }
    }
    Ok(props.build())
}

/// Integer columns whose values rarely repeat (see [`write`]).
const DELTA_COLUMNS: &[&str] = &["id", "ts", "parent", "correlation", "from", "to"];

fn parquet_error(e: impl std::fmt::Display) -> ExportError {
    ExportError::Unsupported(format!("parquet: {e}"))
}

/// Every slice's nesting depth on its track, in one pass: a parent's row comes before
/// its children's in the model.
fn depths(trace: &Trace) -> Vec<i32> {
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

/// Rows of each table per partition (`host=H/rank=R`), by the source of their track.
struct Partitions {
    parts: BTreeMap<String, Part>,
}

#[derive(Default)]
struct Part {
    slices: Vec<u32>,
    tracks: Vec<u32>,
    counters: Vec<u32>,
    instants: Vec<u32>,
    flows: Vec<u32>,
    /// The sources whose partition this is.
    sources: Vec<u32>,
}

/// A partition value as a directory name may hold it.
fn partition_value(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '/' | '\\' | '=' | '%' | ':' | '*' | '?' | '"' | '<' | '>' | '|' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .collect()
}

impl Partitions {
    fn of(trace: &Trace) -> Partitions {
        let of_source: Vec<String> = trace
            .sources
            .iter()
            .map(|s| {
                let host = s
                    .host
                    .map_or("unknown".to_string(), |h| partition_value(trace.str(h)));
                let rank = s.rank.map_or(-1, i64::from);
                format!("host={host}/rank={rank}")
            })
            .collect();
        let unplaced = "host=unknown/rank=-1".to_string();
        let source_of_track: Vec<Option<SourceId>> = trace
            .tracks
            .iter()
            .map(|t| {
                t.process
                    .map(|p| trace.processes[p.index()].source)
                    .or_else(|| t.device.map(|d| trace.devices[d.index()].source))
            })
            .collect();
        let key_of_track: Vec<&String> = source_of_track
            .iter()
            .map(|s| s.map_or(&unplaced, |s| &of_source[s.index()]))
            .collect();
        let key = |track: u32| -> &String {
            key_of_track
                .get(track as usize)
                .copied()
                .unwrap_or(&unplaced)
        };
        let mut parts: BTreeMap<String, Part> = BTreeMap::new();
        for (source, key) in of_source.iter().enumerate() {
            parts
                .entry(key.clone())
                .or_default()
                .sources
                .push(source as u32);
        }
        let mut put = |track: u32, row: u32, table: fn(&mut Part) -> &mut Vec<u32>| {
            let part = match parts.get_mut(key(track)) {
                Some(part) => part,
                None => parts.entry(key(track).clone()).or_default(),
            };
            table(part).push(row);
        };
        for t in 0..trace.tracks.len() {
            put(t as u32, t as u32, |p| &mut p.tracks);
        }
        let s = &trace.slices;
        for i in 0..s.len() {
            put(s.track[i], i as u32, |p| &mut p.slices);
        }
        for i in 0..trace.counters.len() {
            put(trace.counters.track[i], i as u32, |p| &mut p.counters);
        }
        for i in 0..trace.instants.len() {
            put(trace.instants.track[i], i as u32, |p| &mut p.instants);
        }
        // A flow goes with the slice it starts from.
        for i in 0..trace.flows.len() {
            let from = trace.flows.from[i] as usize;
            let track = s.track.get(from).copied().unwrap_or(NONE);
            put(track, i as u32, |p| &mut p.flows);
        }
        Partitions { parts }
    }
}

/// The tables of a partition.
#[derive(Copy, Clone)]
enum Table {
    Slices,
    Tracks,
    Counters,
    Instants,
    Flows,
    Metadata,
}

impl Table {
    const ALL: [Table; 6] = [
        Table::Slices,
        Table::Tracks,
        Table::Counters,
        Table::Instants,
        Table::Flows,
        Table::Metadata,
    ];

    fn name(self) -> &'static str {
        match self {
            Table::Slices => "slices",
            Table::Tracks => "tracks",
            Table::Counters => "counters",
            Table::Instants => "instants",
            Table::Flows => "flows",
            Table::Metadata => "metadata",
        }
    }

    fn rows(self, part: &Part) -> &[u32] {
        match self {
            Table::Slices => &part.slices,
            Table::Tracks => &part.tracks,
            Table::Counters => &part.counters,
            Table::Instants => &part.instants,
            Table::Flows => &part.flows,
            Table::Metadata => &part.sources,
        }
    }
}

/// The model's columns of `rows`, each as Arrow takes it: references (`u32`, with
/// `u32::MAX` for none) as nullable `uint32`, kinds and texts as strings, args as a
/// JSON object.
fn model_columns(
    trace: &Trace,
    rows: &[u32],
    each: impl FnOnce(&mut dyn FnMut(&'static str, Column<'_>)),
) -> Vec<(Field, ArrayRef)> {
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
                // Sized once: growing a column of many MB moves it again and again.
                let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 48);
                for i in rows {
                    // Written straight into the column; `append_value("")` ends it.
                    if args_json(trace, v[at(i)], &mut b) {
                        b.append_value("");
                    } else {
                        b.append_null();
                    }
                }
                (Field::new(name, DataType::Utf8, true), Arc::new(b.finish()))
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

fn strings<S: AsRef<str>>(
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

/// Writes the args `id` names as one JSON object; `false` (nothing written) for none.
fn args_json(trace: &Trace, id: ArgsId, out: &mut impl std::fmt::Write) -> bool {
    if id.is_none() {
        return false;
    }
    // Writing into a column's buffer cannot fail.
    let _ = (|| -> std::fmt::Result {
        out.write_char('{')?;
        for (k, (key, value)) in trace.args.get(id).enumerate() {
            if k > 0 {
                out.write_char(',')?;
            }
            push_json_string(out, trace.str(key))?;
            out.write_char(':')?;
            match value {
                ArgValue::Null => out.write_str("null")?,
                ArgValue::Bool(b) => out.write_str(if b { "true" } else { "false" })?,
                ArgValue::Int(n) => write!(out, "{n}")?,
                ArgValue::UInt(n) => write!(out, "{n}")?,
                ArgValue::Float(x) if x.is_finite() => write!(out, "{x}")?,
                ArgValue::Float(_) => out.write_str("null")?,
                ArgValue::Str(s) => push_json_string(out, trace.str(s))?,
                // An array or object the importer kept as its JSON text.
                ArgValue::Json(s) => out.write_str(trace.str(s))?,
            }
        }
        out.write_char('}')
    })();
    true
}

fn push_json_string(out: &mut impl std::fmt::Write, text: &str) -> std::fmt::Result {
    let plain =
        memchr::memchr2(b'"', b'\\', text.as_bytes()).is_none() && !text.bytes().any(|b| b < 0x20);
    if plain {
        out.write_char('"')?;
        out.write_str(text)?;
        out.write_char('"')
    } else {
        // Serialising a &str cannot fail.
        out.write_str(&serde_json::to_string(text).unwrap_or_default())
    }
}

fn batch(columns: Vec<(Field, ArrayRef)>) -> Result<RecordBatch, ExportError> {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = columns.into_iter().unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).map_err(parquet_error)
}

/// Slices: `id` (the row in the whole trace, which `parent` and the flows name), the
/// model's columns, then `depth` and the `correlation` id the trace gave the slice.
fn slices_batch(trace: &Trace, rows: &[u32], depth: &[i32]) -> Result<RecordBatch, ExportError> {
    let s = &trace.slices;
    let mut columns = vec![(
        Field::new("id", DataType::UInt32, false),
        Arc::new(UInt32Array::from(rows.to_vec())) as ArrayRef,
    )];
    columns.extend(model_columns(trace, rows, |f| s.for_each_column(f)));
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

/// One row per source of a partition: where it came from, its clock, and what wrote
/// the dataset.
fn metadata_batch(
    trace: &Trace,
    rows: &[u32],
    partition: &str,
    version: &str,
) -> Result<RecordBatch, ExportError> {
    let sources: Vec<_> = rows.iter().map(|&s| &trace.sources[s as usize]).collect();
    let n = sources.len();
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
    let columns = vec![
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
        strings("partition", false, (0..n).map(|_| Some(partition))),
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
        strings("opscope_version", false, (0..n).map(|_| Some(version))),
        (
            Field::new("schema_version", DataType::UInt32, false),
            Arc::new(UInt32Array::from(vec![SCHEMA_VERSION; n])),
        ),
    ];
    batch(columns)
}
