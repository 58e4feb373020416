//! The page `opscope diff A B -o diff.html` writes: each side's step times on one
//! scale, one above the other, then the lines that moved most, each as its per-step
//! values on both sides, then the diff's own tables. One file, nothing fetched.

use std::fmt::Write;

use opscope_analysis::diff::matched::{Compared, MatchedDiff};
use opscope_analysis::diff::Verdict;
use opscope_analysis::report::Reported;

use crate::html::{self, Bar};

const A: &str = "#4e79a7";
const B: &str = "#e15759";
/// Lines drawn step by step after the step time.
const LINES_DRAWN: usize = 6;

/// The page of a diff of matched lines.
pub fn matched(diff: &MatchedDiff) -> String {
    html::page("opscope diff", &matched_body(diff, 2))
}

/// What [`matched`]'s page holds, for a page of its own or a section of another's
/// (`report --against`, the viewer's panels), its headings at `level` (`<h2>` on a
/// page of its own) and the lines' a level below.
pub fn matched_body(diff: &MatchedDiff, level: u8) -> String {
    let (h, sub) = (level, level + 1);
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<p class=\"legend\"><span style=\"background:{A}\"></span>A: {}<span style=\"background:{B}\"></span>B: {}</p>",
        html::escape(&diff.sides[0].label),
        html::escape(&diff.sides[1].label)
    );
    if let Some(step) = diff.breakdown.first() {
        let _ = writeln!(body, "<h{h}>Step time, step by step</h{h}>");
        body.push_str(&side_by_side(&step.compared, 140));
    }
    let mut moved: Vec<&opscope_analysis::diff::matched::MatchedLine> =
        diff.host.iter().chain(&diff.device).collect();
    // Lines with a verdict of change first (a warm-up step's outlier moves a mean,
    // not a verdict), then by their contribution.
    let changed = |l: &opscope_analysis::diff::matched::MatchedLine| {
        !matches!(l.compared.verdict, Verdict::Unchanged | Verdict::FewSteps)
    };
    moved.sort_by(|x, y| {
        changed(y).cmp(&changed(x)).then_with(|| {
            y.compared
                .mean_change_ns
                .abs()
                .total_cmp(&x.compared.mean_change_ns.abs())
        })
    });
    if !moved.is_empty() {
        let _ = writeln!(body, "<h{h}>The lines that moved most</h{h}>");
    }
    for line in moved.into_iter().take(LINES_DRAWN) {
        let _ = writeln!(
            body,
            "<h{sub}>{} <small>({}, {})</small></h{sub}>",
            html::escape(&line.place()),
            if line.on_device { "device" } else { "host" },
            line.compared.verdict.word()
        );
        body.push_str(&side_by_side(&line.compared, 90));
    }
    let _ = writeln!(body, "<h{h}>Every line</h{h}>");
    body.push_str(&html::report(&diff.report()));
    body
}

/// The page of any other diff (by name): its tables.
pub fn tables(report: &impl Reported) -> String {
    html::page("opscope diff", &html::report(&report.report()))
}

/// A's per-step values above B's, on one scale (ms).
fn side_by_side(c: &Compared, height: u32) -> String {
    let bars = |values: &[f64], colour: &'static str, side: &str| -> Vec<Bar> {
        values
            .iter()
            .enumerate()
            .map(|(k, &ns)| Bar {
                label: k.to_string(),
                parts: vec![(ns / 1e6, colour)],
                title: format!("{side}, step {k}: {:.3} ms", ns / 1e6),
            })
            .collect()
    };
    let a = bars(&c.per_step_ns[0], A, "A");
    let b = bars(&c.per_step_ns[1], B, "B");
    let max = html::largest(&a).max(html::largest(&b));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<p>median {:.3} ms → {:.3} ms</p>",
        c.median_ns[0] / 1e6,
        c.median_ns[1] / 1e6
    );
    out.push_str(&html::bars_scaled(&a, height, "ms", max));
    out.push_str(&html::bars_scaled(&b, height, "ms", max));
    out
}
