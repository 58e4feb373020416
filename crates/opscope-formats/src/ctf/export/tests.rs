use std::path::Path;
use std::process::Command;

use super::*;

/// Nested slices (with zero-length ones at a parent's edges), overlapping GPU work, an
/// async lane, instants, a counter, and args that need escaping.
const SAMPLE: &str = r#"{"traceEvents":[
  {"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}},
  {"ph":"X","cat":"cpu_op","name":"outer","pid":1,"tid":2,"ts":10,"dur":10,"args":{"note":"say \"hi\"","n":3,"External id":-7,"string":"a keyword","2x":1.5,"flag":true,"dims":[[1,2],[3]],"big":18446744073709551615,"none":null,"n_":0,"_n":1}},
  {"ph":"X","cat":"cpu_op","name":"first","pid":1,"tid":2,"ts":10,"dur":0},
  {"ph":"X","cat":"cpu_op","name":"inner","pid":1,"tid":2,"ts":12,"dur":5},
  {"ph":"X","cat":"cpu_op","name":"last","pid":1,"tid":2,"ts":20,"dur":0},
  {"ph":"X","cat":"cpu_op","name":"next","pid":1,"tid":2,"ts":20,"dur":3},
  {"ph":"i","cat":"mark","name":"here","pid":1,"tid":2,"ts":13,"s":"t"},
  {"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":11,"dur":6},
  {"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":17,"dur":2},
  {"ph":"b","cat":"io","name":"read","id":5,"pid":1,"tid":2,"ts":9},
  {"ph":"e","cat":"io","name":"read","id":5,"pid":1,"tid":2,"ts":30},
  {"ph":"C","name":"queue","pid":1,"ts":15,"args":{"queue":4}},
  {"ph":"C","name":"queue","pid":1,"ts":25,"args":{"queue":1.5}}
]}"#;

fn sample() -> Trace {
    let mut trace = Trace::new();
    crate::chrome::import(SAMPLE.as_bytes(), "sample.json", &mut trace).unwrap();
    trace
}

fn write_dir(trace: &Trace, name: &str) -> tempfile::TempDir {
    write_dir_with(trace, name, MAX_TYPED_CLASSES)
}

/// The trace written with at most `typed` classes of typed args, in a directory that
/// goes away with the test.
fn write_dir_with(trace: &Trace, name: &str, typed: usize) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("opscope-ctf-{name}-"))
        .tempdir()
        .unwrap();
    export_with(trace, typed, &mut |file, bytes| {
        std::fs::write(dir.path().join(file), bytes)
    })
    .unwrap();
    dir
}

/// One event as babeltrace2 prints it: clock cycles, name, and its payload fields (but
/// the struct `args`), and the fields of `args`.
#[derive(Debug, Clone, PartialEq)]
struct Printed {
    cycles: u64,
    event: String,
    fields: Vec<(String, String)>,
    args: Vec<(String, String)>,
}

/// The text of the quoted string at `j` of `bytes` (babeltrace2 escapes `"` and `\\`),
/// and where it ends.
fn quoted(bytes: &[u8], mut j: usize) -> (String, usize) {
    let mut text = Vec::new();
    j += 1;
    while bytes[j] != b'"' {
        if bytes[j] == b'\\' {
            j += 1;
        }
        text.push(bytes[j]);
        j += 1;
    }
    (String::from_utf8(text).unwrap(), j + 1)
}

/// `key = value, …` as babeltrace2 prints a struct's fields (strings unquoted, and
/// enumerations, `( "label" : container = N )`, as their label).
fn parse_fields(inner: &str) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let bytes = inner.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let eq = inner[i..].find(" = ").unwrap() + i;
        let key = inner[i..eq].trim_start_matches(", ").to_string();
        let mut j = eq + 3;
        let value;
        if bytes[j] == b'"' {
            (value, j) = quoted(bytes, j);
        } else if inner[j..].starts_with("( \"") {
            (value, j) = quoted(bytes, j + 2);
            j += inner[j..].find(" )").unwrap() + 2;
        } else {
            let end = inner[j..].find(", ").map_or(inner.len(), |e| e + j);
            value = inner[j..end].to_string();
            j = end;
        }
        fields.push((key, value));
        i = j;
    }
    fields
}

