//! A model saved with postcard, as the model cache saves the rest of one around its
//! mapped columns (`crates/opscope-engine/src/cache.rs`): arbitrary bytes never panic
//! nor exhaust memory when read back as a model and checked, and a model that reads
//! back and passes the check saves and reads back again with the same tables. (The
//! cache itself saves only models that pass the check and reads back only entries whose
//! CRC-32s match, so what it maps is what it checked.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    let Ok(trace) = postcard::from_bytes::<Trace>(data) else {
        return;
    };
    if trace.check().is_err() {
        return;
    }
    let _ = trace.time_span();
    // What analyses do with a model that passed: every bag's values read, every
    // string id among them resolved.
    let resolve = |args| {
        for (key, value) in trace.args.get(args) {
            let _ = trace.str(key);
            if let opscope_model::ArgValue::Str(s) | opscope_model::ArgValue::Json(s) = value {
                let _ = trace.str(s);
            }
        }
    };
    trace.slices.args.iter().for_each(|&a| resolve(a));
    trace.instants.args.iter().for_each(|&a| resolve(a));
    trace.sources.iter().for_each(|s| resolve(s.metadata));
    let saved = postcard::to_stdvec(&trace).expect("a model read back saves");
    let again: Trace = postcard::from_bytes(&saved).expect("a saved model reads back");
    again.check().expect("a saved model keeps the invariants");
    assert_eq!(again.strings.len(), trace.strings.len());
    assert_eq!(again.slices.ts, trace.slices.ts);
    assert_eq!(again.instants.ts, trace.instants.ts);
    assert_eq!(again.counters.value.len(), trace.counters.value.len());
});
