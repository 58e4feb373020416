//! `opscope report`'s page and the viewer's panels: one section per report command
//! that has one (in the table's order), each its report as HTML with charts, and a
//! flame graph; every figure is the one the terminal shows.

use opscope_analysis::flame::{folded, FlameOptions};
use opscope_analysis::gpu::{self, GpuOptions};
use opscope_analysis::memory::{memory_report, MemoryOptions};
use opscope_analysis::report::Reported;
use opscope_analysis::steps::{self, StepOptions};
use opscope_analysis::Context as Cx;

use crate::html::{self, Bar};
use crate::reports::{Error, REPORTS};
use base64_encoding::encode;

/// The page's sections, titled, as HTML: each report command's that has one, with
/// `top` rows in its lists, then the flame graph.
pub fn sections(cx: &Cx, top: usize) -> Result<Vec<(&'static str, String)>, Error> {
    let mut sections = Vec::new();
    for command in REPORTS {
        if let Some(section) = command.section(cx, top)? {
            sections.push(section);
        }
    }
    if let Some(flame) = flame_section(cx)? {
        sections.push(("Flame graph", flame));
    }
    Ok(sections)
}

/// The whole page: `title` and the sections.
/// The first section (the verdict) is open; the others are folded under their
/// headings, so that the first screen is the verdict however many ranks there are.
pub fn page(cx: &Cx, title: &str, top: usize) -> Result<String, Error> {
    page_with(cx, title, top, &[])
}

/// [`page`] with `open` sections (heading, HTML) shown whole after the first, as a
/// comparison with another trace (`report --against`).
pub fn page_with(
    cx: &Cx,
    title: &str,
    top: usize,
    open: &[(String, String)],
) -> Result<String, Error> {
    let mut body = String::new();
    for (k, (heading, content)) in sections(cx, top)?.into_iter().enumerate() {
        let heading = html::escape(heading);
        if k == 0 {
            body.push_str(&format!("<h2>{heading}</h2>\n{content}"));
            for (heading, content) in open {
                body.push_str(&format!(
                    "<section><h2>{}</h2>\n{content}</section>\n",
                    html::escape(heading)
                ));
            }
        } else {
            body.push_str(&format!(
                "<details><summary><h2>{heading}</h2></summary>\n{content}</details>\n"
            ));
        }
    }
    Ok(html::page(title, &body))
}

const COMPUTE: &str = "#4e79a7";
const OTHER: &str = "#f28e2b";
const IDLE: &str = "#d3d3d3";
const COMMUNICATION: &str = "#e15759";
const MEMORY: &str = "#76b7b2";

/// The verdict: `advise`'s one sentence, each rank's median step and where it went
/// (one chart, a row per rank), the straggler, and the top findings with what each
/// saves at most.
pub(crate) fn advise_section(cx: &Cx, top: usize) -> Result<String, Error> {
    let advice =
        opscope_analysis::advise::advise(cx, &opscope_analysis::advise::AdviseOptions::default());
    let mut out = format!(
        "<p class=\"verdict\"><b>{}</b></p>\n",
        html::escape(&advice.verdict)
    );
    out.push_str(&median_steps_chart(cx));
    let shown: Vec<_> = advice
        .findings
        .iter()
        .filter(|f| f.severity > opscope_analysis::advise::Severity::Info)
        .take(top.clamp(3, 6))
        .collect();
    if !shown.is_empty() {
        out.push_str("<table class=\"findings\"><tr><th>saves at most</th><th>where</th><th>finding</th><th>try</th></tr>\n");
        for f in &shown {
            // A finding about a time span names it: the viewer shows the span when it
            // is clicked.
            let title = match f.span {
                Some([a, b]) => format!(
                    "<a class=\"span\" data-span=\"{a},{b}\">{}</a>",
                    html::escape(&f.title)
                ),
                None => html::escape(&f.title),
            };
            out.push_str(&format!(
                "<tr><td class=\"n\">{:.1} %</td><td>{}</td><td title=\"{}\">{title}</td><td>{}</td></tr>\n",
                f.saving_pct,
                html::escape(&f.scope),
                html::escape(&f.evidence.join("; ")),
                html::escape(&f.fix)
            ));
        }
        out.push_str("</table>\n");
    }
    let rest = advice.findings.len() - shown.len();
    if rest > 0 {
        out.push_str(&format!(
            "<p>{rest} more finding{} in <code>opscope advise</code>; the details below are folded.</p>\n",
            if rest == 1 { "" } else { "s" }
        ));
    }
    Ok(out)
}

