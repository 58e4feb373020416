//! Correlation on an XPlane with GPUs: every kernel and copy is linked, through
//! `correlation_id`, to a host launch event that carries the same id and starts before it.

mod common;

use common::{load, shared};
use opscope_analysis::correlate;
use opscope_model::args::ArgValue;

#[test]
fn xplane_gpu_work_is_linked_to_its_launch() {
    let Some(shared) = shared() else {
        return;
    };
    let trace = load(&shared.join("traces/xplane/GPU-multi-worker/34.83.195.179_6003.xplane.pb"));
    let c = correlate::correlate(&trace);
    assert!(c.device_slices > 1500, "{} device slices", c.device_slices);
    assert_eq!(c.unattributed, 0);
    let key = trace.strings.find("correlation_id").unwrap();
    let id = |i: usize| match trace.args.find(trace.slices.args[i], key) {
        Some(ArgValue::Int(v)) => v,
        other => panic!("slice {i}: correlation_id {other:?}"),
    };
    for i in (0..trace.slices.len()).filter(|&i| correlate::is_device_work(&trace, i)) {
        let call = c.launch_of(i).unwrap();
        assert_eq!(id(call), id(i));
        assert!(
            trace.slices.ts[call] <= trace.slices.ts[i],
            "work {i} starts before its launch"
        );
    }
}
