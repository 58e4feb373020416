//! The one place reports become output: any report command's [`Output`] as aligned
//! text that fits the terminal, as CSV, or as JSON (the result itself, serialized).
//! Every figure is written here by its kind (durations, shares, bytes, …), so that all
//! commands show a figure the same way.

use std::io::Write;

use opscope_analysis::report::{Block, CsvTime, Line, Part, Piece, Report, Table, Tree, Value};

use crate::reports::Output;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Csv,
    Json,
}

/// Writes `result` in `format`; text tables fit in `width` columns (none: whole).
pub fn render(
    result: &dyn Output,
    format: Format,
    width: Option<usize>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match format {
        Format::Json => {
            result.write_json(out)?;
            writeln!(out)
        }
        Format::Csv => match result.blocks().csv_table() {
            Some(table) => write_csv(table, out),
            None => Ok(()),
        },
        Format::Text => write_report(&result.blocks(), width, out),
    }
}

/// A report as text: lines, tables fitting `width` columns (none: whole), trees
/// indented.
pub fn write_report(
    report: &Report,
    width: Option<usize>,
    out: &mut (impl Write + ?Sized),
) -> std::io::Result<()> {
    for block in &report.blocks {
        match block {
            Block::Line(line) => writeln!(out, "{}", line_text(line))?,
            Block::Table(table) => write_table(table, out, width)?,
            Block::Tree(tree) => write_tree(tree, out)?,
        }
    }
    Ok(())
}

fn line_text(line: &Line) -> String {
    line.0
        .iter()
        .map(|piece| match piece {
            Piece::Text(t) => t.clone(),
            Piece::Value(v) => text(v),
        })
        .collect()
}

/// A value for people.
pub fn text(value: &Value) -> String {
    match value {
        Value::Text(t) => t.clone(),
        Value::Count(n) => n.to_string(),
        Value::Duration(ns) => duration_text(*ns),
        Value::Share {
            ns,
            percent,
            decimals,
        } => {
            let share = percent.map_or_else(|| "-".to_string(), |p| format!("{p:.decimals$}%"));
            format!("{} ({share})", duration_text(*ns))
        }
        Value::Percent { value, decimals } => {
            value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}%"))
        }
        Value::Bytes(b) => bytes_text(*b),
        Value::TfprofBytes(b) => tfprof_bytes_text(*b),
        Value::Number { value, decimals } => {
            value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
        }
        Value::Sparkline { values, width } => sparkline(values, *width),
    }
}

/// A value as a bare CSV cell: durations in the table's unit, bytes as a count.
fn csv_cell(value: &Value, time: CsvTime) -> String {
    let duration = |ns: f64| match time {
        CsvTime::Micros => format!("{:.3}", ns / 1000.0),
        CsvTime::Nanos => format!("{ns:.1}"),
    };
    match value {
        Value::Duration(ns) | Value::Share { ns, .. } => duration(*ns),
        Value::Bytes(b) | Value::TfprofBytes(b) => b.to_string(),
        Value::Percent { value, decimals } => {
            value.map_or_else(String::new, |v| format!("{v:.decimals$}"))
        }
        Value::Number { value: None, .. } => String::new(),
        other => text(other),
    }
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

/// `1.50 GiB`.
fn bytes_text(bytes: i64) -> String {
    let abs = bytes.unsigned_abs() as f64;
    let sign = if bytes < 0 { "-" } else { "" };
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if abs >= size as f64 {
            return format!("{sign}{:.2} {unit}", abs / size as f64);
        }
    }
    format!("{bytes} B")
}

/// `512B`, `1.34MB`: tfprof's byte units (decimal).
fn tfprof_bytes_text(bytes: i64) -> String {
    let b = bytes as f64;
    if bytes.abs() >= 1_000_000_000 {
        format!("{:.2}GB", b / 1e9)
    } else if bytes.abs() >= 1_000_000 {
        format!("{:.2}MB", b / 1e6)
    } else if bytes.abs() >= 1_000 {
        format!("{:.2}KB", b / 1e3)
    } else {
        format!("{bytes}B")
    }
}

/// The largest value per part, `width` characters wide, scaled to the largest of all.
fn sparkline(values: &[u32], width: usize) -> String {
    const BARS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = values.len().div_ceil(width.max(1)).max(1);
    let top = values.iter().copied().max().unwrap_or(0).max(1);
    values
        .chunks(per)
        .map(|c| {
            let m = c.iter().copied().max().unwrap_or(0);
            BARS[((m as usize * 8).div_ceil(top as usize)).min(8)]
        })
        .collect()
}

