//! opscope's own CTF (what `convert --to ctf` writes: enumeration labels, typed args,
//! slice begin/end pairs), damaged: a valid export of a small Kineto-like trace has
//! bytes overwritten at places the input picks and is cut where it says. Reading it
//! never panics, and the trace left behind keeps the model's invariants.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

const SOURCE: &str = r#"{"traceEvents": [
 {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":50,"args":{"Input Dims":[[2,3],[3,4]],"External id":7,"Sequence number":3}},
 {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":20,"dur":5,"args":{"Concrete Inputs":["", "1"]}},
 {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":30,"dur":8,"args":{"stream":7,"correlation":11}},
 {"ph":"i","s":"t","cat":"cpu_instant_event","name":"mark","pid":1,"tid":2,"ts":40},
 {"ph":"C","name":"mem","pid":1,"ts":45,"args":{"bytes":1024}},
 {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":5,"dur":80}
]}"#;

/// The export's metadata and stream files, made once.
fn exported() -> &'static (Vec<u8>, Vec<(String, Vec<u8>)>) {
    static FILES: OnceLock<(Vec<u8>, Vec<(String, Vec<u8>)>)> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut trace = Trace::new();
        opscope_formats::chrome::import(SOURCE.as_bytes(), "seed.json", &mut trace).unwrap();
        trace.finish();
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        opscope_formats::ctf::export::export(&trace, &mut |name, bytes| {
            files.push((name.to_string(), bytes.to_vec()));
            Ok(())
        })
        .unwrap();
        files.sort();
        let at = files.iter().position(|(n, _)| n == "metadata").unwrap();
        let (_, metadata) = files.remove(at);
        (metadata, files)
    })
}

fuzz_target!(|data: &[u8]| {
    let (metadata, files) = exported();
    let mut streams: Vec<(String, Vec<u8>)> = files.clone();
    // First two bytes: which stream to cut, and where (in 1/256ths of its length).
    let (cut, edits) = match data {
        [which, at, rest @ ..] => (Some((*which, *at)), rest),
        _ => (None, data),
    };
    // Then (stream, offset u16, byte) edits.
    for edit in edits.chunks_exact(4) {
        let s = edit[0] as usize % streams.len();
        let bytes = &mut streams[s].1;
        if !bytes.is_empty() {
            let at = u16::from_le_bytes([edit[1], edit[2]]) as usize % bytes.len();
            bytes[at] = edit[3];
        }
    }
    if let Some((which, at)) = cut {
        let bytes = &mut streams[which as usize % files.len()].1;
        let keep = bytes.len() * (at as usize + 1) / 256;
        bytes.truncate(keep);
    }
    let views: Vec<(String, &[u8])> = streams.iter().map(|(n, b)| (n.clone(), &b[..])).collect();
    let mut trace = Trace::new();
    let _ = opscope_formats::ctf::import("fuzz", metadata, "fuzz/metadata", &views, &mut trace);
    opscope_fuzz::check_invariants(&trace);
});
