//! Output shared by the subcommands: the `--format` choice, tables printed as aligned
//! text or CSV, human durations, and broken-pipe detection (a closed pipe, as with
//! `| head`, is not an error).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use clap::ValueEnum;
use opscope_analysis::report::Reported;
use serde::Serialize;

use crate::render::{render, Format};

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

/// Prints an analysis's result to stdout in `format` (see [`crate::render`]).
pub fn print<R: Reported + ?Sized>(format: impl Into<Format>, result: &R) -> Result<()> {
    let format = format.into();
    write_to(None, |out| Ok(render(result, format, out)?))
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints `value` to stdout as JSON, or as text by `text`.
pub fn print_report<T: Serialize>(
    format: TextOrJson,
    value: &T,
    text: impl FnOnce(&T, &mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    write_to(None, |out| {
        match format {
            TextOrJson::Json => {
                serde_json::to_writer_pretty(&mut *out, value)?;
                writeln!(out)?;
            }
            TextOrJson::Text => text(value, out)?,
        }
        Ok(())
    })
}

/// Runs `write` on a buffered stdout, or on a new file at `path`.
pub fn write_to(
    path: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    match path {
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

/// A duration for people: `1.234 ms`.
pub fn duration_text(ns: f64) -> String {
    let abs = ns.abs();
    if abs >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if abs >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if abs >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// `--wide`: text tables keep every name whole, however long the lines.
static WIDE: AtomicBool = AtomicBool::new(false);

pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// The width text tables fit: the terminal's when stdout is one, else `$COLUMNS` when
/// set; none with `--wide` (JSON and CSV always keep whole names).
pub fn text_width() -> Option<usize> {
    use std::io::IsTerminal;
    if WIDE.load(Ordering::Relaxed) {
        return None;
    }
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0);
    if std::io::stdout().is_terminal() {
        return terminal_columns().or(columns).or(Some(80));
    }
    columns
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

/// Narrowest a shortened text column gets: past that, lines stay too wide rather than
/// names become unrecognisable.
const MIN_TEXT_COLUMN: usize = 24;

/// Shrinks the widest text columns until the line (columns two apart) fits `max`.
fn fit(widths: &mut [usize], right_aligned: &[bool], max: usize) {
    loop {
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        if total <= max {
            return;
        }
        let widest = (0..widths.len())
            .filter(|&i| !right_aligned[i] && widths[i] > MIN_TEXT_COLUMN)
            .max_by_key(|&i| widths[i]);
        let Some(i) = widest else { return };
        widths[i] = widths[i].saturating_sub(total - max).max(MIN_TEXT_COLUMN);
    }
}

/// `text` in at most `width` characters: its middle replaced by `…` when too long
/// (kernel names differ at both ends: their namespace and their template arguments).
fn shorten(text: &str, width: usize) -> String {
    let n = text.chars().count();
    if n <= width || width < 2 {
        return text.to_string();
    }
    let head = (width - 1) / 2 + (width - 1) % 2;
    let tail = width - 1 - head;
    let mut short: String = text.chars().take(head).collect();
    short.push('…');
    short.extend(text.chars().skip(n - tail));
    short
}

/// Rows of text under a header; numeric columns are right-aligned in text output.
pub struct Table {
    pub header: Vec<&'static str>,
    pub right_aligned: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, bool)]) -> Table {
        Table {
            header: columns.iter().map(|c| c.0).collect(),
            right_aligned: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    /// Aligned columns, two spaces apart; the last column is never padded. Lines fit
    /// [`text_width`]: text columns (names) are shortened in the middle to make room,
    /// numbers never.
    pub fn write_text(&self, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
        self.write_text_within(out, text_width())
    }

    fn write_text_within(
        &self,
        out: &mut (impl Write + ?Sized),
        max_width: Option<usize>,
    ) -> std::io::Result<()> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        if let Some(max) = max_width {
            fit(&mut widths, &self.right_aligned, max);
        }
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| {
                row.iter()
                    .zip(&widths)
                    .map(|(cell, &w)| shorten(cell, w))
                    .collect()
            })
            .collect();
        let last = self.header.len().saturating_sub(1);
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut text = String::new();
            for (i, cell) in cells.enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                if i > 0 {
                    text.push_str("  ");
                }
                if self.right_aligned[i] {
                    text.extend(std::iter::repeat_n(' ', pad));
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    if i != last {
                        text.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            text
        };
        writeln!(out, "{}", line(&mut self.header.iter().copied()))?;
        for row in &cells {
            writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
        }
        Ok(())
    }

    /// RFC 4180 CSV (fields with commas, quotes or line breaks quoted), lines ended by
    /// `\n`.
    pub fn write_csv(&self, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
        let mut writer = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(out);
        writer.write_record(&self.header)?;
        for row in &self.rows {
            writer.write_record(row)?;
        }
        writer.flush()
    }
}

/// The spread table of a cross-rank summary: one row per figure, with min, median, max
/// and who has the least and the most; `label` names a figure and `value` formats it.
pub fn write_across(
    out: &mut (impl std::io::Write + ?Sized),
    across: &opscope_analysis::across::Across,
    label: impl Fn(&'static str) -> &'static str,
    value: impl Fn(&'static str, f64) -> String,
) -> std::io::Result<()> {
    let mut table = Table::new(&[
        ("", false),
        ("min", true),
        ("median", true),
        ("max", true),
        ("least", false),
        ("most", false),
    ]);
    for s in &across.spreads {
        table.rows.push(vec![
            label(s.metric).to_string(),
            value(s.metric, s.min),
            value(s.metric, s.median),
            value(s.metric, s.max),
            s.min_at.clone(),
            s.max_at.clone(),
        ]);
    }
    table.write_text(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_quote() {
        let mut t = Table::new(&[("n", true), ("name", false)]);
        t.rows.push(vec!["12".into(), "a, \"b\"".into()]);
        t.rows.push(vec!["3".into(), "c".into()]);
        let mut text = Vec::new();
        t.write_text(&mut text).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            " n  name\n12  a, \"b\"\n 3  c\n"
        );
        let mut csv = Vec::new();
        t.write_csv(&mut csv).unwrap();
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "n,name\n12,\"a, \"\"b\"\"\"\n3,c\n"
        );
        assert_eq!(duration_text(1_500_000.0), "1.500 ms");
        assert_eq!(duration_text(12.0), "12 ns");
    }

    fn table(name: &str) -> Table {
        let mut t = Table::new(&[("name", false), ("calls", true), ("total", true)]);
        t.rows
            .push(vec![name.to_string(), "12".into(), "3.000 ms".into()]);
        t.rows
            .push(vec!["short".into(), "1".into(), "1.000 µs".into()]);
        t
    }

    fn text(t: &Table, max: Option<usize>) -> String {
        let mut out = Vec::new();
        t.write_text_within(&mut out, max).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn long_names_are_shortened_in_the_middle_to_fit_and_numbers_stay_whole() {
        let name = format!(
            "void at::native::{}elementwise_kernel<128, 4>",
            "x".repeat(900)
        );
        let t = table(&name);
        let fitted = text(&t, Some(80));
        for line in fitted.lines() {
            assert!(line.chars().count() <= 80, "{line}");
        }
        let row = fitted.lines().nth(1).unwrap();
        assert!(row.starts_with("void at::native::"), "{row}");
        assert!(row.contains('…') && row.contains("kernel<128, 4>"), "{row}");
        assert!(row.ends_with("3.000 ms"), "{row}");
        // Without a width (--wide, a pipe without $COLUMNS) the name stays whole.
        assert!(text(&t, None).contains(&name));
        // Never narrower than the floor: a tiny terminal gets readable names.
        let tiny = text(&t, Some(10));
        assert!(tiny.lines().nth(1).unwrap().chars().count() > 10);
    }
}
