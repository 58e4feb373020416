//! Reports as HTML: the same blocks the terminal shows (lines, tables, trees), every
//! figure written by [`crate::render::text`], so the page says what the commands say;
//! and bar charts drawn as inline SVG. Nothing is fetched: the page is one file.

use std::fmt::Write;

use opscope_analysis::report::{Block, Piece, Report, Table};

use crate::render::{text, write_report};

/// `&`, `<`, `>` and `"` as entities.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Rows of a table a page shows whole; a longer one shows its first and last
/// [`ROWS_KEPT`] / 2 and says how many it leaves out.
const ROWS_SHOWN: usize = 60;
const ROWS_KEPT: usize = 40;

/// A report's blocks as HTML; a table of more than 60 rows (1,500 steps) is cut to
/// its first and last 20 rows, which says so: the command's own output has them all.
pub fn report(report: &Report) -> String {
    let mut out = String::new();
    for block in &report.blocks {
        match block {
            Block::Line(line) if line.0.is_empty() => {}
            Block::Line(line) => {
                out.push_str("<p>");
                for piece in &line.0 {
                    match piece {
                        Piece::Text(t) => out.push_str(&escape(t)),
                        Piece::Value(v) => {
                            let _ = write!(out, "<b>{}</b>", escape(&text(v)));
                        }
                    }
                }
                out.push_str("</p>\n");
            }
            Block::Table(table) => out.push_str(&self::table(table)),
            Block::Tree(tree) => {
                // The tree as the terminal shows it: its indentation is its shape.
                let one = Report {
                    blocks: vec![Block::Tree(tree.clone())],
                };
                let mut bytes = Vec::new();
                let _ = write_report(&one, None, &mut bytes);
                let _ = writeln!(
                    out,
                    "<pre>{}</pre>",
                    escape(&String::from_utf8_lossy(&bytes))
                );
            }
        }
    }
    out
}

