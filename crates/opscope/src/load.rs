//! Finding and loading trace files: a TRACE argument is a file, a directory (searched
//! recursively for trace files, each read once, no link out of it followed), or a pipe
//! (`-` is standard input); files are memory-mapped, pipes read into memory, gzip is
//! inflated, and each is imported into one shared model, with a progress bar on long
//! loads. A directory holding a `metadata` file is a CTF trace: its stream files are
//! read together (an LTTng session directory holds several such traces).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use opscope_model::{SourceId, Trace};

use opscope_formats::registry;

use crate::cache;

/// What loading was asked to do.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Never show a progress bar (it is shown only on a terminal, for big inputs).
    pub quiet: bool,
    /// Read the model from the model cache when it holds these very files, and save
    /// it there after parsing them (see [`crate::cache`]).
    pub cache: bool,
}

/// The model a command reports on: read by the command, or (run on a model loaded
/// before, see [`crate::embed`]) that model, shared.
pub enum Loaded {
    Read(Option<Box<Trace>>),
    Shared(Arc<Trace>),
}

/// Whether models read by commands are left for the process's exit to free: the
/// executable reports and exits, and the kernel takes the memory back at once, where
/// freeing it column by column (each large column unmapped on its own) took 0.5-1 ms of
/// a 20 ms `info` on a 35 MB model. A process that goes on (Python) frees them.
static MODELS_DIE_WITH_THE_PROCESS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Says that this process exits after its command (the executable's `main`).
pub fn models_die_with_the_process() {
    MODELS_DIE_WITH_THE_PROCESS.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Drop for Loaded {
    fn drop(&mut self) {
        if let Loaded::Read(trace) = self {
            if MODELS_DIE_WITH_THE_PROCESS.load(std::sync::atomic::Ordering::Relaxed) {
                std::mem::forget(trace.take());
            }
        }
    }
}

impl std::ops::Deref for Loaded {
    type Target = Trace;
    fn deref(&self) -> &Trace {
        match self {
            Loaded::Read(Some(trace)) => trace,
            Loaded::Read(None) => unreachable!("a read model is taken only when dropped"),
            Loaded::Shared(trace) => trace,
        }
    }
}

thread_local! {
    /// The model that commands run by [`crate::embed`] on this thread report on, in
    /// place of reading their TRACE arguments.
    static PRELOADED: std::cell::RefCell<Option<Arc<Trace>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `trace` as the model every [`Inputs::load`] on this thread gives
/// (the model before it, if any, again after).
pub fn with_preloaded<R>(trace: Arc<Trace>, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Arc<Trace>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let before = self.0.take();
            PRELOADED.with(|p| *p.borrow_mut() = before);
        }
    }
    let _reset = Reset(PRELOADED.with(|p| p.borrow_mut().replace(trace)));
    f()
}

/// The traces a command reads, as every analysis command takes them.
#[derive(clap::Args, Debug)]
pub struct Inputs {
    /// Trace files or directories of trace files.
    #[arg(required_unless_present = "live", value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Read a running job from the agent's flight recorder instead (the job as
    /// `opscope top` names it; with no JOB, every job of yours it holds).
    #[arg(long, value_name = "JOB", conflicts_with = "traces", num_args = 0..=1,
          default_missing_value = "")]
    pub live: Option<String>,
    /// With --live: only the last DURATION (e.g. 10s) [default: all the agent holds].
    #[arg(long, value_name = "DURATION", requires = "live",
          value_parser = crate::agent::triggers::parse_duration)]
    pub last: Option<Duration>,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
    /// Parse the files even when the model cache holds them, and do not save the model
    /// there (the cache is under ~/.cache/opscope/models; OPSCOPE_CACHE_DIR moves it,
    /// OPSCOPE_CACHE_DIR=off turns it off).
    #[arg(long)]
    pub no_cache: bool,
    /// Where the agent is, for --live (a socket, or an agent over TCP and its token).
    #[command(flatten, next_help_heading = "Where the agent is (with --live)")]
    pub agent: crate::agent::client::AgentAddress,
}

