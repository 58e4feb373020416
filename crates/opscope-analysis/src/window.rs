//! Which part of a trace an analysis looks at: all of it, or (as HTA does by default)
//! everything before the last profiler step, which is often cut short when the
//! profiler stops. Device work belongs to the step its launch was made in.

use opscope_model::{SliceKind, SourceId, Trace, TrackKind};

use crate::correlate::{self, Correlation};

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Window {
    /// Every slice.
    #[default]
    Whole,
    /// In a source with two or more distinct profiler steps, only host slices that start
    /// before the last step does, and device work launched by them (or, with no known
    /// launch, starting before it).
    BeforeLastStep,
}

/// Per slice row, whether it is in the window.
pub fn select(trace: &Trace, correlation: &Correlation, window: Window) -> Vec<bool> {
    let s = &trace.slices;
    let n = s.len();
    if window == Window::Whole {
        return vec![true; n];
    }
    // Where the last step starts, per source with at least two distinct steps.
    let mut steps: Vec<(Vec<opscope_model::StrId>, i64)> =
        vec![(Vec::new(), i64::MIN); trace.sources.len()];
    for i in 0..n {
        let on_host = trace.tracks[s.track[i] as usize].kind == TrackKind::Thread;
        if on_host && s.kind(i) == SliceKind::Step {
            if let Some(src) = correlate::source_of(trace, i) {
                let entry = &mut steps[src.index()];
                if !entry.0.contains(&s.name[i]) {
                    entry.0.push(s.name[i]);
                }
                entry.1 = entry.1.max(s.ts[i]);
            }
        }
    }
    let cut = |src: Option<SourceId>| -> Option<i64> {
        let (names, last) = &steps[src?.index()];
        (names.len() >= 2).then_some(*last)
    };
    (0..n)
        .map(|i| {
            let Some(cut) = cut(correlate::source_of(trace, i)) else {
                return true;
            };
            let at = match correlation.launch_of(i) {
                Some(call) if correlate::is_device_work(trace, i) => s.ts[call],
                _ => s.ts[i],
            };
            at < cut
        })
        .collect()
}
