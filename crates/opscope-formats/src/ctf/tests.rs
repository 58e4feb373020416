//! Tests of the CTF reader: hand-made traces for the mapping rules and the decoder's
//! edge cases, and the shared real traces against babeltrace2 / babeltrace 1.5.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::decode::{Layout, Node, StreamReader, Val};

use crate::shared_data::shared;

/// Whether `tool` runs; under CI it must. (babeltrace 1.5 has no `--version`: its help
/// exits 0.)
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but `{tool}` is not installed (.ci/run installs it)"
        );
        opscope_corpus::skip(&format!("`{tool}` is not installed"));
    }
    ok
}

/// Every directory holding a `metadata` file under `root`, sorted.
fn ctf_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        if dir.join("metadata").is_file() {
            out.push(dir);
            continue;
        }
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The metadata and the stream files of a trace directory.
pub(crate) fn read_trace(dir: &Path) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let metadata = std::fs::read(dir.join("metadata")).unwrap();
    let mut streams: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().unwrap() != "metadata")
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    streams.sort();
    (metadata, streams)
}

fn escape(bytes: &[u8], out: &mut String) {
    out.push('"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
}

const EMPTY: &str = "\"<empty>\"";

/// Whether `theirs` is `ours` with each [`EMPTY`] replaced by some quoted string.
fn matches_with_holes(ours: &str, theirs: &str) -> bool {
    let mut rest = theirs;
    for (i, part) in ours.split(EMPTY).enumerate() {
        if i > 0 {
            // Skip one quoted string.
            let Some(body) = rest.strip_prefix('"') else {
                return false;
            };
            let mut end = None;
            let mut escaped = false;
            for (k, c) in body.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => {
                        end = Some(k);
                        break;
                    }
                    _ => {}
                }
            }
            let Some(end) = end else { return false };
            rest = &body[end + 1..];
        }
        let Some(r) = rest.strip_prefix(part) else {
            return false;
        };
        rest = r;
    }
    rest.is_empty()
}

/// One value the way babeltrace2's `sink.text.pretty` prints it.
///
/// An empty string is printed as [`EMPTY`]: babeltrace2 2.0.4 does not clear a pooled
/// string field when an event has an empty string there and prints the text of an
/// earlier event of the same class instead (tracecompass/bug446190, whose bytes hold
/// empty `filename`s, e.g. at byte 125380 of `channel0_3`).
fn pretty(r: &StreamReader, node: &Node, vals: &[Val], pos: usize, out: &mut String) -> usize {
    match (node, vals[pos]) {
        (Node::Int(i), v) => {
            let (u, s) = match v {
                Val::U(u) => (u, u as i64),
                Val::I(s) => (s as u64, s),
                _ => unreachable!(),
            };
            if let Some(labels) = &i.labels {
                let x = if i.op.signed { s as i128 } else { u as i128 };
                let hits: Vec<&str> = labels
                    .entries
                    .iter()
                    .filter(|e| e.1 <= x && x <= e.2)
                    .map(|e| e.0.as_str())
                    .collect();
                out.push_str("( ");
                match hits.as_slice() {
                    [] => out.push_str("<unknown>"),
                    [one] => {
                        let _ = write!(out, "\"{one}\"");
                    }
                    many => {
                        out.push_str("{ ");
                        out.push_str(
                            &many
                                .iter()
                                .map(|m| format!("\"{m}\""))
                                .collect::<Vec<_>>()
                                .join(", "),
                        );
                        out.push_str(" }");
                    }
                }
                let _ = write!(
                    out,
                    " : container = {} )",
                    if i.op.signed { x } else { u as i128 }
                );
                return pos + 1;
            }
            let _ = match i.base {
                16 => write!(out, "0x{u:X}"),
                8 => write!(out, "0{u:o}"),
                2 => write!(out, "0b{u:b}"),
                _ if i.op.signed => write!(out, "{s}"),
                _ => write!(out, "{u}"),
            };
            pos + 1
        }
        (Node::Float { .. }, Val::F(f)) => {
            let _ = write!(out, "{f}");
            pos + 1
        }
        (_, Val::Str { start, len }) => {
            let text = r.text(start, len);
            if text.is_empty() && matches!(node, Node::Str) {
                out.push_str(EMPTY);
            } else {
                escape(text, out);
            }
            pos + 1
        }
        (Node::Struct { names, fields, .. }, Val::Compound(_)) => {
            let mut p = pos + 1;
            if fields.is_empty() {
                out.push_str("{ }");
                return p;
            }
            out.push_str("{ ");
            for (k, (n, f)) in names.iter().zip(fields.iter()).enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{n} = ");
                p = pretty(r, f, vals, p, out);
            }
            out.push_str(" }");
            p
        }
        (Node::Array { elem, .. } | Node::Seq { elem, .. }, Val::Compound(n)) => {
            let mut p = pos + 1;
            if n == 0 {
                out.push_str("[ ]");
                return p;
            }
            out.push_str("[ ");
            for k in 0..n {
                if k > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "[{k}] = ");
                p = pretty(r, elem, vals, p, out);
            }
            out.push_str(" ]");
            p
        }
        (Node::Variant { names, options, .. }, Val::Variant(o)) => {
            let _ = write!(out, "{{ {} = ", names[o as usize]);
            let p = pretty(r, &options[o as usize], vals, pos + 1, out);
            out.push_str(" }");
            p
        }
        (n, v) => panic!("value {v:?} for node {n:?}"),
    }
}

/// Packet context fields babeltrace2 turns into packet properties (not printed).
const HIDDEN: [&str; 6] = [
    "timestamp_begin",
    "timestamp_end",
    "content_size",
    "packet_size",
    "events_discarded",
    "packet_seq_num",
];

/// Our events of a trace as babeltrace2 prints them (`--no-delta --clock-seconds`),
/// and the number of events per stream file.
fn our_lines(dir: &Path) -> (Vec<String>, Vec<u64>) {
    let (metadata, files) = read_trace(dir);
    let layout: Layout = super::layout(&metadata, "metadata").unwrap();
    let streams: Vec<(String, &[u8])> = files.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
    // babeltrace2 names the trace `hostname[:procname][:(vpid)]` from its environment.
    let host = layout.meta.env_str("hostname").map(|h| {
        let mut name = h.to_string();
        if let Some(p) = layout.meta.env_str("procname") {
            let _ = write!(name, ":{p}");
        }
        if let Some((_, super::types::EnvValue::Int(v))) =
            layout.meta.env.iter().find(|e| e.0 == "vpid")
        {
            let _ = write!(name, ":({v})");
        }
        name
    });
    let mut lines = Vec::new();
    let (readers, error) = super::read_merged(&layout, &streams, |_, r| {
        let mut line = String::new();
        let ns = match &layout.clock {
            Some(c) => c.ns_from_origin(r.timestamp),
            None => r.timestamp as i64,
        };
        let _ = write!(
            line,
            "[{}.{:09}] ",
            ns.div_euclid(1_000_000_000),
            ns.rem_euclid(1_000_000_000)
        );
        if let Some(h) = &host {
            let _ = write!(line, "{h} ");
        }
        let el = &layout.events[r.event];
        let sl = &layout.streams[r.stream];
        let _ = write!(line, "{}:", el.name);
        let mut scopes = Vec::new();
        if let (Some(Node::Struct { names, fields, .. }), Some(at)) =
            (&sl.packet_context, r.packet_context_at)
        {
            let mut parts = Vec::new();
            let mut p = at + 1;
            for (n, f) in names.iter().zip(fields.iter()) {
                let mut s = String::new();
                let next = pretty(r, f, &r.packet_vals, p, &mut s);
                if !HIDDEN.contains(&n.as_str()) {
                    parts.push(format!("{n} = {s}"));
                }
                p = next;
            }
            if !parts.is_empty() {
                scopes.push(format!("{{ {} }}", parts.join(", ")));
            }
        }
        for (node, scope) in [
            (sl.event_context.as_ref(), 1),
            (el.context.as_ref(), 2),
            (el.fields.as_ref(), 3),
        ] {
            if let Some(node) = node {
                let mut s = String::new();
                pretty(r, node, &r.vals, r.scopes[scope] as usize, &mut s);
                scopes.push(s);
            }
        }
        if !scopes.is_empty() {
            line.push(' ');
            line.push_str(&scopes.join(", "));
        }
        lines.push(line);
    });
    assert!(error.is_none(), "{}: {error:?}", dir.display());
    (lines, readers.iter().map(|r| r.events).collect())
}

