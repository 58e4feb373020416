"""`opscope view` on a trace far past what browser viewers take: a Kineto trace made by
replicating a shared trace's events (kineto/hta/ns_resolution_trace, each copy after
the last, its correlation and flow ids renumbered) up to --size-gb of JSON.

Measured, in one run:
  * opscope's own load of the trace, and the summaries it builds for drawing;
  * the first picture: from the load's end to the first view answered (the page's
    first request: every track, the whole span, 2,000 pixels), summaries included; and
    from the start of `opscope view` to that answer when the model is cached;
  * the picture while loading, on the 1 and 2 GB traces (--loading-sizes), cold (no
    model cache): from the start of `opscope view` to each draft's view answered (the
    viewer serves at once and draws what it has read), the events the last draft
    within 1 s holds, and the whole picture; beside it, `opscope info --no-cache` (the
    load alone, no drafts) in the same run;
  * zoom and pan: the server's answer to 2,000-pixel-wide views of every track at every
    zoom level, from the whole trace down to 2 µs (x4 each level), at 24 places each
    plus 10 pans of 15 %: the time of each request as the client sees it, and the
    server's own;
  * the browser: headless Chromium driven through the DevTools protocol (websocket-client)
    loads the page and is zoomed and panned with W/A/S/D; its tab's resident memory
    (the renderer process) and JavaScript heap at their peak;
  * the peers: Perfetto's trace processor through the pinned `perfetto` Python package
    (it downloads its shell binary at run time: said so when that cannot happen here),
    and the anchors the issue states: chrome://tracing stops near 256 MB of JSON, the
    Perfetto UI near 2 GB, trace_processor_shell loaded 1.3 GB in 98 s (13.3 MB/s).

    python3 bench/view.py [--size-gb 2] [--opscope target/release/opscope]

(It runs itself again in bench/setup-venv.sh's venv, which has websocket-client and
perfetto at pinned versions.)

The replicated trace is kept in ~/.cache/opscope-bench (made once, about 40 s per GB).
"""

import argparse
import decimal
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parent.parent
SOURCE = "traces/kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
PIXELS = 2000


def two_gb_trace(shared: Path) -> Path:
    """The 2 GB synthetic Kineto trace the other benchmarks share."""
    return synthetic_trace(shared, 2.0)


def synthetic_trace(shared: Path, size_gb: float) -> Path:
    """A synthetic Kineto trace of SIZE_GB (see make_trace), made once into the
    benchmarks' cache (OPSCOPE_BENCH_CACHE, else ~/.cache/opscope-bench)."""
    cache = Path(os.environ.get("OPSCOPE_BENCH_CACHE", Path.home() / ".cache/opscope-bench"))
    big = cache / f"view-{size_gb:g}g.json"
    if not big.exists():
        print(f"making {big}…", file=sys.stderr)
        cache.mkdir(parents=True, exist_ok=True)
        make_trace(shared, size_gb, big)
    return big


