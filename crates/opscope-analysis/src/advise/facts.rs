//! What several rules read, computed once when first asked: the `gpu` and `steps`
//! reports, the device work of each source and device in time order, the time each
//! source was looked at (its steps' time, else its span), and the device properties a
//! trace records.

use std::sync::OnceLock;

use opscope_model::args::ArgValue;
use opscope_model::{DeviceId, SliceKind, SourceId, Trace};

use super::AdviseOptions;
use crate::context::Context;
use crate::correlate::{self, Correlation};
use crate::gpu::{self, GpuOptions, GpuReport};
use crate::markers::Bounds;
use crate::steps::{self, StepOptions, StepSource, StepsReport};

/// The device work of one source's device, in start order.
#[derive(Clone, Debug)]
pub struct DeviceWork {
    pub source: SourceId,
    pub device: Option<DeviceId>,
    /// `rank 0 gpu 0`, or the file and device.
    pub label: String,
    pub slices: Vec<usize>,
}

/// A device's properties as Kineto's `deviceProperties` records them.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceProps {
    pub source: SourceId,
    pub id: u32,
    pub name: String,
    pub total_memory: Option<i64>,
    pub compute: Option<(i64, i64)>,
}

/// What the rules read. It is `Sync`: the rules run side by side, each filling what it
/// asks first (the others wait for it), and each that needs an analysis context makes
/// one that shares the correlation and the step markers.
pub struct Facts<'c, 't> {
    trace: &'t Trace,
    correlation: &'c Correlation,
    markers: &'c [Vec<Bounds>],
    pub options: &'c AdviseOptions,
    gpu: OnceLock<GpuReport>,
    steps: OnceLock<StepsReport>,
    device_work: OnceLock<Vec<DeviceWork>>,
    props: OnceLock<Vec<DeviceProps>>,
    selected: OnceLock<Vec<bool>>,
    bounds: OnceLock<Vec<[i64; 2]>>,
    by_kind: OnceLock<Vec<Vec<usize>>>,
    op_rows: OnceLock<Vec<crate::op_stats::OpRow>>,
}

impl<'c, 't> Facts<'c, 't> {
    pub fn new(cx: &'c Context<'t>, options: &'c AdviseOptions) -> Facts<'c, 't> {
        Facts {
            trace: cx.trace(),
            correlation: cx.correlation(),
            markers: cx.step_markers(),
            options,
            gpu: OnceLock::new(),
            steps: OnceLock::new(),
            device_work: OnceLock::new(),
            props: OnceLock::new(),
            selected: OnceLock::new(),
            bounds: OnceLock::new(),
            by_kind: OnceLock::new(),
            op_rows: OnceLock::new(),
        }
    }

    /// Computes the analyses most rules share, `gpu`, `steps` and `stats op`'s rows, at
    /// once on the cores there are (each on a context of its own that shares the
    /// correlation and the step markers), before the rules run one after another.
    pub fn prefetch(&self) {
        let trace = self.trace();
        let (correlation, markers) = (self.correlation, self.markers);
        let window = self.options.window;
        let own = || Context::sharing(trace, correlation, markers);
        let options = self.op_stats_options();
        let ((gpu, steps), ops) = rayon::join(
            || {
                rayon::join(
                    || {
                        gpu::analyze(
                            &own(),
                            &GpuOptions {
                                window,
                                ..GpuOptions::default()
                            },
                        )
                    },
                    || steps::report(&own(), &StepOptions::default()),
                )
            },
            || crate::op_stats::op_stats(&own(), &options),
        );
        let _ = self.gpu.set(gpu);
        let _ = self.steps.set(steps);
        let _ = self.op_rows.set(ops);
    }

    fn op_stats_options(&self) -> crate::op_stats::OpStatsOptions {
        crate::op_stats::OpStatsOptions {
            window: self.options.window,
            timing: crate::op_stats::Timing::Exact,
        }
    }

    /// `stats op`'s rows over the window, to the nanosecond.
    pub fn op_rows(&self) -> &[crate::op_stats::OpRow] {
        self.op_rows
            .get_or_init(|| crate::op_stats::op_stats(&self.context(), &self.op_stats_options()))
    }

