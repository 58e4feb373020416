//! Nsight Systems SQLite exports (`nsys export --type sqlite`, schemas 2.x and 3.x):
//! CUPTI kernels, copies and sets on per-device stream tracks, synchronisation waits on
//! a lane of the waiting process; CUDA
//! runtime and driver calls, NVTX ranges and marks, and OS runtime calls on the threads
//! that made them; each thread's spells on a CPU (`SCHED_EVENTS`) as `running` slices.
//! Correlation ids are kept as `correlation` args, the key the correlation pass reads,
//! so launches link to their kernels. Tables of events opscope keeps no place for yet
//! (CPU samples and call stacks) are named in a warning.
//!
//! Columns are looked up by name, so tables of other schema versions with extra or
//! missing columns still read; a table that is absent is simply empty. An NVTX range
//! with no end (never popped before the capture stopped) ends at the export's last
//! time, counted as an unmatched begin.

use std::collections::HashMap;
use std::path::Path;

use opscope_model::args::ArgValue;
use opscope_model::events::{InstantRow, SliceRow};
use opscope_model::{
    ArgsId, ClockDomain, CopyDirection, DeviceKind, InstantScope, LinearTransform, SliceKind,
    Source, SourceId, StrId, Trace, TrackId, TrackKind,
};
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::common::SliceStack;
use crate::error::ImportError;

/// The first bytes of every SQLite database file.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

pub fn is_sqlite(bytes: &[u8]) -> bool {
    bytes.starts_with(SQLITE_MAGIC)
}

/// Nsight Systems SQLite exports (`nsys export --type sqlite`) in the registry. SQLite
/// reads the file itself (and its write-ahead log, when there is one).
pub struct NsysFormat;

impl crate::importer::Importer for NsysFormat {
    fn name(&self) -> &'static str {
        "nsys-sqlite"
    }

    fn looks_for(&self) -> &'static str {
        ".sqlite"
    }

    fn claims_name(&self, name: &str) -> bool {
        name.ends_with(".sqlite")
    }

    fn claims_bytes(&self, _path: &str, head: &[u8]) -> bool {
        is_sqlite(head)
    }

    /// The database, then its write-ahead log beside it (which SQLite reads when it is
    /// there: its coming or going is a changed input).
    fn files(&self, path: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        Ok(vec![path.to_path_buf(), wal.into()])
    }

    fn opens_files_itself(&self) -> bool {
        true
    }

    fn bytes_importer(&self) -> Option<crate::importer::BytesImporter> {
        Some(import_bytes)
    }

    fn import(
        &self,
        input: &crate::importer::Input,
        trace: &mut Trace,
    ) -> Option<Result<SourceId, ImportError>> {
        Some(import_path(input.path, input.shown, trace))
    }
}

/// Imports the export at `path` (opened read-only) as a new source; `shown` names it
/// in errors.
pub fn import_path(path: &Path, shown: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| sql_error(shown, "cannot open the database", &e))?;
    import_connection(&conn, shown, trace)
}

/// Imports an export held in memory (tests, fuzzing, stdin).
pub fn import_bytes(bytes: &[u8], shown: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let mut conn =
        Connection::open_in_memory().map_err(|e| sql_error(shown, "no in-memory database", &e))?;
    conn.deserialize_read_exact("main", bytes, bytes.len(), true)
        .map_err(|e| sql_error(shown, "not a SQLite database", &e))?;
    import_connection(&conn, shown, trace)
}

fn sql_error(path: &str, what: &str, e: &rusqlite::Error) -> ImportError {
    ImportError::Syntax {
        path: path.to_string(),
        offset: 0,
        message: format!("{what} ({e})"),
    }
}

/// One table's rows, with its columns found by name.
struct Table {
    columns: HashMap<String, usize>,
    rows: Vec<Vec<Value>>,
}