def make_trace(shared: Path, size_gb: float, out: Path) -> dict:
    """Writes copies of the source trace's events one after another until the file
    holds size_gb of JSON; returns what it wrote."""
    # Timestamps are read exactly: the trace's are ns in µs with three decimals, past
    # what a double holds at 1.7e15 µs.
    with gzip.open(shared / SOURCE, "rt") as f:
        trace = json.load(f, parse_float=decimal.Decimal)
    events = trace["traceEvents"]
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, decimal.Decimal))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + e.get("dur", 0) for e in timed)
    period = ((end - start) * decimal.Decimal("1.02")).quantize(decimal.Decimal("0.001"))
    ID_STEP = 10**9
    # Each event as a template: its text with holes for ts and its ids.
    templates = []
    hole = re.compile(r'"\\u0000(\d+)\\u0000"')
    for e in timed:
        e = dict(e)
        holes = [("ts", e["ts"])]
        e["ts"] = "\0" + "0\0"
        args = e.get("args")
        if isinstance(args, dict):
            args = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    holes.append(("id", args[key]))
                    args[key] = f"\0{len(holes) - 1}\0"
            e["args"] = args
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            holes.append(("id", e["id"]))
            e["id"] = f"\0{len(holes) - 1}\0"
        # The text split at its holes, each hole's number between two pieces.
        parts = hole.split(json.dumps(plain(e), separators=(",", ":")))
        templates.append((parts, holes))
    head = dict(trace)
    head.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    target = int(size_gb * 2**30)
    written, copies, count = 0, 0, 0
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as f:
        text = json.dumps(plain(head), separators=(",", ":"))[:-1] + ',"traceEvents":['
        text += ",".join(json.dumps(plain(e), separators=(",", ":")) for e in meta)
        f.write(text)
        written += len(text)
        count += len(meta)
        while written < target:
            shift, id_shift = copies * period, copies * ID_STEP
            chunk = []
            for parts, holes in templates:
                values = [str(v + shift) if kind == "ts" else str(v + id_shift) for kind, v in holes]
                text = parts[0]
                for k in range(1, len(parts), 2):
                    text += values[int(parts[k])] + parts[k + 1]
                chunk.append(text)
            text = "," + ",".join(chunk)
            f.write(text)
            written += len(text)
            count += len(chunk)
            copies += 1
        f.write("]}")
    tmp.rename(out)
    info = {"bytes": out.stat().st_size, "events": count, "copies": copies}
    out.with_suffix(".info").write_text(json.dumps(info))
    return info


def plain(value):
    """`value` with its decimals as floats, for json.dumps."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def get(url: str) -> tuple[float, bytes]:
    begun = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return (time.perf_counter() - begun) * 1e3, body


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def status_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of /proc/PID/status (VmRSS now, VmHWM the peak), in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def renderer_pids(profile: str) -> list[int]:
    """Chromium's renderer processes of the profile (the tab)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            # Chromium rewrites its children's titles: one string, spaces between.
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"--type=renderer" in cmd and f"--user-data-dir={profile} ".encode() in cmd:
            pids.append(int(proc.name))
    return pids


class DevTools:
    """The few DevTools calls the browser part needs, over websocket-client."""

    def __init__(self, port: int):
        import websocket  # websocket-client, pinned in bench/requirements.txt

        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                    targets = json.load(r)
                page = next(t for t in targets if t["type"] == "page")
                break
            except Exception:
                time.sleep(0.1)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120, suppress_origin=True)
        self.next = 1

    def call(self, method: str, **params):
        mid = self.next
        self.next += 1
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == mid:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return r["result"].get("value")

    def key(self, key: str):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=f"Key{key.upper()}",
                      text=key if kind == "keyDown" else "", windowsVirtualKeyCode=ord(key.upper()))

    def settle(self, limit: float = 60.0):
        """Waits until the page has no request in flight and nothing waiting."""
        begun = time.perf_counter()
        time.sleep(0.05)
        while time.perf_counter() - begun < limit:
            if self.eval("(() => { const s = window.opscopeViewer; return !!s && s.answered > 0 && !s.inFlight && !s.again; })()"):
                return
            time.sleep(0.02)
        raise TimeoutError("the page did not settle")


