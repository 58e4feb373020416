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