impl Table {
    fn read(conn: &Connection, shown: &str, name: &str) -> Result<Table, ImportError> {
        let exists: bool = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?1",
                [name],
                |row| row.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|e| sql_error(shown, "cannot list tables", &e))?;
        if !exists {
            return Ok(Table {
                columns: HashMap::new(),
                rows: Vec::new(),
            });
        }
        let error = |e: rusqlite::Error| sql_error(shown, &format!("table {name}"), &e);
        // Column names from the schema, read as bytes: rusqlite's own accessors panic
        // on a name that is not UTF-8 (a corrupt file).
        let mut names = conn
            .prepare("SELECT cid, name FROM pragma_table_info(?1)")
            .map_err(error)?;
        let columns: HashMap<String, usize> = names
            .query_map([name], |row| {
                let cid: i64 = row.get(0)?;
                let text = match row.get_ref(1)? {
                    ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    _ => String::new(),
                };
                Ok((text, cid as usize))
            })
            .map_err(error)?
            .collect::<Result<_, _>>()
            .map_err(error)?;
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{name}\""))
            .map_err(error)?;
        let width = stmt.column_count();
        let rows = stmt
            .query_map([], |row| {
                (0..width)
                    .map(|i| row.get_ref(i).map(owned_value))
                    .collect()
            })
            .map_err(error)?
            .collect::<Result<Vec<Vec<Value>>, _>>()
            .map_err(error)?;
        Ok(Table { columns, rows })
    }

    fn int(&self, row: &[Value], column: &str) -> Option<i64> {
        match row.get(*self.columns.get(column)?)? {
            Value::Integer(v) => Some(*v),
            Value::Real(v) => Some(*v as i64),
            _ => None,
        }
    }

    fn text<'r>(&self, row: &'r [Value], column: &str) -> Option<&'r str> {
        match row.get(*self.columns.get(column)?)? {
            Value::Text(t) => Some(t.as_str()),
            _ => None,
        }
    }
}

/// A column value, owned; text that is not UTF-8 (a corrupt database) is replaced
/// rather than refused, which rusqlite's own conversion does by panicking.
fn owned_value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Integer(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
    }
}

/// nsys packs a process and thread id into one number.
fn split_global_tid(global: i64) -> (i64, i64) {
    ((global >> 24) & 0xFF_FFFF, global & 0xFF_FFFF)
}

/// CUPTI's `CUpti_ActivityMemcpyKind`.
fn copy_direction(kind: i64) -> CopyDirection {
    match kind {
        1 | 6 => CopyDirection::H2D,
        2 | 7 => CopyDirection::D2H,
        8 | 5 => CopyDirection::D2D,
        9 => CopyDirection::H2H,
        10 => CopyDirection::P2P,
        _ => CopyDirection::Unknown,
    }
}

/// NVTX event types in `NVTX_EVENTS.eventType`.
mod nvtx_type {
    pub const MARK: i64 = 34;
    pub const THREAD_NAME: i64 = 39;
    pub const PUSH_POP_RANGE: i64 = 59;
    pub const START_END_RANGE: i64 = 60;
    pub const DOMAIN_CREATE: i64 = 75;
}

struct Importer<'t> {
    trace: &'t mut Trace,
    source: SourceId,
    strings: HashMap<i64, String>,
    /// Per GPU device: its process.
    gpu_processes: HashMap<i64, opscope_model::ProcessId>,
    gpu_names: HashMap<i64, String>,
    process_names: HashMap<i64, String>,
    /// Events whose name is a string id the StringIds table does not hold.
    nameless: u64,
    /// NVTX ranges with no end, by track.
    open: SliceStack<TrackId, OpenRange>,
    /// The latest time read, where what is left open ends.
    last_ts: i64,
}

struct OpenRange {
    ts: i64,
    name: StrId,
    args: ArgsId,
}

