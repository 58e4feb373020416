//! Where output goes: the `--format` choices, stdout or a file, the width text fits,
//! and broken-pipe detection (a closed pipe, as with `| head`, is not an error). What
//! is written is the renderer's (see [`opscope_engine::render`]).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use clap::ValueEnum;
use opscope_engine::render::{render, Format};
use opscope_engine::Output;

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned text for people.
    #[default]
    Text,
    /// One JSON document for scripts.
    Json,
    /// Comma-separated values with one header line.
    Csv,
}

/// `--format` for commands whose output is not a table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum TextOrJson {
    /// Aligned text for people.
    #[default]
    Text,
    /// One JSON document for scripts.
    Json,
}

impl From<OutputFormat> for Format {
    fn from(format: OutputFormat) -> Format {
        match format {
            OutputFormat::Text => Format::Text,
            OutputFormat::Json => Format::Json,
            OutputFormat::Csv => Format::Csv,
        }
    }
}

impl From<TextOrJson> for Format {
    fn from(format: TextOrJson) -> Format {
        match format {
            TextOrJson::Text => Format::Text,
            TextOrJson::Json => Format::Json,
        }
    }
}

/// Prints a report command's result to stdout in `format` (see
/// [`opscope_engine::render`]).
pub fn print(format: impl Into<Format>, result: &dyn Output) -> Result<()> {
    let format = format.into();
    write_to(None, |out| Ok(render(result, format, text_width(), out)?))
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

thread_local! {
    /// Where stdout's output goes instead, while [`capture_stdout`] runs on this thread.
    static CAPTURED: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with what commands on this thread write to stdout kept, and gives it. Text
/// kept is a program's to show, not a terminal's: its tables keep names whole.
pub fn capture_stdout<R>(f: impl FnOnce() -> R) -> (R, Vec<u8>) {
    struct Reset(Option<Vec<u8>>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let before = self.0.take();
            CAPTURED.with(|c| *c.borrow_mut() = before);
        }
    }
    let reset = Reset(CAPTURED.with(|c| c.borrow_mut().replace(Vec::new())));
    let result = f();
    let captured = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(reset);
    (result, captured)
}

fn capturing() -> bool {
    CAPTURED.with(|c| c.borrow().is_some())
}

/// Runs `write` on a buffered stdout (or what [`capture_stdout`] keeps), or on a new
/// file at `path`.
pub fn write_to(
    path: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    match path {
        None if capturing() => {
            let mut out = Vec::new();
            write(&mut out)?;
            CAPTURED.with(|c| {
                if let Some(captured) = c.borrow_mut().as_mut() {
                    captured.extend_from_slice(&out);
                }
            });
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            write(&mut out)?;
            out.flush()?;
        }
        Some(path) => {
            let file = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = std::io::BufWriter::new(file);
            write(&mut out)?;
            out.flush()
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    Ok(())
}

/// `--wide`: text tables keep every name whole, however long the lines.
static WIDE: AtomicBool = AtomicBool::new(false);

pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// The width text tables fit when stdout is no terminal and `$COLUMNS` is not set (a
/// file, a pager): wide enough for every column of the widest report, narrow enough
/// that a 900-character kernel name does not make every line that long.
const PIPE_COLUMNS: usize = 200;

/// The width text tables fit: the terminal's when stdout is one, else `$COLUMNS` when
/// set, else [`PIPE_COLUMNS`]; none with `--wide` (JSON and CSV always keep whole
/// names).
pub fn text_width() -> Option<usize> {
    use std::io::IsTerminal;
    if WIDE.load(Ordering::Relaxed) || capturing() {
        return None;
    }
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    if std::io::stdout().is_terminal() {
        return terminal_columns().or(columns).or(Some(80));
    }
    columns.or(Some(PIPE_COLUMNS))
}

fn terminal_columns() -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize it is given; stdout is a valid descriptor.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// Refuses to write over an existing `path` unless `force` (the commands that write one
/// file: `flame`, `report`).
pub fn refuse_existing(path: &Path, force: bool) -> Result<()> {
    if path.exists() && !force {
        anyhow::bail!(
            "{}: already exists; pass --force to replace it",
            path.display()
        );
    }
    Ok(())
}
