//! The viewer's web server: the page and its assets compiled into the binary, and a
//! small JSON API the page asks for what the screen holds. It listens on 127.0.0.1 at
//! a path holding a random token (the address is the key), so it works offline and
//! through an SSH tunnel. A live view reloads the job from the agent and the page
//! follows it.

mod loading;
mod model;
mod pair;
mod stacks;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use opscope_analysis::gpu::{self, GpuOptions};
use opscope_analysis::op_stats::OpStatsOptions;
use opscope_analysis::report::Reported;
use opscope_analysis::view::{op_view, OpViewOptions};
use opscope_analysis::window::Window;

use crate::load::Inputs;
use model::ViewModel;
use opscope_engine::html;

const INDEX_HTML: &str = include_str!("assets/index.html");
const VIEWER_JS: &str = include_str!("assets/viewer.js");
const VIEWER_CSS: &str = include_str!("assets/viewer.css");

pub struct ServeOptions {
    pub title: String,
    /// Open the address in the browser.
    pub open: bool,
    /// 0: any free port.
    pub port: u16,
    /// A live view reloads its job this often.
    pub reload_every: Duration,
    /// An earlier run shown above the trace, and compared with it.
    pub against: Vec<std::path::PathBuf>,
}

/// What the request threads share.
struct Shared {
    model: RwLock<Arc<ViewModel>>,
    /// With `--against`: the two runs (the model above is the later one).
    pair: Option<pair::Pair>,
    /// Bumped at each reload of a live view; the page follows it.
    generation: AtomicU64,
    live: bool,
    /// Why the last reload failed (the job ended, the agent stopped), for the page.
    note: Mutex<String>,
    token: String,
    /// The `Host` headers a request may carry: the loopback names with our port. A page
    /// from elsewhere that rebinds its own name to 127.0.0.1 sends its own name.
    hosts: [String; 3],
    /// How far the load is, while the page shows drafts of it.
    progress: loading::Progress,
}

impl Shared {
    fn new(
        model: Arc<ViewModel>,
        pair: Option<pair::Pair>,
        live: bool,
        port: u16,
    ) -> Result<Shared> {
        Ok(Shared {
            model: RwLock::new(model),
            pair,
            generation: AtomicU64::new(0),
            live,
            note: Mutex::new(String::new()),
            token: opscope_agent::new_token()?,
            hosts: [
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ],
            progress: loading::Progress::default(),
        })
    }

