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
    /// Only step N (`ProfilerStep#N`, `train_step_N`): host slices starting within it and
    /// device work launched by them (tfprof's `-step`).
    Step(u64),
}

/// The number a step marker ends with: 3 in `ProfilerStep#3` or `train_step_3`.
pub fn step_number(name: &str) -> Option<u64> {
    let digits: String = name
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// The steps a trace marks, by number (sorted, unique).
pub fn step_numbers(trace: &Trace) -> Vec<u64> {
    let mut numbers: Vec<u64> = crate::steps::steps(trace, &crate::steps::StepOptions::default())
        .iter()
        .filter(|s| s.found_by == crate::steps::StepSource::Markers)
        .flat_map(|s| s.steps.iter().filter_map(|st| step_number(&st.name)))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
}

/// Per slice row, whether it is in the window.
pub fn select(trace: &Trace, correlation: &Correlation, window: Window) -> Vec<bool> {
    let s = &trace.slices;
    let n = s.len();
    match window {
        Window::Whole => return vec![true; n],
        Window::Step(number) => return select_step(trace, correlation, number),
        Window::BeforeLastStep => {}
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

/// Slices of step `number` (see [`Window::Step`]).
fn select_step(trace: &Trace, correlation: &Correlation, number: u64) -> Vec<bool> {
    let s = &trace.slices;
    // The step's span per source.
    let mut spans: Vec<Option<(i64, i64)>> = vec![None; trace.sources.len()];
    for found in crate::steps::steps(trace, &crate::steps::StepOptions::default()) {
        if found.found_by != crate::steps::StepSource::Markers {
            continue;
        }
        let Some(src) = trace.sources.iter().position(|x| x.path == found.file) else {
            continue;
        };
        if let Some(step) = found
            .steps
            .iter()
            .find(|st| step_number(&st.name) == Some(number))
        {
            spans[src] = Some((step.start_ns, step.start_ns + step.dur_ns));
        }
    }
    (0..s.len())
        .map(|i| {
            let Some((start, end)) =
                correlate::source_of(trace, i).and_then(|src| spans[src.index()])
            else {
                return false;
            };
            let at = match correlation.launch_of(i) {
                Some(call) if correlate::is_device_work(trace, i) => s.ts[call],
                _ => s.ts[i],
            };
            (start..end).contains(&at)
        })
        .collect()
}
