//! `opscope report`: one HTML page that needs nothing else, whose figures are the ones
//! the commands print; on eight ranks made from the shared two-rank Kineto traces, and
//! opened in a real browser (headless Chromium) where one is installed.

mod common;

use std::process::Command;

use common::{eight_ranks, opscope, opscope_ok, scratch_dir};

/// The figures (a number with its unit) in `text`.
fn figures(text: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\b\d[\d,]*(?:\.\d+)? ?(?:ns|µs|ms|s|%|B|KiB|MiB|GiB)\b").unwrap();
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

#[test]
fn the_report_is_one_file_whose_figures_are_the_commands() {
    let dir = scratch_dir("report");
    let Some(ranks) = eight_ranks(&dir, 0.0) else {
        assert!(std::env::var_os("CI").is_none(), "CI has the shared traces");
        opscope_corpus::skip("the shared traces are not here (OPSCOPE_SHARED)");
        return;
    };
    let page = dir.join("report.html");
    let _ = std::fs::remove_file(&page);
    opscope_ok(&[
        "report",
        ranks.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
        "-q",
    ]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.len() < 2 << 20, "{} bytes", html.len());
    // Nothing to fetch: no scripts, styles or images from elsewhere.
    for outside in [
        "<script src",
        "<link",
        "src=\"http",
        "href=\"http",
        "url(http",
        "@import",
    ] {
        assert!(
            !html.contains(outside),
            "the page fetches something: {outside}"
        );
    }
    let text = html
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"");
    // The GPU chart has a bar per rank, the launch-latency chart one per stream with
    // launches (as `gpu` counts them), the quartiles in its tooltip.
    for rank in 0..8 {
        assert!(
            text.contains(&format!("<g><title>rank {rank}: ")),
            "rank {rank}"
        );
    }
    let gpu = opscope_ok(&["gpu", "--format", "json", ranks.to_str().unwrap()]);
    let gpu: serde_json::Value = serde_json::from_slice(&gpu.stdout).unwrap();
    let mut launched = 0;
    for r in gpu["ranks"].as_array().unwrap() {
        for st in r["streams"].as_array().unwrap() {
            let latency = &st["launches"]["latency"];
            let Some(p50) = latency["p50"].as_f64() else {
                continue;
            };
            launched += 1;
            let bar = format!(
                "<title>rank {} {} {}: {} launches; p25 {:.1} µs, p50 {:.1} µs",
                r["rank"],
                st["device"].as_str().unwrap(),
                st["stream"].as_str().unwrap(),
                latency["count"],
                latency["p25"].as_f64().unwrap() / 1e3,
                p50 / 1e3
            );
            assert!(text.contains(&bar), "no bar {bar}");
        }
    }
    assert!(launched >= 8, "{launched} streams with launches");
    // The ranks' step charts share one scale, so that they compare by eye (before:
    // each its own), and their bars are numbered from 0 as the step table numbers the
    // steps (before: from 1).
    let steps_section = text
        .split("<h2>Steps</h2>")
        .nth(1)
        .and_then(|rest| rest.split("<h2>").next())
        .expect("a steps section");
    let scales: Vec<&str> = steps_section
        .split("<text x=\"0\" y=\"12\" font-size=\"11\">")
        .skip(1)
        .map(|rest| rest.split('<').next().unwrap())
        .collect();
    assert!(scales.len() >= 2, "{} step charts", scales.len());
    assert!(scales.iter().all(|s| *s == scales[0]), "{scales:?}");
    assert!(steps_section.contains("text-anchor=\"middle\">0</text>"));
    // Every figure the commands print (in text, names whole) is on the page, which
    // lists the top 20 ops and kernels.
    for args in [
        &["gpu"][..],
        &["steps"],
        &["stats", "op", "--limit", "20"],
        &["stats", "kernel", "--limit", "20"],
        &["info"],
    ] {
        let mut full: Vec<&str> = args.to_vec();
        full.extend_from_slice(&["--wide", ranks.to_str().unwrap()]);
        let out = opscope_ok(&full);
        // (Less the model's own size, which depends on how it was loaded: parsed or
        // read back from the model cache.)
        let printed: String = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.contains("in the model"))
            .collect::<Vec<_>>()
            .join("\n");
        let shown = figures(&printed);
        assert!(!shown.is_empty(), "{args:?} printed no figures");
        for figure in shown {
            assert!(
                text.contains(&figure),
                "{args:?}: {figure} is not on the page"
            );
        }
    }
    // An existing page is not replaced without --force.
    assert!(!opscope(&[
        "report",
        ranks.to_str().unwrap(),
        "-o",
        page.to_str().unwrap()
    ])
    .status
    .success());

    // In a real browser: the page loads offline and shows its sections and tables.
    let Some(chromium) = common::browser::chromium() else {
        return;
    };
    let dom = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    for heading in ["Steps", "GPU time", "Top ops", "Top kernels", "Flame graph"] {
        assert!(
            dom.contains(&format!("<h2>{heading}</h2>")),
            "{heading} not in the DOM"
        );
    }
    assert!(dom.matches("<table>").count() >= 4);
    let shot = common::browser::artifacts_dir().join("report.png");
    let _ = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1200,2400",
        ])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output();
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
        "no screenshot"
    );
    eprintln!("screenshot: {}", shot.display());
}

