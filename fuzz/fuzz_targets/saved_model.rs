//! The model cache's payload (`crates/opscope/src/cache.rs` saves a finished model with
//! bincode): arbitrary bytes never panic nor exhaust memory when read back as a model,
//! and a model read back saves and reads again to the same bytes. The cache checks a
//! CRC-32 before decoding, so this is the defence against a hostile entry, not a
//! damaged one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    if let Ok(trace) = bincode::deserialize::<Trace>(data) {
        let saved = bincode::serialize(&trace).expect("a model read back saves");
        let again: Trace = bincode::deserialize(&saved).expect("a saved model reads back");
        assert_eq!(again.strings.len(), trace.strings.len());
        assert_eq!(again.slices.len(), trace.slices.len());
    }
});