/// Reads `babeltrace2 --clock-cycles` text: `[N] (+D) EVENT: { cpu_id = 0 }, { vpid = …,
/// vtid = … }, { name = "…", … }`.
fn parse_line(line: &str) -> Printed {
    let cycles = line[1..line.find(']').unwrap()].trim().parse().unwrap();
    let after = &line[line.find(") ").unwrap() + 2..];
    let (event, rest) = after.split_once(": ").unwrap();
    // The payload is the last `{ … }`; typed args end it as `args = { … }`.
    let (rest, args) = match rest.find(", args = { ") {
        Some(at) => {
            let inner = &rest[at + ", args = { ".len()..];
            let inner = inner.strip_suffix(" } }").unwrap_or("");
            (format!("{} }}", &rest[..at]), parse_fields(inner))
        }
        None => match rest.find(", args = { } }") {
            Some(at) => (format!("{} }}", &rest[..at]), Vec::new()),
            None => (rest.to_string(), Vec::new()),
        },
    };
    let payload_at = rest.rfind("}, {").map_or(0, |i| i + 3);
    let payload = rest[payload_at..].trim();
    let inner = payload
        .strip_prefix("{ ")
        .and_then(|p| p.strip_suffix(" }"))
        .unwrap_or("");
    let fields = parse_fields(inner);
    Printed {
        cycles,
        event: event.to_string(),
        fields,
        args,
    }
}

/// babeltrace2's reading of DIR, or `None` (saying why) off CI without babeltrace2.
fn babeltrace(dir: &Path) -> Option<Vec<Printed>> {
    let text = babeltrace2_text(&["--clock-cycles"], dir)?;
    Some(text.lines().map(parse_line).collect())
}

fn field<'p>(p: &'p Printed, key: &str) -> &'p str {
    &p.fields.iter().find(|f| f.0 == key).unwrap().1
}