impl Importer<'_> {
    fn string(&mut self, id: Option<i64>) -> Option<StrId> {
        let text = self.strings.get(&id?)?;
        Some(self.trace.intern(text))
    }

    fn process(&mut self, pid: i64) -> opscope_model::ProcessId {
        let p = self.trace.process(self.source, pid);
        if self.trace.processes[p.index()].name.is_none() {
            if let Some(name) = self.process_names.get(&pid).cloned() {
                let name = self.trace.intern(&name);
                self.trace.processes[p.index()].name = Some(name);
            }
        }
        p
    }

    fn thread_track(&mut self, global_tid: i64) -> TrackId {
        let (pid, tid) = split_global_tid(global_tid);
        let process = self.process(pid);
        let thread = self.trace.thread(process, tid);
        self.trace.thread_track(thread, TrackKind::Thread)
    }

    /// The track of a stream of a GPU: GPUs are processes (as in Kineto traces), their
    /// streams threads.
    fn stream_track(&mut self, device: i64, context: i64, stream: i64) -> TrackId {
        let process = match self.gpu_processes.get(&device) {
            Some(&p) => p,
            None => {
                // Kept apart from host pids, which nsys limits to 24 bits.
                let p = self.trace.process(self.source, (1 << 32) + device);
                let index = u32::try_from(device).unwrap_or(u32::MAX);
                let d = self.trace.device(self.source, DeviceKind::Gpu, index);
                let label = match self.gpu_names.get(&device) {
                    Some(model) => format!("GPU {device} ({model})"),
                    None => format!("GPU {device}"),
                };
                if let Some(model) = self.gpu_names.get(&device).cloned() {
                    let model = self.trace.intern(&model);
                    self.trace.devices[d.index()].name = Some(model);
                }
                let label = self.trace.intern(&label);
                self.trace.processes[p.index()].name = Some(label);
                self.trace.processes[p.index()].device = Some(d);
                self.gpu_processes.insert(device, p);
                p
            }
        };
        let thread = self
            .trace
            .thread(process, (context << 32) | (stream & 0xFFFF_FFFF));
        if self.trace.threads[thread.index()].name.is_none() {
            let name = self.trace.intern(&format!("stream {stream}"));
            self.trace.threads[thread.index()].name = Some(name);
        }
        self.trace.thread_track(thread, TrackKind::GpuStream)
    }

    fn args(&mut self, entries: &[(&str, ArgValue)]) -> ArgsId {
        if entries.is_empty() {
            return ArgsId::NONE;
        }
        let keys: Vec<StrId> = entries.iter().map(|(k, _)| self.trace.intern(k)).collect();
        let mut w = self.trace.args.writer();
        for (key, (_, value)) in keys.into_iter().zip(entries) {
            w.push(key, *value);
        }
        w.finish()
    }

    #[allow(clippy::too_many_arguments)]
    fn slice(
        &mut self,
        track: TrackId,
        start: i64,
        end: i64,
        name: StrId,
        category: &str,
        kind: SliceKind,
        args: ArgsId,
    ) {
        self.last_ts = self.last_ts.max(start).max(end);
        let category = self.trace.intern(category);
        self.trace.slices.push(SliceRow {
            track,
            ts: start,
            dur: end.saturating_sub(start),
            name,
            category,
            kind,
            args,
        });
    }
}

/// Imports what the database holds; after an error (a table that cannot be read), what
/// was read before it stays in `trace`, finished like a whole import.
fn import_connection(
    conn: &Connection,
    shown: &str,
    trace: &mut Trace,
) -> Result<SourceId, ImportError> {
    let result = read_tables(conn, shown, trace);
    trace.finish();
    result
}

fn read_tables(conn: &Connection, shown: &str, trace: &mut Trace) -> Result<SourceId, ImportError> {
    let table = |name: &str| Table::read(conn, shown, name);
    let strings_table = table("StringIds")?;
    let strings: HashMap<i64, String> = strings_table
        .rows
        .iter()
        .filter_map(|r| {
            Some((
                strings_table.int(r, "id")?,
                strings_table.text(r, "value")?.to_string(),
            ))
        })
        .collect();
    if strings_table.columns.is_empty() && table("CUPTI_ACTIVITY_KIND_KERNEL")?.columns.is_empty() {
        return Err(ImportError::UnknownFormat {
            path: shown.to_string(),
            message: "a SQLite database without Nsight Systems tables (no StringIds)".into(),
        });
    }
    let start_table = table("TARGET_INFO_SESSION_START_TIME")?;
    let unix_start = start_table
        .rows
        .first()
        .and_then(|r| start_table.int(r, "utcEpochNs"));
    let clock_name = trace.intern("nsys");
    let clock = trace.add_clock(ClockDomain {
        name: clock_name,
        to_global: LinearTransform::IDENTITY,
        // Times count from the session's start, whose Unix time the export keeps.
        unix_offset_ns: unix_start,
    });
    let source = trace.add_source(Source {
        path: shown.to_string(),
        format: crate::importer::Importer::name(&NsysFormat).into(),
        clock,
        host: None,
        rank: None,
        world_size: None,
        metadata: ArgsId::NONE,
    });
    let processes = table("PROCESSES")?;
    let process_names = processes
        .rows
        .iter()
        .filter_map(|r| {
            Some((
                processes.int(r, "pid")?,
                processes.text(r, "name")?.to_string(),
            ))
        })
        .collect();
    let gpus = table("TARGET_INFO_GPU")?;
    let gpu_names = gpus
        .rows
        .iter()
        .filter_map(|r| Some((gpus.int(r, "id")?, gpus.text(r, "name")?.to_string())))
        .collect();
    let mut im = Importer {
        trace,
        source,
        strings,
        gpu_processes: HashMap::new(),
        gpu_names,
        process_names,
        nameless: 0,
        open: SliceStack::new(),
        last_ts: i64::MIN,
    };

    let threads = table("ThreadNames")?;
    for r in &threads.rows {
        let (Some(global), Some(name)) = (threads.int(r, "globalTid"), threads.int(r, "nameId"))
        else {
            continue;
        };
        let Some(name) = im.string(Some(name)) else {
            continue;
        };
        let (pid, tid) = split_global_tid(global);
        let process = im.process(pid);
        let thread = im.trace.thread(process, tid);
        im.trace.threads[thread.index()].name = Some(name);
    }

    device_work(&mut im, &table("CUPTI_ACTIVITY_KIND_KERNEL")?, Work::Kernel);
    device_work(&mut im, &table("CUPTI_ACTIVITY_KIND_MEMCPY")?, Work::Memcpy);
    device_work(&mut im, &table("CUPTI_ACTIVITY_KIND_MEMSET")?, Work::Memset);
    device_work(
        &mut im,
        &table("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")?,
        Work::Sync,
    );
    api_calls(
        &mut im,
        &table("CUPTI_ACTIVITY_KIND_RUNTIME")?,
        "cuda_runtime",
        SliceKind::Runtime,
    );
    api_calls(
        &mut im,
        &table("CUPTI_ACTIVITY_KIND_DRIVER")?,
        "cuda_driver",
        SliceKind::Driver,
    );
    api_calls(&mut im, &table("OSRT_API")?, "os_runtime", SliceKind::Other);
    nvtx(&mut im, &table("NVTX_EVENTS")?);
    scheduling(&mut im, &table("SCHED_EVENTS")?);
    let mut skipped = Vec::new();
    for (name, what) in NOT_READ {
        let rows = count_rows(conn, shown, name)?;
        if rows > 0 {
            skipped.push(format!("{name} ({rows} rows: {what})"));
        }
    }
    if !skipped.is_empty() {
        let warning = format!(
            "{shown}: not read (opscope keeps no such data yet): {}",
            skipped.join(", ")
        );
        im.trace.warnings.push((source, warning));
    }
    if im.nameless > 0 {
        // Names stand in for missing ones; the user must know they are not the trace's.
        let why = if strings_table.columns.is_empty() {
            "the export has no StringIds table"
        } else {
            "their string ids are not in the StringIds table"
        };
        let warning = format!(
            "{shown}: {} kernels, API calls and NVTX ranges have no name ({why}): they are called `kernel`, `unknown` or nothing",
            im.nameless
        );
        im.trace.warnings.push((source, warning));
    }
    Ok(source)
}

