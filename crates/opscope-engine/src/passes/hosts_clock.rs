//! Several hosts on one clock: traces of two or more hosts are put on the reference
//! host's clock by what their collectives say (`opscope merge` shows how). Run after
//! the model cache, which keeps each file's own clock (`merge --clock-per-file`).

use opscope_model::Trace;

/// Traces of two or more hosts are put on one clock (the reference host's) by what
/// their collectives say (`opscope merge` shows how); what could not be done is a
/// warning. Not kept in the model cache: `merge --clock-per-file` needs the clocks as
/// the files have them.
pub fn merge_hosts(trace: &mut Trace) {
    let mut hosts: Vec<_> = trace.sources.iter().filter_map(|s| s.host).collect();
    hosts.sort_unstable_by_key(|h| h.0);
    hosts.dedup();
    if hosts.len() < 2 {
        return;
    }
    let report = opscope_analysis::clock_merge::merge_clocks(trace, &Default::default());
    for warning in report.warnings() {
        eprintln!("opscope: warning: {warning}");
    }
}
