//! Reads a Parquet dataset opscope wrote (`docs/parquet.md`, schema version 2) back
//! into the model, so that every command answers on it as on the traces it came from:
//! each partition's sources, tracks, slices, instants, counter samples and flows, its
//! ids (which are the conversion's own) mapped to the model's.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, UInt32Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use opscope_model::{
    ArgValue, ArgsId, ClockDomain, DeviceKind, InstantScope, LinearTransform, ProcessId, SliceKind,
    Source, SourceId, StrId, Trace, TrackId, TrackKind,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::ImportError;

/// The dataset as an input: a directory of `host=H/rank=R` partitions, or one
/// partition.
pub struct ParquetFormat;

impl crate::importer::Importer for ParquetFormat {
    fn name(&self) -> &'static str {
        "parquet"
    }

    fn looks_for(&self) -> &'static str {
        "Parquet datasets opscope wrote (host=H/rank=R/metadata.parquet)"
    }

    fn claims_dir(&self, dir: &Path) -> bool {
        !partitions(dir).is_empty()
    }

    /// Every table of every partition, in order: what a saved model is checked against.
    fn files(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        Ok(partitions(dir)
            .iter()
            .flat_map(|p| TABLES.iter().map(move |t| p.join(format!("{t}.parquet"))))
            .collect())
    }

    fn opens_files_itself(&self) -> bool {
        true
    }

    fn import(
        &self,
        input: &crate::importer::Input,
        trace: &mut Trace,
    ) -> Option<Result<SourceId, ImportError>> {
        Some(import(input.path, input.shown, trace))
    }
}

const TABLES: [&str; 6] = [
    "metadata", "tracks", "slices", "instants", "counters", "flows",
];

/// The partitions of the dataset at `dir` in name order: its `host=*/rank=*`
/// directories holding a `metadata.parquet`, or `dir` itself when it is one.
fn partitions(dir: &Path) -> Vec<PathBuf> {
    if dir.join("metadata.parquet").is_file() && dir.join("slices.parquet").is_file() {
        return vec![dir.to_path_buf()];
    }
    let children = |d: &Path, prefix: &str| -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect();
        found.sort();
        found
    };
    children(dir, "host=")
        .iter()
        .flat_map(|host| children(host, "rank="))
        .filter(|p| p.join("metadata.parquet").is_file())
        .collect()
}

/// Imports every partition of the dataset at `dir` and finishes the model, as every
/// import does; the first source is returned.
pub fn import(dir: &Path, shown: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let parts = partitions(dir);
    let mut first = None;
    for part in &parts {
        let source = Partition::read(part, dir, shown, trace);
        // Partitions read before an error stay usable.
        let source = source.inspect_err(|_| trace.finish())?;
        first = first.or(source);
    }
    trace.finish();
    first.ok_or_else(|| ImportError::UnknownFormat {
        path: shown.to_string(),
        message: "a Parquet dataset without sources (its metadata.parquet is empty)".into(),
    })
}

/// What one partition's ids are in the model.
struct Partition<'t> {
    trace: &'t mut Trace,
    /// How the partition's files are named in messages.
    shown: String,
    sources: HashMap<u32, SourceId>,
    tracks: HashMap<u32, TrackId>,
    /// The dataset's slice ids, to the model's rows (flows name them).
    slices: HashMap<u32, u32>,
}

