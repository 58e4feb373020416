//! One trace under analysis, with what several analyses of it need computed at most
//! once, when first asked: the correlation of launches with device work, the step
//! markers, and the slices of the window a command looks at. Every analysis takes a
//! [`Context`], so a command (or a live view) that runs several pays for each once.

use std::borrow::Cow;
use std::cell::OnceCell;

use opscope_model::Trace;

use crate::correlate::{self, Correlation};
use crate::markers::{self, Bounds};
use crate::window::{self, Window};

pub struct Context<'t> {
    trace: &'t Trace,
    correlation: OnceCell<Cow<'t, Correlation>>,
    step_markers: OnceCell<Cow<'t, [Vec<Bounds>]>>,
    /// The first window asked for and its slices (a command looks at one window).
    selection: OnceCell<(Window, Vec<bool>)>,
}

impl<'t> Context<'t> {
    pub fn new(trace: &'t Trace) -> Context<'t> {
        Context {
            trace,
            correlation: OnceCell::new(),
            step_markers: OnceCell::new(),
            selection: OnceCell::new(),
        }
    }

    /// A context whose correlation and step markers were computed before (a viewer
    /// keeps them across the many questions it asks of one trace).
    pub fn sharing(
        trace: &'t Trace,
        correlation: &'t Correlation,
        step_markers: &'t [Vec<Bounds>],
    ) -> Context<'t> {
        Context {
            trace,
            correlation: OnceCell::from(Cow::Borrowed(correlation)),
            step_markers: OnceCell::from(Cow::Borrowed(step_markers)),
            selection: OnceCell::new(),
        }
    }

    pub fn trace(&self) -> &'t Trace {
        self.trace
    }

    /// Which call launched which device work (see [`correlate`]).
    pub fn correlation(&self) -> &Correlation {
        self.correlation
            .get_or_init(|| Cow::Owned(correlate::correlate(self.trace)))
    }

    /// Per source, its step markers (see [`markers::step_markers`]).
    pub fn step_markers(&self) -> &[Vec<Bounds>] {
        self.step_markers
            .get_or_init(|| Cow::Owned(markers::step_markers(self.trace)))
    }

    /// The steps the trace marks, by number (sorted, unique).
    pub fn step_numbers(&self) -> Vec<u64> {
        window::step_numbers_of(self.step_markers())
    }

    /// Per slice row, whether it is in `window`.
    pub fn selected(&self, window: Window) -> Cow<'_, [bool]> {
        let compute =
            || window::select_with(self.trace, self.correlation(), self.step_markers(), window);
        let (first, selected) = self.selection.get_or_init(|| (window, compute()));
        if *first == window {
            Cow::Borrowed(selected)
        } else {
            Cow::Owned(compute())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A selection is computed once per window, and another window still gets its own.
    #[test]
    fn windows_are_selected_once_and_each_by_its_own_rule() {
        let json = r#"[
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":50},
            {"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","pid":1,"tid":1,"ts":100,"dur":50}
        ]"#;
        let mut t = Trace::new();
        opscope_formats::chrome::import(json.as_bytes(), "t.json", &mut t).unwrap();
        t.finish();
        let cx = Context::new(&t);
        assert_eq!(cx.step_numbers(), vec![1, 2]);
        let before_last = cx.selected(Window::BeforeLastStep);
        assert_eq!(&*before_last, &[true, false]);
        assert!(matches!(before_last, Cow::Borrowed(_)));
        assert_eq!(&*cx.selected(Window::Whole), &[true, true]);
        assert!(matches!(
            cx.selected(Window::BeforeLastStep),
            Cow::Borrowed(_)
        ));
    }
}
