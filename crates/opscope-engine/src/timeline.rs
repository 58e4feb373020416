//! What `-output timeline:outfile=F` writes: the ops a view shows and the device work
//! and runtime calls that belong to them, as a selection of the trace's slices.

use opscope_analysis::Context;

/// The `selected` ops `wanted` accepts, and the device work and runtime calls that
/// belong to them.
pub fn selection(cx: &Context, selected: &[bool], wanted: impl Fn(usize) -> bool) -> Vec<bool> {
    let trace = cx.trace();
    let correlation = cx.correlation();
    let is_op = |i: usize| opscope_analysis::attribution::is_op_slice(trace, i);
    (0..trace.slices.len())
        .map(|i| {
            selected[i]
                && if is_op(i) {
                    wanted(i)
                } else {
                    correlation
                        .op_of(trace, i)
                        .is_some_and(|op| is_op(op) && wanted(op))
                }
        })
        .collect()
}
