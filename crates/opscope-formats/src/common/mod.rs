//! Import trackers every format shares, so that the same damage (an end with nothing
//! open, a begin never ended, a flow with one end missing) is repaired and counted in
//! `trace.repairs` the same way whichever format it came in.

pub(crate) mod flow_binder;
pub(crate) mod slice_stack;

pub(crate) use flow_binder::{FlowBinder, FlowEnd, FlowRole};
pub(crate) use slice_stack::SliceStack;
