//! Checks shared by the fuzz targets: the invariants [`opscope_model::Trace::finish`]
//! promises, and the export/re-import round trips.

use opscope_model::Trace;

/// Panics if `trace` breaks an invariant of the model ([`Trace::check`]: every
/// reference resolves, columns agree, durations are non-negative, slices are sorted by
/// track and time with valid nesting, arg bags read back).
pub fn check_invariants(trace: &Trace) {
    if let Err(broken) = trace.check() {
        panic!("{broken}");
    }
    let _ = trace.time_span();
}

/// Exports `trace` as Chrome JSON and imports the output again: the exporter must
/// write what the importer reads.
pub fn chrome_round_trip(trace: &Trace) {
    let mut out = Vec::new();
    opscope_formats::chrome::export(trace, &mut out).expect("chrome export failed");
    let mut again = Trace::new();
    if let Err(e) = opscope_formats::chrome::import(&out, "exported.json", &mut again) {
        panic!("re-importing the Chrome export failed: {e}\n{}", String::from_utf8_lossy(&out));
    }
    check_invariants(&again);
}

/// Exports `trace` as Perfetto protobuf and imports the output again.
pub fn perfetto_round_trip(trace: &Trace) {
    let mut out = Vec::new();
    opscope_formats::perfetto::export(trace, &mut out).expect("perfetto export failed");
    let mut again = Trace::new();
    if let Err(e) = opscope_formats::perfetto::import(&out, "exported.pftrace", &mut again) {
        panic!("re-importing the Perfetto export failed: {e}");
    }
    check_invariants(&again);
}