impl Inputs {
    /// The model of the traces, for a command to report on and then exit.
    pub fn load(&self) -> Result<Loaded> {
        if let Some(trace) = PRELOADED.with(|p| p.borrow().clone()) {
            return Ok(Loaded::Shared(trace));
        }
        Ok(Loaded::Read(Some(Box::new(self.load_owned()?))))
    }

    /// The model, to keep and drop later (a viewer that reloads a live job).
    pub fn load_owned(&self) -> Result<Trace> {
        let trace = match &self.live {
            Some(job) => {
                let address = &self.agent;
                let last_ns = self.last.map(|d| d.as_nanos() as u64);
                let jobs = if job.is_empty() {
                    let jobs: Vec<String> = address
                        .snapshot()?
                        .jobs
                        .into_iter()
                        .map(|j| j.job)
                        .collect();
                    if jobs.is_empty() {
                        bail!("the agent holds no job of yours (see `opscope top`)");
                    }
                    jobs
                } else {
                    vec![job.clone()]
                };
                let dumps = jobs
                    .iter()
                    .map(|job| crate::agent::client::LiveDump::fetch(address, job, last_ns))
                    .collect::<Result<Vec<_>>>()?;
                let paths: Vec<PathBuf> = dumps.iter().map(|d| d.path().to_path_buf()).collect();
                let options = LoadOptions {
                    quiet: true,
                    cache: false,
                };
                load(&paths, &options)?
            }
            None => load(&self.traces, &self.options())?,
        };
        Ok(trace)
    }

    pub fn options(&self) -> LoadOptions {
        LoadOptions {
            quiet: self.quiet,
            cache: !self.no_cache,
        }
    }
}

/// Whether some format reads files of this name, when a directory is walked.
fn is_trace_file(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| registry::claims_name(&n.to_string_lossy()))
}

/// The directory of a session where opscope keeps its own files.
pub const OWN_NOTES: &str = ".opscope";

/// One input to read, as [`expand`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The file, the CTF trace directory, or `-` for standard input.
    pub path: PathBuf,
    pub how: How,
}

/// How an input was reached, which decides what an error in it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// Named on the command line: an error in it stops the command.
    Named,
    /// Found by walking a directory: an error in it is a warning and the other files
    /// are still read, so one damaged file (a full disk while recording) does not
    /// hide the rest.
    InDirectory,
    /// A pipe, a FIFO or `-` (standard input): read into memory as a stream, never
    /// cached. An error in it stops the command.
    Stream,
}

/// A file's identity: two paths (links, `..`) to one file are one input.
type FileId = (u64, u64);

