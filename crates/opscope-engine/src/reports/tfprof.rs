//! tfprof's options that every tfprof view takes (`stats op`, `scope`, `code`): how
//! times are counted and totals made, and which part of the trace is looked at; and
//! the checks of their values.

use opscope_analysis::op_stats::Timing;
use opscope_analysis::view;
use opscope_analysis::window::Window;
use opscope_analysis::Context;
use serde::Deserialize;

use super::Error;

/// How times are counted and totals made.
#[derive(clap::Args, Deserialize, Default)]
#[serde(default)]
pub struct Accounting {
    /// Count each op run and kernel in whole microseconds, at least 1, as tfprof does
    /// (its figures come from TensorFlow's µs fields); default: to the nanosecond.
    #[arg(long = "tfprof_micros", alias = "tfprof-micros")]
    pub tfprof_micros: bool,
    /// Totals and shares count only the rows shown (tfprof's option; `true` or
    /// `false`, no value means true).
    #[arg(
        long = "account_displayed_op_only",
        alias = "account-displayed-op-only",
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub account_displayed_op_only: bool,
}

impl Accounting {
    /// How times are counted: tfprof's whole microseconds, or exactly.
    pub fn timing(&self) -> Timing {
        if self.tfprof_micros {
            Timing::WholeMicros
        } else {
            Timing::Exact
        }
    }
}

/// The part of the trace a view looks at.
#[derive(clap::Args, Deserialize, Default)]
#[serde(default)]
pub struct Steps {
    /// Leave out the last profiler step and the work launched in it.
    #[arg(long = "exclude_last_step", alias = "exclude-last-step")]
    pub exclude_last_step: bool,
    /// Only step N (ProfilerStep#N, train_step_N) and the work launched in it.
    #[arg(long = "step", value_name = "N", conflicts_with = "exclude_last_step")]
    pub step: Option<u64>,
}

impl Steps {
    /// The window `-step` and `--exclude-last-step` ask for.
    pub fn window(&self, cx: &Context) -> Result<Window, Error> {
        if self.step.is_some() && self.exclude_last_step {
            return Err(Error::options("-step and -exclude_last_step: give one"));
        }
        match self.step {
            Some(n) => {
                let known = cx.step_numbers();
                if !known.contains(&n) {
                    let list: Vec<String> = known.iter().map(u64::to_string).collect();
                    return Err(Error::options(format!(
                        "-step {n}: the trace has no such step marker (its steps: {})",
                        if list.is_empty() {
                            "none".to_string()
                        } else {
                            list.join(", ")
                        }
                    )));
                }
                Ok(Window::Step(n))
            }
            None if self.exclude_last_step => Ok(Window::BeforeLastStep),
            None => Ok(Window::Whole),
        }
    }
}

/// A list of regexes option: `-NAME` names it in the error.
pub fn regex_list(name: &str, list: &str) -> Result<Vec<regex::Regex>, Error> {
    view::regexes(list).map_err(|e| Error::options(format!("-{name}: not a valid regex list: {e}")))
}