/// Each rank's median step, split as `steps` splits it, in one chart; and the
/// straggler.
fn median_steps_chart(cx: &Cx) -> String {
    let report = steps::report(cx, &StepOptions::default());
    let median = |mut v: Vec<i64>| -> f64 {
        v.sort_unstable();
        if v.is_empty() {
            0.0
        } else {
            v[v.len() / 2] as f64 / 1e6
        }
    };
    let bars: Vec<Bar> = report
        .sources
        .iter()
        .filter(|s| !s.steps.is_empty() && s.found_by != steps::StepSource::Loader)
        .take(64)
        .map(|s| {
            let of = |f: fn(&steps::Step) -> i64| median(s.steps.iter().map(f).collect());
            let parts = if s.on_device {
                vec![
                    (of(|x| x.computation_ns), COMPUTE),
                    (of(|x| x.communication_ns), COMMUNICATION),
                    (of(|x| x.memory_ns), MEMORY),
                    (of(|x| x.device_idle_ns), IDLE),
                ]
            } else {
                vec![
                    (of(|x| x.host.computation_ns - x.host.overlap_ns), COMPUTE),
                    (of(|x| x.host.communication_ns), COMMUNICATION),
                    (of(|x| x.host.idle_ns), IDLE),
                ]
            };
            let label = match s.rank {
                Some(r) => format!("rank {r}"),
                None => s.role.chars().take(24).collect(),
            };
            Bar {
                title: format!(
                    "{label}: median step {:.3} ms over {} steps",
                    of(|x| x.dur_ns),
                    s.steps.len()
                ),
                label,
                parts,
            }
        })
        .collect();
    if bars.is_empty() {
        return String::new();
    }
    let mut out = String::from("<p>Median step per rank: ");
    for (name, colour) in [
        ("computation", COMPUTE),
        ("communication", COMMUNICATION),
        ("memory", MEMORY),
        ("idle", IDLE),
    ] {
        out.push_str(&format!(
            "<span class=\"legend\"><span style=\"background:{colour}\"></span>{name}</span>"
        ));
    }
    out.push_str("</p>\n");
    out.push_str(&html::hbars(&bars, "ms"));
    let straggler = report.across.as_ref().and_then(|a| a.straggler.as_ref());
    if let Some(s) = straggler.filter(|s| s.stands_out()) {
        out.push_str(&format!(
            "<p>Straggler: <b>{}</b>, {:.1} % above the median rank's computation per step.</p>\n",
            html::escape(&s.at),
            s.above_median_pct
        ));
    }
    out
}

pub(crate) fn steps_section(cx: &Cx, _top: usize) -> Result<String, Error> {
    let steps = steps::report(cx, &StepOptions::default());
    // One chart per training process (not its DataLoader workers), all on one scale so
    // that ranks compare by eye; bars numbered as the step table numbers them.
    let mut charts = String::new();
    let mut per_source = Vec::new();
    for source in steps
        .sources
        .iter()
        .filter(|s| !s.steps.is_empty())
        .take(16)
    {
        let bars: Vec<Bar> = source
            .steps
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let ms = |ns: i64| ns as f64 / 1e6;
                let parts = if source.on_device {
                    vec![
                        (ms(s.computation_ns), COMPUTE),
                        (ms(s.communication_ns), COMMUNICATION),
                        (ms(s.memory_ns), MEMORY),
                        (ms(s.device_idle_ns), IDLE),
                    ]
                } else {
                    // The host threads' time: computation alone, communication (with
                    // or without computation beside it), neither.
                    let h = &s.host;
                    vec![
                        (ms(h.computation_ns - h.overlap_ns), COMPUTE),
                        (ms(h.communication_ns), COMMUNICATION),
                        (ms(h.idle_ns), IDLE),
                    ]
                };
                Bar {
                    // Step names are long (ProfilerStep#551): the tooltip has them.
                    label: k.to_string(),
                    title: format!("{}: {:.3} ms", s.name, ms(s.dur_ns)),
                    parts,
                }
            })
            .collect();
        per_source.push((&source.role, bars));
    }
    let scale = per_source
        .iter()
        .map(|(_, bars)| html::largest(bars))
        .fold(0.0, f64::max);
    for (role, bars) in &per_source {
        charts.push_str(&format!("<p>{}</p>\n", html::escape(role)));
        charts.push_str(&html::bars_scaled(bars, 160, "ms", scale));
    }
    if !charts.is_empty() {
        charts.push_str(&legend(&[
            (COMPUTE, "computation"),
            (COMMUNICATION, "communication"),
            (MEMORY, "memory"),
            (
                IDLE,
                "idle (the device's; without device work, the host threads')",
            ),
        ]));
    }
    Ok(charts + &html::report(&steps.report()))
}