fn file_id(meta: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// What kind of file `meta` describes, for messages about files opscope cannot read.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

fn warn(message: &str) {
    eprintln!("opscope: warning: {message}");
}

/// Expands the TRACE arguments into the inputs to load, in a stable order. A CTF trace
/// is listed as its directory. Each file is read once, however many paths lead to it
/// (checked by device and inode); links that leave the directory given are not
/// followed. What is skipped is told on stderr.
pub fn expand(inputs: &[PathBuf]) -> Result<Vec<Found>> {
    use std::os::unix::fs::FileTypeExt;
    let mut files = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for input in inputs {
        if input.as_os_str() == "-" {
            files.push(Found {
                path: input.clone(),
                how: How::Stream,
            });
            continue;
        }
        let meta = std::fs::metadata(input)
            .with_context(|| format!("{}: cannot open", input.display()))?;
        if meta.is_dir() {
            let mut walker = Walker::new(input, &mut seen)?;
            walker.run()?;
            let mut found = walker.found;
            if found.is_empty() {
                bail!(
                    "{}: no trace files in this directory (looked for {})",
                    input.display(),
                    registry::looked_for()
                );
            }
            found.sort();
            files.extend(found.into_iter().map(|path| Found {
                // A directory that is itself a CTF trace was named, not found.
                how: if &path == input {
                    How::Named
                } else {
                    How::InDirectory
                },
                path,
            }));
        } else if input.file_name().is_some_and(|n| n == "metadata") {
            // `TRACE/metadata` stands for the CTF trace `TRACE`.
            let dir = input.parent().unwrap_or(Path::new(".")).to_path_buf();
            let id = std::fs::metadata(&dir).map(|m| file_id(&m)).ok();
            if id.is_none_or(|id| seen.insert(id)) {
                files.push(Found {
                    path: dir,
                    how: How::Named,
                });
            }
        } else if meta.is_file() {
            if seen.insert(file_id(&meta)) {
                files.push(Found {
                    path: input.clone(),
                    how: How::Named,
                });
            } else {
                warn(&format!(
                    "{}: the same file as an input before it; read once",
                    input.display()
                ));
            }
        } else if meta.file_type().is_fifo() {
            files.push(Found {
                path: input.clone(),
                how: How::Stream,
            });
        } else {
            bail!(
                "{}: not a regular file ({}); opscope reads trace files, directories of them, and pipes (`-` is standard input)",
                input.display(),
                kind_of(&meta)
            );
        }
    }
    Ok(files)
}

/// Walks one directory given on the command line. Its own files and directories come
/// first; symbolic links are followed afterwards, and only to what lies inside the
/// directory and was not reached already, so a link cycle (`ln -s . d/a`), a link up
/// (`ln -s .. d/up`) or a second name (`latest -> run1`) neither hangs the walk nor
/// reads a file twice, and the files keep their own paths rather than a link's.
struct Walker<'s> {
    root: PathBuf,
    /// The root with every link resolved: what links must lead into.
    real_root: PathBuf,
    dirs: std::collections::HashSet<FileId>,
    /// Files (and CTF directories) taken, over all TRACE arguments.
    seen: &'s mut std::collections::HashSet<FileId>,
    links: std::collections::VecDeque<PathBuf>,
    found: Vec<PathBuf>,
    /// Parquet datasets found below the root: a copy of traces (`convert ranks/ -o
    /// ranks/job.parquet`), read only when the walk finds nothing else.
    datasets: Vec<PathBuf>,
}

impl<'s> Walker<'s> {
    fn new(root: &Path, seen: &'s mut std::collections::HashSet<FileId>) -> Result<Walker<'s>> {
        let real_root = std::fs::canonicalize(root)
            .with_context(|| format!("{}: cannot open", root.display()))?;
        Ok(Walker {
            root: root.to_path_buf(),
            real_root,
            dirs: Default::default(),
            seen,
            links: Default::default(),
            found: Vec::new(),
            datasets: Vec::new(),
        })
    }

    fn run(&mut self) -> Result<()> {
        let root = self.root.clone();
        let meta =
            std::fs::metadata(&root).with_context(|| format!("{}: cannot open", root.display()))?;
        // The root must be listed; a subdirectory that cannot be is only a warning.
        std::fs::read_dir(&root).with_context(|| format!("{}: cannot list", root.display()))?;
        self.dir(&root, &meta);
        while let Some(link) = self.links.pop_front() {
            self.link(&link);
        }
        if self.found.is_empty() {
            self.found = std::mem::take(&mut self.datasets);
        }
        for dataset in &self.datasets {
            warn(&format!(
                "{}: a Parquet dataset beside the traces (a copy of some of them?); skipped \
                 so that nothing counts twice (name it to read it)",
                dataset.display()
            ));
        }
        Ok(())
    }

    fn dir(&mut self, dir: &Path, meta: &std::fs::Metadata) {
        if !self.dirs.insert(file_id(meta)) {
            return;
        }
        if let Some(importer) = registry::for_dir(dir) {
            if self.seen.insert(file_id(meta)) {
                if importer.name() == "parquet" && dir != self.root {
                    self.datasets.push(dir.to_path_buf());
                } else {
                    self.found.push(dir.to_path_buf());
                }
            }
            return;
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return warn(&format!("{}: cannot list ({e}); skipped", dir.display())),
        };
        let mut entries: Vec<(PathBuf, std::fs::FileType)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                Some((e.path(), e.file_type().ok()?))
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, file_type) in entries {
            if file_type.is_symlink() {
                self.links.push_back(path);
            } else if file_type.is_dir() {
                // opscope's own notes in a session (its Python bootstrap, what the
                // program's profilers took over, a dump's description): never traces.
                if path.file_name().is_some_and(|n| n == OWN_NOTES) {
                    continue;
                }
                if let Ok(meta) = std::fs::metadata(&path) {
                    self.dir(&path, &meta);
                }
            } else if is_trace_file(&path) && !is_a_copy(&path) {
                if let Ok(meta) = std::fs::metadata(&path) {
                    self.file(&path, &meta);
                }
            }
        }
    }