def bench_browser(url: str, chromium: str) -> dict:
    profile = tempfile.mkdtemp(prefix="opscope-bench-chromium-")
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
         f"--user-data-dir={profile}", "--window-size=1600,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = None
        for line in proc.stderr:
            if "DevTools listening on ws://127.0.0.1:" in line:
                port = int(line.split("127.0.0.1:")[1].split("/")[0])
                break
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        dt = DevTools(port)
        dt.call("Page.enable")
        begun = time.perf_counter()
        dt.call("Page.navigate", url=url)
        while not dt.eval("!!window.opscopeViewer && window.opscopeViewer.answered >= 1"):
            time.sleep(0.01)
        first_picture_ms = (time.perf_counter() - begun) * 1e3
        peak_rss, peak_all, peak_heap, interactions = 0.0, 0.0, 0.0, 0
        dt.call("Input.dispatchMouseEvent", type="mouseMoved", x=900, y=300)
        script = ["w"] * 14 + ["a", "d", "d", "a"] * 3 + ["w"] * 10 + ["d"] * 6 + ["s"] * 30 + ["0"]
        for key in script:
            if key == "0":
                dt.call("Input.dispatchKeyEvent", type="keyDown", key="0", code="Digit0", text="0", windowsVirtualKeyCode=48)
                dt.call("Input.dispatchKeyEvent", type="keyUp", key="0", code="Digit0", windowsVirtualKeyCode=48)
            else:
                dt.key(key)
            dt.settle()
            interactions += 1
            renderers = [status_mib(pid) for pid in renderer_pids(profile)]
            peak_rss = max(peak_rss, max(renderers, default=0.0))
            peak_all = max(peak_all, sum(renderers))
            peak_heap = max(peak_heap, dt.call("Runtime.getHeapUsage")["usedSize"] / 2**20)
        hwm = max((status_mib(pid, "VmHWM") for pid in renderer_pids(profile)), default=0.0)
        state = dt.eval("(() => { const s = window.opscopeViewer; return {answered: s.answered, errors: s.errors, span: s.end - s.start}; })()")
        return {"first_picture_in_browser_ms": round(first_picture_ms, 1), "interactions": interactions,
                "requests_answered": state["answered"], "errors": state["errors"],
                "tab_rss_peak_mib": round(max(peak_rss, hwm), 1),
                "all_renderers_rss_peak_mib": round(peak_all, 1), "js_heap_peak_mib": round(peak_heap, 1)}
    finally:
        # Chromium's renderers and GPU process go with it (a session of its own).
        os.killpg(proc.pid, 9)
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def bench_perfetto(trace: Path, python: str) -> dict:
    """Perfetto's trace processor through its Python API, on the same file."""
    code = (
        "import sys, time\n"
        "from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig\n"
        "t = time.perf_counter()\n"
        "tp = TraceProcessor(trace=sys.argv[1], config=TraceProcessorConfig(load_timeout=600))\n"
        "n = next(iter(tp.query('select count(*) as n from slice'))).n\n"
        "print(time.perf_counter() - t, n)\n"
    )
    try:
        out = subprocess.run([python, "-c", code, str(trace)], capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return {"ran": False, "why": "did not finish in 30 min"}
    if out.returncode != 0:
        last = [l for l in out.stderr.strip().splitlines() if l.strip()]
        return {"ran": False, "why": last[-1] if last else f"exit {out.returncode}"}
    seconds, slices = out.stdout.split()
    return {"ran": True, "load_s": float(seconds), "slices": int(slices)}


def bench_python() -> str:
    """The bench venv's Python (bench/setup-venv.sh makes it once)."""
    out = subprocess.run([REPO / "bench/setup-venv.sh"], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def main():
    # The browser part speaks DevTools through websocket-client, from the bench venv.
    try:
        import websocket  # noqa: F401
    except ImportError:
        python = bench_python()
        os.execv(python, [python, *sys.argv])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--opscope", type=Path, default=REPO / "target/release/opscope")
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("OPSCOPE_SHARED") or REPO.parent / "shared"))
    parser.add_argument("--python", default=None,
                        help="the Python with `perfetto` (default: bench/setup-venv.sh's)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    parser.add_argument("--places", type=int, default=24, help="views per zoom level")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--no-perfetto", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--loading-sizes", default="1,2",
                        help="GB of the traces the picture while loading is measured on ('' for none)")
    args = parser.parse_args()
    run = runinfo.start(size_gb=args.size_gb)

    cache = Path(os.environ.get("OPSCOPE_BENCH_CACHE", Path.home() / ".cache/opscope-bench"))
    cache.mkdir(parents=True, exist_ok=True)
    trace = cache / f"view-{args.size_gb:g}g.json"
    if trace.exists() and trace.with_suffix(".info").exists():
        made = json.loads(trace.with_suffix(".info").read_text())
    else:
        print(f"making {trace} ({args.size_gb:g} GB)…", file=sys.stderr)
        begun = time.perf_counter()
        made = make_trace(args.shared, args.size_gb, trace)
        print(f"  {made['events']:,} events in {time.perf_counter() - begun:.0f} s", file=sys.stderr)
    results = {"trace": str(trace), "bytes": made["bytes"], "events": made["events"], "copies": made["copies"]}

    # opscope's load, the summaries, and the first picture.
    begun = time.perf_counter()
    viewer = subprocess.Popen([args.opscope, "view", "--no-open", "--no-cache", "-q", str(trace)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = viewer.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"opscope view failed: {viewer.stderr.read()}")
        # The address comes at once (drafts are drawn while loading); this line once the
        # whole model is shown.
        said = ""
        while "loaded in " not in said:
            said = viewer.stderr.readline()
            if not said:
                raise SystemExit("opscope view ended before saying it had loaded")
        ready = time.perf_counter()
        loaded_s = float(said.split("loaded in ")[1].split(" s")[0])
        summaries_s = float(said.split("summaries built in ")[1].split(" s")[0])
        ms, body = get(url + "api/meta")
        meta = json.loads(body)["meta"]
        tracks = ",".join(str(t["id"]) for t in meta["tracks"])
        span = meta["span"]
        first_ms, body = get(f"{url}api/view?start=0&end={span}&px={PIXELS}&tracks={tracks}")
        first_picture_s = summaries_s + (time.perf_counter() - ready)
        results.update({
            "load_s": loaded_s, "load_mb_per_s": round(made["bytes"] / 1e6 / loaded_s, 1),
            "summaries_s": summaries_s, "first_view_ms": round(first_ms, 1),
            "first_picture_after_load_s": round(first_picture_s, 3),
            "viewer_ready_wall_s": round(ready - begun, 2), "tracks": len(meta["tracks"]),
        })
        print(f"loaded {made['bytes'] / 2**30:.2f} GiB ({made['events']:,} events) in {loaded_s:.2f} s "
              f"({results['load_mb_per_s']} MB/s); summaries {summaries_s:.2f} s; first view {first_ms:.0f} ms: "
              f"first picture {first_picture_s:.2f} s after the load (target 1 s)", file=sys.stderr)

        # Zoom and pan at every level.
        rng = random.Random(7)
        levels = []
        width, level = span, 0
        while width >= 2000:
            client, server, items = [], [], []
            places = [rng.uniform(0, max(0, span - width)) for _ in range(args.places)]
            for k, start in enumerate(places):
                for pan in ([0.0] + ([0.15 * j for j in range(1, 11)] if k == 0 else [])):
                    s = int(start + pan * width)
                    ms, body = get(f"{url}api/view?start={s}&end={s + int(width)}&px={PIXELS}&tracks={tracks}")
                    answer = json.loads(body)
                    client.append(ms)
                    server.append(answer["server_ms"])
                    items.append(sum(sum(len(r) for r in t.get("rows", [])) + len(t.get("samples", []))
                                     for t in answer["tracks"]))
            levels.append({"level": level, "width_ns": int(width), "requests": len(client),
                           "client_p50_ms": round(statistics.median(client), 2),
                           "client_p99_ms": round(percentile(client, 0.99), 2),
                           "client_max_ms": round(max(client), 2),
                           "server_max_ms": round(max(server), 2),
                           "items_max": max(items)})
            width /= 4
            level += 1
        results["levels"] = levels
        results["zoom_client_max_ms"] = max(l["client_max_ms"] for l in levels)
        results["zoom_server_max_ms"] = max(l["server_max_ms"] for l in levels)
        results["viewer_rss_mib"] = round(status_mib(viewer.pid), 1)
        for l in levels:
            print(f"  level {l['level']:2d} ({l['width_ns'] / 1e6:12.3f} ms wide): {l['requests']} views, "
                  f"client p50 {l['client_p50_ms']} / p99 {l['client_p99_ms']} / max {l['client_max_ms']} ms, "
                  f"server max {l['server_max_ms']} ms, at most {l['items_max']} items", file=sys.stderr)

        if not args.no_browser and args.chromium:
            results["browser"] = bench_browser(url, args.chromium)
            print(f"  browser: {results['browser']}", file=sys.stderr)
    finally:
        viewer.kill()
        viewer.wait()

    # A trace opened before: the model cache maps its model, so the whole wait is the
    # summaries and the first view (issue 39: a first picture within 1 s).
    subprocess.run([args.opscope, "info", "-q", str(trace)], check=True, capture_output=True)
    results["first_picture_cached_s"] = round(first_picture_from_start(args.opscope, trace), 3)
    print(f"  first picture from the start, model cached: {results['first_picture_cached_s']} s",
          file=sys.stderr)

    results["while_loading"] = []
    for size in [float(x) for x in args.loading_sizes.split(",") if x.strip()]:
        big = synthetic_trace(args.shared, size)
        drawn = picture_while_loading(args.opscope, big)
        results["while_loading"].append(drawn)
        print(f"  while loading {size:g} GB: {drawn}", file=sys.stderr)

    if not args.no_perfetto:
        python = args.python or bench_python()
        results["perfetto_trace_processor"] = bench_perfetto(trace, python)
        p = results["perfetto_trace_processor"]
        if p["ran"]:
            p["load_ratio"] = round(p["load_s"] / results["load_s"], 1)
        print(f"  perfetto trace processor: {p}", file=sys.stderr)
    results["anchors"] = {
        "chrome_tracing_limit_bytes": 256 * 2**20,
        "perfetto_ui_limit_bytes": 2 * 2**30,
        "trace_processor_shell_mb_per_s": 13.3,
        "this_trace_over_chrome_tracing": round(made["bytes"] / (256 * 2**20), 1),
        "opscope_load_over_trace_processor_shell_rate": round(results["load_mb_per_s"] / 13.3, 1),
    }
    print_tables(results)
    runinfo.finish(run, results, args.json)


def first_picture_from_start(opscope: Path, trace: Path) -> float:
    """Seconds from starting `opscope view TRACE` to its answer to the page's first view."""
    begun = time.perf_counter()
    viewer = subprocess.Popen([opscope, "view", "--no-open", "-q", str(trace)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = viewer.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"opscope view failed: {viewer.stderr.read()}")
        # Served at once: the picture is the first view of the model, once it is shown.
        while True:
            meta = json.loads(get(url + "api/meta")[1])["meta"]
            if meta.get("loading") is None and meta["events"] > 0:
                break
            time.sleep(0.005)
        tracks = ",".join(str(t["id"]) for t in meta["tracks"])
        get(f"{url}api/view?start=0&end={meta['span']}&px={PIXELS}&tracks={tracks}")
        return time.perf_counter() - begun
    finally:
        viewer.kill()
        viewer.wait()


def picture_while_loading(opscope: Path, trace: Path, rounds: int = 3) -> dict:
    """`opscope view --no-cache TRACE` from its start: each draft's view answered (its
    time and events), and the whole picture; `opscope info --no-cache` beside it, the
    load without drafts. Medians of ROUNDS, alternating."""
    runs, loads = [], []
    for _ in range(rounds):
        begun = time.perf_counter()
        subprocess.run([opscope, "info", "--no-cache", "-q", str(trace)], check=True,
                       capture_output=True)
        loads.append(time.perf_counter() - begun)
        begun = time.perf_counter()
        viewer = subprocess.Popen([opscope, "view", "--no-open", "--no-cache", "-q", str(trace)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        drafts = []
        try:
            url = viewer.stdout.readline().strip()
            if not url.startswith("http"):
                raise SystemExit(f"opscope view failed: {viewer.stderr.read()}")
            seen = None
            while True:
                meta = json.loads(get(url + "api/meta")[1])["meta"]
                if meta["generation"] != seen and meta["events"] > 0:
                    seen = meta["generation"]
                    tracks = ",".join(str(t["id"]) for t in meta["tracks"])
                    get(f"{url}api/view?start=0&end={meta['span']}&px={PIXELS}&tracks={tracks}")
                    drafts.append((time.perf_counter() - begun, meta["events"],
                                   meta.get("loading") is None))
                    if drafts[-1][2]:
                        break
                time.sleep(0.01)
        finally:
            viewer.kill()
            viewer.wait()
        runs.append(drafts)
    whole = [r[-1][0] for r in runs]
    events = runs[0][-1][1]
    first = [r[0][0] for r in runs]
    within = [max((d[1] for d in r if d[0] <= 1.0), default=0) for r in runs]
    return {
        "trace": trace.name, "events": events,
        "first_picture_s": round(statistics.median(first), 3),
        "first_picture_events": runs[0][0][1],
        "events_drawn_within_1s_pct": round(100 * statistics.median(within) / events, 1),
        "drafts": statistics.median(len(r) - 1 for r in runs),
        "whole_picture_s": round(statistics.median(whole), 2),
        "info_load_s": round(statistics.median(loads), 2),
        "whole_after_load_s": round(statistics.median(whole) - statistics.median(loads), 2),
    }


def print_tables(results: dict) -> None:
    """The results as the Markdown tables BENCHMARKS.md holds."""
    gib = results["bytes"] / 2**30
    rows = [
        ("trace", f"{gib:.2f} GiB, {results['events']:,} events"),
        ("load (parse, build the model)", f"{results['load_s']:.2f} s ({results['load_mb_per_s']} MB/s)"),
        ("summaries for drawing", f"{results['summaries_s']:.2f} s"),
        ("first view (whole span, all tracks)", f"{results['first_view_ms']:.0f} ms"),
        ("first picture after the load", f"{results['first_picture_after_load_s']:.2f} s (target 1 s)"),
        ("first picture from the start, model cached",
         f"{results['first_picture_cached_s']:.2f} s (target 1 s)"),
    ]
    for w in results.get("while_loading", []):
        rows += [
            (f"{w['trace']}, cold: first picture from the start",
             f"{w['first_picture_s'] * 1e3:.0f} ms ({w['first_picture_events']:,} events; target 1 s)"),
            (f"{w['trace']}, cold: events drawn within 1 s",
             f"{w['events_drawn_within_1s_pct']} % of {w['events']:,} ({w['drafts']:g} drafts in all)"),
            (f"{w['trace']}, cold: whole picture from the start",
             f"{w['whole_picture_s']:.2f} s: the load alone (`info --no-cache`) {w['info_load_s']:.2f} s "
             f"+ {w['whole_after_load_s']:.2f} s (target 0.5 s)"),
        ]
    rows += [
        ("zoom/pan, slowest answer (client / server)",
         f"{results['zoom_client_max_ms']:.0f} ms / {results['zoom_server_max_ms']:.0f} ms"),
        ("viewer RSS after zooming", f"{results['viewer_rss_mib']:.0f} MiB"),
    ]
    browser = results.get("browser")
    if isinstance(browser, dict):
        rows += [(f"browser: {k.replace('_', ' ')}", str(v)) for k, v in browser.items()]
    p = results.get("perfetto_trace_processor")
    if p and p.get("ran"):
        rows.append(("Perfetto trace processor (Python) load",
                     f"{p['load_s']:.1f} s: {p['load_ratio']}× opscope's"))
    elif p:
        why = str(p.get("why", p))
        if "curl" in why and "trace_processor_shell" in why:
            # The perfetto module fetches its trace_processor_shell on first use.
            why = "could not download its trace_processor_shell (no network to Google's storage)"
        rows.append(("Perfetto trace processor (Python)", f"did not run: {why}"))
    print("\n| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    print("\n| zoom level | width | views | client p50 / p99 / max | server max | items (max) |")
    print("|---|---|---|---|---|---|")
    for l in results.get("levels", []):
        print(f"| {l['level']} | {l['width_ns'] / 1e6:,.3f} ms | {l['requests']} | "
              f"{l['client_p50_ms']} / {l['client_p99_ms']} / {l['client_max_ms']} ms | "
              f"{l['server_max_ms']} ms | {l['items_max']:,} |")


if __name__ == "__main__":
    main()
