//! The model as a Parquet dataset that DuckDB, Spark, Polars and pandas read: a
//! directory partitioned Hive's way by host and rank (`host=H/rank=R/slices.parquet`,
//! `tracks`, `counters`, `instants`, `flows`, `metadata`). Each partition is complete in
//! itself, so that many conversions (one per rank, on many hosts) fill one dataset. The
//! event tables' columns are the model's own, from its single column declaration;
//! `docs/parquet.md` is the schema. [`import`] reads such a dataset back.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use opscope_model::{Trace, NONE};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::arrow::{batch, source_columns, strings, track_sources, Batches, Table as EventTable};
use crate::error::ExportError;

mod import;
pub use import::{import, ParquetFormat};

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
    let batches = Batches::new(trace);
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
        // The dataset's name, not the staging's, is what the user knows.
        std::fs::create_dir_all(aside(key)).map_err(at(dir))?;
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
            Table::Events(events) => batches.batch(events, rows),
            Table::Metadata => metadata_batch(trace, rows, key, version),
        };
        let file = aside(key).join(format!("{}.parquet", table.name()));
        let bytes = write(&file, rows, make).map_err(|e| naming(&file, e))?;
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
        let parent = place.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(at(parent))?;
        if replace && place.exists() {
            // The old partition goes into the staging directory (and with it), so that
            // a failure leaves one of the two in place.
            let old = staging.0.join("replaced").join(key);
            let parent = old.parent().unwrap_or(&staging.0);
            std::fs::create_dir_all(parent).map_err(at(parent))?;
            std::fs::rename(&place, &old).map_err(at(&place))?;
        }
        std::fs::rename(aside(key), &place).map_err(at(&place))?;
    }
    Ok(written)
}

/// The error of writing `path`, naming it.
fn at(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::File {
        path: path.display().to_string(),
        source,
    }
}

/// `e`, met writing `path`, saying so.
fn naming(path: &Path, e: ExportError) -> ExportError {
    match e {
        ExportError::Io(source) => at(path)(source),
        ExportError::Unsupported(m) => ExportError::Unsupported(format!("{}: {m}", path.display())),
        named @ ExportError::File { .. } => named,
    }
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
    let file = File::create(path).map_err(at(path))?;
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
    samples: Vec<u32>,
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
        let source_of_track = track_sources(trace);
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
        for i in 0..trace.samples.len() {
            put(trace.samples.track[i], i as u32, |p| &mut p.samples);
        }
        Partitions { parts }
    }
}

/// The tables of a partition.
#[derive(Copy, Clone)]
enum Table {
    Events(EventTable),
    Metadata,
}

impl Table {
    const ALL: [Table; 7] = [
        Table::Events(EventTable::Slices),
        Table::Events(EventTable::Tracks),
        Table::Events(EventTable::Counters),
        Table::Events(EventTable::Instants),
        Table::Events(EventTable::Flows),
        Table::Events(EventTable::Samples),
        Table::Metadata,
    ];

    fn name(self) -> &'static str {
        match self {
            Table::Events(events) => events.name(),
            Table::Metadata => "metadata",
        }
    }

    fn rows(self, part: &Part) -> &[u32] {
        match self {
            Table::Events(EventTable::Slices) => &part.slices,
            Table::Events(EventTable::Tracks) => &part.tracks,
            Table::Events(EventTable::Counters) => &part.counters,
            Table::Events(EventTable::Instants) => &part.instants,
            Table::Events(EventTable::Flows) => &part.flows,
            Table::Events(EventTable::Samples) => &part.samples,
            Table::Metadata => &part.sources,
        }
    }
}

/// One row per source of a partition: where it came from, its clock (see
/// [`source_columns`]), and what wrote the dataset.
fn metadata_batch(
    trace: &Trace,
    rows: &[u32],
    partition: &str,
    version: &str,
) -> Result<RecordBatch, ExportError> {
    let n = rows.len();
    let mut columns = source_columns(trace, rows);
    // After the source's file and format, as the dataset has always had it.
    columns.insert(
        3,
        strings("partition", false, (0..n).map(|_| Some(partition))),
    );
    columns.push(strings(
        "opscope_version",
        false,
        (0..n).map(|_| Some(version)),
    ));
    columns.push((
        Field::new("schema_version", DataType::UInt32, false),
        Arc::new(UInt32Array::from(vec![SCHEMA_VERSION; n])) as ArrayRef,
    ));
    batch(columns)
}
