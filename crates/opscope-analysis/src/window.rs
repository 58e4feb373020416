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
    /// HTA's default: in a source with two or more distinct profiler steps, only host
    /// slices that start before the last step does, and device work launched by them;
    /// device work whose launch is not in the trace (launched before recording began)
    /// is left out.
    BeforeLastStep,
    /// As [`Window::BeforeLastStep`], but device work with no known launch is kept when
    /// it starts before the last step.
    BeforeLastStepByStart,
    /// Only step N (`ProfilerStep#N`, `train_step_N`): host slices starting within it and
    /// device work launched by them (tfprof's `-step`).
    Step(u64),
    /// Host slices starting in `[start, end)` ns and device work launched by them (or,
    /// with no known launch, starting in it): a span picked on a timeline.
    Span(i64, i64),
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
        Window::Span(start, end) => return select_span(trace, correlation, start, end),
        Window::BeforeLastStep | Window::BeforeLastStepByStart => {}
    }
    let by_start = window == Window::BeforeLastStepByStart;
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
            let unlaunched =
                correlate::is_device_work(trace, i) && correlation.launch_of(i).is_none();
            if unlaunched && !by_start {
                return false;
            }
            let at = launched_at(trace, correlation, i);
            at < cut
        })
        .collect()
}

/// Slices of a span of time (see [`Window::Span`]).
fn select_span(trace: &Trace, correlation: &Correlation, start: i64, end: i64) -> Vec<bool> {
    let s = &trace.slices;
    (0..s.len())
        .map(|i| (start..end).contains(&launched_at(trace, correlation, i)))
        .collect()
}

/// When a slice's work was asked for: device work at its launch, when known.
fn launched_at(trace: &Trace, correlation: &Correlation, i: usize) -> i64 {
    match correlation.launch_of(i) {
        Some(call) if correlate::is_device_work(trace, i) => trace.slices.ts[call],
        _ => trace.slices.ts[i],
    }
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
            let at = launched_at(trace, correlation, i);
            (start..end).contains(&at)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::Trace;

    /// A span takes the host work that starts in it, and the kernels that work launched
    /// even when they run after the span ends.
    #[test]
    fn a_span_takes_kernels_by_their_launch() {
        let json = r#"{"traceEvents":[
            {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":0,"dur":50},
            {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":10,"dur":5,"args":{"correlation":7}},
            {"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":200,"dur":30,"args":{"correlation":7,"device":0,"stream":7}},
            {"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":150,"dur":10}
        ]}"#;
        let mut t = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut t).unwrap();
        t.finish();
        let correlation = correlate::correlate(&t);
        let chosen = select(&t, &correlation, Window::Span(0, 100_000));
        let mut names: Vec<&str> = (0..t.slices.len())
            .filter(|&i| chosen[i])
            .map(|i| t.str(t.slices.name[i]))
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["aten::mm", "cudaLaunchKernel", "gemm"]);
        let later = select(&t, &correlation, Window::Span(100_000, 300_000));
        let names: Vec<&str> = (0..t.slices.len())
            .filter(|&i| later[i])
            .map(|i| t.str(t.slices.name[i]))
            .collect();
        assert_eq!(names, ["aten::add"]);
    }
}