    pub fn trace(&self) -> &'t Trace {
        self.trace
    }

    /// Which call launched which device work.
    pub fn correlation(&self) -> &'c Correlation {
        self.correlation
    }

    /// An analysis context on the trace that shares the correlation and the step
    /// markers (for the analyses that take one).
    pub fn context(&self) -> Context<'c>
    where
        't: 'c,
    {
        Context::sharing(self.trace, self.correlation, self.markers)
    }

    /// `opscope gpu`'s report with its defaults, over the window looked at.
    pub fn gpu(&self) -> &GpuReport {
        self.gpu.get_or_init(|| {
            gpu::analyze(
                &self.context(),
                &GpuOptions {
                    window: self.options.window,
                    ..GpuOptions::default()
                },
            )
        })
    }

    pub fn steps(&self) -> &StepsReport {
        self.steps
            .get_or_init(|| steps::report(&self.context(), &StepOptions::default()))
    }

    /// Per slice row, whether it is in the window looked at.
    pub fn selected(&self) -> &[bool] {
        self.selected
            .get_or_init(|| self.context().selected(self.options.window).into_owned())
    }

    /// Device work per source and device (in the window), each in start order.
    pub fn device_work(&self) -> &[DeviceWork] {
        self.device_work.get_or_init(|| {
            let trace = self.trace();
            let selected = self.selected();
            let mut groups: Vec<DeviceWork> = Vec::new();
            for (i, &keep) in selected.iter().enumerate() {
                if !keep || !correlate::is_device_work(trace, i) {
                    continue;
                }
                let track = &trace.tracks[trace.slices.track[i] as usize];
                let Some(source) = correlate::source_of_track(trace, track) else {
                    continue;
                };
                match groups
                    .iter_mut()
                    .find(|g| g.source == source && g.device == track.device)
                {
                    Some(g) => g.slices.push(i),
                    None => groups.push(DeviceWork {
                        source,
                        device: track.device,
                        label: self.label(source, track.device),
                        slices: vec![i],
                    }),
                }
            }
            let s = &trace.slices;
            for g in &mut groups {
                g.slices.sort_by_key(|&i| (s.ts[i], i));
            }
            groups.sort_by_key(|g| (g.source.0, g.device.map(|d| d.0)));
            groups
        })
    }

    /// How a source (and device) is named in findings: `rank 3 gpu 0`, else its role
    /// and device.
    pub fn label(&self, source: SourceId, device: Option<DeviceId>) -> String {
        let trace = self.trace();
        let src = &trace.sources[source.index()];
        // A process that several files show (a profiler's successive windows) is
        // named once, by itself, so that its findings in each file add up.
        let shown_more_than_once = || {
            crate::roles::process_key(trace, source).is_some_and(|key| {
                (0..trace.sources.len()).any(|other| {
                    other != source.index()
                        && crate::roles::process_key(trace, SourceId(other as u32)) == Some(key)
                })
            })
        };
        let who = match src.rank {
            Some(rank) => format!("rank {rank}"),
            None if trace.sources.len() == 1 => file_name(&src.path).to_string(),
            None if shown_more_than_once() => crate::roles::role(trace, source),
            None => format!(
                "{} ({})",
                crate::roles::role(trace, source),
                file_name(&src.path)
            ),
        };
        match device {
            Some(d) => {
                let d = &trace.devices[d.index()];
                format!("{who} {} {}", d.kind.name(), d.index)
            }
            None => who,
        }
    }

    /// The source whose path is `file`.
    pub fn source_of_file(&self, file: &str) -> Option<SourceId> {
        self.trace()
            .sources
            .iter()
            .position(|s| s.path == file)
            .map(|i| SourceId(i as u32))
    }

    /// The time a source was looked at: its steps' time where it has steps, else the
    /// span of its events; with the number of steps.
    pub fn time_looked_at(&self, source: SourceId) -> (i64, usize) {
        match self.steps_of(source, 1) {
            Some(s) => (s.steps.iter().map(|x| x.dur_ns).sum(), s.steps.len()),
            None => (self.span_of(source), 0),
        }
    }

    /// The steps of a source, when it has at least `at_least` of them (a DataLoader
    /// worker's batches are none).
    pub fn steps_of(
        &self,
        source: SourceId,
        at_least: usize,
    ) -> Option<&crate::steps::SourceSteps> {
        let path = &self.trace().sources[source.index()].path;
        self.steps().sources.iter().find(|s| {
            &s.file == path && s.steps.len() >= at_least.max(1) && s.found_by != StepSource::Loader
        })
    }

    /// The longest time any source was looked at (ranks run side by side).
    pub fn longest_time_looked_at(&self) -> i64 {
        (0..self.trace().sources.len())
            .map(|i| self.time_looked_at(SourceId(i as u32)).0)
            .max()
            .unwrap_or(0)
    }

    /// From the first event of a source (in the window) to its last end.
    pub fn span_of(&self, source: SourceId) -> i64 {
        let [start, end] = self.bounds_of(source);
        (end - start).max(0)
    }

    /// Where a source's events (in the window) start and end; `end` below `start`
    /// for one without events.
    pub fn bounds_of(&self, source: SourceId) -> [i64; 2] {
        self.bounds.get_or_init(|| {
            let trace = self.trace();
            let s = &trace.slices;
            let mut bounds = vec![[i64::MAX, i64::MIN]; trace.sources.len()];
            for (i, &keep) in self.selected().iter().enumerate() {
                if let Some(src) = correlate::source_of(trace, i).filter(|_| keep) {
                    let b = &mut bounds[src.index()];
                    *b = [b[0].min(s.ts[i]), b[1].max(s.end(i))];
                }
            }
            bounds
        })[source.index()]
    }

    /// The share of a source's time looked at that `ns` is, in percent.
    pub fn share(&self, source: SourceId, ns: i64) -> f64 {
        let (of, _) = self.time_looked_at(source);
        if of > 0 {
            100.0 * ns as f64 / of as f64
        } else {
            0.0
        }
    }

    /// The devices' properties the trace records (Kineto's `deviceProperties`).
    pub fn device_props(&self) -> &[DeviceProps] {
        self.props.get_or_init(|| {
            let trace = self.trace();
            let mut out = Vec::new();
            let Some(key) = trace.strings.find("deviceProperties") else {
                return out;
            };
            for (i, source) in trace.sources.iter().enumerate() {
                let Some(ArgValue::Json(text)) = trace.args.find(source.metadata, key) else {
                    continue;
                };
                let Ok(serde_json::Value::Array(list)) =
                    serde_json::from_str::<serde_json::Value>(trace.str(text))
                else {
                    continue;
                };
                for p in list {
                    let int = |k: &str| p.get(k).and_then(serde_json::Value::as_i64);
                    out.push(DeviceProps {
                        source: SourceId(i as u32),
                        id: int("id").unwrap_or(0) as u32,
                        name: p
                            .get("name")
                            .and_then(|n| n.as_str())
                            .unwrap_or_default()
                            .to_string(),
                        total_memory: int("totalGlobalMem"),
                        compute: int("computeMajor").zip(int("computeMinor")),
                    });
                }
            }
            out
        })
    }

    /// The properties of one device of a source.
    pub fn props_of(&self, source: SourceId, device: Option<DeviceId>) -> Option<&DeviceProps> {
        let index = self.trace().devices[device?.index()].index;
        self.device_props()
            .iter()
            .find(|p| p.source == source && p.id == index)
    }

    /// The slice rows in the window of each of `kinds`, in row order within a kind:
    /// one pass over the trace sorts every row by kind for all the rules.
    pub fn of_kinds(&self, kinds: &[SliceKind]) -> Vec<usize> {
        let by_kind = self.by_kind.get_or_init(|| {
            let s = &self.trace().slices;
            let mut by_kind = vec![Vec::new(); SliceKind::ALL.len()];
            for (i, &keep) in self.selected().iter().enumerate() {
                if keep {
                    by_kind[s.kind(i).code() as usize].push(i);
                }
            }
            by_kind
        });
        let mut out: Vec<usize> = Vec::new();
        for kind in kinds {
            out.extend_from_slice(&by_kind[kind.code() as usize]);
        }
        out
    }

    /// Per string of the trace (by id), whether `keep` holds of it: a rule that tests
    /// names tests each distinct name once, not each slice's.
    pub fn names_where(&self, keep: impl Fn(&str) -> bool) -> Vec<bool> {
        let strings = &self.trace().strings;
        (0..strings.len())
            .map(|i| keep(strings.get(opscope_model::StrId(i as u32))))
            .collect()
    }

    /// The rows of `kinds` whose name passes `keep`.
    pub fn named(&self, kinds: &[SliceKind], keep: impl Fn(&str) -> bool) -> Vec<usize> {
        let names = self.names_where(keep);
        let s = &self.trace().slices;
        self.of_kinds(kinds)
            .into_iter()
            .filter(|&i| names[s.name[i].0 as usize])
            .collect()
    }

    /// The slice rows in the window whose kind passes `keep`.
    pub fn slices_where(&self, keep: impl Fn(usize) -> bool) -> Vec<usize> {
        self.selected()
            .iter()
            .enumerate()
            .filter(|&(i, &s)| s && keep(i))
            .map(|(i, _)| i)
            .collect()
    }

    /// The name of slice `i`.
    pub fn name(&self, i: usize) -> &'t str {
        let trace = self.trace();
        trace.str(trace.slices.name[i])
    }

    /// An integer arg of slice `i`.
    pub fn int_arg(&self, i: usize, key: &str) -> Option<i64> {
        let trace = self.trace();
        let key = trace.strings.find(key)?;
        trace.args.find(trace.slices.args[i], key)?.as_i64()
    }

    /// A text arg of slice `i`.
    pub fn str_arg(&self, i: usize, key: &str) -> Option<&'t str> {
        let trace = self.trace();
        let key = trace.strings.find(key)?;
        match trace.args.find(trace.slices.args[i], key)? {
            ArgValue::Str(s) | ArgValue::Json(s) => Some(trace.str(s)),
            _ => None,
        }
    }

    /// The trace's files, for `more` commands: the one file, else the folder that
    /// holds them all (a session, a folder of ranks), else up to three files.
    pub fn files(&self) -> String {
        let paths: Vec<&str> = self
            .trace()
            .sources
            .iter()
            .map(|s| s.path.as_str())
            .collect();
        common_folder(&paths).unwrap_or_else(|| match paths.len() {
            0 => "TRACE".to_string(),
            1..=3 => paths.join(" "),
            _ => format!("{} …", paths[..3].join(" ")),
        })
    }
}

