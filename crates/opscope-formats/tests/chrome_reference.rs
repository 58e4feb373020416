//! The fast Chrome JSON reader against the slow one (serde reads the document, the same
//! builder makes the model): on every shared JSON trace, whole and read as a stream in
//! small pieces, and on variants of them no tool wrote (events reordered, whitespace
//! added, strings escaped, keys renamed, pieces cut), the models are equal byte for
//! byte as the model cache saves them, or the reference refuses the text.

use std::io::Read;
use std::path::{Path, PathBuf};

use opscope_formats::chrome;
use opscope_model::compare::{first_difference, shape};
use opscope_model::Trace;

fn json_traces(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            json_traces(&path, found);
        } else {
            let name = path.to_string_lossy();
            if name.ends_with(".json") || name.ends_with(".json.gz") {
                found.push(path);
            }
        }
    }
}

fn text_of(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut text)
            .unwrap();
        text
    } else {
        raw
    }
}

/// Both readers give the same model of `text`, or the reference refuses it; returns
/// whether it read it.
fn same_model(what: &str, text: &[u8]) -> bool {
    let mut reference = Trace::new();
    let reference_result = chrome::import_reference(text, "trace.json", &mut reference);
    let mut fast = Trace::new();
    let fast_result = chrome::import(text, "trace.json", &mut fast);
    // The fast reader also takes raw control characters in strings (JSON forbids them;
    // serde refuses them): it may read more than serde, never less.
    assert!(
        fast_result.is_ok() || reference_result.is_err(),
        "{what}: fast {fast_result:?}, reference {reference_result:?}"
    );
    if reference_result.is_err() {
        return false;
    }
    if let Some(part) = first_difference(&fast, &reference) {
        panic!(
            "{what}: the fast reader's model ({}) differs from the reference's ({}) in its \
             {part}",
            shape(&fast),
            shape(&reference)
        );
    }
    // Read as a stream, handed over in pieces that cut events anywhere (the smallest
    // only for texts of a few MB: a debug build's test stays within seconds).
    let smallest = if text.len() < 4 << 20 { 61 } else { 4093 };
    for pieces in [1 << 20, 4093, smallest] {
        let mut streamed = Trace::new();
        chrome::import_reader_in_pieces(text, "trace.json", &mut streamed, pieces)
            .unwrap_or_else(|e| panic!("{what}, in pieces of {pieces}: {e}"));
        if let Some(part) = first_difference(&streamed, &reference) {
            panic!(
                "{what}: read in pieces of {pieces}, the model ({}) differs from the \
                 reference's ({}) in its {part}",
                shape(&streamed),
                shape(&reference)
            );
        }
    }
    true
}

#[test]
fn every_shared_json_trace_reads_as_the_reference_reads_it() {
    let Some(traces) = opscope_corpus::traces() else {
        return;
    };
    let mut files = Vec::new();
    json_traces(&traces, &mut files);
    assert!(files.len() >= 20, "the shared JSON traces: {files:?}");
    let mut read = 0;
    for file in &files {
        let text = text_of(file);
        let what = file.strip_prefix(&traces).unwrap().display().to_string();
        read += same_model(&what, &text) as usize;
    }
    // A few shared files are JSON but no trace (peer settings, configs): refused by both.
    assert!(
        read * 10 >= files.len() * 8,
        "{read} of {} read",
        files.len()
    );
    eprintln!("{read} of {} shared JSON files read alike", files.len());
}

/// Rewrites of one real trace that keep its meaning but not its bytes: what the fast
/// reader's shortcuts (keys by their first bytes, numbers without strings, spans of the
/// text) must not depend on.
#[test]
fn rewritten_traces_read_as_the_reference_reads_them() {
    let Some(traces) = opscope_corpus::traces() else {
        return;
    };
    let file = traces.join("kineto/hta/trace_diff/control/control.json.gz");
    let text = String::from_utf8(text_of(&file)).unwrap();
    let short: String = {
        // The first 3,000 events keep the test quick in a debug build.
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut doc = doc;
        let events = doc["traceEvents"].as_array_mut().unwrap();
        events.truncate(3000);
        serde_json::to_string(&doc).unwrap()
    };
    assert!(same_model("the first events", short.as_bytes()));
    let pretty = {
        let doc: serde_json::Value = serde_json::from_str(&short).unwrap();
        serde_json::to_string_pretty(&doc).unwrap()
    };
    assert!(same_model("pretty-printed", pretty.as_bytes()));
    let spaced = short
        .replace("\":", "\" :\t")
        .replace(",\"", "\r\n ,  \"")
        .replace("},{", "}\n,\n{");
    assert!(same_model(
        "white space between all tokens",
        spaced.as_bytes()
    ));
    let escaped = short
        .replace("aten::", "aten\\u003a\\u003a")
        .replace("\"name\"", "\"n\\u0061me\"");
    assert!(same_model("escaped names and keys", escaped.as_bytes()));
    let exponents = short.replace("\"dur\":1,", "\"dur\":1.0e0,");
    assert_ne!(exponents, short, "durations of 1 µs to rewrite");
    assert!(same_model("exponents", exponents.as_bytes()));
    let bare = {
        let doc: serde_json::Value = serde_json::from_str(&short).unwrap();
        serde_json::to_string(&doc["traceEvents"]).unwrap()
    };
    assert!(same_model("the bare event array", bare.as_bytes()));
    let reversed = {
        let mut doc: serde_json::Value = serde_json::from_str(&short).unwrap();
        doc["traceEvents"].as_array_mut().unwrap().reverse();
        serde_json::to_string(&doc).unwrap()
    };
    assert!(same_model("events in reverse", reversed.as_bytes()));
    // A raw tab in a name (JSON forbids it): the fast reader keeps the event.
    let tab = short.replacen("aten::", "aten:\t:", 1);
    assert!(chrome::import_reference(tab.as_bytes(), "tab.json", &mut Trace::new()).is_err());
    let mut read = Trace::new();
    chrome::import(tab.as_bytes(), "tab.json", &mut read).unwrap();
    assert!((0..read.strings.len()).any(|i| read
        .strings
        .get(opscope_model::StrId(i as u32))
        .contains("aten:\t:")));
    // Cut anywhere: both refuse (the fast reader keeps what came before, which the
    // reference cannot give).
    for cut in [1, 2, 100, short.len() / 3, short.len() / 2, short.len() - 2] {
        let text = &short.as_bytes()[..cut];
        assert!(!same_model(&format!("cut at {cut}"), text));
        assert!(
            chrome::import(text, "cut.json", &mut Trace::new()).is_err(),
            "cut at {cut}"
        );
    }
}

