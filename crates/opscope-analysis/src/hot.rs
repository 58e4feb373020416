//! Hot functions of the sampled stacks, as py-spy's `top` lists them: each function's
//! self time (samples where it was the innermost frame) and total time (samples where
//! it was anywhere on the stack, counted once however deep it recursed), in time and
//! as a share of all the samples counted.

use hashbrown::{HashMap, HashSet};
use opscope_model::{StrId, Trace};
use serde::Serialize;

use crate::report::{Column, Table, Value};

#[derive(Clone, Copy, Debug, Default)]
pub struct HotOptions {
    /// Count idle threads' samples too (wall time), not only those of threads that ran.
    pub wall: bool,
    /// One row per line of a function rather than per function (self time only means
    /// the innermost frame's line; total counts the line each frame was at).
    pub lines: bool,
    /// Native frames too: own time goes to the C/C++ function running, not to the
    /// Python function that called it. Without, native frames are left out and so are
    /// samples of threads that ran no Python.
    pub native: bool,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct HotFunction {
    pub function: String,
    pub file: String,
    /// With `lines`: the line; else `None`.
    pub line: Option<u32>,
    pub self_ns: i64,
    pub total_ns: i64,
    pub self_pct: f64,
    pub total_pct: f64,
    pub self_samples: u64,
    pub total_samples: u64,
}

#[derive(Serialize, Debug, Default)]
pub struct Hot {
    /// `cpu` or `wall`.
    pub time: &'static str,
    /// The time all counted samples stand for, and how many they are.
    pub sampled_ns: i64,
    pub samples: u64,
    /// By self time, then total time, then name.
    pub functions: Vec<HotFunction>,
}

/// A function (or a line of one): its name, file and, by line, the line.
type Key = (StrId, StrId, u32);

pub fn hot(trace: &Trace, options: HotOptions) -> Hot {
    let (samples, stacks) = (&trace.samples, &trace.stacks);
    let frames = &stacks.frames;
    let key = |f: u32| {
        let f = f as usize;
        let line = if options.lines { frames.line[f] } else { 0 };
        (frames.function[f], frames.file[f], line)
    };
    let mut by: HashMap<Key, [(i64, u64); 2]> = HashMap::new();
    let mut seen: HashSet<Key> = HashSet::new();
    let (mut sampled_ns, mut counted) = (0i64, 0u64);
    let mut stack = Vec::new();
    for i in 0..samples.len() {
        if !options.wall && !samples.on_cpu(i) {
            continue;
        }
        let period = samples.period[i].max(0);
        stack.clear();
        stack.extend(
            stacks
                .frames_of(samples.stack[i])
                .filter(|&f| options.native || !trace.is_native_frame(f))
                .filter(|&f| !trace.is_recorder_frame(f)),
        );
        let native_only = stack.is_empty() && samples.stack[i] != opscope_model::NONE;
        if native_only && !options.native {
            continue;
        }
        sampled_ns += period;
        counted += 1;
        seen.clear();
        for (depth, &f) in stack.iter().enumerate() {
            let k = key(f);
            let entry = by.entry(k).or_default();
            if depth == 0 {
                entry[0].0 += period;
                entry[0].1 += 1;
            }
            // Recursion: a function is on the stack once, whatever its depth.
            if seen.insert(k) {
                entry[1].0 += period;
                entry[1].1 += 1;
            }
        }
    }
    let share = |ns: i64| 100.0 * ns as f64 / sampled_ns.max(1) as f64;
    let mut functions: Vec<HotFunction> = by
        .into_iter()
        .map(|((function, file, line), [own, all])| HotFunction {
            function: trace.str(function).to_string(),
            file: trace.str(file).to_string(),
            line: options.lines.then_some(line),
            self_ns: own.0,
            total_ns: all.0,
            self_pct: share(own.0),
            total_pct: share(all.0),
            self_samples: own.1,
            total_samples: all.1,
        })
        .collect();
    functions.sort_by(|a, b| {
        (b.self_ns, b.total_ns)
            .cmp(&(a.self_ns, a.total_ns))
            .then_with(|| (&a.function, &a.file, a.line).cmp(&(&b.function, &b.file, b.line)))
    });
    Hot {
        time: if options.wall { "wall" } else { "cpu" },
        sampled_ns,
        samples: counted,
        functions,
    }
}

/// The text table: py-spy top's columns, most self time first, at most `top` rows.
pub fn table(hot: &Hot, top: usize) -> Table {
    let mut table = Table::new(vec![
        Column::numeric("own %"),
        Column::numeric("total %"),
        Column::numeric("own time"),
        Column::numeric("total time"),
        Column::text("function (file:line)"),
    ]);
    table.empty = Some("no sampled stacks in the trace (record with `opscope record`, or `opscope attach` a running job)");
    for f in hot.functions.iter().take(top) {
        let file = f.file.rsplit('/').next().unwrap_or(&f.file);
        let place = match f.line {
            Some(line) if line > 0 => format!("{} ({file}:{line})", f.function),
            _ => format!("{} ({file})", f.function),
        };
        table.rows.push(vec![
            Value::percent(f.self_pct, 1),
            Value::percent(f.total_pct, 1),
            Value::Duration(f.self_ns as f64),
            Value::Duration(f.total_ns as f64),
            Value::text(place),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::samples::state;
    use opscope_model::{SampleRow, TrackKind};

    /// Self time goes to the innermost frame, total to every function on the stack once
    /// (a recursive one too); idle samples count in wall time only.
    #[test]
    fn self_and_total_as_py_spy_top_counts_them() {
        let mut t = Trace::new();
        let p = t.process(opscope_model::SourceId(0), 1);
        let th = t.thread(p, 1);
        let track = t.thread_track(th, TrackKind::Thread);
        let file = t.intern("m.py");
        let frame = |t: &mut Trace, name: &str, line| {
            let name = t.intern(name);
            t.stacks.frame(name, file, line)
        };
        let (main, f, f_again, g) = (
            frame(&mut t, "main", 1),
            frame(&mut t, "f", 5),
            frame(&mut t, "f", 6),
            frame(&mut t, "g", 9),
        );
        let recursive = t.stacks.stack([main, f, f_again]);
        let in_g = t.stacks.stack([main, g]);
        let running = state::ACTIVE_KNOWN | state::ACTIVE;
        for (ts, stack, period, st) in [
            (10, recursive, 30, running),
            (20, in_g, 10, running),
            (30, in_g, 60, state::ACTIVE_KNOWN),
        ] {
            t.samples.push(SampleRow {
                ts,
                track,
                stack,
                period,
                state: st,
            });
        }
        t.finish();
        let rows = |h: &Hot| -> Vec<(String, i64, i64)> {
            h.functions
                .iter()
                .map(|f| (f.function.clone(), f.self_ns, f.total_ns))
                .collect()
        };
        let cpu = hot(&t, HotOptions::default());
        assert_eq!((cpu.sampled_ns, cpu.samples), (40, 2));
        assert_eq!(
            rows(&cpu),
            vec![
                ("f".to_string(), 30, 30),
                ("g".to_string(), 10, 10),
                ("main".to_string(), 0, 40)
            ]
        );
        assert_eq!(cpu.functions[0].self_pct, 75.0);
        let wall = hot(
            &t,
            HotOptions {
                wall: true,
                ..Default::default()
            },
        );
        assert_eq!(wall.sampled_ns, 100);
        assert_eq!(rows(&wall)[0], ("g".to_string(), 70, 70));
        let lines = hot(
            &t,
            HotOptions {
                lines: true,
                ..Default::default()
            },
        );
        let f_lines: Vec<(Option<u32>, i64, i64)> = lines
            .functions
            .iter()
            .filter(|f| f.function == "f")
            .map(|f| (f.line, f.self_ns, f.total_ns))
            .collect();
        assert_eq!(f_lines, vec![(Some(6), 30, 30), (Some(5), 0, 30)]);
    }

    /// Native frames under a Python one count for it unless asked for; a thread that
    /// ran no Python counts only then.
    #[test]
    fn native_frames_count_for_their_python_caller_unless_asked_for() {
        let mut t = Trace::new();
        let p = t.process(opscope_model::SourceId(0), 1);
        let track = |t: &mut Trace, tid| {
            let th = t.thread(p, tid);
            t.thread_track(th, TrackKind::Thread)
        };
        let (python, worker) = (track(&mut t, 1), track(&mut t, 2));
        let (py, lib) = (t.intern("m.py"), t.intern("libz.so.1"));
        let frame = |t: &mut Trace, name: &str, file, line| {
            let name = t.intern(name);
            t.stacks.frame(name, file, line)
        };
        let (main, compress, deflate, start) = (
            frame(&mut t, "main", py, 1),
            frame(&mut t, "compress", py, 4),
            frame(&mut t, "deflate_slow", lib, 0),
            frame(&mut t, "start_thread", lib, 0),
        );
        let in_c = t.stacks.stack([main, compress, deflate]);
        let native_only = t.stacks.stack([start, deflate]);
        let running = state::ACTIVE_KNOWN | state::ACTIVE;
        for (ts, track, stack) in [(10, python, in_c), (10, worker, native_only)] {
            t.samples.push(SampleRow {
                ts,
                track,
                stack,
                period: 10,
                state: running,
            });
        }
        t.finish();
        let own = |h: &Hot| -> Vec<(String, i64)> {
            h.functions
                .iter()
                .filter(|f| f.self_ns > 0)
                .map(|f| (f.function.clone(), f.self_ns))
                .collect()
        };
        let python_only = hot(&t, HotOptions::default());
        assert_eq!(python_only.sampled_ns, 10);
        assert_eq!(own(&python_only), vec![("compress".to_string(), 10)]);
        let native = hot(
            &t,
            HotOptions {
                native: true,
                ..Default::default()
            },
        );
        assert_eq!(native.sampled_ns, 20);
        assert_eq!(own(&native), vec![("deflate_slow".to_string(), 20)]);
    }
}
