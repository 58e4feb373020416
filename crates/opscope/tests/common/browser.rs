//! Headless Chromium driven through the DevTools protocol: real mouse, key and wheel
//! input, script evaluation in the page, and screenshots, for the tests of what opscope
//! shows in a browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The Chromium binary, or `None` off CI (saying so); on CI a missing one fails.
pub fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI installs chromium");
        opscope_corpus::skip("the browser: no chromium");
    }
    found
}

/// Where tests keep screenshots for CI to show (`target/tmp/artifacts`).
pub fn artifacts_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub struct Browser {
    child: Child,
    _profile: PathBuf,
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Drop for Browser {
    /// Chromium's own children (renderers, the GPU process) go with it: it runs in a
    /// process group of its own.
    fn drop(&mut self) {
        if let Some(group) = i32::try_from(self.child.id()).ok().filter(|&g| g > 1) {
            // SAFETY: kill(2) with the negated id of a process group this test made.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts headless Chromium with a window of `width`×`height` and attaches to its
    /// one page.
    pub fn start(chromium: &str, profile: PathBuf, width: u32, height: u32) -> Browser {
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let mut child = Command::new(chromium)
            // Its own temporary files go with the profile, not into /tmp for good.
            .env("TMPDIR", &profile)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--enable-precise-memory-info",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("chromium starts");
        // It says where its DevTools listen on stderr.
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut port = None;
        let mut line = String::new();
        while port.is_none() && stderr.read_line(&mut line).unwrap_or(0) > 0 {
            if let Some(rest) = line
                .trim()
                .strip_prefix("DevTools listening on ws://127.0.0.1:")
            {
                port = rest.split('/').next().and_then(|p| p.parse::<u16>().ok());
            }
            line.clear();
        }
        let port = port.expect("chromium printed its DevTools address");
        // Keep reading stderr so that chromium never blocks on it.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = stderr.read_to_end(&mut sink);
        });
        let targets = http_get(port, "/json/list");
        let targets: Value = serde_json::from_str(&targets).expect("the target list is JSON");
        let page = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target");
        let url = page["webSocketDebuggerUrl"].as_str().unwrap().to_string();
        let (ws, _) = tungstenite::connect(url.as_str()).expect("the DevTools socket opens");
        let mut browser = Browser {
            child,
            _profile: profile,
            ws,
            next_id: 1,
        };
        browser.call("Page.enable", json!({}));
        browser
    }

    /// Sends one command and returns its result (events in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws
            .send(tungstenite::Message::text(message))
            .expect("DevTools takes the command");
        loop {
            let message = self.ws.read().expect("DevTools answers");
            let tungstenite::Message::Text(text) = message else {
                continue;
            };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method} failed: {v}");
                return v["result"].clone();
            }
        }
    }

    pub fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url }));
    }

    /// Evaluates `expression` in the page (awaiting a promise) and returns its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{expression} threw: {r}"
        );
        r["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page, for at most `limit`.
    pub fn wait_for(&mut self, expression: &str, limit: Duration) {
        let begun = Instant::now();
        while begun.elapsed() < limit {
            if self.eval(expression) == Value::Bool(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("waited {limit:?} for {expression}");
    }

    pub fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y, 0);
        self.mouse("mousePressed", x, y, 1);
        self.mouse("mouseReleased", x, y, 1);
    }

    /// Presses at `from`, moves and releases at `to`.
    pub fn drag(&mut self, from: (f64, f64), to: (f64, f64)) {
        self.mouse("mouseMoved", from.0, from.1, 0);
        self.mouse("mousePressed", from.0, from.1, 1);
        for k in 1..=5 {
            let f = k as f64 / 5.0;
            let (x, y) = (from.0 + (to.0 - from.0) * f, from.1 + (to.1 - from.1) * f);
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": "mouseMoved", "x": x, "y": y, "button": "left", "buttons": 1}),
            );
        }
        self.mouse("mouseReleased", to.0, to.1, 1);
    }

    fn mouse(&mut self, kind: &str, x: f64, y: f64, clicks: u32) {
        let button = if kind == "mouseMoved" { "none" } else { "left" };
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": kind, "x": x, "y": y, "button": button, "clickCount": clicks}),
        );
    }

    /// The wheel at (x, y), with Ctrl held when `ctrl`.
    pub fn wheel(&mut self, x: f64, y: f64, delta_y: f64, ctrl: bool) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": "mouseWheel", "x": x, "y": y, "deltaX": 0, "deltaY": delta_y,
                   "modifiers": if ctrl { 2 } else { 0 }}),
        );
    }

    /// Presses and releases a key that types `key` (a letter, `Enter`).
    pub fn key(&mut self, key: &str) {
        let (code, text, vk) = match key {
            "Enter" => ("Enter".to_string(), "\r".to_string(), 13),
            k => (
                format!("Key{}", k.to_uppercase()),
                k.to_string(),
                k.to_uppercase().chars().next().unwrap() as u32,
            ),
        };
        for kind in ["keyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": key, "code": code, "text": if kind == "keyDown" { text.as_str() } else { "" },
                       "windowsVirtualKeyCode": vk}),
            );
        }
    }

    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// A PNG of the page as it is drawn now.
    pub fn screenshot(&mut self, to: &Path) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let data = decode_base64(r["data"].as_str().unwrap());
        std::fs::write(to, data).unwrap();
    }

    /// The page's JavaScript heap in use, in bytes.
    pub fn js_heap(&mut self) -> u64 {
        let r = self.call("Runtime.getHeapUsage", json!({}));
        r["usedSize"].as_f64().unwrap_or(0.0) as u64
    }
}

fn http_get(port: u16, path: &str) -> String {
    let begun = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            write!(
                s,
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut body = String::new();
            let _ = s.read_to_string(&mut body);
            if let Some((_, b)) = body.split_once("\r\n\r\n") {
                if b.contains("webSocketDebuggerUrl") {
                    return b.to_string();
                }
            }
        }
        assert!(begun.elapsed() < Duration::from_secs(20), "no page target");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (k, &c) in chunk.iter().enumerate() {
            n |= (value(c) as u32) << (18 - 6 * k);
        }
        for k in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * k)) as u8);
        }
    }
    out
}