    fn file(&mut self, path: &Path, meta: &std::fs::Metadata) {
        if !meta.is_file() {
            // A FIFO or device named like a trace would block or never end.
            warn(&format!(
                "{}: not a regular file ({}); skipped",
                path.display(),
                kind_of(meta)
            ));
        } else if self.seen.insert(file_id(meta)) {
            self.found.push(path.to_path_buf());
        }
    }

    fn link(&mut self, link: &Path) {
        let wanted = |meta: Option<&std::fs::Metadata>| {
            meta.is_some_and(|m| m.is_dir()) || is_trace_file(link)
        };
        let Ok(real) = std::fs::canonicalize(link) else {
            if is_trace_file(link) {
                warn(&format!("{}: a broken link; skipped", link.display()));
            }
            return;
        };
        let meta = std::fs::metadata(&real).ok();
        // A link to a file elsewhere is read (once, by its inode: a directory of links
        // to each rank's file is a common layout); a link to a directory elsewhere
        // could lead anywhere, up to the whole disk, and is not followed.
        let is_dir = meta.as_ref().is_some_and(|m| m.is_dir());
        if is_dir && !real.starts_with(&self.real_root) {
            if wanted(meta.as_ref()) {
                warn(&format!(
                    "{}: not followed: the link leads to {}, outside {} (name it on the command line to read it)",
                    link.display(),
                    real.display(),
                    self.root.display()
                ));
            }
            return;
        }
        match meta {
            Some(meta) if meta.is_dir() => self.dir(link, &meta),
            Some(meta) if is_trace_file(link) && !is_a_copy(link) => self.file(link, &meta),
            _ => {}
        }
    }
}

/// A file beside the input it copies (the JAX and TensorFlow profilers write
/// `<host>.trace.json.gz` beside `<host>.xplane.pb`): in a directory only the input is
/// read, so nothing counts twice (named on the command line, the copy is read).
fn is_a_copy(path: &Path) -> bool {
    registry::is_a_copy(path, &|p| p.is_file())
}

/// Loads every file of `inputs` into one trace. A file found in a directory that
/// cannot be read is a warning, and the other files are read; a file named on the
/// command line that cannot be read is an error, as is a directory none of whose files
/// can be.
pub fn load(inputs: &[PathBuf], options: &LoadOptions) -> Result<Trace> {
    load_found(&expand(inputs)?, options)
}

/// [`load`] for inputs [`expand`] found already.
pub fn load_found(files: &[Found], options: &LoadOptions) -> Result<Trace> {
    let mut trace = load_model(files, options)?;
    merge_hosts(&mut trace);
    Ok(trace)
}

/// The model of `files`, from the cache or parsed, with each host on its own clock.
pub fn load_model(files: &[Found], options: &LoadOptions) -> Result<Trace> {
    // A stream has no identity the cache could check again.
    let streams = files.iter().any(|f| f.how == How::Stream);
    let total: u64 = files.iter().map(|f| input_bytes(&f.path)).sum();
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
    for file in files {
        let shown = shown(&file.path);
        bar.set_message(shown.clone());
        match load_file(file, &shown, &mut trace) {
            Ok(()) => {}
            Err(e) if file.how == How::InDirectory => failed.push(e),
            Err(e) => return Err(e),
        }
        bar.inc(input_bytes(&file.path));
    }
    bar.finish_and_clear();
    if !failed.is_empty() && failed.len() == files.len() {
        let n = failed.len();
        let first = failed.swap_remove(0);
        if n == 1 {
            return Err(first);
        }
        return Err(first.context(format!(
            "none of the {n} trace files could be read; the first"
        )));
    }
    for e in &failed {
        warn(&format!("{e:#}; the other files are still read"));
    }
    // A failed import may have stopped before finishing the model.
    trace.finish();
    no_rank_for_dataloader_workers(&mut trace);
    warn_of_shared_ranks(&mut trace);
    number_hosts_of_runs(&mut trace);
    // A recording session mixes opscope's CLOCK_MONOTONIC files with frameworks'
    // Unix-time ones (XPlane): one time line for all. Before the processes are united:
    // each track moves by the clock of its process's file.
    opscope_analysis::clock_sync::align_to_unix(&mut trace);
    unite_recorded_processes(&mut trace);
    print_warnings(&trace);
    trace.shrink_to_fit();
    // A model missing a file that could not be read is not saved: the next command
    // tries the file again, and tells of it again.
    if let Some(entry) = entry.filter(|_| failed.is_empty()) {
        entry.write(&trace, parse_started.elapsed());
    }
    Ok(trace)
}

