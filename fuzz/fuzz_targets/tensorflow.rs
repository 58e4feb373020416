//! TensorFlow RunMetadata and GraphDef readers: the input is a GraphDef (text or
//! binary), a 0xFF byte, then a RunMetadata. No panic; the graph parser's errors are
//! clean; the trace left behind keeps the model's invariants, and on `Ok` exports as
//! Chrome JSON and Perfetto that import again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    let (graph_bytes, run_meta) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&[][..], data),
    };
    let graph = opscope_formats::run_metadata::graph::parse(graph_bytes, "fuzz/graph.pbtxt").ok();
    let mut trace = Trace::new();
    let result =
        opscope_formats::run_metadata::import(run_meta, "fuzz/run_meta", graph.as_ref(), &mut trace);
    opscope_fuzz::check_invariants(&trace);
    if result.is_ok() {
        opscope_fuzz::perfetto_round_trip(&trace);
        opscope_fuzz::chrome_round_trip(&trace);
    }
});