pub(crate) fn gpu_section(cx: &Cx, _top: usize) -> Result<String, Error> {
    let gpu = gpu::analyze(cx, &GpuOptions::default());
    let bars: Vec<Bar> = gpu
        .ranks
        .iter()
        .map(|r| {
            let ms = |ns: i64| ns as f64 / 1e6;
            let name = match (r.rank, &r.device) {
                (Some(rank), _) => format!("rank {rank}"),
                (None, Some(d)) => d.clone(),
                (None, None) => "device".to_string(),
            };
            Bar {
                title: format!(
                    "{name}: computation {:.1} %, other work {:.1} %, idle {:.1} %",
                    r.temporal.compute_pct, r.temporal.non_compute_pct, r.temporal.idle_pct
                ),
                label: name,
                parts: vec![
                    (ms(r.temporal.compute_ns), COMPUTE),
                    (ms(r.temporal.non_compute_ns), OTHER),
                    (ms(r.temporal.idle_ns), IDLE),
                ],
            }
        })
        .collect();
    let mut gpu_html = html::bars(&bars, 200, "ms");
    if !bars.is_empty() {
        gpu_html.push_str(&legend(&[
            (COMPUTE, "computation"),
            (OTHER, "other device work"),
            (IDLE, "idle"),
        ]));
    }
    // A run without device work: its host threads' time, per process.
    let host_bars: Vec<Bar> = gpu
        .hosts
        .iter()
        .map(|h| {
            let ms = |ns: i64| ns as f64 / 1e6;
            let t = &h.time;
            Bar {
                title: format!(
                    "{}: computation {:.1} ms, communication {:.1} ms, idle {:.1} ms",
                    h.role,
                    ms(t.computation_ns),
                    ms(t.communication_ns),
                    ms(t.idle_ns)
                ),
                label: h.role.clone(),
                parts: vec![
                    (ms(t.computation_ns - t.overlap_ns), COMPUTE),
                    (ms(t.communication_ns), COMMUNICATION),
                    (ms(t.idle_ns), IDLE),
                ],
            }
        })
        .collect();
    if bars.is_empty() && !host_bars.is_empty() {
        gpu_html.push_str(&html::bars(&host_bars, 200, "ms"));
        gpu_html.push_str(&legend(&[
            (COMPUTE, "computation (host threads)"),
            (COMMUNICATION, "communication (collectives on the CPU)"),
            (IDLE, "idle"),
        ]));
    }
    // Launch latency per stream: the middle half of the launches, the median between,
    // and the whisker to the 99th percentile.
    let latency: Vec<Bar> = gpu
        .ranks
        .iter()
        .flat_map(|r| r.streams.iter().map(move |st| (r, st)))
        .filter_map(|(r, st)| {
            let d = st.launches.latency.as_ref()?;
            let us = |ns: f64| ns / 1e3;
            let rank = r.rank.map_or(String::new(), |k| format!("rank {k} "));
            Some(Bar {
                label: format!("{rank}{}", st.stream),
                title: format!(
                    "{rank}{} {}: {} launches; p25 {:.1} µs, p50 {:.1} µs, p75 {:.1} µs, p99 {:.1} µs",
                    st.device, st.stream, d.count, us(d.p25), us(d.p50), us(d.p75), us(d.p99)
                ),
                parts: vec![
                    (us(d.p25), "#ffffff"),
                    (us(d.p50 - d.p25), "#6baed6"),
                    (us(d.p75 - d.p50), "#2171b5"),
                    (us(d.p99 - d.p75), "#c6dbef"),
                ],
            })
        })
        .take(48)
        .collect();
    if !latency.is_empty() {
        gpu_html.push_str(
            "<p>Launch latency per stream (from the launch call to the work's start)</p>\n",
        );
        gpu_html.push_str(&html::bars(&latency, 160, "µs"));
        gpu_html.push_str(&legend(&[
            ("#6baed6", "p25 to p50"),
            ("#2171b5", "p50 to p75"),
            ("#c6dbef", "p75 to p99"),
        ]));
    }
    Ok(gpu_html + &html::report(&gpu.report()))
}