impl Partition<'_> {
    fn read(
        dir: &Path,
        root: &Path,
        shown: &str,
        trace: &mut Trace,
    ) -> Result<Option<SourceId>, ImportError> {
        let relative = dir.strip_prefix(root).unwrap_or(dir);
        let shown = if relative.as_os_str().is_empty() {
            shown.to_string()
        } else {
            format!("{shown}/{}", relative.display())
        };
        let rank = dir
            .file_name()
            .and_then(|n| n.to_str()?.strip_prefix("rank=")?.parse::<i64>().ok())
            .and_then(|r| u32::try_from(r).ok());
        let mut part = Partition {
            trace,
            shown,
            sources: HashMap::new(),
            tracks: HashMap::new(),
            slices: HashMap::new(),
        };
        for batch in part.batches(dir, "metadata")? {
            part.sources_of(&batch, rank)?;
        }
        for batch in part.batches(dir, "tracks")? {
            part.tracks_of(&batch)?;
        }
        for batch in part.batches(dir, "slices")? {
            part.slices_of(&batch)?;
        }
        for batch in part.batches(dir, "instants")? {
            part.instants_of(&batch)?;
        }
        for batch in part.batches(dir, "counters")? {
            part.counters_of(&batch)?;
        }
        for batch in part.batches(dir, "flows")? {
            part.flows_of(&batch)?;
        }
        Ok(part.sources.values().min_by_key(|s| s.0).copied())
    }

    /// The batches of `dir/NAME.parquet`; none when the file is absent (a table the
    /// writer had no rows for is still written, but a hand-made dataset may lack it).
    fn batches(&self, dir: &Path, name: &str) -> Result<Vec<RecordBatch>, ImportError> {
        let path = dir.join(format!("{name}.parquet"));
        let shown = format!("{}/{name}.parquet", self.shown);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name != "metadata" => {
                return Ok(Vec::new())
            }
            Err(e) => {
                return Err(ImportError::Io {
                    path: shown,
                    message: e.to_string(),
                })
            }
        };
        let bad = |e: parquet::errors::ParquetError| ImportError::Syntax {
            path: shown.clone(),
            offset: 0,
            message: format!("not a Parquet file opscope can read ({e})"),
        };
        const BATCH_ROWS: usize = 1 << 16;
        // The Parquet reader is not ours: should a damaged file make it panic, that is
        // this file's error, not the end of the command.
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(bad)?
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(bad)?;
            let mut batches = Vec::new();
            for (n, batch) in reader.enumerate() {
                batches.push(batch.map_err(|e| ImportError::Io {
                    path: shown.clone(),
                    message: format!(
                        "rows {} on do not decode, the file is damaged ({e})",
                        n * BATCH_ROWS
                    ),
                })?);
            }
            Ok(batches)
        }));
        read.unwrap_or_else(|_| {
            Err(ImportError::Io {
                path: shown.clone(),
                message: "the Parquet reader failed on it: the file is damaged".into(),
            })
        })
    }

    fn wrong(&self, table: &str, message: String) -> ImportError {
        ImportError::UnknownFormat {
            path: format!("{}/{table}.parquet", self.shown),
            message,
        }
    }

    fn column<'b>(
        &self,
        table: &str,
        batch: &'b RecordBatch,
        name: &str,
    ) -> Result<&'b ArrayRef, ImportError> {
        batch.column_by_name(name).ok_or_else(|| {
            self.wrong(
                table,
                format!("no column `{name}`: not a dataset opscope wrote (docs/parquet.md)"),
            )
        })
    }

    fn texts(
        &mut self,
        table: &str,
        batch: &RecordBatch,
        name: &str,
    ) -> Result<Texts, ImportError> {
        let column = self.column(table, batch, name)?.clone();
        Texts::of(&column, self.trace).ok_or_else(|| {
            self.wrong(
                table,
                format!("column `{name}` is not text ({})", column.data_type()),
            )
        })
    }

    fn ints(&self, table: &str, batch: &RecordBatch, name: &str) -> Result<Ints, ImportError> {
        let column = self.column(table, batch, name)?;
        Ints::of(column).ok_or_else(|| {
            self.wrong(
                table,
                format!("column `{name}` is not an integer ({})", column.data_type()),
            )
        })
    }

    fn sources_of(&mut self, batch: &RecordBatch, rank: Option<u32>) -> Result<(), ImportError> {
        const T: &str = "metadata";
        if let Ok(version) = self.ints(T, batch, "schema_version") {
            if let Some(v) = (0..batch.num_rows()).find_map(|r| version.get(r)) {
                if v != i64::from(super::SCHEMA_VERSION) {
                    return Err(self.wrong(
                        T,
                        format!(
                            "schema version {v}; this opscope reads version {} (convert the traces again)",
                            super::SCHEMA_VERSION
                        ),
                    ));
                }
            }
        }
        let ids = self.ints(T, batch, "source")?;
        let paths = self.texts(T, batch, "path")?;
        let formats = self.texts(T, batch, "format")?;
        let hosts = self.texts(T, batch, "host_name")?;
        let world = self.ints(T, batch, "world_size")?;
        let clocks = self.texts(T, batch, "clock")?;
        let unix = self.ints(T, batch, "unix_offset_ns")?;
        for r in 0..batch.num_rows() {
            let clock_name = clocks
                .get(r)
                .unwrap_or_else(|| self.trace.intern("parquet"));
            // The times are on the one clock the conversion put every host on.
            let clock = self.trace.add_clock(ClockDomain {
                name: clock_name,
                to_global: LinearTransform::IDENTITY,
                unix_offset_ns: unix.get(r),
            });
            let path = paths
                .get(r)
                .map(|p| self.trace.str(p).to_string())
                .unwrap_or_default();
            let format = formats
                .get(r)
                .map(|f| self.trace.str(f).to_string())
                .unwrap_or_else(|| "parquet".into());
            let source = self.trace.add_source(Source {
                path,
                format: format.into(),
                clock,
                host: hosts.get(r),
                rank,
                world_size: world.get(r).and_then(|w| u32::try_from(w).ok()),
                metadata: ArgsId::NONE,
            });
            let id = ids
                .get(r)
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(r as u32);
            self.sources.insert(id, source);
        }
        Ok(())
    }

    fn tracks_of(&mut self, batch: &RecordBatch) -> Result<(), ImportError> {
        const T: &str = "tracks";
        let ids = self.ints(T, batch, "id")?;
        let kinds = self.texts(T, batch, "kind")?;
        let names = self.texts(T, batch, "name")?;
        let pids = self.ints(T, batch, "pid")?;
        let process_names = self.texts(T, batch, "process_name")?;
        let tids = self.ints(T, batch, "tid")?;
        let thread_names = self.texts(T, batch, "thread_name")?;
        let device_kinds = self.texts(T, batch, "device_kind")?;
        let device_index = self.ints(T, batch, "device_index")?;
        let source_ids = self.ints(T, batch, "source")?;
        // Tracks with no process belong to the partition's first source.
        let fallback = self.sources.values().min_by_key(|s| s.0).copied();
        for r in 0..batch.num_rows() {
            let Some(id) = ids.get(r).and_then(|i| u32::try_from(i).ok()) else {
                continue;
            };
            let kind = match kinds.get(r).map(|k| self.trace.str(k)) {
                Some("thread") => TrackKind::Thread,
                Some("gpu_stream") => TrackKind::GpuStream,
                Some("counter") => TrackKind::Counter,
                _ => TrackKind::Async,
            };
            let source = source_ids
                .get(r)
                .and_then(|s| self.sources.get(&(s as u32)).copied())
                .or(fallback);
            let Some(source) = source else {
                return Err(self.wrong(T, "tracks but no source in metadata.parquet".into()));
            };
            let device = match (device_kinds.get(r), device_index.get(r)) {
                (Some(k), Some(i)) => {
                    let kind = match self.trace.str(k) {
                        "cpu" => DeviceKind::Cpu,
                        "gpu" => DeviceKind::Gpu,
                        "mtia" => DeviceKind::Mtia,
                        "tpu" => DeviceKind::Tpu,
                        "sycl" => DeviceKind::Sycl,
                        _ => DeviceKind::Other,
                    };
                    u32::try_from(i)
                        .ok()
                        .map(|i| self.trace.device(source, kind, i))
                }
                _ => None,
            };
            let process: Option<ProcessId> = pids.get(r).map(|pid| {
                let p = self.trace.process(source, pid);
                let proc_ = &mut self.trace.processes[p.index()];
                if proc_.name.is_none() {
                    proc_.name = process_names.get(r);
                }
                if proc_.device.is_none() {
                    proc_.device = device;
                }
                p
            });
            let track = match (process, tids.get(r)) {
                (Some(p), Some(tid))
                    if matches!(kind, TrackKind::Thread | TrackKind::GpuStream) =>
                {
                    let thread = self.trace.thread(p, tid);
                    let th = &mut self.trace.threads[thread.index()];
                    if th.name.is_none() {
                        th.name = thread_names.get(r);
                    }
                    self.trace.thread_track(thread, kind)
                }
                _ => {
                    let name = names.get(r).unwrap_or(StrId::EMPTY);
                    // The dataset's id keeps apart lanes of one name.
                    let t = self.trace.named_track(process, kind, name, u64::from(id));
                    if let (Some(tid), Some(p)) = (tids.get(r), process) {
                        let thread = self.trace.thread(p, tid);
                        self.trace.tracks[t.index()].thread = Some(thread);
                    }
                    t
                }
            };
            if self.trace.tracks[track.index()].device.is_none() {
                self.trace.tracks[track.index()].device = device;
            }
            self.tracks.insert(id, track);
        }
        Ok(())
    }

    fn track(&self, table: &str, id: Option<i64>) -> Result<TrackId, ImportError> {
        id.and_then(|t| self.tracks.get(&(t as u32)).copied())
            .ok_or_else(|| {
                self.wrong(
                    table,
                    format!("a row of track {id:?}, which tracks.parquet does not have"),
                )
            })
    }

    fn slices_of(&mut self, batch: &RecordBatch) -> Result<(), ImportError> {
        const T: &str = "slices";
        let ids = self.ints(T, batch, "id")?;
        let ts = self.ints(T, batch, "ts")?;
        let dur = self.ints(T, batch, "dur")?;
        let tracks = self.ints(T, batch, "track")?;
        let naming = self.naming(T, batch)?;
        let args = self.column(T, batch, "args")?.clone();
        for r in 0..batch.num_rows() {
            let track = self.track(T, tracks.get(r))?;
            let args = self.args(&args, r);
            let row = self.trace.slices.push(opscope_model::events::SliceRow {
                track,
                ts: ts.get(r).unwrap_or(0),
                dur: dur.get(r).unwrap_or(0),
                name: naming.name(r),
                category: naming.category(r),
                kind: naming.kind(r),
                args,
            });
            if let Some(id) = ids.get(r) {
                self.slices.insert(id as u32, row);
            }
        }
        Ok(())
    }

    fn instants_of(&mut self, batch: &RecordBatch) -> Result<(), ImportError> {
        const T: &str = "instants";
        let ts = self.ints(T, batch, "ts")?;
        let tracks = self.ints(T, batch, "track")?;
        let naming = self.naming(T, batch)?;
        let scopes = self.texts(T, batch, "scope")?;
        let args = self.column(T, batch, "args")?.clone();
        for r in 0..batch.num_rows() {
            let track = self.track(T, tracks.get(r))?;
            let args = self.args(&args, r);
            let scope = match scopes.get(r).map(|s| self.trace.str(s)) {
                Some("process") => InstantScope::Process,
                Some("global") => InstantScope::Global,
                _ => InstantScope::Thread,
            };
            self.trace.instants.push(opscope_model::events::InstantRow {
                track,
                ts: ts.get(r).unwrap_or(0),
                name: naming.name(r),
                category: naming.category(r),
                kind: naming.kind(r),
                scope,
                args,
            });
        }
        Ok(())
    }

    /// The name, category and kind columns of a table of slices or instants.
    fn naming(&mut self, table: &str, batch: &RecordBatch) -> Result<Naming, ImportError> {
        Ok(Naming {
            names: self.texts(table, batch, "name")?,
            categories: self.texts(table, batch, "category")?,
            kinds: self.texts(table, batch, "kind")?,
            kind_of: kind_names(self.trace),
        })
    }

    fn counters_of(&mut self, batch: &RecordBatch) -> Result<(), ImportError> {
        const T: &str = "counters";
        let ts = self.ints(T, batch, "ts")?;
        let tracks = self.ints(T, batch, "track")?;
        let values = self.column(T, batch, "value")?;
        let Some(values) = values.as_primitive_opt::<Float64Type>() else {
            return Err(self.wrong(T, "column `value` is not a double".into()));
        };
        for r in 0..batch.num_rows() {
            let track = self.track(T, tracks.get(r))?;
            let value = if values.is_null(r) {
                f64::NAN
            } else {
                values.value(r)
            };
            self.trace
                .counters
                .push(track, ts.get(r).unwrap_or(0), value);
        }
        Ok(())
    }

    fn flows_of(&mut self, batch: &RecordBatch) -> Result<(), ImportError> {
        const T: &str = "flows";
        let from = self.ints(T, batch, "from")?;
        let to = self.ints(T, batch, "to")?;
        let names = self.texts(T, batch, "name")?;
        let categories = self.texts(T, batch, "category")?;
        for r in 0..batch.num_rows() {
            let row = |x: Option<i64>| x.and_then(|x| self.slices.get(&(x as u32)).copied());
            // A flow to a slice of another partition (another rank) has no row here.
            if let (Some(a), Some(b)) = (row(from.get(r)), row(to.get(r))) {
                let name = names.get(r).unwrap_or(StrId::EMPTY);
                let category = categories.get(r).unwrap_or(StrId::EMPTY);
                self.trace.flows.push(a, b, name, category);
            }
        }
        Ok(())
    }

    /// A row's args: the JSON object the writer made, back as the model's values, in
    /// its order, arrays and objects as their text (as importers keep them).
    fn args(&mut self, column: &ArrayRef, row: usize) -> ArgsId {
        let Some(text) = column
            .as_string_opt::<i32>()
            .filter(|c| !c.is_null(row))
            .map(|c| c.value(row))
        else {
            return ArgsId::NONE;
        };
        let Ok(Ordered(fields)) = serde_json::from_str::<Ordered>(text) else {
            return ArgsId::NONE;
        };
        let entries: Vec<(StrId, ArgValue)> = fields
            .iter()
            .map(|(k, raw)| {
                let key = self.trace.intern(k);
                (key, arg_value(self.trace, raw.get()))
            })
            .collect();
        self.trace.args.push_bag(&entries)
    }
}