/// The page of an 8-rank job (the shared ranks, one pair's kernels stretched) leads
/// with its verdict: in a 1200×900 Chromium window the verdict, the chart of every
/// rank's median step, the straggler and the findings end above the fold, the
/// sections after it are folded, and the page stays under 2 MB. Before, the page
/// listed each rank's tables one after another (9,000 px for 8 ranks).
#[test]
fn the_verdict_fits_the_first_screen_on_eight_ranks() {
    let scratch = scratch_dir("report-verdict");
    let Some(ranks) = eight_ranks(&scratch, 0.1) else {
        return;
    };
    let page = scratch.join("job.html");
    opscope_ok(&[
        "report",
        ranks.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 2 * 1024 * 1024, "{size} bytes");
    let html = std::fs::read_to_string(&page).unwrap();
    // The verdict is advise's, and the straggler steps' own.
    let advice: serde_json::Value = serde_json::from_slice(
        &opscope_ok(&["advise", ranks.to_str().unwrap(), "--format", "json"]).stdout,
    )
    .unwrap();
    let verdict = advice["verdict"].as_str().unwrap();
    assert!(
        html.contains(&verdict.replace('\'', "&#39;")) || html.contains(verdict),
        "{verdict}"
    );
    assert!(
        html.contains("Straggler: <b>rank 7</b>"),
        "no straggler line"
    );
    let Some(chromium) = common::browser::chromium() else {
        return;
    };
    let mut b = common::browser::Browser::start(chromium, scratch.join("profile"), 1200, 900);
    b.navigate(&format!("file://{}", page.display()));
    b.wait_for(
        "document.readyState === 'complete'",
        std::time::Duration::from_secs(30),
    );
    let rows = b.eval("document.querySelectorAll('svg g text[text-anchor=end]').length");
    assert_eq!(rows.as_i64(), Some(8), "one row per rank in the chart");
    let verdict_bottom = b.eval(
        "(() => { const t = document.querySelector('table.findings'); \
         return t.getBoundingClientRect().bottom + window.scrollY; })()",
    );
    assert!(
        verdict_bottom.as_f64().unwrap() <= 900.0,
        "the findings end at {verdict_bottom} px"
    );
    let folded = b.eval("[...document.querySelectorAll('details')].filter(d => !d.open).length");
    assert!(folded.as_i64().unwrap() >= 4, "{folded}");
    let shot = common::browser::artifacts_dir().join("report-eight-ranks.png");
    b.screenshot(&shot);
    assert!(std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000));
    eprintln!("screenshot: {}", shot.display());
}