/// The one file of `paths`, or the deepest folder holding them all (not the root).
fn common_folder(paths: &[&str]) -> Option<String> {
    match paths {
        [] => None,
        [one] => Some(one.to_string()),
        [first, rest @ ..] => {
            let parts = |p: &str| -> Vec<String> {
                std::path::Path::new(p)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            };
            let mut common = parts(first);
            common.pop();
            for p in rest {
                let other = parts(p);
                let same = common
                    .iter()
                    .zip(&other)
                    .take_while(|(a, b)| a == b)
                    .count();
                common.truncate(same.min(other.len().saturating_sub(1)));
            }
            let folder: std::path::PathBuf = common.iter().collect();
            let folder = folder.to_string_lossy().into_owned();
            (!folder.is_empty() && folder != "/").then_some(folder)
        }
    }
}

pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::common_folder;

    #[test]
    fn the_files_are_named_by_the_folder_that_holds_them() {
        assert_eq!(common_folder(&["a/t.json"]).as_deref(), Some("a/t.json"));
        assert_eq!(
            common_folder(&["runs/s1/r0.json", "runs/s1/r1.json"]).as_deref(),
            Some("runs/s1")
        );
        assert_eq!(
            common_folder(&["runs/s1/r0.json", "runs/s2/deep/r1.json"]).as_deref(),
            Some("runs")
        );
        assert_eq!(common_folder(&["/a.json", "/b.json"]), None);
        assert_eq!(common_folder(&["a.json", "b.json"]), None);
    }
}