pub(crate) fn memory_section(cx: &Cx, _top: usize) -> Result<String, Error> {
    let memory = memory_report(cx, &MemoryOptions { top: 10 });
    let mut memory_html = String::new();
    for a in memory.allocators.iter().take(8) {
        let mib = |b: i64| b as f64 / (1 << 20) as f64;
        let (what, bars): (&str, Vec<Bar>) = if !a.over_time.is_empty() {
            (
                "highest resident memory in each tenth of the run",
                a.over_time
                    .iter()
                    .enumerate()
                    .map(|(k, p)| Bar {
                        label: (k + 1).to_string(),
                        title: format!("{:.1} MiB at most", mib(p.peak)),
                        parts: vec![(mib(p.peak), COMPUTE)],
                    })
                    .collect(),
            )
        } else {
            (
                "bytes in use at the end of each step",
                a.steps
                    .iter()
                    .enumerate()
                    .map(|(k, st)| Bar {
                        label: (k + 1).to_string(),
                        title: format!(
                            "{}: {:.1} MiB in use at its end",
                            st.step,
                            mib(st.in_use_at_end)
                        ),
                        parts: vec![(mib(st.in_use_at_end), COMPUTE)],
                    })
                    .collect(),
            )
        };
        if bars.len() >= 2 {
            let rank = a.rank.map_or(String::new(), |k| format!("rank {k}, "));
            memory_html.push_str(&format!(
                "<p>{}: {what}</p>\n",
                html::escape(&format!("{rank}{}", a.allocator))
            ));
            memory_html.push_str(&html::bars(&bars, 120, "MiB"));
        }
    }
    Ok(memory_html + &html::report(&memory.report()))
}

/// The flame graph of the whole trace, as an image in the page.
fn flame_section(cx: &Cx) -> Result<Option<String>, Error> {
    let stacks = folded(
        cx,
        FlameOptions {
            device: true,
            wall: false,
        },
    );
    if !stacks.is_empty() {
        let lines: Vec<String> = stacks.iter().map(|(s, ns)| format!("{s} {ns}")).collect();
        let mut options = inferno::flamegraph::Options::default();
        options.title = "Where the time goes".to_string();
        options.count_name = "ns".to_string();
        // Colours from the frames' names, not from a random generator: the same page
        // for the same trace, however many were drawn before in the process.
        options.deterministic = true;
        // Frames narrower than this are left out: they keep a big trace's page small.
        options.min_width = 0.5;
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
            .map_err(|e| Error::Failed(format!("cannot draw the flame graph: {e}")))?;
        return Ok(Some(format!(
                "<p>Ops under the ops they sit in, by CPU self time; kernels, copies and sets under the op that launched them, by device time. Open the image on its own to zoom.</p>\n<img alt=\"flame graph\" style=\"max-width:100%\" src=\"data:image/svg+xml;base64,{}\">\n",
                encode(&svg)
            )));
    }
    Ok(None)
}

fn legend(items: &[(&str, &str)]) -> String {
    let mut out = String::from("<p class=legend>");
    for (colour, what) in items {
        out.push_str(&format!(
            "<span style=\"background:{colour}\"></span>{}",
            html::escape(what)
        ));
    }
    out.push_str("</p>\n");
    out
}

/// Base64 for the page's inline images (RFC 4648, with padding).
mod base64_encoding {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let n = (chunk[0] as u32) << 16
                | (*chunk.get(1).unwrap_or(&0) as u32) << 8
                | *chunk.get(2).unwrap_or(&0) as u32;
            for k in 0..4 {
                if k <= chunk.len() {
                    out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn encodes_as_rfc_4648_says() {
            for (plain, coded) in [
                ("", ""),
                ("f", "Zg=="),
                ("fo", "Zm8="),
                ("foo", "Zm9v"),
                ("foob", "Zm9vYg=="),
                ("fooba", "Zm9vYmE="),
                ("foobar", "Zm9vYmFy"),
            ] {
                assert_eq!(super::encode(plain.as_bytes()), coded);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The page of a trace is the same however many were drawn before it on the thread
    /// (the flame graph's colours came from a random generator, so a Python process's
    /// second page differed from its first and from the command line's).
    #[test]
    fn a_page_drawn_twice_is_the_same() {
        let json = r#"[
            {"ph":"X","cat":"cpu_op","name":"aten::linear","pid":1,"tid":1,"ts":0,"dur":100},
            {"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":1,"tid":1,"ts":10,"dur":80},
            {"ph":"X","cat":"cpu_op","name":"aten::relu","pid":1,"tid":2,"ts":20,"dur":50}
        ]"#;
        let mut trace = opscope_model::Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut trace).unwrap();
        trace.finish();
        let cx = super::Cx::new(&trace);
        let first = super::page(&cx, "t", 20).unwrap();
        assert!(first.contains("Flame graph"));
        for _ in 0..3 {
            assert!(super::page(&cx, "t", 20).unwrap() == first);
        }
    }
}