/// One JSON value as an arg. A float the writer wrote without a fraction (`1.0` as
/// `1`) comes back an integer.
fn arg_value(trace: &mut Trace, raw: &str) -> ArgValue {
    match raw.as_bytes().first() {
        Some(b'{' | b'[') => ArgValue::Json(trace.intern(raw)),
        Some(b'"') => match serde_json::from_str::<String>(raw) {
            Ok(s) => ArgValue::Str(trace.intern(&s)),
            Err(_) => ArgValue::Json(trace.intern(raw)),
        },
        Some(b't') => ArgValue::Bool(true),
        Some(b'f') => ArgValue::Bool(false),
        Some(b'n') | None => ArgValue::Null,
        Some(_) => {
            if let Ok(i) = raw.parse::<i64>() {
                ArgValue::Int(i)
            } else if let Ok(u) = raw.parse::<u64>() {
                ArgValue::UInt(u)
            } else {
                ArgValue::Float(raw.parse().unwrap_or(f64::NAN))
            }
        }
    }
}

/// A JSON object's members in their order, each value as its text.
struct Ordered<'a>(Vec<(std::borrow::Cow<'a, str>, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for Ordered<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Ordered<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Members)
    }
}

/// Each kind's name, interned, to its kind.
fn kind_names(trace: &mut Trace) -> HashMap<StrId, SliceKind> {
    SliceKind::ALL
        .iter()
        .map(|&k| (trace.intern(k.name()), k))
        .collect()
}

