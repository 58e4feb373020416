//! Nsight Systems SQLite reader on any bytes (SQLite opens them read-only in memory):
//! no panic, the model's invariants hold, and on `Ok` the trace exports as Chrome JSON
//! and Perfetto that import again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    let mut trace = Trace::new();
    let result = opscope_formats::nsys::import_bytes(data, "fuzz.sqlite", &mut trace);
    opscope_fuzz::check_invariants(&trace);
    if result.is_ok() {
        opscope_fuzz::perfetto_round_trip(&trace);
        opscope_fuzz::chrome_round_trip(&trace);
    }
});