/// How an input is named in messages.
fn shown(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// Two files that claim one rank (Kineto's `distributedInfo`) are most often one run
/// read twice (a copy) or two runs in one directory: either way their numbers would be
/// added up as one rank's.
fn warn_of_shared_ranks(trace: &mut Trace) {
    let mut by_rank: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (i, source) in trace.sources.iter().enumerate() {
        if let Some(rank) = source.rank {
            by_rank.entry(rank).or_default().push(i);
        }
    }
    for (rank, sources) in by_rank {
        if let [first, rest @ ..] = &sources[..] {
            for &other in rest {
                let warning = format!(
                    "{} and {} both claim rank {rank} (a copy of one file, or two runs in one directory?)",
                    trace.sources[*first].path, trace.sources[other].path
                );
                trace.warnings.push((SourceId(other as u32), warning));
            }
        }
    }
}

fn print_warnings(trace: &Trace) {
    for (_, warning) in &trace.warnings {
        eprintln!("opscope: warning: {warning}");
    }
}

/// The files importing `input` reads: a CTF trace's metadata and stream files, a
/// RunMetadata and the GraphDef beside it, an SQLite database and its write-ahead log
/// (which SQLite reads, when there is one), or the file alone (as its format says).
pub fn files_read(input: &Path) -> Vec<PathBuf> {
    registry::files_of(input)
}

/// Bytes of a trace file, or of the files of a trace directory.
fn input_bytes(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    if path.is_dir() {
        registry::files_of(path).iter().map(|f| size(f)).sum()
    } else {
        size(path)
    }
}

/// A mapped input, named for the SIGBUS handler while it is mapped.
struct Mapped {
    // Dropped first: unnamed before it is unmapped.
    _named: crate::cut_files::Registered,
    map: memmap2::Mmap,
}

impl std::ops::Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.map
    }
}

fn map_file(file: &Path, shown: &str) -> Result<Option<Mapped>> {
    let handle = File::open(file).with_context(|| format!("{shown}: cannot open"))?;
    if handle.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        return Ok(None);
    }
    // SAFETY: the map is read-only and lives only while its input is imported; a trace
    // file truncated by another process meanwhile faults (SIGBUS), which the executable
    // reports naming the file and the byte (`cut_files`). It is the risk every
    // mmap-based reader (ripgrep, samply) takes for speed on multi-GB inputs.
    let map =
        unsafe { memmap2::Mmap::map(&handle) }.with_context(|| format!("{shown}: cannot map"))?;
    let named = crate::cut_files::register(&map, shown);
    Ok(Some(Mapped { _named: named, map }))
}

