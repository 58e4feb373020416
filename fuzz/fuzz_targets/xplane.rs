//! XPlane importer: arbitrary bytes never panic, the trace left behind (even after an
//! error) keeps the model's invariants, and a successful import exports as Chrome JSON
//! and Perfetto that import again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    let mut trace = Trace::new();
    let result = opscope_formats::xplane::import(data, "fuzz.xplane.pb", &mut trace);
    opscope_fuzz::check_invariants(&trace);
    if result.is_ok() {
        opscope_fuzz::perfetto_round_trip(&trace);
        opscope_fuzz::chrome_round_trip(&trace);
    }
});
