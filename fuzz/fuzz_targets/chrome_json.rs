//! Chrome/Kineto JSON importer: arbitrary bytes never panic, the trace left behind
//! (even after an error) keeps the model's invariants, a successful import exports as
//! Chrome JSON that imports again, and reading the same bytes as a stream in small
//! pieces gives the same outcome and the same events; and where serde reads the bytes
//! (the slow reference reader, `chrome::import_reference`), the fast reader builds the
//! same model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opscope_model::Trace;

fuzz_target!(|data: &[u8]| {
    let mut trace = Trace::new();
    let result = opscope_formats::chrome::import(data, "fuzz.json", &mut trace);
    opscope_fuzz::check_invariants(&trace);

    let mut streamed = Trace::new();
    let pieces = 1 + data.len() % 61;
    let streamed_result =
        opscope_formats::chrome::import_reader_in_pieces(data, "fuzz.json", &mut streamed, pieces);
    opscope_fuzz::check_invariants(&streamed);
    assert_eq!(
        result.is_ok(),
        streamed_result.is_ok(),
        "whole: {result:?}, in pieces of {pieces}: {streamed_result:?}"
    );

    let mut reference = Trace::new();
    let reference_result =
        opscope_formats::chrome::import_reference(data, "fuzz.json", &mut reference);
    // The fast reader also takes raw control characters in strings (JSON forbids them;
    // serde refuses), so it may read more than serde, never less.
    assert!(
        result.is_ok() || reference_result.is_err(),
        "fast: {result:?}, reference: {reference_result:?}"
    );
    if reference_result.is_ok() {
        if let Some(part) = opscope_model::compare::first_difference(&trace, &reference) {
            panic!("the fast reader's model differs from the reference's in its {part}");
        }
    }

    if result.is_ok() {
        assert_eq!(trace.slices.len(), streamed.slices.len());
        assert_eq!(trace.instants.len(), streamed.instants.len());
        assert_eq!(trace.counters.len(), streamed.counters.len());
        assert_eq!(trace.flows.len(), streamed.flows.len());
        opscope_fuzz::chrome_round_trip(&trace);
    }
});
