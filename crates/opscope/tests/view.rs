//! `opscope view` in a real browser: headless Chromium, driven through the DevTools
//! protocol with real mouse, wheel and key input, on the shared two-rank Kineto trace.
//! What the page shows is checked against the trace files read here on their own.

mod common;

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use common::browser::{artifacts_dir, chromium, Browser};
use common::viewer::start_viewer;
use common::{http_json, http_text, opscope_ok, scratch_dir, shared_traces};
use serde_json::Value;

fn read_gz_json(path: &Path) -> Value {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The page's state, as the viewer keeps it for the console.
const STATE: &str = "window.opscopeViewer";

/// How long a page may take to reach a state before the test fails: a headless browser
/// on a machine running the whole suite on 2 cores is slow, and waiting costs time only
/// when the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn the_viewer_draws_every_track_zooms_clicks_selects_and_searches() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = traces.join("kineto/hta/trace_filter");
    let files: Vec<Value> = (0..2)
        .map(|r| read_gz_json(&dir.join(format!("sampled_rank-{r}.json.gz"))))
        .collect();
    // Tracks, read from the files: a lane per (rank, pid, tid) with complete events.
    let mut lanes = HashSet::new();
    for (rank, file) in files.iter().enumerate() {
        for e in file["traceEvents"].as_array().unwrap() {
            if e["ph"] == "X" {
                lanes.insert((rank, e["pid"].to_string(), e["tid"].to_string()));
            }
        }
    }

    let viewer = start_viewer(&[dir.to_str().unwrap()]);
    let scratch = scratch_dir("view-browser");
    let mut b = Browser::start(chromium, scratch.join("profile"), 1600, 1000);
    b.navigate(&viewer.url);
    b.wait_for(
        &format!(
            "!!{STATE} && {STATE}.answered >= 1 && {STATE}.steps !== null && !{STATE}.inFlight"
        ),
        Duration::from_secs(30),
    );

    // The steps band shows the first rank's steps, as `opscope steps` finds them, and
    // the first picture is narrowed to the run of steps (before: no step row, and the
    // whole run shown).
    let steps = common::opscope_ok(&["steps", "--format", "json", dir.to_str().unwrap()]);
    let steps: Value = serde_json::from_slice(&steps.stdout).unwrap();
    let first = steps["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| !s["steps"].as_array().unwrap().is_empty())
        .expect("the trace has steps");
    let band = b.eval(&format!("{STATE}.steps.map((s) => s.name)"));
    let names: Vec<&Value> = first["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["name"])
        .collect();
    assert_eq!(band.as_array().unwrap().iter().collect::<Vec<_>>(), names);
    let view = b.eval(&format!("[{STATE}.start, {STATE}.end, {STATE}.meta.span]"));
    let (start, end, span) = (
        view[0].as_f64().unwrap(),
        view[1].as_f64().unwrap(),
        view[2].as_f64().unwrap(),
    );
    let spans = b.eval(&format!(
        "[Math.min(...{STATE}.steps.map((s) => s.start)), Math.max(...{STATE}.steps.map((s) => s.end))]"
    ));
    let (a, z) = (spans[0].as_f64().unwrap(), spans[1].as_f64().unwrap());
    assert!(
        start <= a && end >= z && end - start < (z - a) * 1.2 + span * 0.0,
        "{view} {spans}"
    );
    // Ops of one kind are told apart by their names' colours.
    let colours = b.eval("[shade('op', 'aten::mm', false), shade('op', 'aten::add', false)]");
    assert_ne!(colours[0], colours[1]);

    // Every lane is a track, grouped by rank.
    let meta = b.eval(&format!("{STATE}.meta"));
    let tracks = meta["tracks"].as_array().unwrap();
    assert_eq!(tracks.len(), lanes.len(), "tracks: {tracks:?}");
    for rank in ["rank 0", "rank 1"] {
        assert!(tracks
            .iter()
            .any(|t| t["group"].as_str().unwrap().starts_with(rank)));
    }
    assert!(tracks.iter().filter(|t| t["kind"] == "gpu_stream").count() >= 2);

    // Each track on screen is drawn: items from the server and coloured pixels in its
    // band of the canvas.
    let drawn = b.eval(&format!(
        "(() => {{
            const s = {STATE}, c = document.getElementById('canvas');
            const g = c.getContext('2d'), dpr = window.devicePixelRatio || 1;
            const out = [];
            for (const e of s.layout) {{
                if (!e.track) continue;
                const y = s.top + e.y - s.scrollY;
                if (y < s.top || y + e.h > c.clientHeight) continue;
                const img = g.getImageData(231 * dpr, y * dpr, (c.clientWidth - 232) * dpr, Math.max(1, (e.h - 5) * dpr));
                let coloured = 0;
                for (let i = 0; i < img.data.length; i += 4) {{
                    const [r, gr, b] = [img.data[i], img.data[i + 1], img.data[i + 2]];
                    if (img.data[i + 3] > 0 && (Math.abs(r - gr) > 12 || Math.abs(gr - b) > 12 || r < 200)) coloured++;
                }}
                const d = s.drawn.find((x) => x.id === e.track.id);
                out.push({{ id: e.track.id, name: e.track.name, items: d ? d.items : 0, coloured }});
            }}
            return out;
        }})()"
    ));
    let drawn = drawn.as_array().unwrap();
    assert!(drawn.len() >= 6, "only {} tracks on screen", drawn.len());
    for t in drawn {
        assert!(t["items"].as_u64().unwrap() > 0, "nothing drawn on {t}");
        assert!(t["coloured"].as_u64().unwrap() > 0, "no pixels on {t}");
    }
    b.screenshot(&artifacts_dir().join("view.png"));

    // Zoom with the keyboard at the mouse, then with Ctrl+wheel: the page asks again
    // and the server answers for the narrower span only.
    let span = |b: &mut Browser| {
        b.eval(&format!("{STATE}.end - {STATE}.start"))
            .as_f64()
            .unwrap()
    };
    let before = span(&mut b);
    let answered = b.eval(&format!("{STATE}.answered")).as_u64().unwrap();
    b.call(
        "Input.dispatchMouseEvent",
        serde_json::json!({"type": "mouseMoved", "x": 700, "y": 300}),
    );
    for _ in 0..3 {
        b.key("w");
    }
    b.wheel(700.0, 300.0, -300.0, true);
    b.wait_for(
        &format!("{STATE}.answered > {answered} && !{STATE}.inFlight && !{STATE}.again"),
        PATIENCE,
    );
    std::thread::sleep(Duration::from_millis(300));
    b.wait_for(&format!("!{STATE}.inFlight"), PATIENCE);
    let after = span(&mut b);
    assert!(
        after < before * 0.4,
        "zoom: {before} ns shown, then {after} ns"
    );
    let outside = b.eval(&format!(
        "{STATE}.data.tracks.flatMap((t) => (t.rows || []).flat()).filter((it) => it[1] < {STATE}.start - 1 || it[0] > {STATE}.end + 1).length"
    ));
    assert_eq!(outside, 0, "items outside the zoomed view");
    let server_ms = b.eval(&format!("{STATE}.lastServerMs")).as_f64().unwrap();
    eprintln!("zoomed from {before} to {after} ns; the server answered in {server_ms} ms");

    // Back to the whole trace, then a real click on the widest kernel drawn alone.
    b.key("0");
    b.wait_for(&format!("!{STATE}.inFlight"), PATIENCE);
    std::thread::sleep(Duration::from_millis(300));
    b.wait_for(&format!("!{STATE}.inFlight"), PATIENCE);
    // Launch arrows at the whole trace's zoom too (before: only once slices stood
    // alone, deep in).
    let flows = b.eval(&format!("{STATE}.data.flows.length"));
    assert!(flows.as_u64() > Some(0), "no arrows at the whole view");
    let target = b.eval(&format!(
        "(() => {{
            const s = {STATE}, W = document.getElementById('canvas').clientWidth;
            let best = null;
            for (const t of s.data.tracks) {{
                const e = s.byId.get(t.id);
                if (!t.rows || e.track.kind !== 'gpu_stream') continue;
                t.rows.forEach((row, r) => row.forEach((it) => {{
                    if (it[3] !== 1) return;
                    const x0 = Math.max(231, 230 + (it[0] - s.start) / (s.end - s.start) * (W - 230));
                    const x1 = Math.min(W - 1, 230 + (it[1] - s.start) / (s.end - s.start) * (W - 230));
                    const y = s.top + e.y - s.scrollY + r * 15 + 7;
                    if (y > s.top && y < document.getElementById('canvas').clientHeight && (!best || x1 - x0 > best.w))
                        best = {{ slice: it[2], x: (x0 + x1) / 2, y, w: x1 - x0 }};
                }}));
            }}
            return best;
        }})()"
    ));
    assert!(target.is_object(), "no kernel on screen");
    let rect = b.eval("(() => { const r = document.getElementById('canvas').getBoundingClientRect(); return [r.left, r.top]; })()");
    let (left, top) = (rect[0].as_f64().unwrap(), rect[1].as_f64().unwrap());
    b.click(
        left + target["x"].as_f64().unwrap(),
        top + target["y"].as_f64().unwrap(),
    );
    b.wait_for(
        &format!(
            "!!{STATE}.details && {STATE}.details.id === {}",
            target["slice"]
        ),
        PATIENCE,
    );
    let details = b.eval(&format!("{STATE}.details"));
    let text = b
        .eval("document.getElementById('details').innerText")
        .as_str()
        .unwrap()
        .to_string();
    let name = details["name"].as_str().unwrap();
    assert!(
        text.contains(name) && text.contains("correlation"),
        "{text}"
    );
    // The same kernel in the files: its duration, and the runtime call of the same
    // correlation as its launch.
    let correlation = details["args"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kv| kv[0] == "correlation")
        .map(|kv| kv[1].as_str().unwrap().parse::<i64>().unwrap())
        .unwrap();
    let events: Vec<&Value> = files
        .iter()
        .flat_map(|f| f["traceEvents"].as_array().unwrap())
        .filter(|e| e["ph"] == "X" && e["args"]["correlation"].as_i64() == Some(correlation))
        .collect();
    let kernel = events
        .iter()
        .find(|e| e["name"] == name && e["cat"] == "kernel")
        .expect("the clicked kernel is in the files");
    let dur_ns = (kernel["dur"].as_f64().unwrap() * 1000.0).round() as i64;
    assert_eq!(details["dur"].as_i64().unwrap(), dur_ns);
    let call = events
        .iter()
        .find(|e| e["cat"] == "cuda_runtime")
        .expect("its launch is in the files");
    assert_eq!(details["launch"]["name"], call["name"]);
    assert!(text.contains("launched by"), "{text}");

    // A span picked on the time axis shows its `stats op` and `gpu` reports.
    b.drag((left + 500.0, top + 10.0), (left + 1000.0, top + 10.0));
    b.wait_for(
        "document.getElementById('selection').innerText.includes('stats op') && document.querySelectorAll('#selection table').length >= 2",
        PATIENCE,
    );

    // The report panels, through the tab.
    let tab = b.eval("(() => { const r = document.querySelector('[data-tab=reports]').getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()");
    b.click(tab[0].as_f64().unwrap(), tab[1].as_f64().unwrap());
    b.wait_for(
        "['Steps', 'GPU time', 'Top ops', 'Top kernels'].every((h) => document.getElementById('reports').innerHTML.includes('<h2>' + h + '</h2>'))",
        Duration::from_secs(30),
    );
    // The verdict leads the panels, and a finding about a time span shows it when
    // clicked: the view then covers that span and little more.
    assert_eq!(
        b.eval("document.querySelector('#reports h2').textContent"),
        "Verdict"
    );
    let link = b.eval("(() => { const a = document.querySelector('#reports a[data-span]'); if (!a) return null; a.scrollIntoView(); const r = a.getBoundingClientRect(); return [r.left + 3, r.top + r.height / 2, a.dataset.span]; })()");
    assert!(link.is_array(), "no finding with a span in the panels");
    b.click(link[0].as_f64().unwrap(), link[1].as_f64().unwrap());
    let span: Vec<f64> = link[2]
        .as_str()
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    let shown = b.eval(&format!(
        "[{STATE}.start + {STATE}.meta.origin, {STATE}.end + {STATE}.meta.origin]"
    ));
    let (start, end) = (shown[0].as_f64().unwrap(), shown[1].as_f64().unwrap());
    let width = span[1] - span[0];
    assert!(
        start <= span[0] && end >= span[1] && end - start <= width * 1.2 + 2000.0,
        "view {start}..{end} for the finding's span {span:?}"
    );

    // The critical path, through its button: its slices are `opscope critical-path`'s.
    let cli: Value = serde_json::from_slice(
        &opscope_ok(&["critical-path", "--format", "json", dir.to_str().unwrap()]).stdout,
    )
    .unwrap();
    let mut want: Vec<u64> = cli["edges"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            [
                e["from"]["slice"].as_u64().unwrap(),
                e["to"]["slice"].as_u64().unwrap(),
            ]
        })
        .collect();
    want.sort_unstable();
    want.dedup();
    let button = b.eval("(() => { const r = document.getElementById('critical').getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()");
    b.click(button[0].as_f64().unwrap(), button[1].as_f64().unwrap());
    b.wait_for(&format!("!!{STATE}.critical"), PATIENCE);
    let shown = b.eval(&format!("[...{STATE}.critical].sort((a, b) => a - b)"));
    let shown: Vec<u64> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(shown, want, "the path's slices");
    // And the lines between them: one per edge from one slice to another, from the
    // end (or start) it leaves to the one it reaches.
    let at = |e: &Value, start: bool| {
        let (ts, dur) = (e["ts_ns"].as_i64().unwrap(), e["dur_ns"].as_i64().unwrap());
        if start {
            ts
        } else {
            ts + dur
        }
    };
    let want: Vec<(i64, i64)> = cli["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["from"]["slice"] != e["to"]["slice"])
        .map(|e| {
            (
                at(&e["from"], e["from_start"].as_bool().unwrap()),
                at(&e["to"], e["to_start"].as_bool().unwrap()),
            )
        })
        .collect();
    assert!(!want.is_empty());
    // Compared from the first line's start: the origin, past 2^53 ns, is no exact
    // JavaScript number.
    let lines = b.eval(&format!("{STATE}.criticalEdges.map(e => [e[2], e[5]])"));
    let lines: Vec<(i64, i64)> = lines
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l[0].as_i64().unwrap(), l[1].as_i64().unwrap()))
        .collect();
    let from_first = |v: &[(i64, i64)]| -> Vec<(i64, i64)> {
        let t0 = v.first().map_or(0, |x| x.0);
        v.iter().map(|x| (x.0 - t0, x.1 - t0)).collect()
    };
    let (lines, want) = (from_first(&lines), from_first(&want));
    assert_eq!(lines, want, "the path's lines");
    assert!(
        b.eval("document.getElementById('status').textContent")
            .as_str()
            .unwrap()
            .starts_with("critical path: "),
        "the status line says what bounds the path"
    );
    // A picture of the path's first milliseconds, for people to look at.
    b.eval(&format!(
        "(() => {{ const e = {STATE}.criticalEdges[0]; setView(e[2] - 200000, e[2] + 4000000); }})()"
    ));
    b.wait_for(
        &format!("{STATE}.end - {STATE}.start < 5e6 && {STATE}.critical !== null"),
        PATIENCE,
    );
    b.screenshot(&artifacts_dir().join("view-critical-path.png"));

    // The panels fit their column (before: the charts ran out of it).
    let fits = b.eval(
        "(() => { const r = document.getElementById('reports'); return r.scrollWidth <= r.clientWidth + 1; })()",
    );
    assert_eq!(fits, true, "the reports tab is wider than its panel");

    // Search: typed in the box, Enter selects the first match after the selected slice
    // and shows it; the count of matches is the files' count of such names.
    let query = "aten::";
    let expected = files
        .iter()
        .flat_map(|f| f["traceEvents"].as_array().unwrap())
        .filter(|e| {
            e["ph"] == "X"
                && e["name"]
                    .as_str()
                    .is_some_and(|n| n.to_lowercase().contains(query))
        })
        .count();
    let search = b.eval("(() => { const r = document.getElementById('search').getBoundingClientRect(); return [r.left + 20, r.top + r.height / 2]; })()");
    b.click(search[0].as_f64().unwrap(), search[1].as_f64().unwrap());
    b.type_text(query);
    b.key("Enter");
    b.wait_for(
        &format!("!!{STATE}.details && {STATE}.details.name.startsWith('{query}') && !document.getElementById('details').hidden"),
        PATIENCE,
    );
    let found = b.eval("document.getElementById('found').textContent");
    assert_eq!(found, format!("{expected} matches"));
    let first = b.eval(&format!("{STATE}.details.start")).as_i64().unwrap();
    b.key("Enter");
    b.wait_for(
        &format!("{STATE}.details.start > {first} && {STATE}.details.name.startsWith('{query}')"),
        PATIENCE,
    );
    // The found slice is brought into view.
    let shown = b.eval(&format!(
        "{STATE}.start <= {STATE}.details.start && {STATE}.details.start <= {STATE}.end"
    ));
    assert_eq!(shown, true);
    let heap = b.js_heap();
    eprintln!("page heap in use: {:.1} MB", heap as f64 / 1e6);
    assert!(heap < 300 << 20);
    b.screenshot(&artifacts_dir().join("view-selected.png"));
}