fn write_tree(tree: &Tree, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
    writeln!(out, "node name | {}", tree.legend)?;
    for row in &tree.rows {
        let parts: Vec<String> = row
            .parts
            .iter()
            .map(|p| match p {
                Part::Pair(own, total) => format!("{}/{}", text(own), text(total)),
                Part::One(v) => text(v),
            })
            .collect();
        writeln!(
            out,
            "{:indent$}{} ({})",
            "",
            row.name,
            parts.join(", "),
            indent = 2 * row.depth
        )?;
    }
    Ok(())
}

/// RFC 4180 CSV (fields with commas, quotes or line breaks quoted), lines ended by
/// `\n`.
pub fn write_csv(table: &Table, out: &mut (impl Write + ?Sized)) -> std::io::Result<()> {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(out);
    writer.write_record(table.columns.iter().map(|c| c.csv_title))?;
    for row in &table.rows {
        writer.write_record(row.iter().map(|v| csv_cell(v, table.csv_time)))?;
    }
    writer.flush()
}

/// Narrowest a shortened text column gets: past that, lines stay too wide rather than
/// names become unrecognisable.
const MIN_TEXT_COLUMN: usize = 24;

/// Shrinks the widest text columns until the line (columns two apart) fits `max`.
fn fit(widths: &mut [usize], numeric: &[bool], max: usize) {
    loop {
        let total: usize = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
        if total <= max {
            return;
        }
        let widest = (0..widths.len())
            .filter(|&i| !numeric[i] && widths[i] > MIN_TEXT_COLUMN)
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

/// Aligned columns, two spaces apart, numbers to the right; the last column is never
/// padded. Lines fit `max_width`: text columns (names) are shortened in the middle to
/// make room, numbers never.
pub fn write_table(
    table: &Table,
    out: &mut (impl Write + ?Sized),
    max_width: Option<usize>,
) -> std::io::Result<()> {
    if table.rows.is_empty() {
        if let Some(message) = table.empty {
            return writeln!(out, "{message}");
        }
    }
    let numeric: Vec<bool> = table.columns.iter().map(|c| c.numeric).collect();
    let texts: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|row| row.iter().map(text).collect())
        .collect();
    let mut widths: Vec<usize> = table
        .columns
        .iter()
        .map(|c| c.title.chars().count())
        .collect();
    for row in &texts {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Columns shown: all, unless numbers alone overflow the width, when the last ones
    // go (named below the table) rather than every line wrapping.
    let mut shown = table.columns.len();
    if let Some(max) = max_width {
        fit(&mut widths, &numeric, max);
        let total = |n: usize| widths[..n].iter().sum::<usize>() + 2 * n.saturating_sub(1);
        while shown > 2 && total(shown) > max {
            shown -= 1;
        }
    }
    let widths = &widths[..shown];
    let last = shown.saturating_sub(1);
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut line = String::new();
        for (i, cell) in cells.enumerate() {
            let cell = shorten(cell, widths[i]);
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i > 0 {
                line.push_str("  ");
            }
            if numeric[i] {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(&cell);
            } else {
                line.push_str(&cell);
                if i != last {
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        line
    };
    writeln!(
        out,
        "{}",
        line(&mut table.columns.iter().take(shown).map(|c| c.title))
    )?;
    for row in &texts {
        writeln!(
            out,
            "{}",
            line(&mut row.iter().take(shown).map(String::as_str))
        )?;
    }
    if shown < table.columns.len() {
        let left: Vec<&str> = table.columns[shown..].iter().map(|c| c.title).collect();
        writeln!(
            out,
            "({} more {} that {} not fit {} characters: {}; --wide, a wider terminal or --format json show them)",
            left.len(),
            if left.len() == 1 { "column" } else { "columns" },
            if left.len() == 1 { "does" } else { "do" },
            max_width.unwrap_or_default(),
            left.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_analysis::report::Column;

    fn table(name: &str) -> Table {
        let mut t = Table::new(vec![
            Column::text("name"),
            Column::numeric("calls"),
            Column::numeric("total"),
        ]);
        t.rows.push(vec![
            Value::text(name),
            Value::Count(12),
            Value::Duration(3e6),
        ]);
        t.rows.push(vec![
            Value::text("short"),
            Value::Count(1),
            Value::Duration(1e3),
        ]);
        t
    }

    fn written(t: &Table, max: Option<usize>) -> String {
        let mut out = Vec::new();
        write_table(t, &mut out, max).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn tables_align_and_quote() {
        let mut t = Table::new(vec![Column::numeric("n"), Column::text("name")]);
        t.rows.push(vec![Value::Count(12), Value::text("a, \"b\"")]);
        t.rows.push(vec![Value::Count(3), Value::text("c")]);
        assert_eq!(written(&t, None), " n  name\n12  a, \"b\"\n 3  c\n");
        let mut csv = Vec::new();
        write_csv(&t, &mut csv).unwrap();
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "n,name\n12,\"a, \"\"b\"\"\"\n3,c\n"
        );
        assert_eq!(duration_text(1_500_000.0), "1.500 ms");
        assert_eq!(duration_text(12.0), "12 ns");
    }

    /// A value reads as people expect in text, and as a bare number in CSV in the
    /// table's unit.
    #[test]
    fn values_by_kind() {
        let share = Value::share_of(1_500_000.0, 6_000_000.0, 2);
        assert_eq!(text(&share), "1.500 ms (25.00%)");
        assert_eq!(csv_cell(&share, CsvTime::Micros), "1500.000");
        assert_eq!(csv_cell(&share, CsvTime::Nanos), "1500000.0");
        assert_eq!(text(&Value::Bytes(3 << 20)), "3.00 MiB");
        assert_eq!(text(&Value::TfprofBytes(1_340_000)), "1.34MB");
        assert_eq!(
            text(&Value::Percent {
                value: None,
                decimals: 1
            }),
            "-"
        );
        assert_eq!(text(&Value::percent(12.345, 1)), "12.3%");
        assert_eq!(
            text(&Value::Sparkline {
                values: vec![0, 4, 8],
                width: 3
            }),
            " ▄█"
        );
    }

    #[test]
    fn long_names_are_shortened_in_the_middle_to_fit_and_numbers_stay_whole() {
        let name = format!(
            "void at::native::{}elementwise_kernel<128, 4>",
            "x".repeat(900)
        );
        let t = table(&name);
        let fitted = written(&t, Some(80));
        for line in fitted.lines() {
            assert!(line.chars().count() <= 80, "{line}");
        }
        let row = fitted.lines().nth(1).unwrap();
        assert!(row.starts_with("void at::native::"), "{row}");
        assert!(row.contains('…') && row.contains("kernel<128, 4>"), "{row}");
        assert!(row.ends_with("3.000 ms"), "{row}");
        // Without a width (--wide) the name stays whole.
        assert!(written(&t, None).contains(&name));
        // Never narrower than the floor: a tiny terminal gets readable names.
        let tiny = written(&t, Some(10));
        assert!(tiny.lines().nth(1).unwrap().chars().count() > 10);
    }

    /// Numbers are never cut: when they alone overflow the width, the last columns are
    /// left out, and named, rather than every line running past the width.
    #[test]
    fn columns_that_do_not_fit_are_left_out_and_named() {
        let mut columns = vec![Column::text("stream")];
        let titles = [
            "busy",
            "host wait",
            "kernel wait",
            "other idle",
            "launch p50",
        ];
        columns.extend(titles.iter().map(|&t| Column::numeric(t)));
        let mut t = Table::new(columns);
        let mut row = vec![Value::text("stream 7")];
        row.extend((0..titles.len()).map(|i| Value::Duration(1e9 * (i + 1) as f64)));
        t.rows.push(row);
        let whole = written(&t, None);
        let width = whole.lines().map(|l| l.chars().count()).max().unwrap();
        let fitted = written(&t, Some(width - 1));
        let lines: Vec<&str> = fitted.lines().collect();
        assert!(
            lines[..2].iter().all(|l| l.chars().count() < width),
            "{fitted}"
        );
        assert!(
            lines[0].ends_with("other idle") && lines[1].ends_with("4.000 s"),
            "{fitted}"
        );
        assert_eq!(
            lines[2],
            format!("(1 more column that does not fit {} characters: launch p50; --wide, a wider terminal or --format json show them)", width - 1)
        );
        assert_eq!(written(&t, Some(width)), whole);
    }
}