/// Complete (`X`) events in every shape the fast reader hands the builder directly or
/// not (ids absent, zero, numeric or strings; `ts` and `dur` as plain numbers, text,
/// absent; names absent; args of every kind), interleaved so that the last thread
/// looked up is reused across the two paths.
#[test]
fn complete_events_of_every_shape_read_as_the_reference_reads_them() {
    let shapes = [
        r#"{"ph":"X","name":"a","cat":"cpu_op","pid":1,"tid":2,"ts":10,"dur":5,"args":{"External id":7,"Ev Idx":0}}"#,
        r#"{"ph":"X","name":"b","pid":1,"tid":2,"ts":11,"dur":1}"#,
        r#"{"ph":"X","cat":"kernel","pid":0,"tid":0,"ts":12.5,"dur":2.25}"#,
        r#"{"ph":"X","name":"no ids","ts":13,"dur":1}"#,
        r#"{"ph":"X","name":"only pid","pid":0,"ts":14,"dur":1}"#,
        r#"{"ph":"X","name":"no dur","pid":1,"tid":2,"ts":15}"#,
        r#"{"ph":"X","name":"text dur","pid":1,"tid":2,"ts":16,"dur":1.5e1}"#,
        r#"{"ph":"X","name":"text ts","pid":1,"tid":2,"ts":1.7e1,"dur":1}"#,
        r#"{"ph":"X","name":"bad dur","pid":1,"tid":2,"ts":18,"dur":"x"}"#,
        r#"{"ph":"X","name":"bad ts","pid":1,"tid":2,"ts":"x","dur":1}"#,
        r#"{"ph":"X","name":"no ts","pid":1,"tid":2,"dur":1}"#,
        r#"{"ph":"X","name":"string pid","pid":"Traces","tid":2,"ts":19,"dur":1}"#,
        r#"{"ph":"X","name":"string tid","pid":1,"tid":"stream 7","ts":20,"dur":1}"#,
        r#"{"ph":"X","name":"numeric string pid","pid":"1","tid":2,"ts":21,"dur":1}"#,
        r#"{"ph":"X","name":"negative","pid":-1,"tid":-2,"ts":-22,"dur":1}"#,
        r#"{"ph":"\u0058","name":"escaped ph","pid":1,"tid":2,"ts":23,"dur":1}"#,
        r#"{"ph":"XX","name":"long ph","pid":1,"tid":2,"ts":24,"dur":1}"#,
        r#"{"ph":"X","name":"args array","pid":1,"tid":2,"ts":25,"dur":1,"args":[1,2]}"#,
        r#"{"ph":"X","name":"args of all kinds","pid":1,"tid":2,"ts":26,"dur":1,"args":{"s":"v","f":1.5,"b":true,"n":null,"o":{"x":[1]},"big":18446744073709551615}}"#,
        r#"{"ph":"X","name":"with id","id":3,"bp":"e","pid":1,"tid":2,"ts":27,"dur":1}"#,
        r#"{"ph":"X","name":"x","cat":"python_function","pid":3,"tid":3,"ts":28,"dur":100,"args":{"Python id":1}}"#,
        r#"{"ph":"B","name":"open","pid":1,"tid":2,"ts":29}"#,
        r#"{"ph":"X","name":"inside","pid":1,"tid":2,"ts":30,"dur":1}"#,
        r#"{"ph":"E","pid":1,"tid":2,"ts":31}"#,
    ];
    // Every shape after every other one: the thread cache and the strings' recent
    // slots see each transition between the two paths.
    let mut events = Vec::new();
    for a in &shapes {
        for b in &shapes {
            events.push(*a);
            events.push(*b);
        }
    }
    let text = format!("[{}]", events.join(",\n"));
    assert!(same_model(
        "complete events of every shape",
        text.as_bytes()
    ));
    let mut trace = Trace::new();
    chrome::import(text.as_bytes(), "t.json", &mut trace).unwrap();
    assert!(trace.slices.len() > 2 * shapes.len() * 15);
    assert!(trace.repairs.malformed_events > 0, "the bad ts and dur");
}