    fn model(&self) -> Arc<ViewModel> {
        self.model.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Shows `model` from now on (a new generation for the page). A draft of a load is
    /// shown only while the load runs; the whole model ends it. Whether it was shown.
    fn install(&self, model: Arc<ViewModel>, draft: bool) -> bool {
        let mut shown = self.model.write().unwrap_or_else(|e| e.into_inner());
        if draft && !self.progress.loading.load(Ordering::Acquire) {
            return false;
        }
        *shown = model;
        if !draft {
            self.progress.loading.store(false, Ordering::Release);
        }
        self.generation.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn url(&self, port: u16) -> String {
        format!("http://127.0.0.1:{port}/{}/", self.token)
    }
}

/// Loads the inputs, serves them until interrupted. Files are served at once and drawn
/// while they load; a live job and two runs compared are loaded first.
pub fn serve(inputs: Inputs, options: ServeOptions) -> Result<()> {
    if inputs.live.is_none() && options.against.is_empty() {
        return serve_while_loading(inputs, options);
    }
    let started = Instant::now();
    let trace = inputs.load_owned()?;
    let before = match options.against.as_slice() {
        [] => None,
        paths => Some(opscope_engine::load::load(paths, &inputs.options())?),
    };
    let loaded = started.elapsed();
    let model = ViewModel::build(trace, options.title.clone());
    let (model, pair) = match before {
        Some(trace) => {
            let title = options
                .against
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let pair = pair::Pair::new(ViewModel::build(trace, title), model);
            (pair.after.clone(), Some(pair))
        }
        None => (Arc::new(model), None),
    };
    let summarised = started.elapsed() - loaded;
    let (server, port) = listen(options.port)?;
    let live = inputs.live.is_some();
    let shared = Arc::new(Shared::new(model, pair, live, port)?);
    say_loaded(&shared, loaded, summarised);
    // Launch links are not needed for the first picture: computed beside it.
    let first = shared.model();
    std::thread::spawn(move || {
        first.links();
    });
    if let Some(pair) = &shared.pair {
        let before = pair.before.clone();
        std::thread::spawn(move || {
            before.links();
        });
    }
    let url = shared.url(port);
    println!("{url}");
    eprintln!("Ctrl-C stops the viewer.");
    if options.open {
        open_browser(&url);
    }
    if live {
        let shared = shared.clone();
        let title = options.title.clone();
        std::thread::spawn(move || reload(inputs, title, options.reload_every, &shared));
    }
    for worker in answer_requests(server, &shared) {
        let _ = worker.join();
    }
    Ok(())
}

/// Serves at once and loads meanwhile: the page shows drafts of what has been read, and
/// how much remains, until the whole model is built. A load that fails ends the viewer
/// with its error, as before the address was given.
fn serve_while_loading(inputs: Inputs, options: ServeOptions) -> Result<()> {
    let started = Instant::now();
    let (server, port) = listen(options.port)?;
    let empty = ViewModel::build(opscope_model::Trace::new(), options.title.clone());
    let shared = Arc::new(Shared::new(Arc::new(empty), None, false, port)?);
    shared.progress.loading.store(true, Ordering::Release);
    let url = shared.url(port);
    println!("{url}");
    eprintln!("Ctrl-C stops the viewer.");
    if options.open {
        open_browser(&url);
    }
    let workers = answer_requests(server, &shared);
    let drafts = loading::Drafts::start(shared.clone(), options.title.clone());
    let trace = opscope_formats::watch::watching(drafts.clone(), || inputs.load_owned());
    let trace = match trace {
        Ok(trace) => {
            drafts.stop();
            trace
        }
        Err(e) => {
            // What was read before the error stays on the page, with the error; with
            // nothing read, the viewer ends with it as before.
            drafts.stop_and_wait();
            let shown = shared.model();
            let events = shown.trace.slices.len() + shown.trace.instants.len();
            if events == 0 {
                return Err(e);
            }
            eprintln!("opscope: error: {e:#}");
            eprintln!("opscope view: showing the {events} events read before the error");
            *shared.note.lock().unwrap_or_else(|e| e.into_inner()) = format!("{e:#}");
            shared.install(shown, false);
            for worker in workers {
                let _ = worker.join();
            }
            return Ok(());
        }
    };
    let loaded = started.elapsed();
    let model = Arc::new(ViewModel::build(trace, options.title.clone()));
    let summarised = started.elapsed() - loaded;
    shared.install(model.clone(), false);
    say_loaded(&shared, loaded, summarised);
    std::thread::spawn(move || {
        model.links();
    });
    for worker in workers {
        let _ = worker.join();
    }
    Ok(())
}

fn listen(port: u16) -> Result<(tiny_http::Server, u16)> {
    let server = tiny_http::Server::http(("127.0.0.1", port))
        .map_err(|e| anyhow::anyhow!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let port = server.server_addr().to_ip().map_or(port, |a| a.port());
    Ok((server, port))
}

/// Four threads answering the page's requests until the server stops.
fn answer_requests(
    server: tiny_http::Server,
    shared: &Arc<Shared>,
) -> Vec<std::thread::JoinHandle<()>> {
    let server = Arc::new(server);
    (0..4)
        .map(|_| {
            let (server, shared) = (server.clone(), shared.clone());
            std::thread::spawn(move || {
                while let Ok(request) = server.recv() {
                    respond(request, &shared);
                }
            })
        })
        .collect()
}

/// The line a benchmark reads: events, tracks, and where the time went.
fn say_loaded(shared: &Shared, loaded: Duration, summarised: Duration) {
    let model = shared.model();
    let models = shared
        .pair
        .as_ref()
        .map_or(vec![&model], |p| vec![&p.before, &p.after]);
    eprintln!(
        "opscope view: {} events on {} tracks; loaded in {:.2} s, summaries built in {:.2} s",
        models
            .iter()
            .map(|m| m.trace.slices.len() + m.trace.instants.len() + m.trace.counters.len())
            .sum::<usize>(),
        shared
            .pair
            .as_ref()
            .map_or(model.tracks.len(), pair::Pair::track_count),
        loaded.as_secs_f64(),
        summarised.as_secs_f64()
    );
}

/// A live view: reads the job again every `every`; the page sees a new generation.
fn reload(inputs: Inputs, title: String, every: Duration, shared: &Shared) {
    loop {
        std::thread::sleep(every);
        match inputs.load_owned() {
            Ok(trace) => {
                let model = Arc::new(ViewModel::build(trace, title.clone()));
                model.links();
                shared.install(model, false);
                shared
                    .note
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
            }
            Err(e) => {
                *shared.note.lock().unwrap_or_else(|e| e.into_inner()) = format!("{e:#}");
            }
        }
    }
}

fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let opened = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if opened.is_err() {
        eprintln!("(could not start `{opener}`: open the address above in a browser)");
    }
}

/// A response: status, content type, body.
type Answer = (u16, &'static str, Vec<u8>);

fn respond(request: tiny_http::Request, shared: &Shared) {
    let host = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Host"))
        .map(|h| h.value.as_str().to_ascii_lowercase());
    let answer = if !host.is_some_and(|h| shared.hosts.contains(&h)) {
        Ok((
            421,
            "text/plain",
            b"this viewer answers only at 127.0.0.1 or localhost".to_vec(),
        ))
    } else {
        answer(request.url(), shared)
    };
    let answer = answer.unwrap_or_else(|e| {
        (
            400,
            "text/plain; charset=utf-8",
            format!("{e:#}").into_bytes(),
        )
    });
    let (status, kind, body) = answer;
    let mut response = tiny_http::Response::from_data(body).with_status_code(status);
    for (name, value) in [
        ("Content-Type", kind),
        ("Cache-Control", "no-store"),
        // Nothing on the page may come from elsewhere.
        (
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
        ),
    ] {
        if let Ok(header) = tiny_http::Header::from_bytes(name, value) {
            response.add_header(header);
        }
    }
    // The page may have gone; nothing to do about it.
    let _ = request.respond(response);
}

fn answer(url: &str, shared: &Shared) -> Result<Answer> {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let Some(rest) = path
        .strip_prefix('/')
        .and_then(|p| p.strip_prefix(shared.token.as_str()))
    else {
        return Ok((
            403,
            "text/plain",
            b"no such page (the address holds a token)".to_vec(),
        ));
    };
    let params = Params::parse(query);
    let json = |s: String| Ok((200, "application/json", s.into_bytes()));
    let page = |s: String| Ok((200, "text/html; charset=utf-8", s.into_bytes()));
    match rest {
        "" | "/" | "/index.html" => page(INDEX_HTML.to_string()),
        "/viewer.js" => Ok((
            200,
            "text/javascript; charset=utf-8",
            VIEWER_JS.as_bytes().to_vec(),
        )),
        "/viewer.css" => Ok((200, "text/css", VIEWER_CSS.as_bytes().to_vec())),
        "/api/meta" => {
            let note = shared
                .note
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let generation = shared.generation.load(Ordering::Relaxed);
            let meta = match &shared.pair {
                Some(pair) => pair.meta_json(generation, &note),
                None => {
                    shared
                        .model()
                        .meta_json(shared.live, generation, &note, shared.progress.get())
                }
            };
            json(format!(
                "{{\"kinds\":{},\"meta\":{meta}}}",
                model::kinds_json()
            ))
        }
        "/api/view" => {
            let model = shared.model();
            let start = params.time("start")?;
            let end = params.time("end")?;
            let px = params.pixels("px")?;
            // `tracks=3,4:48`: the tracks on screen, each with the rows shown of it
            // when more than `rows` (the rows a folded track shows).
            let folded: usize = params.int("rows").map_or(usize::MAX, |r| r.max(1) as usize);
            let tracks: Vec<(usize, usize)> = params
                .get("tracks")
                .unwrap_or("")
                .split(',')
                .filter_map(|t| {
                    let (id, rows) = t.split_once(':').unwrap_or((t, ""));
                    Some((id.parse().ok()?, rows.parse().unwrap_or(folded)))
                })
                .filter(|&(t, _)| {
                    t < shared
                        .pair
                        .as_ref()
                        .map_or(model.tracks.len(), pair::Pair::track_count)
                })
                .collect();
            let begun = Instant::now();
            let end = end.max(start + 1);
            let mut body = match &shared.pair {
                Some(pair) => pair.view_parts(start, end, px, &tracks).json(),
                None => model.view_json(start, end, px, &tracks),
            };
            // The server's own time, for the page's status line and the benchmark.
            body.pop();
            body.push_str(&format!(
                ",\"server_ms\":{:.3}}}",
                begun.elapsed().as_secs_f64() * 1e3
            ));
            json(body)
        }
        "/api/slice" => {
            let id: usize = params.int("id")?.try_into().context("id")?;
            let found = match &shared.pair {
                Some(pair) => pair.slice_json(id),
                None => shared.model().slice_json(id),
            };
            match found {
                Some(body) => json(body),
                None => Ok((404, "text/plain", b"no such slice".to_vec())),
            }
        }
        "/api/steps" => json(match &shared.pair {
            Some(pair) => pair.steps_json(),
            None => shared.model().steps_json().to_string(),
        }),
        "/api/critical-path" => json(shared.model().critical_path_json(
            params.get("annotation").unwrap_or("ProfilerStep"),
            params.int("instance").unwrap_or(0).max(0) as usize,
        )),
        "/api/search" => {
            let (query, after) = (
                params.get("q").unwrap_or(""),
                params.int("after").unwrap_or(-1),
            );
            json(match &shared.pair {
                Some(pair) => pair.search_json(query, after),
                None => shared.model().search_json(query, after),
            })
        }
        "/api/panels" => {
            let model = shared.model();
            let body = model.panels.get_or_init(|| {
                let cx = model.context();
                match opscope_engine::page::sections(&cx, 20) {
                    Ok(sections) => sections
                        .into_iter()
                        .map(|(title, content)| {
                            format!(
                                "<section><h2>{}</h2>\n{content}</section>",
                                html::escape(title)
                            )
                        })
                        .collect(),
                    Err(e) => format!("<p>{}</p>", html::escape(&format!("{e:#}"))),
                }
            });
            match &shared.pair {
                Some(pair) => page(format!("{}{body}", pair_panel(pair))),
                None => page(body.clone()),
            }
        }
        "/api/reports" => json(reports_json()),
        "/api/report" => {
            // Any report command of the engine's table, its options as query
            // parameters (`?name=gpu&kernel_wait_us=10`), as the CLI's JSON.
            let name = params.get("name").context("`name` is missing")?;
            let command = opscope_engine::find(name)
                .with_context(|| format!("no report command `{name}`"))?;
            let keywords = params
                .0
                .iter()
                .filter(|(k, _)| k != "name")
                .map(|(k, v)| {
                    // `10` and `true` are a number and a flag; anything else, text.
                    let value = serde_json::from_str(v)
                        .unwrap_or_else(|_| serde_json::Value::String(v.clone()));
                    (k.clone(), value)
                })
                .collect();
            let model = shared.model();
            let result = command.run_keywords(&model.context(), &keywords)?;
            let mut body = Vec::new();
            result.write_json(&mut body)?;
            Ok((200, "application/json", body))
        }
        "/api/window" => {
            let (start, end) = (params.time("start")?, params.time("end")?);
            match &shared.pair {
                Some(pair) => page(format!(
                    "<h2>A: {}</h2>\n{}<h2>B: {}</h2>\n{}",
                    html::escape(&pair.before.title),
                    window(&pair.before, start, end),
                    html::escape(&pair.after.title),
                    window(&pair.after, start, end)
                )),
                None => page(window(&shared.model(), start, end)),
            }
        }
        _ => Ok((404, "text/plain", b"no such page".to_vec())),
    }
}

/// The panels' first section with two runs: what `opscope diff` says of them.
fn pair_panel(pair: &pair::Pair) -> &str {
    pair.diff.get_or_init(|| {
        let diff = crate::commands::diff::matched_default(
            &pair.before.trace,
            &pair.after.trace,
            [pair.before.title.clone(), pair.after.title.clone()],
        );
        let content = match diff {
            Ok(diff) => opscope_engine::diff_page::matched_body(&diff, 3),
            Err(e) => format!("<p>{}</p>", html::escape(&format!("{e:#}"))),
        };
        format!("<section><h2>Before and after (A → B)</h2>\n{content}</section>")
    })
}

/// `stats op` and `gpu` of the span `[start, end]` (ns after the model's origin).
fn window(model: &ViewModel, start: i64, end: i64) -> String {
    let start = model.origin + start;
    let end = model.origin + end;
    let window = Window::Span(start, end.max(start + 1));
    let cx = model.context();
    let ops = op_view(
        &cx,
        &OpViewOptions {
            stats: OpStatsOptions {
                window,
                ..OpStatsOptions::default()
            },
            columns: opscope_engine::reports::ops::TOP_OP_COLUMNS.to_vec(),
            limit: 30,
            ..OpViewOptions::default()
        },
    );
    let gpu = gpu::analyze(
        &cx,
        &GpuOptions {
            window,
            ..GpuOptions::default()
        },
    );
    format!(
        "<h2>stats op</h2>\n{}<h2>gpu</h2>\n{}",
        html::report(&ops.report()),
        html::report(&gpu.report())
    )
}

/// The report commands `/api/report` runs: name, description, options.
fn reports_json() -> String {
    let list: Vec<serde_json::Value> = opscope_engine::REPORTS
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name(),
                "about": r.about(),
                "options": r.keywords(),
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// A request's query parameters, decoded.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str) -> Params {
        Params(
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn int(&self, key: &str) -> Result<i64> {
        let v = self
            .get(key)
            .with_context(|| format!("`{key}` is missing"))?;
        // The page computes times in floating point.
        v.parse::<i64>()
            .or_else(|_| v.parse::<f64>().map(|f| f as i64))
            .with_context(|| format!("`{key}` is not a number: {v}"))
    }

    /// A time from the trace's origin, in nanoseconds, brought within 73 years
    /// either side, so that adding the origin or taking differences cannot overflow.
    fn time(&self, key: &str) -> Result<i64> {
        const FAR: i64 = 1 << 61;
        Ok(self.int(key)?.clamp(-FAR, FAR))
    }

    /// The width the page draws in: a finite number, at most a very wide screen's, so
    /// that a request cannot ask for every slice at full resolution.
    fn pixels(&self, key: &str) -> Result<f64> {
        const WIDEST: f64 = 16_384.0;
        let v = self
            .get(key)
            .with_context(|| format!("`{key}` is missing"))?;
        let px: f64 = v
            .parse()
            .with_context(|| format!("`{key}` is not a number: {v}"))?;
        anyhow::ensure!(!px.is_nan(), "`{key}` is not a number: {v}");
        Ok(px.clamp(1.0, WIDEST))
    }
}

/// `%XX` and `+` as a form or `encodeURIComponent` writes them.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_as_the_page_encodes_them() {
        let p = Params::parse("q=aten%3A%3Amm+x&start=12.7&tracks=1,2&bad=%zz&end=%4&u=%C3%A9%");
        assert_eq!(p.get("q"), Some("aten::mm x"));
        assert_eq!(p.int("start").unwrap(), 12);
        assert_eq!(p.get("tracks"), Some("1,2"));
        assert_eq!(p.get("bad"), Some("%zz"));
        assert_eq!(p.get("end"), Some("%4"));
        assert_eq!(p.get("u"), Some("é%"));
        assert!(p.int("missing").is_err());
    }
}
