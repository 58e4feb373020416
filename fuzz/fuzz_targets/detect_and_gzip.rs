//! The CLI's input path: gzip inflation and format detection, then whichever importer
//! the bytes look like; nothing panics and the trace keeps the model's invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    // Gzip'd JSON is streamed through the inflating thread (`read_ahead`), not
    // inflated whole first: that path too.
    let mut streamed = Trace::new();
    let _ = opscope_formats::import_bytes(data, "fuzz.json.gz", &mut streamed);
    opscope_fuzz::check_invariants(&streamed);
    let Ok(bytes) = opscope_formats::input::decompress_if_gzip(data, "fuzz.gz") else {
        return;
    };
    let mut trace = Trace::new();
    let _ = opscope_formats::import_bytes(&bytes, "fuzz.gz", &mut trace);
    opscope_fuzz::check_invariants(&trace);
});