/// The address is the key: a request without the token is refused, and the server
/// listens on the loopback interface only.
#[test]
fn the_viewer_answers_only_with_its_token_on_loopback() {
    let fixture = common::repo_root().join("examples/traces/mlp-train.json");
    let viewer = start_viewer(&[fixture.to_str().unwrap()]);
    let port: u16 = viewer.url["http://127.0.0.1:".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let get_as = |host: &str, path: &str| -> String {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let ours = format!("127.0.0.1:{port}");
    let get = |path: &str| get_as(&ours, path);
    let token_path = &viewer.url[format!("http://127.0.0.1:{port}").len()..];
    // A page elsewhere whose name was rebound to 127.0.0.1 sends its own name: even
    // with the token, it is refused.
    for host in ["x", &format!("attacker.example:{port}"), "127.0.0.1:1"] {
        let refused = get_as(host, &format!("{token_path}api/meta"));
        assert_eq!(
            refused.split(' ').nth(1),
            Some("421"),
            "Host {host}: {refused}"
        );
    }
    assert_eq!(
        get_as(
            &format!("localhost:{port}"),
            &format!("{token_path}api/meta")
        )
        .split(' ')
        .nth(1),
        Some("200")
    );
    // Times at the ends of i64 and widths no screen has are brought within bounds: a
    // 200 of about the size of a wide screen's answer, not an overflow or every slice.
    let answer_len = |query: &str| {
        let answer = get(&format!("{token_path}api/view?{query}&tracks=0,1,2,3"));
        assert_eq!(
            answer.split(' ').nth(1),
            Some("200"),
            "{query}: {answer:.300}"
        );
        answer.len()
    };
    let wide = answer_len("start=-1000000000000&end=1000000000000&px=16384");
    for query in [
        "start=-9223372036854775808&end=9223372036854775807&px=2000",
        "start=9223372036854775807&end=-9223372036854775808&px=2000",
        "start=-1e300&end=1e300&px=2000",
        "start=-1000000000000&end=1000000000000&px=inf",
        "start=-1000000000000&end=1000000000000&px=1e308",
    ] {
        let len = answer_len(query);
        assert!(
            len <= wide + 200,
            "{query}: {len} bytes against {wide} at 16384 px"
        );
    }
    let nan = get(&format!("{token_path}api/view?start=0&end=1&px=NaN"));
    assert_eq!(nan.split(' ').nth(1), Some("400"), "{nan:.300}");
    let window = get(&format!(
        "{token_path}api/window?start=-9223372036854775808&end=9223372036854775807"
    ));
    assert_eq!(window.split(' ').nth(1), Some("200"), "{window:.300}");
    assert!(get(&format!("{token_path}api/meta")).split(' ').nth(1) == Some("200"));
    assert!(get("/api/meta").split(' ').nth(1) == Some("403"));
    assert!(get("/0000/api/meta").split(' ').nth(1) == Some("403"));
    let page = get(token_path);
    assert!(page.contains("viewer.js") && !page.contains("http://") && !page.contains("https://"));
    // Bad parameters are a 400 with the reason, not a dropped connection.
    let bad = get(&format!("{token_path}api/view?start=x&end=1&px=10"));
    assert!(
        bad.split(' ').nth(1) == Some("400") && bad.contains("start"),
        "{bad}"
    );
    // Not on other addresses.
    let others: Vec<std::net::IpAddr> = local_addresses();
    for ip in others {
        assert!(
            std::net::TcpStream::connect((ip, port)).is_err(),
            "the viewer answers on {ip}"
        );
    }
}

/// This host's non-loopback IPv4 addresses, from the kernel's routing table (the
/// `LOCAL` entries of `/proc/net/fib_trie`), with 127.0.0.2: on the loopback network,
/// but not the address the viewer binds.
fn local_addresses() -> Vec<std::net::IpAddr> {
    let mut found = vec![std::net::IpAddr::from([127, 0, 0, 2])];
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut previous = "";
    for line in trie.lines() {
        if line.contains("/32 host LOCAL") {
            if let Some(ip) = previous
                .split_whitespace()
                .last()
                .and_then(|a| a.parse::<std::net::IpAddr>().ok())
                .filter(|ip| !ip.is_loopback())
            {
                if !found.contains(&ip) {
                    found.push(ip);
                }
            }
        }
        previous = line;
    }
    found
}

/// Every format opens in the viewer, and the whole trace at 2,000 pixels accounts for
/// every slice: each is in exactly one item, drawn alone or in a block. Counters and
/// allocators' bytes in use are tracks with samples.
#[test]
fn every_format_opens_and_a_whole_view_accounts_for_every_slice() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let scratch = scratch_dir("view-formats");
    let perfetto = scratch.join("trace_filter.pftrace");
    let _ = std::fs::remove_file(&perfetto);
    common::opscope_ok(&[
        "convert",
        traces
            .join("kineto/hta/trace_filter/sampled_rank-0.json.gz")
            .to_str()
            .unwrap(),
        "-o",
        perfetto.to_str().unwrap(),
    ]);
    let inputs = [
        traces.join("kineto/hta/df_index_resolver/df_index_resolver.json.gz"),
        traces.join("kineto/kineto-tb_plugin/test/gpu_metrics_expected.json"),
        traces.join("tf-timeline/xprof-demo/trace.json"),
        traces.join("tf-timeline/generated-here/tf2.21-cpu-mlp/run_meta"),
        traces.join("xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb"),
        traces.join("nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
        traces.join("ctf/tracecompass/context-switches"),
        perfetto,
    ];
    // No profile's line id passes for a thread id (an XPlane's are 64-bit hashes, shown
    // as negative numbers before).
    let line_ids = regex::Regex::new(r"-\d{6,}").unwrap();
    for input in &inputs {
        let path = input.to_str().unwrap();
        let info = common::opscope_ok(&["info", "--format", "json", path]);
        let info: Value = serde_json::from_slice(&info.stdout).unwrap();
        let viewer = start_viewer(&[path]);
        let meta = http_json(&viewer.url, "api/meta")["meta"].clone();
        let tracks = meta["tracks"].as_array().unwrap();
        assert!(!tracks.is_empty(), "{path}: no tracks");
        for t in tracks {
            let name = t["name"].as_str().unwrap();
            assert!(!line_ids.is_match(name), "{path}: track {name:?}");
        }
        let ids: Vec<String> = tracks.iter().map(|t| t["id"].to_string()).collect();
        let span = meta["span"].as_i64().unwrap();
        let view = http_json(
            &viewer.url,
            &format!(
                "api/view?start=0&end={span}&px=2000&tracks={}",
                ids.join(",")
            ),
        );
        let mut counted = 0u64;
        for t in view["tracks"].as_array().unwrap() {
            if let Some(rows) = t["rows"].as_array() {
                let items: u64 = rows
                    .iter()
                    .flat_map(|r| r.as_array().unwrap())
                    .map(|it| it[3].as_u64().unwrap())
                    .sum();
                assert!(items > 0, "{path}: track {} drew nothing", t["id"]);
                counted += items;
            } else {
                assert!(
                    !t["samples"].as_array().unwrap().is_empty(),
                    "{path}: counter {} has no samples",
                    t["id"]
                );
            }
        }
        assert_eq!(
            counted,
            info["slices"].as_u64().unwrap(),
            "{path}: slices in the view"
        );
        let derived = |t: &&Value| t["name"].as_str().unwrap().starts_with("memory in use");
        let counters = tracks
            .iter()
            .filter(|t| t["kind"] == "counter" && !derived(t))
            .count();
        let expect_counters = info["counter_samples"].as_u64().unwrap_or(0) > 0;
        assert_eq!(counters > 0, expect_counters, "{path}");
        if path.contains("df_index") {
            assert!(tracks
                .iter()
                .any(|t| t["name"].as_str().unwrap().starts_with("memory in use")));
        }
    }
}

/// `view TEST --against CONTROL` (the shared `hta/trace_diff` pair): CONTROL's tracks
/// (A) above TEST's (B), each as its own viewer shows it; a whole view holds every
/// slice of each (as `info` counts them), B's numbered after A's and answering as B's
/// own viewer does; the two runs' first steps start at one time; searches count both;
/// the panels open with the diff.
#[test]
fn two_runs_one_above_the_other_with_their_first_steps_together() {
    let Some(traces) = shared_traces() else {
        return;
    };
    let dir = traces.join("kineto/hta/trace_diff");
    let (control, test) = (dir.join("control"), dir.join("test"));
    let (control, test) = (control.to_str().unwrap(), test.to_str().unwrap());
    let slices = |path: &str| -> u64 {
        let info = opscope_ok(&["info", "--format", "json", "-q", path]);
        serde_json::from_slice::<Value>(&info.stdout).unwrap()["slices"]
            .as_u64()
            .unwrap()
    };
    let (slices_a, slices_b) = (slices(control), slices(test));
    let pair = start_viewer(&[test, "--against", control]);
    let alone = [start_viewer(&[control]), start_viewer(&[test])];
    let meta = |url: &str| http_json(url, "api/meta")["meta"].clone();
    let pair_meta = meta(&pair.url);
    let tracks = pair_meta["tracks"].as_array().unwrap();
    let mut expected = Vec::new();
    for (side, viewer) in ["A", "B"].iter().zip(&alone) {
        for t in meta(&viewer.url)["tracks"].as_array().unwrap() {
            expected.push((
                format!("{side} · {}", t["group"].as_str().unwrap()),
                t["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    let shown: Vec<(String, String)> = tracks
        .iter()
        .map(|t| {
            (
                t["group"].as_str().unwrap().to_string(),
                t["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(shown, expected);
    let a_tracks = tracks
        .iter()
        .filter(|t| t["group"].as_str().unwrap().starts_with("A · "))
        .count() as u64;
    // A whole view: every slice of each side, on its side's tracks.
    let ids: Vec<String> = tracks.iter().map(|t| t["id"].to_string()).collect();
    let span = pair_meta["span"].as_i64().unwrap();
    let view = http_json(
        &pair.url,
        &format!(
            "api/view?start=-1000000000&end={}&px=4000&tracks={}",
            span + 1_000_000_000,
            ids.join(",")
        ),
    );
    let mut counted = [0u64; 2];
    let mut one_of_b = None;
    for t in view["tracks"].as_array().unwrap() {
        let side = usize::from(t["id"].as_u64().unwrap() >= a_tracks);
        for item in t["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r.as_array().unwrap())
        {
            let slice = item[2].as_u64().unwrap();
            counted[side] += item[3].as_u64().unwrap();
            match side {
                0 => assert!(slice < slices_a, "A's slice {slice}"),
                _ => {
                    assert!(
                        (slices_a..slices_a + slices_b).contains(&slice),
                        "B's slice {slice}"
                    );
                    if item[3] == 1 && one_of_b.is_none() {
                        one_of_b = Some((slice, view["names"][item[5].to_string()].clone()));
                    }
                }
            }
        }
    }
    assert_eq!(counted, [slices_a, slices_b]);
    // B's slice answers as B's own viewer answers for it.
    let (slice, name) = one_of_b.expect("a slice of B drawn alone");
    let here = http_json(&pair.url, &format!("api/slice?id={slice}"));
    let there = http_json(&alone[1].url, &format!("api/slice?id={}", slice - slices_a));
    assert_eq!(here["name"], name);
    assert_eq!(here["name"], there["name"]);
    assert_eq!(here["dur"], there["dur"]);
    assert_eq!(here["args"], there["args"]);
    // The first steps of the two runs start together.
    let steps = http_json(&pair.url, "api/steps");
    let first = |side: &str| {
        steps["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["process"].as_str().unwrap().starts_with(side))
            .map(|s| s["start"].as_i64().unwrap())
            .min()
            .unwrap_or_else(|| panic!("no steps of {side}"))
    };
    assert_eq!(first("A · "), first("B · "));
    // A search counts the matches of both.
    let matches = |url: &str| {
        http_json(url, "api/search?q=nccl&after=-1")["matches"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        matches(&pair.url),
        matches(&alone[0].url) + matches(&alone[1].url)
    );
    // The panels open with what changed.
    let panels = http_text(&pair.url, "api/panels");
    let diff_at = panels
        .find("Before and after (A → B)")
        .expect("the diff's panel");
    assert!(diff_at < panels.find("What the trace holds").unwrap());
    assert!(panels.contains("launch latency (median per step)"));
}

/// A FIFO named `name` in `dir`: a trace written into it arrives when the test says.
fn fifo_at(dir: &Path, name: &str) -> std::path::PathBuf {
    let fifo = dir.join(name);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    fifo
}

/// A Chrome trace of `n` complete events, one per line, on `threads` threads, named
/// `op0`…`op{names - 1}` in turn.
fn trace_of(n: usize, threads: usize, names: usize) -> String {
    let events: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "{{\"ph\": \"X\", \"cat\": \"cpu_op\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"dur\": 5, \"name\": \"op{}\"}}",
                i % threads,
                10 * i,
                i % names
            )
        })
        .collect();
    format!("{{\"traceEvents\": [\n{}\n]}}\n", events.join(",\n"))
}

/// The viewer's `meta` once `ready` holds of it (waiting up to [`PATIENCE`]).
fn meta_once(url: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let meta = http_json(url, "api/meta")["meta"].clone();
        if ready(&meta) {
            return meta;
        }
        assert!(std::time::Instant::now() < deadline, "waited for: {meta}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A trace is drawn while it loads: the viewer serves at once, the page shows the events
/// read so far and that it is loading, and the whole trace replaces the draft when the
/// load ends. The trace comes through a FIFO, so the test decides when the rest arrives
/// (before: nothing was served until the whole trace was read).
#[test]
fn a_trace_is_drawn_while_it_loads() {
    use std::io::Write;
    let scratch = scratch_dir("view-while-loading");
    let fifo = fifo_at(&scratch, "growing.json");
    let n = 30_000;
    let doc = trace_of(n, 2, 7);
    // More than a few of the loader's pieces (256 KiB), cut inside an event.
    let first_part = doc.len() / 2 + 7;

    let viewer = common::viewer::launch_viewer(&[fifo.to_str().unwrap()]);
    // Served before a byte of the trace is read.
    let meta = http_json(&viewer.url, "api/meta")["meta"].clone();
    assert!(!meta["loading"].is_null(), "{meta}");
    assert_eq!(meta["events"], 0);

    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    writer.write_all(&doc.as_bytes()[..first_part]).unwrap();
    writer.flush().unwrap();
    let draft = meta_once(&viewer.url, |m| m["events"].as_u64() > Some(0));
    assert!(!draft["loading"].is_null(), "{draft}");
    let drafted = draft["events"].as_u64().unwrap();
    assert!(
        drafted < n as u64 / 2 + 1,
        "{drafted} events of the first half"
    );
    // Its views are answered from what is loaded.
    let tracks: Vec<String> = draft["tracks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].to_string())
        .collect();
    let view = http_json(
        &viewer.url,
        &format!(
            "api/view?start=0&end={}&px=1000&tracks={}",
            draft["span"],
            tracks.join(",")
        ),
    );
    assert!(view.to_string().contains("op3"), "{view}");

    // The page says it is loading, and shows the draft.
    let browser = chromium().map(|chromium| {
        let mut b = Browser::start(chromium, scratch.join("profile"), 1200, 700);
        b.navigate(&viewer.url);
        b.wait_for(
            &format!(
                "!!{STATE} && {STATE}.meta && {STATE}.meta.events > 0 && {STATE}.answered >= 1"
            ),
            PATIENCE,
        );
        let said = b.eval("document.getElementById('status').textContent");
        assert!(said.as_str().unwrap().starts_with("loading: "), "{said}");
        b
    });

    writer.write_all(&doc.as_bytes()[first_part..]).unwrap();
    drop(writer);
    let whole = meta_once(&viewer.url, |m| m["loading"].is_null());
    assert_eq!(whole["events"], n);
    if let Some(mut b) = browser {
        b.wait_for(
            &format!(
                "{STATE}.meta.loading === null && {STATE}.meta.events === {n} && !{STATE}.inFlight"
            ),
            PATIENCE,
        );
        let said = b.eval("document.getElementById('status').textContent");
        assert!(!said.as_str().unwrap().starts_with("loading"), "{said}");
    }
}

/// A trace cut short: what was read before the cut stays on the page, the error said in
/// its status line and on stderr, and the viewer goes on serving (before: it ended with
/// the error, and the page with it).
#[test]
fn a_load_that_fails_part_way_shows_what_it_read() {
    use std::io::Write;
    let scratch = scratch_dir("view-cut-short");
    let fifo = fifo_at(&scratch, "cut.json");
    let n = 20_000;
    let doc = trace_of(n, 1, 5);
    let viewer = common::viewer::launch_viewer(&[fifo.to_str().unwrap()]);
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    writer.write_all(&doc.as_bytes()[..doc.len() / 2]).unwrap();
    drop(writer);
    let meta = meta_once(&viewer.url, |m| m["loading"].is_null());
    let shown = meta["events"].as_u64().unwrap();
    assert!(shown > n as u64 / 3 && shown < n as u64, "{meta}");
    assert!(
        meta["note"]
            .as_str()
            .unwrap()
            .contains("the JSON ends early"),
        "{meta}"
    );
    let view = http_json(
        &viewer.url,
        &format!("api/view?start=0&end={}&px=800&tracks=0", meta["span"]),
    );
    assert!(view.to_string().contains("op3"), "{view}");
    if let Some(chromium) = chromium() {
        let mut b = Browser::start(chromium, scratch.join("profile"), 1200, 700);
        b.navigate(&viewer.url);
        b.wait_for(
            &format!(
                "!!{STATE} && {STATE}.answered >= 1 && \
                 document.getElementById('status').textContent.startsWith('stopped: ')"
            ),
            PATIENCE,
        );
    }
}
