//! Chrome/Kineto JSON importer: arbitrary bytes never panic, the trace left behind
//! (even after an error) keeps the model's invariants, and a successful import
//! exports as Chrome JSON that imports again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    let mut trace = Trace::new();
    let result = opscope_formats::chrome::import(data, "fuzz.json", &mut trace);
    opscope_fuzz::check_invariants(&trace);
    if result.is_ok() {
        opscope_fuzz::chrome_round_trip(&trace);
    }
});