fn load_file(file: &Found, shown: &str, trace: &mut Trace) -> Result<()> {
    let path = &file.path;
    if file.how == How::Stream {
        let bytes = read_stream(path, shown)?;
        opscope_formats::import_bytes(&bytes, shown, trace)
            .map_err(|e| explained(e, &[(shown.to_string(), &bytes)]))?;
        return Ok(());
    }
    if !path.is_dir() && std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) == 0 {
        File::open(path).with_context(|| format!("{shown}: cannot open"))?;
        bail!("{shown}: the file is empty (0 bytes)");
    }
    let importer = registry::for_path(path).with_context(|| format!("{shown}: cannot open"))?;
    let Some(importer) = importer else {
        // No format claims it: the one entry point says what it is not.
        let map = map_file(path, shown)?;
        let bytes = map.as_deref().unwrap_or(&[]);
        opscope_formats::import_bytes(bytes, shown, trace)
            .map_err(|e| explained(e, &[(shown.to_string(), bytes)]))?;
        return Ok(());
    };
    let names = if importer.opens_files_itself() {
        Vec::new()
    } else {
        importer
            .files(path)
            .with_context(|| format!("{shown}: cannot list the files it is made of"))?
    };
    let mut maps = Vec::with_capacity(names.len());
    for name in &names {
        // The input's own file keeps the name it was given.
        let file_shown = if name == path {
            shown.to_string()
        } else {
            name.display().to_string()
        };
        let map = map_file(name, &file_shown)?;
        maps.push((file_shown, map));
    }
    let files: Vec<(String, &[u8])> = maps
        .iter()
        .map(|(name, map)| (name.clone(), map.as_deref().unwrap_or(&[])))
        .collect();
    let input = registry::Input {
        path,
        shown,
        files: &files,
    };
    registry::import(importer, &input, trace).map_err(|e| explained(e, &files))?;
    Ok(())
}

/// An import's error, or what it comes of where it is plain: a file that went through
/// a text conversion fails at some varint or length, which says nothing of why.
fn explained(e: opscope_formats::ImportError, files: &[(String, &[u8])]) -> anyhow::Error {
    match files
        .iter()
        .find(|(_, bytes)| opscope_formats::input::mangled_by_text_conversion(bytes))
    {
        Some((name, _)) => anyhow::anyhow!("{name}: {}", opscope_formats::input::MANGLED),
        None => e.into(),
    }
}

/// How long a named FIFO may stay without a writer before reading it is given up.
const FIFO_WAIT: Duration = Duration::from_secs(10);

/// Reads a pipe, a FIFO or standard input (`-`) to its end. Its first bytes must look
/// like a trace, so an endless stream of something else (`/dev/urandom` through `cat`)
/// is refused at once rather than read until memory runs out. A named FIFO that no
/// writer opens within [`FIFO_WAIT`] is an error, not a hang.
fn read_stream(path: &Path, shown: &str) -> Result<Vec<u8>> {
    use std::io::{IsTerminal, Read};
    let mut reader: Box<dyn Read> = if path.as_os_str() == "-" {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            bail!("{shown}: is a terminal; pipe a trace into it (`opscope info - < trace.json`)");
        }
        Box::new(stdin.lock())
    } else {
        Box::new(open_fifo(path, shown)?)
    };
    let read_error = |e: std::io::Error| anyhow::anyhow!("{shown}: cannot read ({e})");
    let mut bytes = Vec::new();
    (&mut reader)
        .take(4096)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.is_empty() {
        bail!("{shown}: nothing came in (0 bytes)");
    }
    let gzip = bytes.starts_with(&[0x1f, 0x8b]);
    // Whatever a format claims by its first bytes (XPlane's planes are told later).
    if !gzip && opscope_formats::registry::for_bytes(shown, &bytes).is_none() {
        bail!(
            "{shown}: not a trace opscope can read (neither JSON nor a Perfetto protobuf, from byte 0); from a pipe, opscope reads JSON, gzip'd JSON, Perfetto, XPlane and Nsight Systems exports"
        );
    }
    reader.read_to_end(&mut bytes).map_err(read_error)?;
    Ok(bytes)
}