/// A text column's values interned: a dictionary's texts once each.
/// What the rows of slices and instants are called and of which kind (a missing or
/// unknown kind is other).
struct Naming {
    names: Texts,
    categories: Texts,
    kinds: Texts,
    kind_of: HashMap<StrId, SliceKind>,
}

impl Naming {
    fn name(&self, row: usize) -> StrId {
        self.names.get(row).unwrap_or(StrId::EMPTY)
    }

    fn category(&self, row: usize) -> StrId {
        self.categories.get(row).unwrap_or(StrId::EMPTY)
    }

    fn kind(&self, row: usize) -> SliceKind {
        self.kinds
            .get(row)
            .and_then(|k| self.kind_of.get(&k).copied())
            .unwrap_or(SliceKind::Other)
    }
}

struct Texts(Vec<Option<StrId>>);

impl Texts {
    fn of(column: &ArrayRef, trace: &mut Trace) -> Option<Texts> {
        let n = column.len();
        if let Some(strings) = column.as_string_opt::<i32>() {
            return Some(Texts(
                (0..n)
                    .map(|r| (!strings.is_null(r)).then(|| trace.intern(strings.value(r))))
                    .collect(),
            ));
        }
        let dictionary = column.as_any_dictionary_opt()?;
        let values = dictionary.values().as_string_opt::<i32>()?;
        let interned: Vec<StrId> = (0..values.len())
            .map(|v| trace.intern(values.value(v)))
            .collect();
        let keys = dictionary.normalized_keys();
        Some(Texts(
            (0..n)
                .map(|r| {
                    if column.is_null(r) {
                        None
                    } else {
                        interned.get(keys[r]).copied()
                    }
                })
                .collect(),
        ))
    }

    fn get(&self, row: usize) -> Option<StrId> {
        self.0.get(row).copied().flatten()
    }
}

/// An integer column of any width the writer uses, as i64 (null as none).
struct Ints(Vec<Option<i64>>);

impl Ints {
    fn of(column: &ArrayRef) -> Option<Ints> {
        fn all<T: arrow_array::ArrowPrimitiveType>(
            a: &arrow_array::PrimitiveArray<T>,
            wide: impl Fn(T::Native) -> i64,
        ) -> Vec<Option<i64>> {
            a.iter().map(|v| v.map(&wide)).collect()
        }
        if let Some(a) = column.as_primitive_opt::<Int64Type>() {
            return Some(Ints(all(a, |v| v)));
        }
        if let Some(a) = column.as_primitive_opt::<Int32Type>() {
            return Some(Ints(all(a, i64::from)));
        }
        column
            .as_primitive_opt::<UInt32Type>()
            .map(|a| Ints(all(a, i64::from)))
    }

    fn get(&self, row: usize) -> Option<i64> {
        self.0.get(row).copied().flatten()
    }
}
