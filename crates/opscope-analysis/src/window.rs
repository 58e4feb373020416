//! Which part of a trace an analysis looks at: all of it, or (as HTA does by default)
//! everything before the last profiler step, which is often cut short when the
//! profiler stops. Device work belongs to the step its launch was made in.

use opscope_model::{SourceId, Trace};

use crate::correlate::{self, Correlation};
use crate::markers::Bounds;

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

/// The steps these markers (per source, see [`crate::markers::step_markers`]) mark, by
/// number (sorted, unique).
pub(crate) fn step_numbers_of(markers: &[Vec<Bounds>]) -> Vec<u64> {
    let mut numbers: Vec<u64> = markers
        .iter()
        .flatten()
        .filter_map(|b| step_number(&b.0))
        .collect();
    numbers.sort_unstable();
    numbers.dedup();
    numbers
}

/// Per slice row, whether it is in the window.
pub fn select(trace: &Trace, correlation: &Correlation, window: Window) -> Vec<bool> {
    select_with(
        trace,
        correlation,
        &crate::markers::step_markers(trace),
        window,
    )
}

/// [`select`], given the trace's step markers (which the analysis context keeps).
pub(crate) fn select_with(
    trace: &Trace,
    correlation: &Correlation,
    markers: &[Vec<Bounds>],
    window: Window,
) -> Vec<bool> {
    let s = &trace.slices;
    let n = s.len();
    match window {
        Window::Whole => return vec![true; n],
        Window::Step(number) => return select_step(trace, correlation, markers, number),
        Window::BeforeLastStep => {}
    }
    // Where the last step starts, per source with at least two distinct steps.
    let steps: Vec<(usize, i64)> = markers
        .iter()
        .map(|m| {
            let mut names: Vec<&str> = m.iter().map(|b| b.0.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            (names.len(), m.iter().map(|b| b.1).max().unwrap_or(i64::MIN))
        })
        .collect();
    let cut = |src: Option<SourceId>| -> Option<i64> {
        let (distinct, last) = steps[src?.index()];
        (distinct >= 2).then_some(last)
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
fn select_step(
    trace: &Trace,
    correlation: &Correlation,
    markers: &[Vec<Bounds>],
    number: u64,
) -> Vec<bool> {
    let s = &trace.slices;
    // The step's span per source.
    let spans: Vec<Option<(i64, i64)>> = markers
        .iter()
        .map(|m| {
            m.iter()
                .find(|b| step_number(&b.0) == Some(number))
                .map(|b| (b.1, b.2))
        })
        .collect();
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