#[test]
fn babeltrace2_reads_every_event_with_its_time_and_fields() {
    let trace = sample();
    let written = write_dir(&trace, "sample");
    let dir = written.path();
    let Some(printed) = babeltrace(dir) else {
        return;
    };
    let s = &trace.slices;
    let base = first_time(&trace).unwrap();
    assert_eq!(
        printed.len(),
        2 * s.len() + trace.instants.len() + trace.counters.len()
    );
    let mut begins = 0;
    let mut ends = 0;
    for p in &printed {
        match p.event.as_str() {
            "opscope:slice_begin" | "opscope:slice_end" => {
                let i: usize = field(p, "id").parse().unwrap();
                assert_eq!(field(p, "name"), trace.str(s.name[i]));
                if p.event.ends_with("begin") {
                    begins += 1;
                    assert_eq!(p.cycles as i64, s.ts[i] - base, "{p:?}");
                    assert_eq!(field(p, "category"), trace.str(s.category[i]));
                    assert_eq!(field(p, "kind"), s.kind(i).name());
                    assert_args(&trace, s.args[i], &p.args);
                } else {
                    ends += 1;
                    assert_eq!(p.cycles as i64, s.end(i) - base, "{p:?}");
                }
            }
            "opscope:instant" => assert_eq!(field(p, "name"), "here"),
            "opscope:counter" => {
                assert_eq!(field(p, "name"), "queue");
                let v: f64 = field(p, "value").parse().unwrap();
                assert!(v == 4.0 || v == 1.5, "{v}");
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!((begins, ends), (s.len(), s.len()));
    let outer = printed
        .iter()
        .find(|p| field(p, "name") == "outer" && p.event.ends_with("begin"))
        .unwrap();
    assert!(outer.args.contains(&("note".into(), r#"say "hi""#.into())));
    assert!(outer.args.contains(&("External_id".into(), "-7".into())));
}

/// babeltrace2 prints each arg as a field of its type: integers and strings as they
/// are, floats as numbers, JSON as its text, booleans as 0 or 1; under its key cut to
/// an identifier, in order.
fn assert_args(trace: &Trace, args: ArgsId, printed: &[(String, String)]) {
    let ours: Vec<(StrId, ArgValue)> = trace.args.get(args).collect();
    assert_eq!(ours.len(), printed.len(), "{printed:?}");
    let keys: Vec<(StrId, ArgTag)> = ours.iter().map(|&(k, v)| (k, ArgTag::of(v))).collect();
    let names = field_names(trace, &keys);
    for ((&(key, value), (name, text)), field) in ours.iter().zip(printed).zip(&names) {
        assert_eq!(field.strip_prefix('_').unwrap_or(field), name);
        let key = trace.str(key);
        let cut: String = key
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        assert!(
            name.starts_with(cut.trim_start_matches('_')),
            "{key} printed as {name}"
        );
        match value {
            ArgValue::Int(i) => assert_eq!(text, &i.to_string()),
            ArgValue::UInt(u) => assert_eq!(text, &u.to_string()),
            ArgValue::Float(f) => {
                let g: f64 = text.parse().unwrap();
                assert!((g - f).abs() <= 1e-6 * f.abs(), "{key}: {text} for {f}");
            }
            ArgValue::Str(x) | ArgValue::Json(x) => assert_eq!(text, trace.str(x)),
            ArgValue::Bool(b) => assert_eq!(text, if b { "1" } else { "0" }),
            ArgValue::Null => assert_eq!(text, "0"),
        }
    }
}

/// On a thread track, each slice's begin and end enclose exactly its children's, even
/// where zero-length slices sit at a parent's first and last instant.
#[test]
fn thread_tracks_keep_their_nesting() {
    let trace = sample();
    let s = &trace.slices;
    let mut per_track: Vec<Vec<Event>> = (0..trace.tracks.len()).map(|_| Vec::new()).collect();
    slice_events(&trace, &mut per_track);
    for (t, events) in per_track.iter().enumerate() {
        if trace.tracks[t].kind != TrackKind::Thread || events.is_empty() {
            continue;
        }
        let mut stack: Vec<usize> = Vec::new();
        let mut last = i64::MIN;
        for e in events {
            assert!(e.ts >= last, "time goes back on track {t}");
            last = e.ts;
            match e.what {
                What::Begin(i) => {
                    let parent = (s.parent[i] != NONE).then_some(s.parent[i] as usize);
                    assert_eq!(stack.last().copied(), parent, "{}", trace.str(s.name[i]));
                    stack.push(i);
                }
                What::End(i) => assert_eq!(stack.pop(), Some(i)),
                _ => {}
            }
        }
        assert!(stack.is_empty());
    }
}

#[test]
fn metadata_declares_a_unix_clock_when_sources_know_it() {
    let mut trace = sample();
    let m = metadata(
        &trace,
        10_000,
        &[0; 16],
        &Classes::default(),
        &Enums::default(),
        false,
    );
    assert!(m.starts_with("/* CTF 1.8 */"));
    assert!(
        m.contains("absolute = FALSE"),
        "Chrome traces of µs have no epoch"
    );
    trace.clocks[0].unix_offset_ns = Some(1_700_000_000_500_000_000);
    let m = metadata(
        &trace,
        10_000,
        &[0; 16],
        &Classes::default(),
        &Enums::default(),
        false,
    );
    assert!(m.contains("offset_s = 1700000000;"), "{m}");
    assert!(m.contains("offset = 500010000;"), "{m}");
    assert!(m.contains("absolute = TRUE"));
}

/// opscope's CTF reader turns opscope's own events back into the slices, instants and
/// counter samples they came from: names, categories, kinds, args (each of its type),
/// times and durations; with typed args, and with args as JSON past the classes' limit
/// (here after one class, and with none).
#[test]
fn our_reader_reads_our_output_back() {
    for typed in [MAX_TYPED_CLASSES, 1, 0] {
        reads_back(typed);
    }
}

fn reads_back(typed: usize) {
    let trace = sample();
    let written = write_dir_with(&trace, &format!("roundtrip-{typed}"), typed);
    let dir = written.path();
    let metadata = std::fs::read(dir.join("metadata")).unwrap();
    let text = String::from_utf8_lossy(&metadata);
    let classes = text.matches("opscope_args_").count();
    if typed <= 1 {
        assert_eq!(classes, typed, "{text}");
    } else {
        assert!(classes > 1, "{text}");
    }
    let back = read_ours(dir);
    // The classes' keys and types are not repeated in the source's metadata.
    let meta: Vec<String> = back
        .args
        .get(back.sources[0].metadata)
        .map(|(k, _)| back.str(k).to_string())
        .collect();
    assert!(meta.iter().any(|k| k == "env.tracer_name"), "{meta:?}");
    assert!(
        !meta.iter().any(|k| k.starts_with("env.opscope_args_")),
        "{meta:?}"
    );

    let slices = slice_keys;
    assert_eq!(slices(&back), slices(&trace));
    let instants = |t: &Trace| -> Vec<(String, &'static str, i64, String)> {
        let inst = &t.instants;
        let mut v: Vec<_> = (0..inst.len())
            .map(|i| {
                (
                    t.str(inst.name[i]).to_string(),
                    inst.kind(i).name(),
                    inst.ts[i],
                    crate::roundtrip_tests::args_text(t, inst.args[i]),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(instants(&back), instants(&trace));
    let counters = |t: &Trace| -> Vec<(String, i64, u64)> {
        let c = &t.counters;
        let mut v: Vec<_> = (0..c.len())
            .map(|i| {
                let name = t.str(t.tracks[c.track[i] as usize].name).to_string();
                (name, c.ts[i], c.value[i].to_bits())
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(counters(&back), counters(&trace));
}

/// Per event of DIR as babeltrace2 prints it (`--clock-seconds`): its time, the `vtid` of
/// its context and the `cpu_id` of its packet, sorted and without repeats (a realloc is
/// one event there and two instants here, at one time on one thread). Counter samples,
/// which no CPU emitted, are left out.
fn times_threads_cpus(dir: &Path) -> Option<Vec<(String, i64, u64)>> {
    let text = babeltrace2_text(&["--clock-seconds", "--no-delta"], dir)?;
    let number = |line: &str, key: &str| -> Option<i64> {
        let at = line.find(key)? + key.len();
        let digits: String = line[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        digits.parse().ok()
    };
    let mut v: Vec<(String, i64, u64)> = text
        .lines()
        .filter(|l| !l.contains(" opscope:counter: "))
        .map(|l| {
            let time = l[1..l.find(']').unwrap()].to_string();
            let tid = number(l, "vtid = ").unwrap_or_else(|| panic!("no vtid: {l}"));
            let cpu = number(l, "cpu_id = ").unwrap_or_else(|| panic!("no cpu_id: {l}"));
            (time, tid, cpu as u64)
        })
        .collect();
    v.sort();
    v.dedup();
    Some(v)
}

/// An LTTng trace read, written as CTF and read by babeltrace2 again: every event is
/// at the same time on the same thread and CPU (`cpu_id`) as babeltrace2 reads it in
/// the original.
#[test]
fn cpu_ids_of_an_lttng_trace_survive_export() {
    let Some(shared) = crate::shared_data::shared() else {
        return;
    };
    // Four CPUs, one thread moving between them.
    let original = shared.join("traces/ctf/tracecompass/memory");
    let metadata = std::fs::read(original.join("metadata")).unwrap();
    let files: Vec<(String, Vec<u8>)> = ["0", "1", "2", "3"]
        .iter()
        .map(|n| {
            let p = original.join(format!("channel0_{n}"));
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    let streams: Vec<(String, &[u8])> = files.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
    let mut trace = Trace::new();
    crate::ctf::import("memory", &metadata, "memory/metadata", &streams, &mut trace).unwrap();
    let written = write_dir(&trace, "cpus");
    let dir = written.path();
    let Some(theirs) = times_threads_cpus(&original) else {
        return;
    };
    let ours = times_threads_cpus(dir).unwrap();
    let cpus: std::collections::BTreeSet<u64> = theirs.iter().map(|e| e.2).collect();
    assert!(cpus.len() > 1, "the trace runs on several CPUs: {cpus:?}");
    assert_eq!(ours.len(), theirs.len());
    let first_difference = ours.iter().zip(&theirs).find(|(a, b)| a != b);
    assert_eq!(first_difference, None, "(ours, babeltrace2's original)");
}

/// opscope's reader's model of the CTF in DIR.
fn read_ours(dir: &Path) -> Trace {
    let metadata = std::fs::read(dir.join("metadata")).unwrap();
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "metadata")
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    let streams: Vec<(String, &[u8])> = files.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
    let mut back = Trace::new();
    let metadata_path = dir.join("metadata").display().to_string();
    crate::ctf::import("ours", &metadata, &metadata_path, &streams, &mut back).unwrap();
    back
}

/// Each slice as (name, category, kind, time, duration, args), sorted.
fn slice_keys(t: &Trace) -> Vec<(String, String, &'static str, i64, i64, String)> {
    let s = &t.slices;
    let mut v: Vec<_> = (0..s.len())
        .map(|i| {
            (
                t.str(s.name[i]).to_string(),
                t.str(s.category[i]).to_string(),
                s.kind(i).name(),
                s.ts[i],
                s.dur[i],
                crate::roundtrip_tests::args_text(t, s.args[i]),
            )
        })
        .collect();
    v.sort();
    v
}

/// Ops whose names, categories and `Input type` repeat (texts with quotes, a
/// backslash, a leading `_`, non-ASCII and an empty one), with an arg of a new text
/// each time (`uid`).
fn repeating_ops() -> Trace {
    let types = [r#"float \"x\""#, r"c:\\dir", "_under", "µs ≥ 1", ""];
    let mut events = Vec::new();
    for n in 0..40 {
        let name = ["aten::mm", "aten::add", "_private"][n % 3];
        let cat = if n % 4 == 0 { "" } else { "cpu_op" };
        let ty = types[n % types.len()];
        events.push(format!(
            r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":1,"tid":2,"ts":{},"dur":5,"args":{{"Input type":"{ty}","uid":"u{n}","n":{n}}}}}"#,
            10 * n
        ));
    }
    let json = format!(r#"{{"traceEvents":[{}]}}"#, events.join(",\n"));
    let mut trace = Trace::new();
    crate::chrome::import(json.as_bytes(), "ops.json", &mut trace).unwrap();
    trace
}

/// Names, categories, kinds and the string args whose texts repeat are enumerations
/// whose labels are the texts: babeltrace2 prints each label, opscope's reader takes
/// each back as its text. An arg of a new text each time stays a string.
#[test]
fn repeated_texts_are_enumeration_labels() {
    let trace = repeating_ops();
    let written = write_dir(&trace, "labels");
    let dir = written.path();
    let metadata = std::fs::read_to_string(dir.join("metadata")).unwrap();
    for declared in [
        "enum opscope_kind : uint32_t",
        "enum opscope_name : uint32_t",
        "enum opscope_category : uint32_t",
        "enum opscope_arg_1 : uint32_t",
        "enum opscope_name name;",
        "enum opscope_category category;",
        "enum opscope_kind kind;",
        "enum opscope_arg_1 Input_type;",
        "string uid;",
        r#""c:\\dir" = "#,
    ] {
        assert!(metadata.contains(declared), "no {declared} in {metadata}");
    }
    assert_eq!(slice_keys(&read_ours(dir)), slice_keys(&trace));
    let Some(printed) = babeltrace(dir) else {
        return;
    };
    let s = &trace.slices;
    let mut begins = 0;
    for p in printed.iter().filter(|p| p.event == "opscope:slice_begin") {
        let i: usize = field(p, "id").parse().unwrap();
        assert_eq!(field(p, "name"), trace.str(s.name[i]), "{p:?}");
        assert_eq!(field(p, "category"), trace.str(s.category[i]), "{p:?}");
        assert_eq!(field(p, "kind"), s.kind(i).name(), "{p:?}");
        assert_args(&trace, s.args[i], &p.args);
        begins += 1;
    }
    assert_eq!(begins, s.len());
}

/// A field of more distinct texts than an enumeration may hold (babeltrace2 reads
/// large ones slowly) stays a string, and reads back the same.
#[test]
fn a_field_of_too_many_texts_stays_a_string() {
    let events: Vec<String> = (0..=MAX_LABELS)
        .map(|n| {
            format!(
                r#"{{"ph":"X","cat":"op","name":"op {n}","pid":1,"tid":2,"ts":{},"dur":1}}"#,
                2 * n
            )
        })
        .collect();
    let json = format!(r#"{{"traceEvents":[{}]}}"#, events.join(",\n"));
    let mut trace = Trace::new();
    crate::chrome::import(json.as_bytes(), "many.json", &mut trace).unwrap();
    let written = write_dir(&trace, "many-names");
    let dir = written.path();
    let metadata = std::fs::read_to_string(dir.join("metadata")).unwrap();
    assert!(!metadata.contains("enum opscope_name"), "{metadata}");
    assert!(metadata.contains("string name;"));
    assert!(metadata.contains("enum opscope_category category;"));
    assert_eq!(slice_keys(&read_ours(dir)), slice_keys(&trace));
}

/// A trace cut after its first packet: the slices begun there and not ended (the
/// outer one, and the child whose begin is the packet's last event) end at the last
/// event read, counted as unmatched begins, as the reader's other open slices do
/// (they were dropped).
#[test]
fn own_slices_cut_off_before_their_end_end_at_the_last_event() {
    let mut events = vec![
        r#"{"ph":"X","cat":"op","name":"outer","pid":1,"tid":2,"ts":0,"dur":100000}"#.to_string(),
    ];
    for n in 0..3000 {
        events.push(format!(
            r#"{{"ph":"X","cat":"op","name":"child","pid":1,"tid":2,"ts":{},"dur":1}}"#,
            10 + 2 * n
        ));
    }
    let json = format!(r#"{{"traceEvents":[{}]}}"#, events.join(",\n"));
    let mut trace = Trace::new();
    crate::chrome::import(json.as_bytes(), "cut.json", &mut trace).unwrap();
    let written = write_dir(&trace, "cut");
    let dir = written.path();
    // One stream; its first packet's size (in bits) is the packet context's fourth
    // field, after the header (32 bytes) and the two timestamps.
    let stream = dir.join("stream_0");
    let bytes = std::fs::read(&stream).unwrap();
    let bits = u64::from_le_bytes(bytes[56..64].try_into().unwrap());
    let first = (bits / 8) as usize;
    assert!(first < bytes.len(), "one packet only");
    std::fs::write(&stream, &bytes[..first]).unwrap();
    let back = read_ours(dir);
    assert_eq!(back.repairs.unmatched_begins, 2);
    let s = &back.slices;
    let outer = (0..s.len())
        .find(|&i| back.str(s.name[i]) == "outer")
        .expect("the outer slice, begun in the first packet");
    let last = (0..s.len()).map(|i| s.end(i)).max().unwrap();
    assert_eq!(s.end(outer), last);
    // The first packet's 4,096 events: the outer begin, 2,047 children's begins and
    // ends, and the next child's begin.
    assert_eq!(s.len(), 1 + PACKET_EVENTS / 2);
}

/// What babeltrace2 prints of DIR with `options`, or `None` (saying why) off CI
/// without babeltrace2.
fn babeltrace2_text(options: &[&str], dir: &Path) -> Option<String> {
    let out = match Command::new("babeltrace2").args(options).arg(dir).output() {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but babeltrace2 cannot run ({e})"
            );
            opscope_corpus::skip(&format!("babeltrace2 is not installed ({e})"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "babeltrace2 refused {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// A trace whose processes and threads are named by text (a TensorFlow timeline's
/// devices) and whose events name no CPU: babeltrace2 sees packets without a `cpu_id`
/// (no made-up CPU 4294967295), and the names opscope gave numbers to come back with
/// their processes and threads.
#[test]
fn processes_named_by_text_keep_their_names_and_no_cpu_is_made_up() {
    let json = r#"{"traceEvents":[
      {"ph":"M","name":"process_name","pid":"/device:GPU:0 Compute","args":{"name":"/device:GPU:0 Compute"}},
      {"ph":"M","name":"thread_name","pid":7,"tid":8,"args":{"name":"worker"}},
      {"ph":"X","name":"MatMul","pid":"/device:GPU:0 Compute","tid":"stream 3","ts":1,"dur":4},
      {"ph":"X","name":"step","pid":7,"tid":8,"ts":2,"dur":5}
    ]}"#;
    let mut trace = Trace::new();
    crate::chrome::import(json.as_bytes(), "tf.json", &mut trace).unwrap();
    let written = write_dir(&trace, "named");
    let dir = written.path();
    let metadata = std::fs::read_to_string(dir.join("metadata")).unwrap();
    assert!(!metadata.contains("cpu_id"), "{metadata}");
    let back = read_ours(dir);
    let mut names: Vec<(String, String)> = back
        .threads
        .iter()
        .map(|t| {
            let p = &back.processes[t.process.index()];
            let name = |n: Option<StrId>| n.map_or("-".to_string(), |n| back.str(n).to_string());
            (name(p.name), name(t.name))
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("-".to_string(), "worker".to_string()),
            ("/device:GPU:0 Compute".to_string(), "stream 3".to_string())
        ]
    );
    let Some(text) = babeltrace2_text(&[], dir) else {
        return;
    };
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(!text.contains("cpu_id"), "{text}");
}