/// Opens a FIFO (or a pipe, as `/dev/fd/N`) for reading without blocking in `open`
/// when it has no writer, then waits for its first data: for as long as it takes on
/// an anonymous pipe (whose writer exists, or its end has come), for [`FIFO_WAIT`] on
/// a named FIFO.
fn open_fifo(path: &Path, shown: &str) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("{shown}: cannot open"))?;
    let fd = file.as_raw_fd();
    const PIPEFS_MAGIC: libc::c_long = 0x5049_5045;
    // SAFETY: `fd` is open for the whole call and `fs` is a plain struct the kernel
    // fills in.
    let anonymous = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::fstatfs(fd, &mut fs) == 0 && fs.f_type as libc::c_long == PIPEFS_MAGIC
    };
    let timeout = if anonymous {
        -1
    } else {
        FIFO_WAIT.as_millis() as libc::c_int
    };
    let mut poll = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, alive for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, timeout) };
        if ready > 0 {
            break;
        }
        if ready == 0 {
            bail!(
                "{shown}: a FIFO that nothing came through in {} s (no writer?)",
                FIFO_WAIT.as_secs()
            );
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("{shown}: cannot wait for data ({e})");
        }
    }
    // Blocking reads from here: the writer is there.
    // SAFETY: fcntl on an open descriptor, changing only its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            bail!("{shown}: cannot read ({})", std::io::Error::last_os_error());
        }
    }
    Ok(file)
}

/// Traces of two or more hosts are put on one clock (the reference host's) by what
/// their collectives say (`opscope merge` shows how); what could not be done is a
/// warning. Not kept in the model cache: `merge --clock-per-file` needs the clocks as
/// the files have them.
pub fn merge_hosts(trace: &mut Trace) {
    let mut hosts: Vec<_> = trace.sources.iter().filter_map(|s| s.host).collect();
    hosts.sort_unstable_by_key(|h| h.0);
    hosts.dedup();
    if hosts.len() < 2 {
        return;
    }
    let report = opscope_analysis::clock_merge::merge_clocks(trace, &Default::default());
    for warning in report.warnings() {
        eprintln!("opscope: warning: {warning}");
    }
}

/// A TensorBoard profile run (`plugins/profile/<run>/<host>.xplane.pb`) with several
/// hosts is one multi-host job: its hosts become ranks 0…n-1, in the order of their
/// file names, so that per-rank views and summaries cover them.
fn number_hosts_of_runs(trace: &mut Trace) {
    let mut runs: std::collections::BTreeMap<PathBuf, Vec<usize>> = Default::default();
    for (i, source) in trace.sources.iter().enumerate() {
        if source.format == registry::Importer::name(&opscope_formats::xplane::XPlaneFormat)
            && source.rank.is_none()
        {
            let dir = Path::new(&source.path).parent().unwrap_or(Path::new(""));
            runs.entry(dir.to_path_buf()).or_default().push(i);
        }
    }
    for (_, mut sources) in runs.into_iter().filter(|(_, s)| s.len() > 1) {
        sources.sort_by(|&a, &b| trace.sources[a].path.cmp(&trace.sources[b].path));
        let world = sources.len() as u32;
        for (rank, &i) in sources.iter().enumerate() {
            trace.sources[i].rank = Some(rank as u32);
            trace.sources[i].world_size = Some(world);
        }
    }
}

/// The session and pid of an XPlane the recording bootstrap had TensorFlow's or JAX's
/// profiler write: `SESSION/{tensorflow,jax}/PID.N/plugins/profile/RUN/HOST.xplane.pb`.
fn profiled_by_the_bootstrap(path: &Path) -> Option<(PathBuf, i64)> {
    if !path.to_string_lossy().ends_with(".xplane.pb") {
        return None;
    }
    let run_dir = path.ancestors().nth(4)?;
    let framework = run_dir.parent()?;
    let pid = run_dir
        .file_name()?
        .to_str()?
        .split_once('.')?
        .0
        .parse()
        .ok()?;
    let is_framework = framework
        .file_name()
        .is_some_and(|n| n == "tensorflow" || n == "jax");
    let in_profile_dir = path.ancestors().nth(2)?.file_name()? == "profile";
    (is_framework && in_profile_dir).then(|| {
        (
            framework.parent().unwrap_or(Path::new("")).to_path_buf(),
            pid,
        )
    })
}