fn bt2_lines(dir: &Path) -> Vec<String> {
    let out = Command::new("babeltrace2")
        .args(["--no-delta", "--clock-seconds"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "babeltrace2 failed on {}",
        dir.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Traces babeltrace2 2.0.4 refuses (its muxer stops on them) and CTF 2 traces.
fn refused_by_babeltrace2(dir: &Path) -> bool {
    let s = dir.display().to_string();
    s.contains("hello-lost") || s.contains("synctraces") || s.contains("CTF2-")
}

/// Each event name's count in babeltrace2's text output of a trace.
fn bt2_counts(dir: &Path) -> HashMap<String, i64> {
    let mut counts = HashMap::new();
    for line in bt2_lines(dir) {
        // `[time] (+delta?) host name: { … }`: the name ends the part before `: {`.
        let Some(head) = line.split(": {").next() else {
            continue;
        };
        if let Some(name) = head.split_whitespace().last() {
            *counts
                .entry(name.trim_end_matches(':').to_string())
                .or_insert(0) += 1;
        }
    }
    counts
}

/// LTTng kernel traces pair only what the kernel tracer pairs, in its version's
/// style, never by a name's suffix: on an LTTng 2.5 trace (`bug446190`), `sys_X` and
/// `exit_syscall` make syscall slices, and `hrtimer_start`, `timer_start` and the like
/// stay instants (before: 980 invented slices closed by whatever enclosed them, 1,378.9
/// s of its 1,385.0 s of slice time, and the syscalls instants); on an LTTng 2.8 trace
/// (`many-threads`), `syscall_entry_exit` (the exit syscall's entry) and
/// `sched_process_exit` are no ends: the only unmatched ends are the syscall exits
/// with no entry (a clone returns twice), as babeltrace2's counts say (before: 24,035).
#[test]
fn kernel_traces_pair_only_what_the_kernel_tracer_pairs() {
    let Some(shared) = shared() else { return };
    if !have("babeltrace2") {
        return;
    }
    let slices_by_name = |trace: &opscope_model::Trace| {
        let mut by: HashMap<String, (i64, i64)> = HashMap::new();
        for i in 0..trace.slices.len() {
            let e = by
                .entry(trace.str(trace.slices.name[i]).to_string())
                .or_default();
            e.0 += 1;
            e.1 += trace.slices.dur[i];
        }
        by
    };
    let load = |dir: &Path| {
        let (metadata, streams) = read_trace(dir);
        let streams: Vec<(String, &[u8])> = streams
            .iter()
            .map(|(p, b)| (p.clone(), b.as_slice()))
            .collect();
        let mut trace = opscope_model::Trace::new();
        crate::ctf::import("t", &metadata, "metadata", &streams, &mut trace).unwrap();
        trace
    };

    let old = shared.join("traces/ctf/tracecompass/bug446190");
    let raw = bt2_counts(&old);
    let trace = load(&old);
    let by = slices_by_name(&trace);
    for invented in [
        "hrtimer",
        "timer",
        "sched_process",
        "softirq_raise",
        "irq_softirq",
    ] {
        assert!(!by.contains_key(invented), "a slice `{invented}`: {by:?}");
    }
    // Every syscall slice is a sys_X event closed by an exit_syscall (or by the trace's
    // end: an unmatched begin).
    let syscalls: i64 = raw
        .keys()
        .filter_map(|name| name.strip_prefix("sys_"))
        .filter_map(|x| by.get(x).map(|s| s.0))
        .sum();
    let exits = raw["exit_syscall"];
    let unended = trace.repairs.unmatched_begins as i64;
    assert!(unended < 50, "{:?}", trace.repairs);
    assert!(
        syscalls <= exits + unended && syscalls * 10 >= exits * 9,
        "{syscalls} syscall slices for {exits} exit_syscall events"
    );
    let softirqs = by.get("softirq").map_or(0, |s| s.0);
    assert_eq!(softirqs, raw["softirq_entry"]);

    let new = shared.join("traces/ctf/tracecompass/many-threads");
    let raw = bt2_counts(&new);
    let trace = load(&new);
    let by = slices_by_name(&trace);
    let mut paired = 0;
    let mut unpaired_exits = 0;
    for (name, &exits) in &raw {
        if let Some(x) = name.strip_prefix("syscall_exit_") {
            let entries = raw.get(&format!("syscall_entry_{x}")).copied().unwrap_or(0);
            paired += entries.min(exits);
            unpaired_exits += (exits - entries).max(0);
        }
    }
    for invented in ["syscall_entry", "sched_process"] {
        assert!(!by.contains_key(invented), "a slice `{invented}`: {by:?}");
    }
    let syscall_slices: i64 = raw
        .keys()
        .filter_map(|n| n.strip_prefix("syscall_entry_"))
        .filter_map(|x| by.get(x).map(|s| s.0))
        .sum();
    // The exit syscall's entry never returns: its slice ends with the thread's last
    // event (its sched_process_exit), not with the trace.
    let unended = trace.repairs.unmatched_begins as i64;
    assert!(
        syscall_slices <= paired + unended && syscall_slices * 100 >= paired * 99,
        "{syscall_slices} syscall slices of {paired} pairs, {unended} never ended"
    );
    let (exits, exit_ns) = by["exit"];
    assert!(
        exit_ns / exits < 1_000_000,
        "exit syscalls of {} ns on average",
        exit_ns / exits
    );
    let ends = trace.repairs.unmatched_ends as i64;
    assert!(
        ends >= unpaired_exits && ends <= unpaired_exits + 100,
        "{ends} unmatched ends; babeltrace2's counts leave {unpaired_exits} exits without an entry"
    );
}

/// Every event of every trace babeltrace2 reads: time, name and every field equal
/// babeltrace2's text output, and the events per stream add up to its count.
#[test]
fn events_equal_babeltrace2_text() {
    let Some(shared) = shared() else { return };
    if !have("babeltrace2") {
        return;
    }
    let dirs: Vec<PathBuf> = ctf_dirs(&shared.join("traces/ctf"))
        .into_iter()
        .filter(|d| !refused_by_babeltrace2(d))
        .collect();
    assert!(dirs.len() >= 20, "{dirs:?}");
    let mut total = 0;
    let mut stale_strings = 0;
    for dir in &dirs {
        let (mut ours, per_stream) = our_lines(dir);
        let mut theirs = bt2_lines(dir);
        assert_eq!(per_stream.iter().sum::<u64>() as usize, ours.len());
        ours.sort();
        theirs.sort();
        let mut counts: std::collections::HashMap<&str, i64> = Default::default();
        for l in &ours {
            *counts.entry(l).or_default() += 1;
        }
        for l in &theirs {
            *counts.entry(l).or_default() -= 1;
        }
        // Our lines with empty strings against babeltrace2's stale texts.
        let mut only_theirs: Vec<&str> = counts.iter().filter(|c| *c.1 < 0).map(|c| *c.0).collect();
        only_theirs.sort();
        let holes: Vec<&str> = counts
            .iter()
            .filter(|c| *c.1 > 0 && c.0.contains(EMPTY))
            .map(|c| *c.0)
            .collect();
        for h in holes {
            while counts[h] > 0 {
                let Some(k) = only_theirs
                    .iter()
                    .position(|t| counts[t] < 0 && matches_with_holes(h, t))
                else {
                    break;
                };
                *counts.get_mut(h).unwrap() -= 1;
                *counts.get_mut(only_theirs[k]).unwrap() += 1;
                stale_strings += 1;
            }
        }
        if counts.values().any(|&n| n != 0) {
            let mut diff: Vec<(i64, &str)> = counts
                .into_iter()
                .filter(|c| c.1 != 0)
                .map(|(l, n)| (n, &l[..l.len().min(400)]))
                .collect();
            diff.sort_by_key(|d| d.1);
            diff.truncate(6);
            panic!(
                "{}: {} events here, {} from babeltrace2; lines only here (+n) or only there (-n):\n{diff:#?}",
                dir.display(),
                ours.len(),
                theirs.len()
            );
        }
        total += ours.len();
    }
    assert!(total >= 800_000, "{total}");
    // Only bug446190 has empty strings babeltrace2 misprints.
    assert!(stale_strings < 100, "{stale_strings}");
}

/// babeltrace 1.5's event lines and the events it says the tracer discarded.
fn babeltrace1(dir: &Path) -> Option<(usize, u64)> {
    let out = Command::new("babeltrace").arg(dir).output().unwrap();
    if !out.status.success() {
        return None;
    }
    let lines = out.stdout.iter().filter(|&&b| b == b'\n').count();
    let discarded = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| {
            let rest = l.split("Tracer discarded ").nth(1)?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Some((lines, discarded))
}

/// The traces babeltrace2 refuses are read with babeltrace 1.5's event count; for every
/// trace babeltrace 1.5 reads, the discarded events we count equal the sum of its
/// "Tracer discarded N events" warnings.
#[test]
fn counts_and_discarded_events_equal_babeltrace1() {
    let Some(shared) = shared() else { return };
    if !have("babeltrace") {
        return;
    }
    let mut refused = 0;
    let mut with_losses = 0;
    for dir in ctf_dirs(&shared.join("traces/ctf")) {
        if dir.display().to_string().contains("CTF2-") {
            continue;
        }
        let Some((lines, discarded)) = babeltrace1(&dir) else {
            continue;
        };
        let (metadata, files) = read_trace(&dir);
        let layout = super::layout(&metadata, "metadata").unwrap();
        let streams: Vec<(String, &[u8])> =
            files.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
        let (readers, error) = super::read_merged(&layout, &streams, |_, _| {});
        assert!(error.is_none(), "{}: {error:?}", dir.display());
        let events: u64 = readers.iter().map(|r| r.events).sum();
        let ours_discarded: u64 = readers.iter().map(|r| r.events_discarded).sum();
        assert_eq!(ours_discarded, discarded, "{}", dir.display());
        if refused_by_babeltrace2(&dir) {
            assert_eq!(events as usize, lines, "{}", dir.display());
            refused += 1;
        }
        with_losses += usize::from(discarded > 0);
    }
    assert_eq!(refused, 3);
    assert!(with_losses >= 2, "{with_losses}");
}

/// CTF 2 traces are refused with an error naming the metadata file.
#[test]
fn ctf2_is_refused_clearly() {
    let Some(shared) = shared() else { return };
    for name in ["CTF2-7.0-smalltrace", "CTF2-7.0-trace-with-index"] {
        let dir = shared.join("traces/ctf/tracecompass").join(name);
        let (metadata, files) = read_trace(&dir);
        let streams: Vec<(String, &[u8])> =
            files.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
        let mut trace = opscope_model::Trace::new();
        let err = super::import(name, &metadata, "x/metadata", &streams, &mut trace).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("x/metadata")
                && text.contains("CTF 2 metadata")
                && text.contains("not supported"),
            "{text}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Hand-made traces

/// Bytes of a stream, written in one byte order.
struct Bytes {
    be: bool,
    out: Vec<u8>,
}

impl Bytes {
    fn new(be: bool) -> Self {
        Bytes {
            be,
            out: Vec::new(),
        }
    }
    fn u(&mut self, v: u64, bytes: usize) -> &mut Self {
        let all = if self.be {
            v.to_be_bytes()[8 - bytes..].to_vec()
        } else {
            v.to_le_bytes()[..bytes].to_vec()
        };
        self.out.extend(all);
        self
    }
    fn s(&mut self, s: &str) -> &mut Self {
        self.out.extend(s.as_bytes());
        self.out.push(0);
        self
    }
}

/// The TSDL of the fixtures: byte-aligned integers, a 64-bit header timestamp unless
/// `ts_bits` says otherwise, `vpid`/`vtid` contexts unless `kernel`.
fn fixture_metadata(be: bool, ts_bits: u32, kernel: bool, events: &str) -> String {
    let order = if be { "be" } else { "le" };
    let context = if kernel {
        String::new()
    } else {
        "event.context := struct { i32 vpid; i32 vtid; };".to_string()
    };
    format!(
        r#"/* CTF 1.8 */
typealias integer {{ size = 8; align = 8; }} := u8;
typealias integer {{ size = 32; align = 8; }} := u32;
typealias integer {{ size = 32; align = 8; signed = true; }} := i32;
typealias integer {{ size = 64; align = 8; }} := u64;
typealias integer {{ size = 64; align = 8; base = 16; }} := x64;
trace {{ major = 1; minor = 8; byte_order = {order};
  packet.header := struct {{ u32 magic; u32 stream_id; }}; }};
env {{ hostname = "fixture"; domain = "{domain}"; }};
clock {{ name = "c"; freq = 1000000000; offset_s = 1600000000; offset = 0; }};
typealias integer {{ size = 64; align = 8; map = clock.c.value; }} := ts64;
typealias integer {{ size = {ts_bits}; align = 8; map = clock.c.value; }} := tsn;
stream {{ id = 0;
  packet.context := struct {{ ts64 timestamp_begin; ts64 timestamp_end; u64 content_size;
    u64 packet_size; u64 events_discarded; u32 cpu_id; }};
  event.header := struct {{ u32 id; tsn timestamp; }};
  {context}
}};
{events}
"#,
        domain = if kernel { "kernel" } else { "ust" }
    )
}

/// One packet: (event id, raw timestamp, context and payload bytes).
fn fixture_packet(
    be: bool,
    ts_bits: u32,
    begin: u64,
    discarded: u64,
    cpu: u32,
    events: &[(u32, u64, Vec<u8>)],
) -> Vec<u8> {
    let mut body = Bytes::new(be);
    for (id, ts, rest) in events {
        body.u(*id as u64, 4).u(*ts, (ts_bits / 8) as usize);
        body.out.extend(rest);
    }
    let header_len = 8 + 5 * 8 + 4;
    let size = ((header_len + body.out.len()) * 8) as u64;
    let mut p = Bytes::new(be);
    p.u(0xC1FC_1FC1, 4).u(0, 4);
    let end = events.last().map_or(begin, |e| e.1);
    p.u(begin, 8)
        .u(end, 8)
        .u(size, 8)
        .u(size, 8)
        .u(discarded, 8)
        .u(cpu as u64, 4);
    p.out.extend(body.out);
    p.out
}

fn ctx(be: bool, vpid: u32, vtid: u32) -> Bytes {
    let mut b = Bytes::new(be);
    b.u(vpid as u64, 4).u(vtid as u64, 4);
    b
}

fn import_fixture(
    metadata: &str,
    streams: &[Vec<u8>],
) -> (
    opscope_model::Trace,
    Result<opscope_model::SourceId, crate::ImportError>,
) {
    let named: Vec<(String, &[u8])> = streams
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("fixture/channel0_{i}"), &s[..]))
        .collect();
    let mut trace = opscope_model::Trace::new();
    let r = super::import(
        "fixture",
        metadata.as_bytes(),
        "fixture/metadata",
        &named,
        &mut trace,
    );
    (trace, r)
}

/// (name, ts relative to the clock offset, dur, kind, depth) of every slice.
fn slices(
    trace: &opscope_model::Trace,
) -> Vec<(String, i64, i64, opscope_model::SliceKind, usize)> {
    let base = 1_600_000_000_000_000_000i64;
    let s = &trace.slices;
    let mut v: Vec<_> = (0..s.len())
        .map(|i| {
            (
                trace.str(s.name[i]).to_string(),
                s.ts[i] - base,
                s.dur[i],
                s.kind(i),
                s.depth(i),
            )
        })
        .collect();
    v.sort_by_key(|x| (x.1, -x.2));
    v
}

fn arg(trace: &opscope_model::Trace, args: opscope_model::ArgsId, key: &str) -> Option<ArgValue> {
    let k = trace.strings.find(key)?;
    trace.args.find(args, k)
}

use opscope_model::args::ArgValue;
use opscope_model::SliceKind;

#[test]
fn entry_exit_pairs_nest_and_other_events_are_instants() {
    let events = r#"
event { name = "myprov:work_entry"; id = 1; stream_id = 0; fields := struct { u32 n; }; };
event { name = "myprov:work_exit"; id = 2; stream_id = 0; fields := struct { i32 ret; }; };
event { name = "myprov:thing"; id = 3; stream_id = 0; fields := struct { u32 a; string s; x64 p; }; };
event { name = "myprov:load_begin"; id = 4; stream_id = 0; };
event { name = "myprov:load_end"; id = 5; stream_id = 0; };
"#;
    let meta = fixture_metadata(false, 64, false, events);
    let c = |n: u64| {
        let mut b = ctx(false, 7, 8);
        b.u(n, 4);
        b.out
    };
    let mut thing = ctx(false, 7, 8);
    thing.u(5, 4).s("hello").u(0xbeef, 8);
    let p = fixture_packet(
        false,
        64,
        100,
        0,
        0,
        &[
            (1, 100, c(1)),
            (1, 110, c(2)),
            (3, 120, thing.out),
            (2, 130, c(0)),
            (2, 150, c(0)),
            (4, 160, ctx(false, 7, 8).out),
            (5, 170, ctx(false, 7, 8).out),
        ],
    );
    let (trace, r) = import_fixture(&meta, &[p]);
    r.unwrap();
    assert_eq!(
        slices(&trace),
        vec![
            ("work".into(), 100, 50, SliceKind::Other, 0),
            ("work".into(), 110, 20, SliceKind::Other, 1),
            ("load".into(), 160, 10, SliceKind::Other, 0),
        ]
    );
    // Entry and exit fields are both on the slice.
    let first = (0..trace.slices.len())
        .find(|&i| trace.slices.dur[i] == 50)
        .unwrap();
    assert_eq!(
        arg(&trace, trace.slices.args[first], "n"),
        Some(ArgValue::Int(1))
    );
    assert_eq!(
        arg(&trace, trace.slices.args[first], "ret"),
        Some(ArgValue::Int(0))
    );
    assert_eq!(trace.str(trace.slices.category[first]), "myprov");
    // The instant keeps every field.
    assert_eq!(trace.instants.len(), 1);
    let a = trace.instants.args[0];
    assert_eq!(trace.str(trace.instants.name[0]), "thing");
    assert_eq!(arg(&trace, a, "a"), Some(ArgValue::Int(5)));
    assert!(matches!(arg(&trace, a, "s"), Some(ArgValue::Str(s)) if trace.str(s) == "hello"));
    assert_eq!(arg(&trace, a, "p"), Some(ArgValue::Int(0xbeef)));
    // One process (vpid 7), one thread (vtid 8).
    assert_eq!(trace.processes.len(), 1);
    assert_eq!(trace.processes[0].pid, 7);
    assert_eq!(trace.threads[0].tid, 8);
    assert_eq!(trace.clocks[0].unix_offset_ns, Some(0));
}

#[test]
fn cyg_profile_functions_are_slices_named_by_address() {
    let events = r#"
event { name = "lttng_ust_cyg_profile:func_entry"; id = 0; stream_id = 0; fields := struct { x64 addr; x64 call_site; }; };
event { name = "lttng_ust_cyg_profile:func_exit"; id = 1; stream_id = 0; fields := struct { x64 addr; x64 call_site; }; };
"#;
    let meta = fixture_metadata(false, 64, false, events);
    let f = |addr: u64| {
        let mut b = ctx(false, 1, 1);
        b.u(addr, 8).u(0x400000, 8);
        b.out
    };
    let p = fixture_packet(
        false,
        64,
        0,
        0,
        0,
        &[
            (0, 10, f(0x4005d0)),
            (0, 20, f(0x4006aa)),
            (1, 30, f(0x4006aa)),
            (1, 40, f(0x4005d0)),
        ],
    );
    let (trace, r) = import_fixture(&meta, &[p]);
    r.unwrap();
    assert_eq!(
        slices(&trace),
        vec![
            ("0x4005d0".into(), 10, 30, SliceKind::Other, 0),
            ("0x4006aa".into(), 20, 10, SliceKind::Other, 1),
        ]
    );
}

#[test]
fn libc_events_are_alloc_instants_and_a_bytes_in_use_counter() {
    let events = r#"
event { name = "lttng_ust_libc:malloc"; id = 0; stream_id = 0; fields := struct { u64 size; x64 ptr; }; };
event { name = "lttng_ust_libc:calloc"; id = 1; stream_id = 0; fields := struct { u64 nmemb; u64 size; x64 ptr; }; };
event { name = "lttng_ust_libc:realloc"; id = 2; stream_id = 0; fields := struct { x64 in_ptr; u64 size; x64 ptr; }; };
event { name = "lttng_ust_libc:free"; id = 3; stream_id = 0; fields := struct { x64 ptr; }; };
event { name = "lttng_ust_libc:posix_memalign"; id = 4; stream_id = 0; fields := struct { x64 out_ptr; u64 alignment; u64 size; i32 result; }; };
"#;
    let meta = fixture_metadata(false, 64, false, events);
    let ev = |vals: &[u64], tid: u32| {
        let mut b = ctx(false, 42, tid);
        for v in vals {
            b.u(*v, 8);
        }
        b.out
    };
    let mut pm = ctx(false, 42, 43);
    pm.u(0x5000, 8).u(64, 8).u(1000, 8).u(0, 4);
    let p = fixture_packet(
        false,
        64,
        0,
        0,
        0,
        &[
            (0, 1, ev(&[100, 0x1000], 42)),
            (1, 2, ev(&[2, 50, 0x2000], 43)),
            (2, 3, ev(&[0x1000, 300, 0x3000], 42)),
            (3, 4, ev(&[0x2000], 42)),
            (4, 5, pm.out),
            (3, 6, ev(&[0x3000], 43)),
            (3, 7, ev(&[0x9999], 43)),
        ],
    );
    let (trace, r) = import_fixture(&meta, &[p]);
    r.unwrap();
    // One process for both threads; its counter.
    assert_eq!(trace.processes.len(), 1);
    let values = counter_values(&trace);
    assert_eq!(
        values,
        vec![100.0, 200.0, 400.0, 300.0, 1300.0, 1000.0, 1000.0]
    );
    let first = (0..trace.counters.len())
        .find(|&i| !cpu_counter(&trace, trace.counters.track[i]))
        .unwrap();
    let track = &trace.tracks[trace.counters.track[first] as usize];
    assert_eq!(track.kind, opscope_model::TrackKind::Counter);
    // Alloc instants: realloc is a free and an allocation.
    let mut order: Vec<usize> = (0..trace.instants.len())
        .filter(|&i| trace.instants.kind(i) == SliceKind::Alloc)
        .collect();
    order.sort_by_key(|&i| trace.instants.ts[i]);
    let bytes: Vec<i64> = order
        .iter()
        .map(|&i| {
            arg(&trace, trace.instants.args[i], "Bytes")
                .unwrap()
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(bytes, vec![100, 100, -100, 300, -100, 1000, -300, 0]);
    let first = trace.instants.args[0];
    assert_eq!(arg(&trace, first, "Bytes"), Some(ArgValue::Int(100)));
    assert_eq!(arg(&trace, first, "Addr"), Some(ArgValue::Int(0x1000)));
    // A malloc's `size` and `ptr` are its Bytes and Addr, not repeated.
    assert_eq!(arg(&trace, first, "size"), None);
    assert_eq!(trace.str(trace.instants.category[0]), "lttng_ust_libc");
    // A realloc's free keeps where the block went, its allocation where it came from;
    // neither repeats what its own Bytes and Addr say.
    let realloc_ts = trace.instants.ts[order[3]];
    let realloc: Vec<opscope_model::ArgsId> = order
        .iter()
        .filter(|&&i| trace.instants.ts[i] == realloc_ts)
        .map(|&i| trace.instants.args[i])
        .collect();
    let [free, alloc] = realloc[..] else {
        panic!("{realloc:?}")
    };
    let get = |args, key| arg(&trace, args, key).and_then(|v| v.as_i64());
    assert_eq!(get(free, "Bytes"), Some(-100));
    assert_eq!(get(free, "Addr"), Some(0x1000));
    assert_eq!(
        (get(free, "size"), get(free, "ptr")),
        (Some(300), Some(0x3000))
    );
    assert_eq!(get(free, "in_ptr"), None);
    assert_eq!(
        (get(alloc, "Bytes"), get(alloc, "Addr")),
        (Some(300), Some(0x3000))
    );
    assert_eq!(get(alloc, "in_ptr"), Some(0x1000));
    assert_eq!((get(alloc, "size"), get(alloc, "ptr")), (None, None));
}

#[test]
fn research_tracer_families_map_to_kinds_and_cupti_uses_its_timestamp_field() {
    let events = r#"
event { name = "cuptiTracer:kernel_begin"; id = 0; stream_id = 0; fields := struct { string name; u64 timestamp; }; };
event { name = "cuptiTracer:kernel_end"; id = 1; stream_id = 0; fields := struct { string name; u64 timestamp; }; };
event { name = "cuptiTracer:runtime_api_entry"; id = 2; stream_id = 0; fields := struct { string name; u64 timestamp; }; };
event { name = "cuptiTracer:runtime_api_exit"; id = 3; stream_id = 0; fields := struct { string name; u64 timestamp; }; };
event { name = "tensorflowTracer:operation_start"; id = 4; stream_id = 0; fields := struct { string cat; string name; string placement; }; };
event { name = "tensorflowTracer:operation_end"; id = 5; stream_id = 0; fields := struct { string cat; string name; string placement; }; };
event { name = "tensorflowTracer:bfc_allocator_stats"; id = 6; stream_id = 0; fields := struct { string allocator_name; u64 num_allocs; u64 bytes_in_use; }; };
event { name = "cuptiTracer:memcpy_begin"; id = 7; stream_id = 0; fields := struct { string name; u64 timestamp; }; };
event { name = "cuptiTracer:memcpy_end"; id = 8; stream_id = 0; fields := struct { string name; u64 timestamp; }; };
event { name = "grpcTracer:send_request_entry"; id = 9; stream_id = 0; };
event { name = "grpcTracer:send_request_exit"; id = 10; stream_id = 0; };
"#;
    let meta = fixture_metadata(false, 64, false, events);
    let named = |name: &str, ts: u64| {
        let mut b = ctx(false, 1, 2);
        b.s(name).u(ts, 8);
        b.out
    };
    let op = |name: &str| {
        let mut b = ctx(false, 1, 2);
        b.s("op").s(name).s("/device:CPU:0");
        b.out
    };
    let mut stats = ctx(false, 1, 2);
    stats.s("GPU_0_bfc").u(3, 8).u(4096, 8);
    let p = fixture_packet(
        false,
        64,
        0,
        0,
        0,
        &[
            (4, 100, op("MatMul")),
            (2, 110, named("cudaLaunchKernel", 105)),
            (3, 120, named("cudaLaunchKernel", 115)),
            (5, 130, op("MatMul")),
            (6, 140, stats.out),
            // GPU records arrive late: their real times are in `timestamp`.
            (0, 500, named("gemm", 150)),
            (1, 501, named("gemm", 180)),
            (7, 502, named("HtoD", 190)),
            (8, 503, named("HtoD", 195)),
            (9, 600, ctx(false, 1, 2).out),
            (10, 610, ctx(false, 1, 2).out),
        ],
    );
    let (trace, r) = import_fixture(&meta, &[p]);
    r.unwrap();
    let got = slices(&trace);
    assert!(
        got.contains(&("MatMul".into(), 100, 30, SliceKind::Op, 0)),
        "{got:?}"
    );
    assert!(
        got.contains(&("cudaLaunchKernel".into(), 105, 10, SliceKind::Runtime, 1)),
        "{got:?}"
    );
    assert!(
        got.contains(&("gemm".into(), 150, 30, SliceKind::Kernel, 0)),
        "{got:?}"
    );
    assert!(
        got.contains(&(
            "HtoD".into(),
            190,
            5,
            SliceKind::Memcpy(opscope_model::CopyDirection::Unknown),
            0
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&("send_request".into(), 600, 10, SliceKind::Collective, 0)),
        "{got:?}"
    );
    // The kernel is on a GPU track.
    let k = (0..trace.slices.len())
        .find(|&i| trace.slices.kind(i) == SliceKind::Kernel)
        .unwrap();
    let track = &trace.tracks[trace.slices.track[k] as usize];
    assert_eq!(track.kind, opscope_model::TrackKind::GpuStream);
    assert!(track.device.is_some());
    // Allocator stats are counters, one track per numeric field.
    let names: Vec<&str> = trace
        .tracks
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            t.kind == opscope_model::TrackKind::Counter && !cpu_counter(&trace, *i as u32)
        })
        .map(|(_, t)| trace.str(t.name))
        .collect();
    assert_eq!(
        names,
        vec![
            "bfc_allocator_stats.num_allocs",
            "bfc_allocator_stats.bytes_in_use"
        ]
    );
    assert_eq!(counter_values(&trace), vec![3.0, 4096.0]);
}

#[test]
fn sched_switch_makes_running_slices_and_kernel_events_use_cpu_lanes() {
    let events = r#"
event { name = "sched_switch"; id = 0; stream_id = 0; fields := struct { string prev_comm; i32 prev_tid; i32 prev_prio; u64 prev_state; string next_comm; i32 next_tid; i32 next_prio; }; };
event { name = "irq_handler_entry"; id = 1; stream_id = 0; fields := struct { i32 irq; string name; }; };
event { name = "irq_handler_exit"; id = 2; stream_id = 0; fields := struct { i32 irq; i32 ret; }; };
"#;
    let meta = fixture_metadata(false, 64, true, events);
    let sw = |prev: (&str, u64), next: (&str, u64)| {
        let mut b = Bytes::new(false);
        b.s(prev.0)
            .u(prev.1, 4)
            .u(20, 4)
            .u(0, 8)
            .s(next.0)
            .u(next.1, 4)
            .u(20, 4);
        b.out
    };
    let mut irq = Bytes::new(false);
    irq.u(23, 4).s("timer");
    let mut irq_exit = Bytes::new(false);
    irq_exit.u(23, 4).u(1, 4);
    let p0 = fixture_packet(
        false,
        64,
        0,
        0,
        0,
        &[
            (0, 10, sw(("swapper/0", 0), ("bash", 100))),
            (1, 20, irq.out),
            (2, 25, irq_exit.out),
            (0, 30, sw(("bash", 100), ("cat", 200))),
            (0, 50, sw(("cat", 200), ("swapper/0", 0))),
        ],
    );
    let p1 = fixture_packet(
        false,
        64,
        0,
        0,
        1,
        &[(0, 40, sw(("swapper/1", 0), ("bash", 100)))],
    );
    let (trace, r) = import_fixture(&meta, &[p0, p1]);
    r.unwrap();
    let got = slices(&trace);
    assert_eq!(
        got,
        vec![
            ("bash".into(), 10, 20, SliceKind::Other, 0),
            // On the thread that was running.
            ("irq_handler".into(), 20, 5, SliceKind::Other, 0),
            ("cat".into(), 30, 20, SliceKind::Other, 0),
            // Still running on CPU 1 at the end of the trace.
            ("bash".into(), 40, 10, SliceKind::Other, 0),
        ]
    );
    // Instants on the lanes "CPU 0" and "CPU 1".
    let mut lanes: Vec<&str> = trace
        .threads
        .iter()
        .filter_map(|t| t.name.map(|n| trace.str(n)))
        .filter(|n| n.starts_with("CPU"))
        .collect();
    lanes.sort();
    assert_eq!(lanes, vec!["CPU 0", "CPU 1"]);
    assert_eq!(trace.instants.len(), 4);
    let irq = (0..trace.slices.len())
        .find(|&i| trace.str(trace.slices.name[i]) == "irq_handler")
        .unwrap();
    let track = &trace.tracks[trace.slices.track[irq] as usize];
    assert_eq!(trace.threads[track.thread.unwrap().index()].tid, 100);
}

#[test]
fn discarded_events_are_summed_per_stream_and_reported() {
    let events = r#"event { name = "p:e"; id = 0; stream_id = 0; };"#;
    let meta = fixture_metadata(false, 64, false, events);
    let e = |ts| (0u32, ts, ctx(false, 1, 1).out);
    let mut s0 = fixture_packet(false, 64, 0, 0, 0, &[e(1), e(2)]);
    s0.extend(fixture_packet(false, 64, 10, 5, 0, &[e(11)]));
    s0.extend(fixture_packet(false, 64, 20, 12, 0, &[e(21)]));
    let s1 = fixture_packet(false, 64, 0, 3, 1, &[e(5)]);
    let (trace, r) = import_fixture(&meta, &[s0, s1]);
    let source = r.unwrap();
    let md = trace.sources[source.index()].metadata;
    assert_eq!(arg(&trace, md, "events_discarded"), Some(ArgValue::Int(15)));
    assert_eq!(
        arg(&trace, md, "events_discarded.channel0_0"),
        Some(ArgValue::Int(12))
    );
    assert_eq!(
        arg(&trace, md, "events_discarded.channel0_1"),
        Some(ArgValue::Int(3))
    );
    assert_eq!(arg(&trace, md, "events"), Some(ArgValue::Int(5)));
    assert!(
        trace.warnings[0].1.contains("discarded 15 events"),
        "{:?}",
        trace.warnings
    );
}

#[test]
fn narrow_timestamps_wrap_around_from_the_previous_value() {
    let events = r#"event { name = "p:e"; id = 0; stream_id = 0; };"#;
    // 16-bit timestamps: the packet starts at 0x1_FFF0.
    let meta = fixture_metadata(false, 16, false, events);
    let e = |raw: u64| (0u32, raw, ctx(false, 1, 1).out);
    let p = fixture_packet(
        false,
        16,
        0x1_FFF0,
        0,
        0,
        &[e(0xFFF5), e(0x0003), e(0x0003), e(0x8000), e(0x0001)],
    );
    let layout = super::layout(meta.as_bytes(), "m").unwrap();
    let streams = vec![("s".to_string(), &p[..])];
    let mut got = Vec::new();
    let (_, err) = super::read_merged(&layout, &streams, |_, r| got.push(r.timestamp));
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got, vec![0x1_FFF5, 0x2_0003, 0x2_0003, 0x2_8000, 0x3_0001]);
}

/// A big-endian trace with packetized big-endian metadata, one little-endian field, and a
/// bit-packed header (5-bit id, 27-bit timestamp) as LTTng's compact header has.
#[test]
fn big_endian_traces_and_packetized_metadata_are_read() {
    let text = r#"/* CTF 1.8 */
typealias integer { size = 32; align = 8; } := u32;
typealias integer { size = 64; align = 8; } := u64;
trace { major = 1; minor = 8; byte_order = be; packet.header := struct { u32 magic; }; };
clock { name = c; freq = 1000000000; };
typealias integer { size = 27; align = 1; map = clock.c.value; } := ts27;
stream { packet.context := struct { u64 timestamp_begin; u64 content_size; u64 packet_size; };
  event.header := struct { enum : integer { size = 5; align = 1; } { a = 0 ... 30, ext = 31 } id; ts27 timestamp; } align(8); };
event { name = "x"; id = 3; fields := struct { u32 be_field; integer { size = 32; align = 8; byte_order = le; } le_field; }; };
"#;
    // Packetize the metadata in two big-endian packets.
    let mut metadata = Vec::new();
    for chunk in text.as_bytes().chunks(200) {
        let mut p = Bytes::new(true);
        p.u(0x75D1_1D57, 4);
        p.out.extend([0u8; 16]);
        let content = (37 + chunk.len()) as u64 * 8;
        p.u(0, 4).u(content, 4).u(content + 24, 4);
        p.out.extend([0, 0, 0, 1, 8]);
        p.out.extend(chunk);
        p.out.extend([0u8; 3]);
        metadata.extend(p.out);
    }
    // id 3 in the top 5 bits, timestamp 1000 in the low 27.
    let header = (3u64 << 27) | 1000;
    let mut stream = Bytes::new(true);
    stream.u(0xC1FC_1FC1, 4).u(0, 8).u(0, 8).u(0, 8);
    stream.u(header, 4).u(0x0102_0304, 4);
    stream.out.extend(0x0A0B_0C0Du32.to_le_bytes());
    let size = stream.out.len() as u64 * 8;
    stream.out[12..20].copy_from_slice(&size.to_be_bytes());
    stream.out[20..28].copy_from_slice(&size.to_be_bytes());
    let layout = super::layout(&metadata, "m").unwrap();
    let streams = vec![("s".to_string(), &stream.out[..])];
    let mut got = Vec::new();
    let (_, err) = super::read_merged(&layout, &streams, |_, r| {
        got.push((
            r.timestamp,
            r.vals[r.scopes[3] as usize + 1],
            r.vals[r.scopes[3] as usize + 2],
        ))
    });
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got, vec![(1000, Val::U(0x0102_0304), Val::U(0x0A0B_0C0D))]);
}

/// A stream cut inside an event: the error names the file and the byte offset, and the
/// events before the cut are in the trace.
#[test]
fn truncated_packets_fail_with_file_and_offset_and_keep_what_was_read() {
    let events =
        r#"event { name = "p:thing"; id = 0; stream_id = 0; fields := struct { u64 a; }; };"#;
    let meta = fixture_metadata(false, 64, false, events);
    let e = |ts: u64| {
        let mut b = ctx(false, 1, 1);
        b.u(ts, 8);
        (0u32, ts, b.out)
    };
    let full = fixture_packet(false, 64, 0, 0, 0, &[e(1), e(2), e(3)]);
    // Header 52 bytes, events of 28 bytes: cut the third event in half.
    let cut = full[..52 + 28 * 2 + 10].to_vec();
    let (trace, r) = import_fixture(&meta, std::slice::from_ref(&cut));
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("fixture/channel0_0") && err.contains("byte 108:") && err.contains("event 2 "),
        "{err}"
    );
    assert_eq!(trace.instants.len(), 2);
    // Cut at an event boundary: the packet is still short of its content size.
    let (trace, r) = import_fixture(&meta, &[full[..52 + 28].to_vec()]);
    let err = r.unwrap_err().to_string();
    assert!(err.contains("cut off by the end of the file"), "{err}");
    assert_eq!(trace.instants.len(), 1);
    // Garbage and every prefix never panic.
    for n in 0..full.len() {
        let _ = import_fixture(&meta, &[full[..n].to_vec()]);
    }
    let (_, r) = import_fixture(&meta, &[vec![0xAB; 100]]);
    assert!(r.unwrap_err().to_string().contains("magic"));
}

/// Metadata that nests types through aliases, unfolds exponentially or piles up array
/// dimensions is refused, quickly and without exhausting the stack.
#[test]
fn hostile_metadata_is_refused() {
    let mut deep = String::from("typealias integer { size = 8; } := a0;\n");
    for i in 1..1000 {
        let _ = writeln!(deep, "typealias struct {{ a{} x; }} := a{i};", i - 1);
    }
    assert!(super::metadata::parse(&deep).is_err());
    let mut wide = String::from("typealias integer { size = 8; } := a0;\n");
    for i in 1..40 {
        let _ = writeln!(
            wide,
            "typealias struct {{ a{p} x; a{p} y; }} := a{i};",
            p = i - 1
        );
    }
    wide.push_str("trace { packet.header := struct { a39 h; }; };");
    let err = super::layout(wide.as_bytes(), "m").unwrap_err().to_string();
    assert!(err.contains("more than"), "{err}");
    let dims = format!(
        "trace {{ packet.header := struct {{ integer {{ size = 8; }} x{}; }}; }};",
        "[1]".repeat(100)
    );
    assert!(super::metadata::parse(&dims).is_err());
}

/// Regression (fuzz, ctf_stream): allocation sizes near `u64::MAX` saturate the
/// bytes-in-use counter instead of overflowing.
#[test]
fn huge_allocation_sizes_saturate() {
    let events = r#"
event { name = "lttng_ust_libc:malloc"; id = 0; stream_id = 0; fields := struct { u64 size; x64 ptr; }; };
event { name = "lttng_ust_libc:free"; id = 1; stream_id = 0; fields := struct { x64 ptr; }; };
"#;
    let meta = fixture_metadata(false, 64, false, events);
    let ev = |vals: &[u64]| {
        let mut b = ctx(false, 1, 1);
        for v in vals {
            b.u(*v, 8);
        }
        b.out
    };
    let p = fixture_packet(
        false,
        64,
        0,
        0,
        0,
        &[
            (0, 1, ev(&[u64::MAX, 0x10])),
            (0, 2, ev(&[u64::MAX - 1, 0x20])),
            (1, 3, ev(&[0x10])),
            (1, 4, ev(&[0x20])),
        ],
    );
    let (trace, r) = import_fixture(&meta, &[p]);
    r.unwrap();
    assert_eq!(counter_values(&trace).len(), 4);
}

/// Whether counter track `t` is a thread's CPU (which every event with a `cpu_id`
/// feeds), not one of the events' own counters.
fn cpu_counter(trace: &opscope_model::Trace, t: u32) -> bool {
    let track = &trace.tracks[t as usize];
    track.thread.is_some() && trace.str(track.name).starts_with("cpu (tid ")
}

/// The counter samples but the threads' CPUs, in order.
fn counter_values(trace: &opscope_model::Trace) -> Vec<f64> {
    let c = &trace.counters;
    (0..c.len())
        .filter(|&i| !cpu_counter(trace, c.track[i]))
        .map(|i| c.value[i])
        .collect()
}

/// One event as read: stream, event class, time and values.
type Decoded = (usize, usize, u64, Vec<Val>);

/// Every event of a trace as read with `layout`, and whether reading ended in an error.
fn decoded(layout: &Layout, streams: &[(String, &[u8])]) -> (Vec<Decoded>, bool) {
    let mut events = Vec::new();
    let (_, err) = super::read_merged(layout, streams, |i, r| {
        events.push((i, r.event, r.timestamp, r.vals.clone()))
    });
    (events, err.is_some())
}

/// Calls `f(dir, layout, streams)` for every shared CTF trace whose metadata compiles;
/// `false` when the shared traces are missing (off CI).
fn each_shared_trace(mut f: impl FnMut(&Path, &Layout, &[(String, &[u8])])) -> bool {
    let Some(shared) = shared() else {
        return false;
    };
    for dir in &ctf_dirs(&shared.join("traces/ctf")) {
        let (metadata, files) = read_trace(dir);
        let Ok(layout) = super::layout(&metadata, "metadata") else {
            continue;
        };
        let streams: Vec<(String, &[u8])> =
            files.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
        f(dir, &layout, &streams);
    }
    true
}

/// The fixed runs (whole-byte fields read at offsets worked out in advance) give the
/// values the field-by-field reading gives, on every shared CTF trace.
#[test]
fn fixed_runs_read_what_field_by_field_reading_reads_on_the_shared_traces() {
    let (mut traces, mut events) = (0, 0);
    let shared = each_shared_trace(|dir, layout, streams| {
        let fixed = decoded(layout, streams);
        let per_field = decoded(&layout.per_field(), streams);
        assert!(fixed == per_field, "{}", dir.display());
        traces += 1;
        events += fixed.0.len();
    });
    assert!(
        !shared || (traces >= 20 && events > 500_000),
        "{traces} {events}"
    );
}

/// The same on random packets of a layout that mixes what fixed runs take (integers of
/// every width, alignments up to 64 bits, both byte orders, signed values, floats,
/// text, nested structs) with what they stop at (bit fields, sequences, strings).
#[test]
fn fixed_runs_read_what_field_by_field_reading_reads_on_random_packets() {
    let metadata = r#"/* CTF 1.8 */
typealias integer { size = 8; align = 8; } := u8;
typealias integer { size = 32; align = 8; } := u32;
typealias integer { size = 64; align = 8; } := u64;
trace { major = 1; minor = 8; byte_order = le;
  packet.header := struct { u32 magic; u32 stream_id; }; };
clock { name = c; freq = 1000000000; };
typealias integer { size = 64; align = 8; map = clock.c.value; } := ts64;
stream { id = 0;
  packet.context := struct { u64 content_size; u64 packet_size; };
  event.header := struct { u8 id; ts64 timestamp; };
  event.context := struct { integer { size = 32; align = 8; signed = true; } vtid;
    integer { size = 8; align = 8; encoding = UTF8; } name[5]; };
};
event { name = "a"; id = 0; stream_id = 0; fields := struct {
  integer { size = 16; align = 16; signed = true; byte_order = be; } s16;
  integer { size = 64; align = 64; } a64;
  u8 n;
  integer { size = 32; align = 32; signed = true; } s32;
  floating_point { exp_dig = 8; mant_dig = 24; align = 32; } f32;
  struct { u8 x; integer { size = 16; align = 8; byte_order = be; } y; } align(8) inner;
  integer { size = 3; align = 1; } bits3;
  integer { size = 8; align = 8; signed = true; } s8;
  floating_point { exp_dig = 11; mant_dig = 53; align = 8; } f64;
}; };
event { name = "b"; id = 1; stream_id = 0; fields := struct {
  u8 len; u32 seq[len]; string s; u64 after; integer { size = 8; align = 8; encoding = UTF8; } t[3];
}; };
"#;
    let layout = super::layout(metadata.as_bytes(), "metadata").unwrap();
    let per_field = layout.per_field();
    // xorshift64*: the same packets on every run.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut whole_packets = 0;
    for round in 0..400 {
        let mut body = Vec::new();
        let mut ts = 0u64;
        for _ in 0..(next() % 12) {
            let id = (next() % 2) as u8;
            ts += next() % 1000;
            body.push(id);
            body.extend(ts.to_le_bytes());
            let n = (next() % 64) as usize;
            for i in 0..n {
                // Short sequences now and then, NULs for the strings and texts.
                let b = next() as u8;
                body.push(if i % 7 == 3 {
                    b % 4
                } else if b.is_multiple_of(5) {
                    0
                } else {
                    b
                });
            }
        }
        // Usually the packet says how long it is; sometimes its content is cut short.
        let content = 24 + body.len();
        let declared = if round % 5 == 0 { content + 9 } else { content };
        let mut packet = Vec::new();
        packet.extend(0xC1FC_1FC1u32.to_le_bytes());
        packet.extend(0u32.to_le_bytes());
        packet.extend((declared as u64 * 8).to_le_bytes());
        packet.extend((declared as u64 * 8).to_le_bytes());
        packet.extend(body);
        let streams = vec![("random".to_string(), &packet[..])];
        let fixed = decoded(&layout, &streams);
        assert!(fixed == decoded(&per_field, &streams), "round {round}");
        let (cut, failed, _) = decoded_then_cut(&per_field, &streams);
        assert!(
            decoded_without_headers(&layout, &streams) == (cut, failed),
            "round {round}"
        );
        whole_packets += usize::from(!fixed.1);
    }
    // Both outcomes were exercised.
    assert!((1..400).contains(&whole_packets), "{whole_packets}");
}

/// Reading an event's pid, tid and process name at offsets worked out in advance gives
/// what walking its scopes gives, on every shared CTF trace.
#[test]
fn direct_who_reads_what_walking_the_scopes_reads_on_the_shared_traces() {
    let mut direct_events = 0;
    let shared = each_shared_trace(|dir, layout, streams| {
        let ident = super::mapping::Identify::new(layout);
        let mut positions = Vec::new();
        super::read_merged(layout, streams, |_, r| {
            let event = r.current();
            let walked = ident.who_by_walking(layout, &event, &mut positions);
            let who = ident.who(layout, &event, &mut positions);
            assert_eq!(who, walked, "{}: event {}", dir.display(), r.events);
            direct_events += usize::from(ident.reads_directly(r.event) && who.tid.is_some());
        });
    });
    assert!(!shared || direct_events > 100_000, "{direct_events}");
}

/// Every event read with its header's values, with them cut off (each event's values
/// from its first other scope), and how many events had any.
fn decoded_then_cut(layout: &Layout, streams: &[(String, &[u8])]) -> (Vec<Decoded>, bool, usize) {
    let mut events = Vec::new();
    let mut with_headers = 0;
    let (_, err) = super::read_merged(layout, streams, |i, r| {
        let rest = r.scopes[1..]
            .iter()
            .find(|&&s| s != u32::MAX)
            .map_or(r.vals.len(), |&s| s as usize);
        with_headers += usize::from(r.scopes[0] != u32::MAX && rest > 0);
        events.push((i, r.event, r.timestamp, r.vals[rest..].to_vec()));
    });
    (events, err.is_some(), with_headers)
}

/// Every event read without its header's values (as the mapping reads them).
fn decoded_without_headers(layout: &Layout, streams: &[(String, &[u8])]) -> (Vec<Decoded>, bool) {
    let mut events = Vec::new();
    let keep = super::Keep {
        header: false,
        context: true,
    };
    let (_, err) = super::read_merged_keeping(layout, streams, keep, |i, r| {
        assert_eq!(r.scopes[0], u32::MAX);
        events.push((i, r.event, r.timestamp, r.vals.clone()))
    });
    (events, err.is_some())
}

/// Reading without the event headers' values (flat headers read for the id and time
/// alone) gives the same events, times and other values, on every shared CTF trace.
#[test]
fn events_read_without_header_values_are_the_same_on_the_shared_traces() {
    let (mut with_headers, mut flat) = (0, 0);
    let shared = each_shared_trace(|dir, layout, streams| {
        let (expected, failed, n) = decoded_then_cut(layout, streams);
        let got = decoded_without_headers(layout, streams);
        assert!(got == (expected, failed), "{}", dir.display());
        with_headers += n;
        if layout.streams.iter().any(|s| s.event_header_flat.is_some()) {
            flat += n;
        }
    });
    assert!(
        !shared || (with_headers > 100_000 && flat > 100_000),
        "{with_headers} {flat}"
    );
}

/// The values of an event's payload.
fn payload_of(r: &StreamReader) -> Vec<Val> {
    match r.scopes[3] {
        u32::MAX => Vec::new(),
        at => r.vals[at as usize..].to_vec(),
    }
}

/// Read as the mapping reads them (no header values, and no event context values when
/// the pid, tid and process name can be read from the context's bytes), events give
/// the emitter and the payload that reading all their values gives, on every shared
/// CTF trace.
#[test]
fn who_read_from_context_bytes_equals_walking_the_values_on_the_shared_traces() {
    let mut by_bytes = 0;
    let shared = each_shared_trace(|dir, layout, streams| {
        let ident = super::mapping::Identify::new(layout);
        let mut positions = Vec::new();
        let mut walked = Vec::new();
        super::read_merged(layout, streams, |_, r| {
            let who = ident.who_by_walking(layout, &r.current(), &mut positions);
            walked.push((who, r.event, r.timestamp, payload_of(r)));
        });
        let keep = super::Keep {
            header: false,
            context: !ident.context_by_bytes,
        };
        let mut read = Vec::new();
        super::read_merged_keeping(layout, streams, keep, |_, r| {
            let mut who = ident.who(layout, &r.current(), &mut positions);
            // Read from the bytes, the process name is the whole field: cut it as the
            // mapping does.
            who.procname = who
                .procname
                .map(|v| super::mapping::up_to_nul(&r.current(), v));
            read.push((who, r.event, r.timestamp, payload_of(r)));
        });
        assert!(read == walked, "{}", dir.display());
        if ident.context_by_bytes {
            by_bytes += read.iter().filter(|w| w.0.tid.is_some()).count();
        }
    });
    assert!(!shared || by_bytes > 300_000, "{by_bytes}");
}