/// Tables of an export that hold events opscope does not read, and what they hold: said
/// in a warning when they have rows, rather than dropped without a word.
const NOT_READ: [(&str, &str); 6] = [
    ("COMPOSITE_EVENTS", "CPU samples"),
    ("SAMPLING_CALLCHAINS", "the call stacks of CPU samples"),
    ("CUDA_CALLCHAINS", "the call stacks of CUDA API calls"),
    ("OSRT_CALLCHAINS", "the call stacks of OS runtime calls"),
    ("GPU_METRICS", "GPU metrics samples"),
    ("CUDA_GPU_MEMORY_USAGE_EVENTS", "GPU memory use"),
];

/// The rows of `table`, 0 when the export has no such table.
fn count_rows(conn: &Connection, shown: &str, table: &str) -> Result<i64, ImportError> {
    let exists: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .map_err(|e| sql_error(shown, table, &e))?;
    if exists == 0 {
        return Ok(0);
    }
    conn.query_row(&format!("SELECT count(*) FROM \"{table}\""), [], |r| {
        r.get(0)
    })
    .map_err(|e| sql_error(shown, table, &e))
}

/// When each thread ran (`SCHED_EVENTS`: a thread switched in on a CPU, later out): a
/// `running` slice per spell, on a lane of the thread's process beside the thread (its
/// spells cross its calls, which they would not nest with), the CPU as an arg. A spell
/// the export saw begin but not end ends at the last time read; one it saw end only
/// begins at the session's start.
fn scheduling(im: &mut Importer, t: &Table) {
    let mut rows: Vec<(i64, i64, bool, i64)> = t
        .rows
        .iter()
        .filter_map(|r| {
            Some((
                t.int(r, "globalTid")?,
                t.int(r, "start")?,
                t.int(r, "isSchedIn")? != 0,
                t.int(r, "cpu").unwrap_or(-1),
            ))
        })
        .collect();
    im.trace.repairs.malformed_events += (t.rows.len() - rows.len()) as u64;
    rows.sort_unstable_by_key(|r| (r.0, r.1));
    let running = im.trace.intern("running");
    let category = im.trace.intern("sched");
    let end_of_all = rows.iter().map(|r| r.1).max().unwrap_or(0).max(im.last_ts);
    let spell = |im: &mut Importer, global: i64, from: i64, to: i64, cpu: i64| {
        let (pid, tid) = split_global_tid(global);
        let process = im.process(pid);
        let track = im
            .trace
            .named_track(Some(process), TrackKind::Async, running, tid as u64);
        let args = im.args(&[("cpu", ArgValue::Int(cpu)), ("tid", ArgValue::Int(tid))]);
        im.trace.slices.push(opscope_model::events::SliceRow {
            track,
            ts: from,
            dur: (to - from).max(0),
            name: running,
            category,
            kind: SliceKind::Other,
            args,
        });
    };
    let mut open: Option<(i64, i64, i64)> = None; // (thread, since, cpu)
    for (global, ts, sched_in, cpu) in rows {
        if let Some((thread, since, on)) = open {
            if thread != global {
                spell(im, thread, since, end_of_all, on);
                open = None;
            }
        }
        match (sched_in, open) {
            (true, None) => open = Some((global, ts, cpu)),
            (true, Some(_)) => {} // in twice: the first stands
            (false, Some((thread, since, on))) => {
                spell(im, thread, since, ts, on);
                open = None;
            }
            (false, None) => spell(im, global, 0, ts, cpu),
        }
    }
    if let Some((thread, since, on)) = open {
        spell(im, thread, since, end_of_all, on);
    }
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Work {
    Kernel,
    Memcpy,
    Memset,
    Sync,
}

/// Kernels, copies, sets and synchronisations: on their device's stream tracks.
fn device_work(im: &mut Importer, t: &Table, work: Work) {
    for r in &t.rows {
        let (Some(start), Some(end)) = (t.int(r, "start"), t.int(r, "end")) else {
            im.trace.repairs.malformed_events += 1;
            continue;
        };
        let device = t.int(r, "deviceId").unwrap_or(0);
        let context = t.int(r, "contextId").unwrap_or(0);
        let stream = t.int(r, "streamId").unwrap_or(0);
        let track = if work == Work::Sync {
            // The host's wait for a stream or event, not work on the device: a lane of
            // the waiting process.
            let (pid, _) = split_global_tid(t.int(r, "globalPid").unwrap_or(0));
            let process = im.process(pid);
            let lane = im.trace.intern("CUDA synchronization");
            im.trace
                .named_track(Some(process), TrackKind::Async, lane, stream as u64)
        } else {
            im.stream_track(device, context, stream)
        };
        let mut args: Vec<(&str, ArgValue)> = Vec::with_capacity(12);
        if let Some(c) = t.int(r, "correlationId") {
            args.push(("correlation", ArgValue::Int(c)));
        }
        args.push(("device", ArgValue::Int(device)));
        args.push(("stream", ArgValue::Int(stream)));
        let (name, kind, category) = match work {
            Work::Kernel => {
                for column in [
                    "gridX",
                    "gridY",
                    "gridZ",
                    "blockX",
                    "blockY",
                    "blockZ",
                    "registersPerThread",
                    "staticSharedMemory",
                    "dynamicSharedMemory",
                ] {
                    if let Some(v) = t.int(r, column) {
                        args.push((column, ArgValue::Int(v)));
                    }
                }
                let name = im
                    .string(t.int(r, "demangledName"))
                    .or_else(|| im.string(t.int(r, "shortName")))
                    .unwrap_or_else(|| {
                        im.nameless += 1;
                        im.trace.intern("kernel")
                    });
                (name, SliceKind::Kernel, "kernel")
            }
            Work::Memcpy => {
                let direction = copy_direction(t.int(r, "copyKind").unwrap_or(0));
                if let Some(bytes) = t.int(r, "bytes") {
                    args.push(("bytes", ArgValue::Int(bytes)));
                }
                // CUPTI's memory kinds (0 pageable, 1 pinned, 2 device, …): whether an
                // asynchronous copy really is one.
                for column in ["srcKind", "dstKind"] {
                    if let Some(v) = t.int(r, column) {
                        args.push((column, ArgValue::Int(v)));
                    }
                }
                let label = match direction {
                    CopyDirection::H2D => "Memcpy HtoD",
                    CopyDirection::D2H => "Memcpy DtoH",
                    CopyDirection::D2D => "Memcpy DtoD",
                    CopyDirection::P2P => "Memcpy PtoP",
                    CopyDirection::H2H => "Memcpy HtoH",
                    CopyDirection::Unknown => "Memcpy",
                };
                let name = im.trace.intern(label);
                (name, SliceKind::Memcpy(direction), "gpu_memcpy")
            }
            Work::Memset => {
                if let Some(bytes) = t.int(r, "bytes") {
                    args.push(("bytes", ArgValue::Int(bytes)));
                }
                if let Some(v) = t.int(r, "memKind") {
                    args.push(("memKind", ArgValue::Int(v)));
                }
                let name = im.trace.intern("Memset");
                (name, SliceKind::Memset, "gpu_memset")
            }
            Work::Sync => {
                if let Some(v) = t.int(r, "syncType") {
                    args.push(("syncType", ArgValue::Int(v)));
                }
                let name = im.trace.intern("Synchronization");
                (name, SliceKind::Sync, "cuda_sync")
            }
        };
        let args = im.args(&args);
        im.slice(track, start, end, name, category, kind, args);
    }
}

/// CUDA runtime and driver calls and OS runtime calls, on the calling threads.
fn api_calls(im: &mut Importer, t: &Table, category: &str, kind: SliceKind) {
    for r in &t.rows {
        let (Some(start), Some(end), Some(global)) =
            (t.int(r, "start"), t.int(r, "end"), t.int(r, "globalTid"))
        else {
            im.trace.repairs.malformed_events += 1;
            continue;
        };
        let track = im.thread_track(global);
        let name = im
            .string(t.int(r, "nameId"))
            .or_else(|| t.text(r, "name").map(|n| im.trace.intern(n)))
            .unwrap_or_else(|| {
                im.nameless += 1;
                im.trace.intern("unknown")
            });
        let mut args: Vec<(&str, ArgValue)> = Vec::with_capacity(2);
        if let Some(c) = t.int(r, "correlationId") {
            args.push(("correlation", ArgValue::Int(c)));
        }
        if let Some(v) = t.int(r, "returnValue") {
            args.push(("return", ArgValue::Int(v)));
        }
        let args = im.args(&args);
        im.slice(track, start, end, name, category, kind, args);
    }
}

/// NVTX ranges and marks on the threads that pushed them; domain and thread names.
fn nvtx(im: &mut Importer, t: &Table) {
    let mut domains: HashMap<i64, String> = HashMap::new();
    for r in &t.rows {
        if t.int(r, "eventType") == Some(nvtx_type::DOMAIN_CREATE) {
            if let (Some(id), Some(name)) = (t.int(r, "domainId"), t.text(r, "text")) {
                domains.insert(id, name.to_string());
            }
        }
    }
    for r in &t.rows {
        let event_type = t.int(r, "eventType").unwrap_or(-1);
        let (Some(start), Some(global)) = (t.int(r, "start"), t.int(r, "globalTid")) else {
            continue;
        };
        let text_id = t.int(r, "textId");
        let text = t
            .text(r, "text")
            .map(str::to_string)
            .or_else(|| im.strings.get(&text_id?).cloned());
        if text.is_none() && text_id.is_some() && event_type != nvtx_type::THREAD_NAME {
            im.nameless += 1;
        }
        match event_type {
            nvtx_type::PUSH_POP_RANGE | nvtx_type::START_END_RANGE | nvtx_type::MARK => {}
            nvtx_type::THREAD_NAME => {
                if let Some(name) = text {
                    let (pid, tid) = split_global_tid(global);
                    let process = im.process(pid);
                    let thread = im.trace.thread(process, tid);
                    let name = im.trace.intern(&name);
                    im.trace.threads[thread.index()].name = Some(name);
                }
                continue;
            }
            _ => continue,
        }
        let name = im.trace.intern(text.as_deref().unwrap_or(""));
        let mut args: Vec<(&str, ArgValue)> = Vec::new();
        let domain = t.int(r, "domainId").and_then(|d| domains.get(&d).cloned());
        if let Some(domain) = &domain {
            args.push(("domain", ArgValue::Str(im.trace.intern(domain))));
        }
        if let Some(c) = t.int(r, "category") {
            args.push(("category", ArgValue::Int(c)));
        }
        for (column, key) in [
            ("int64Value", "payload"),
            ("uint64Value", "payload"),
            ("int32Value", "payload"),
            ("uint32Value", "payload"),
        ] {
            if let Some(v) = t.int(r, column) {
                args.push((key, ArgValue::Int(v)));
            }
        }
        if let Some(Value::Real(v)) = t
            .columns
            .get("doubleValue")
            .or_else(|| t.columns.get("floatValue"))
            .and_then(|&i| r.get(i))
        {
            args.push(("payload", ArgValue::Float(*v)));
        }
        let args = im.args(&args);
        let category = im.trace.intern("nvtx");
        im.last_ts = im.last_ts.max(start);
        if event_type == nvtx_type::MARK {
            let track = im.thread_track(global);
            im.trace.instants.push(InstantRow {
                track,
                ts: start,
                name,
                category,
                kind: SliceKind::Other,
                scope: InstantScope::Thread,
                args,
            });
            continue;
        }
        let track = if event_type == nvtx_type::START_END_RANGE {
            // Start/end ranges may cross threads and overlap: an async lane each.
            let (pid, _) = split_global_tid(global);
            let process = im.process(pid);
            let lane = t.int(r, "rangeId").unwrap_or(start) as u64;
            im.trace
                .named_track(Some(process), TrackKind::Async, name, lane)
        } else {
            im.thread_track(global)
        };
        match t.int(r, "end") {
            Some(end) => im.slice(track, start, end, name, "nvtx", SliceKind::Annotation, args),
            None => im.open.begin(
                track,
                OpenRange {
                    ts: start,
                    name,
                    args,
                },
            ),
        }
    }
    let end = im.last_ts;
    for (track, ranges) in im.open.finish(&mut im.trace.repairs) {
        for r in ranges {
            let (ts, name, args) = (r.ts, r.name, r.args);
            im.slice(track, ts, end, name, "nvtx", SliceKind::Annotation, args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_and_copy_kinds() {
        assert_eq!(split_global_tid(0x112c69d12c69d), (1230493, 1230493));
        assert_eq!(copy_direction(1), CopyDirection::H2D);
        assert_eq!(copy_direction(2), CopyDirection::D2H);
        assert_eq!(copy_direction(10), CopyDirection::P2P);
        assert_eq!(copy_direction(99), CopyDirection::Unknown);
    }

    const STRING_IDS: &str = "CREATE TABLE StringIds (id INTEGER, value TEXT);
             INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel'), (2, 'gemm_kernel'), (3, 'step');";

    const SMALL_EXPORT: &str = "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
             INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000);
             CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (100, 150, 16777217 * 5 + 2, 42, 1);
             CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, gridX INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (200, 260, 0, 1, 7, 42, 0, 2, 128);
             CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, bytes INTEGER, copyKind INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (300, 310, 0, 1, 7, 43, 4096, 2);
             CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, textId INTEGER, globalTid INTEGER, domainId INTEGER);
             INSERT INTO NVTX_EVENTS VALUES (90, 400, 59, NULL, 3, 16777217 * 5 + 2, 0), (95, NULL, 34, 'here', NULL, 16777217 * 5 + 2, 0);";

    fn small_export(tables: &[&str]) -> Trace {
        let conn = Connection::open_in_memory().unwrap();
        for sql in tables {
            conn.execute_batch(sql).unwrap();
        }
        let bytes = conn.serialize("main").unwrap().to_vec();
        let mut trace = Trace::new();
        import_bytes(&bytes, "t.sqlite", &mut trace).unwrap();
        trace
    }

    /// A database made here: a launch and its kernel, a copy, a push/pop range and a
    /// mark, each read to the right track with its correlation id.
    #[test]
    fn a_small_export_reads() {
        let trace = small_export(&[STRING_IDS, SMALL_EXPORT]);
        assert!(trace.warnings.is_empty(), "{:?}", trace.warnings);
        let kinds: Vec<SliceKind> = (0..trace.slices.len())
            .map(|i| trace.slices.kind(i))
            .collect();
        assert_eq!(trace.slices.len(), 4, "{kinds:?}");
        let find =
            |kind: SliceKind| (0..trace.slices.len()).find(|&i| trace.slices.kind(i) == kind);
        let kernel = find(SliceKind::Kernel).unwrap();
        assert_eq!(trace.str(trace.slices.name[kernel]), "gemm_kernel");
        assert_eq!(trace.slices.dur[kernel], 60);
        let corr = trace.strings.find("correlation").unwrap();
        assert_eq!(
            trace.args.find(trace.slices.args[kernel], corr),
            Some(ArgValue::Int(42))
        );
        let launch = find(SliceKind::Runtime).unwrap();
        assert_eq!(trace.str(trace.slices.name[launch]), "cudaLaunchKernel");
        let range = find(SliceKind::Annotation).unwrap();
        assert_eq!(trace.str(trace.slices.name[range]), "step");
        assert_eq!(
            trace.slices.parent[launch], range as u32,
            "the launch nests in the range"
        );
        assert!(find(SliceKind::Memcpy(CopyDirection::D2H)).is_some());
        assert_eq!(trace.instants.len(), 1);
        let stream = &trace.tracks[trace.slices.track[kernel] as usize];
        assert_eq!(stream.kind, TrackKind::GpuStream);
        assert!(stream.device.is_some());
        assert_eq!(
            trace.clocks[trace.sources[0].clock.0 as usize].unix_offset_ns,
            Some(1_700_000_000_000_000_000)
        );
    }

    /// A range never popped ends where the export's last event ends, as other formats
    /// close a begin with no end; it used to be dropped (and counted all the same).
    #[test]
    fn a_range_with_no_end_ends_at_the_last_time() {
        let open_range = "INSERT INTO NVTX_EVENTS VALUES (160, NULL, 59, 'never popped', NULL, 16777217 * 5 + 2, 0), (170, NULL, 60, 'never ended', NULL, 16777217 * 5 + 2, 0);";
        let trace = small_export(&[STRING_IDS, SMALL_EXPORT, open_range]);
        assert_eq!(trace.repairs.unmatched_begins, 2);
        let s = &trace.slices;
        let find = |name: &str| {
            (0..s.len())
                .find(|&i| trace.str(s.name[i]) == name)
                .unwrap()
        };
        // The range `step`, 90..400, ends last.
        assert_eq!(
            (s.ts[find("never popped")], s.end(find("never popped"))),
            (160, 400)
        );
        assert_eq!(
            (s.ts[find("never ended")], s.end(find("never ended"))),
            (170, 400)
        );
        let pushed = &trace.tracks[s.track[find("never popped")] as usize];
        assert_eq!(pushed.kind, TrackKind::Thread);
    }

    /// Found by fuzzing: text that is not UTF-8 made rusqlite panic.
    /// Without its StringIds table an export still reads, but the names that stand in
    /// for the missing ones are told of.
    #[test]
    fn names_missing_from_string_ids_are_told_of() {
        let trace = small_export(&[SMALL_EXPORT]);
        assert_eq!(trace.slices.len(), 4);
        let warnings: Vec<&str> = trace.warnings.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(
            warnings,
            ["t.sqlite: 3 kernels, API calls and NVTX ranges have no name (the export has no StringIds table): they are called `kernel`, `unknown` or nothing"]
        );
        // A table that lacks some ids is told apart from no table.
        let trace = small_export(&[
            "CREATE TABLE StringIds (id INTEGER, value TEXT); INSERT INTO StringIds VALUES (2, 'gemm_kernel');",
            SMALL_EXPORT,
        ]);
        assert!(
            trace.warnings[0].1.contains("2 kernels, API calls and NVTX ranges have no name (their string ids are not in the StringIds table)"),
            "{:?}",
            trace.warnings
        );
    }

    #[test]
    fn text_that_is_not_utf8_is_replaced() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE StringIds (id INTEGER, value TEXT);
             INSERT INTO StringIds VALUES (1, CAST(X'66FF6F' AS TEXT));
             CREATE TABLE OSRT_API (start INTEGER, end INTEGER, globalTid INTEGER, nameId INTEGER);
             INSERT INTO OSRT_API VALUES (1, 2, 16777217, 1);",
        )
        .unwrap();
        let bytes = conn.serialize("main").unwrap().to_vec();
        let mut trace = Trace::new();
        import_bytes(&bytes, "t.sqlite", &mut trace).unwrap();
        assert_eq!(trace.str(trace.slices.name[0]), "f\u{fffd}o");
    }

    /// Found by fuzzing: a table that fails to read (here a view over a missing table)
    /// ended the import before the trace was finished, leaving slices unsorted.
    #[test]
    fn what_was_read_before_an_error_is_finished() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE StringIds (id INTEGER, value TEXT);
             CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER);
             INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (50, 60, 0, 7), (10, 20, 0, 7);
             CREATE TABLE gone (a INTEGER);
             CREATE VIEW NVTX_EVENTS AS SELECT a FROM gone;
             DROP TABLE gone;",
        )
        .unwrap();
        let bytes = conn.serialize("main").unwrap().to_vec();
        let mut trace = Trace::new();
        let err = import_bytes(&bytes, "t.sqlite", &mut trace).unwrap_err();
        assert!(err.to_string().contains("NVTX_EVENTS"), "{err}");
        assert_eq!(trace.slices.ts, [10, 50], "kept, and sorted");
    }

    #[test]
    fn not_a_database_is_a_clear_error() {
        let mut trace = Trace::new();
        let mut bytes = SQLITE_MAGIC.to_vec();
        bytes.resize(600, 0xAB);
        let err = import_bytes(&bytes, "x.sqlite", &mut trace).unwrap_err();
        assert!(err.to_string().starts_with("x.sqlite:"), "{err}");
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE other (a INTEGER)")
            .unwrap();
        let bytes = conn.serialize("main").unwrap().to_vec();
        let err = import_bytes(&bytes, "y.sqlite", &mut trace).unwrap_err();
        assert!(
            err.to_string().contains("without Nsight Systems tables"),
            "{err}"
        );
    }
}