/// A DataLoader worker is forked by its rank's process and inherits its `RANK`, so the
/// recorder labels its file with that rank too: it is a worker of the rank, not the
/// rank (PyTorch names a worker's main thread `pt_data_worker`).
fn no_rank_for_dataloader_workers(trace: &mut Trace) {
    let mut workers = Vec::new();
    for t in &trace.threads {
        let process = &trace.processes[t.process.index()];
        if t.tid == process.pid && t.name.is_some_and(|n| trace.str(n) == "pt_data_worker") {
            workers.push(process.source);
        }
    }
    for source in workers {
        trace.sources[source.index()].rank = None;
        trace.sources[source.index()].world_size = None;
    }
}

/// The files of one `opscope record` session (`opscope-<pid>.pftrace` from the
/// recorded processes, `opscope-processes-<pid>.pftrace` from the sampler) were written
/// on one machine over one run: a pid there is one process, not one per file.
fn unite_recorded_processes(trace: &mut Trace) {
    let mut sessions: std::collections::BTreeMap<PathBuf, Vec<SourceId>> = Default::default();
    let mut profiled: Vec<(SourceId, i64, PathBuf)> = Vec::new();
    for (i, source) in trace.sources.iter().enumerate() {
        let path = Path::new(&source.path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        if source.format == registry::Importer::name(&opscope_formats::perfetto::PerfettoFormat)
            && name.starts_with("opscope-")
            && name.ends_with(".pftrace")
        {
            let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
            sessions.entry(dir).or_default().push(SourceId(i as u32));
        } else if let Some((session, pid)) = profiled_by_the_bootstrap(path) {
            sessions
                .entry(session.clone())
                .or_default()
                .push(SourceId(i as u32));
            profiled.push((SourceId(i as u32), pid, session));
        }
    }
    // The framework's profile of a recorded process describes that process, and its
    // lines the threads the recorder saw (by their `pthread_t`).
    for (source, pid, session) in profiled {
        let session = &sessions[&session];
        let known: Vec<(u64, opscope_model::ThreadId)> = (trace.threads.iter().enumerate())
            .filter(|(_, t)| {
                let p = &trace.processes[t.process.index()];
                p.pid == pid && p.source != source && session.contains(&p.source)
            })
            .filter_map(|(i, t)| Some((t.handle?, opscope_model::ThreadId(i as u32))))
            .collect();
        let host: Vec<opscope_model::ProcessId> = (0..trace.processes.len())
            .filter(|&p| trace.processes[p].source == source && trace.processes[p].device.is_none())
            .map(|p| opscope_model::ProcessId(p as u32))
            .collect();
        for process in host {
            trace.set_pid(process, pid);
            opscope_formats::xplane::threads::adopt_tids(trace, process, &known);
        }
    }
    for sources in sessions.into_values().filter(|s| s.len() > 1) {
        trace.unite_processes(&sources);
    }
}

/// The GraphDef saved beside a RunMetadata (`graph.pbtxt`, `graph.pb`, or the one
/// `*.pbtxt`), which types its nodes as tfprof's `--graph_path` does.
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
    use super::*;

    #[test]
    fn the_files_an_import_reads_cover_graphs_and_ctf_streams() {
        let dir = std::env::temp_dir().join(format!("opscope-files-read-{}", std::process::id()));
        let ctf = dir.join("ctf");
        std::fs::create_dir_all(ctf.join("index")).unwrap();
        std::fs::write(dir.join("db.sqlite"), b"SQLite format 3\0 and pages").unwrap();
        for name in [
            "run_meta",
            "graph.pbtxt",
            "notes.txt",
            "ctf/metadata",
            "ctf/chan_0",
        ] {
            std::fs::write(dir.join(name), b"x").unwrap();
        }
        // A RunMetadata's types come from the GraphDef beside it: a changed graph must
        // be a changed input.
        assert_eq!(
            files_read(&dir.join("run_meta")),
            [dir.join("run_meta"), dir.join("graph.pbtxt")]
        );
        assert_eq!(files_read(&dir.join("notes.txt")), [dir.join("notes.txt")]);
        assert_eq!(files_read(&ctf), [ctf.join("metadata"), ctf.join("chan_0")]);
        // SQLite reads its write-ahead log beside the database, when there is one.
        assert_eq!(
            files_read(&dir.join("db.sqlite")),
            [dir.join("db.sqlite"), dir.join("db.sqlite-wal")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