fn table(table: &Table) -> String {
    if table.rows.is_empty() {
        return table
            .empty
            .map(|e| format!("<p>{}</p>\n", escape(e)))
            .unwrap_or_default();
    }
    let mut out = String::from("<table>\n<tr>");
    for c in &table.columns {
        let class = if c.numeric { " class=n" } else { "" };
        let _ = write!(out, "<th{class}>{}</th>", escape(c.title));
    }
    out.push_str("</tr>\n");
    let n = table.rows.len();
    let cut = n > ROWS_SHOWN;
    for (k, row) in table.rows.iter().enumerate() {
        if cut && k >= ROWS_KEPT / 2 && k < n - ROWS_KEPT / 2 {
            if k == ROWS_KEPT / 2 {
                let _ = writeln!(
                    out,
                    "<tr><td colspan={}><i>… {} rows more (the command's JSON has them all)</i></td></tr>",
                    table.columns.len(),
                    n - ROWS_KEPT
                );
            }
            continue;
        }
        out.push_str("<tr>");
        for (value, column) in row.iter().zip(&table.columns) {
            let class = if column.numeric { " class=n" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", escape(&text(value)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

/// One bar of a chart: its label and its parts (value, colour), stacked.
pub struct Bar {
    pub label: String,
    pub parts: Vec<(f64, &'static str)>,
    /// What the bar's tooltip says.
    pub title: String,
}

/// The largest bar of `bars`: a scale several charts can share.
pub fn largest(bars: &[Bar]) -> f64 {
    bars.iter()
        .map(|b| b.parts.iter().map(|p| p.0).sum::<f64>())
        .fold(0.0, f64::max)
}

/// Bars as an inline SVG, `height` px high, scaled to the largest total.
pub fn bars(bars: &[Bar], height: u32, unit: &str) -> String {
    bars_scaled(bars, height, unit, largest(bars))
}

/// Bars as an inline SVG, `height` px high, scaled to `max` (charts that are compared
/// by eye share one).
pub fn bars_scaled(bars: &[Bar], height: u32, unit: &str, max: f64) -> String {
    if bars.is_empty() {
        return String::new();
    }
    let width = 900.0;
    let gap = 2.0;
    let bar_w = ((width - 60.0) / bars.len() as f64 - gap).clamp(1.0, 60.0);
    let max = max.max(largest(bars)).max(f64::MIN_POSITIVE);
    let plot = height as f64 - 30.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" role=\"img\">\n"
    );
    let _ = writeln!(
        svg,
        "<text x=\"0\" y=\"12\" font-size=\"11\">{}</text>",
        escape(&format!("{max:.3} {unit}"))
    );
    for (k, bar) in bars.iter().enumerate() {
        let x = 60.0 + k as f64 * (bar_w + gap);
        let mut y = plot + 15.0;
        let _ = write!(svg, "<g><title>{}</title>", escape(&bar.title));
        for &(value, colour) in &bar.parts {
            let h = value / max * plot;
            y -= h;
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar_w:.1}\" height=\"{h:.1}\" fill=\"{colour}\"/>"
            );
        }
        svg.push_str("</g>\n");
        if bars.len() <= 40 {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{}</text>",
                x + bar_w / 2.0,
                height - 2,
                escape(&bar.label)
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// Bars drawn across, one row each with its label on the left, all on one scale: a
/// comparison of ranks that stays one screen high (a row is 18 px).
pub fn hbars(bars: &[Bar], unit: &str) -> String {
    if bars.is_empty() {
        return String::new();
    }
    let (width, label_w, row) = (900.0, 150.0, 18.0);
    let max = largest(bars).max(f64::MIN_POSITIVE);
    let plot = width - label_w - 90.0;
    let height = bars.len() as f64 * row + 4.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\">\n"
    );
    for (k, bar) in bars.iter().enumerate() {
        let y = k as f64 * row + 2.0;
        let _ = write!(
            svg,
            "<g><title>{}</title><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            escape(&bar.title),
            label_w - 6.0,
            y + row - 6.0,
            escape(&bar.label)
        );
        let mut x = label_w;
        for &(value, colour) in &bar.parts {
            let w = value / max * plot;
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>",
                row - 4.0
            );
            x += w;
        }
        let total: f64 = bar.parts.iter().map(|p| p.0).sum();
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text></g>",
            x + 4.0,
            y + row - 6.0,
            escape(&format!("{total:.2} {unit}"))
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The page around `body`, its style inline.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n{STYLE}</style></head>\n<body>\n<h1>{}</h1>\n{body}</body></html>\n",
        escape(title),
        escape(title)
    )
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
.n{text-align:right;font-variant-numeric:tabular-nums}pre{font-size:12px;overflow-x:auto}
.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
.verdict{font-size:17px;margin:.3em 0 .6em}summary{cursor:pointer}summary h2{display:inline-block;border:0;margin:1em 0 .2em}
details{border-bottom:1px solid #ccc}table.findings td{vertical-align:top}
";

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_analysis::report::{Column, Line, Value};

    #[test]
    fn figures_are_written_as_the_terminal_writes_them_and_escaped() {
        let mut r = Report::default();
        r.line(Line::of("a <b> ").value(Value::Duration(1_500_000.0)));
        let mut t = Table::new(vec![Column::text("op"), Column::numeric("time")]);
        t.rows
            .push(vec![Value::text("x&y"), Value::Duration(2_000.0)]);
        r.table(t);
        let html = report(&r);
        assert!(
            html.contains("<p>a &lt;b&gt; <b>1.500 ms</b></p>"),
            "{html}"
        );
        assert!(
            html.contains("<td>x&amp;y</td><td class=n>2.000 µs</td>"),
            "{html}"
        );
    }

    /// A long table (a run of 1,500 steps) shows its first and last rows and says how
    /// many it leaves out.
    #[test]
    fn long_tables_are_cut_and_say_so() {
        let mut r = Report::default();
        let mut t = Table::new(vec![Column::text("step")]);
        for k in 0..1500 {
            t.rows.push(vec![Value::text(format!("step {k}"))]);
        }
        r.table(t);
        let html = report(&r);
        assert_eq!(html.matches("<tr><td>").count(), ROWS_KEPT);
        assert!(html.contains("<td>step 19</td>") && html.contains("<td>step 1480</td>"));
        assert!(!html.contains("<td>step 20</td>"), "{html}");
        assert!(html.contains("… 1460 rows more"), "{html}");
    }
}
