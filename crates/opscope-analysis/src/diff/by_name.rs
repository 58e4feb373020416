//! `diff --by name`: HTA's `TraceDiff.compare_traces` and `ops_diff`. On each side
//! one rank (the lowest unless told) and some iterations (`ProfilerStep#N`, the first
//! unless told): a host event belongs to the step whose marker it starts within, device
//! work to the step of the call that launched it. Events are grouped by name (or HTA's
//! short name) into counts and total durations, and each name falls in one of HTA's
//! categories: added, deleted, increased, decreased (in count) or unchanged.

use hashbrown::HashMap;
use opscope_model::StrId;
use serde::Serialize;

use super::{sources_of, Side};
use crate::correlate;
use crate::report::{Column, Line, Report, Reported, Table, Value};

/// Which events to compare, as HTA's `device_type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// Host events only (HTA: `stream == -1`).
    Cpu,
    /// Device work only: kernels, copies, sets.
    Gpu,
    #[default]
    All,
}

#[derive(Clone, Debug, Serialize)]
pub struct NameLine {
    pub name: String,
    /// A's count and B's.
    pub counts: [u64; 2],
    /// A's total duration and B's, in µs (HTA's unit).
    pub total_us: [f64; 2],
    pub diff_counts: i64,
    pub diff_duration_us: f64,
    /// HTA's `ops_diff` category: `added`, `deleted`, `increased`, `decreased` or
    /// `unchanged` (by count).
    pub change: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct NameDiff {
    pub labels: [String; 2],
    /// The rank each side read (none where the trace names no ranks).
    pub ranks: [Option<u32>; 2],
    /// The iterations (`ProfilerStep#N`) each side read.
    pub iterations: [Vec<u64>; 2],
    pub device: Device,
    pub short_names: bool,
    /// By the size of the change in total duration, largest first.
    pub lines: Vec<NameLine>,
}

/// Counts and total durations (ns) by name on one side.
type Totals = HashMap<String, (u64, i64)>;

pub fn by_name(a: &Side, b: &Side, device: Device, short_names: bool) -> Result<NameDiff, String> {
    let (rank_a, iterations_a, totals_a) = side_totals(a, device, short_names)?;
    let (rank_b, iterations_b, totals_b) = side_totals(b, device, short_names)?;
    let mut names: Vec<&String> = totals_a.keys().chain(totals_b.keys()).collect();
    names.sort_unstable();
    names.dedup();
    let mut lines: Vec<NameLine> = names
        .into_iter()
        .map(|name| {
            let (ca, da) = totals_a.get(name).copied().unwrap_or_default();
            let (cb, db) = totals_b.get(name).copied().unwrap_or_default();
            let diff_counts = cb as i64 - ca as i64;
            let change = match (ca, cb) {
                (0, _) => "added",
                (_, 0) => "deleted",
                _ if diff_counts > 0 => "increased",
                _ if diff_counts < 0 => "decreased",
                _ => "unchanged",
            };
            NameLine {
                name: name.clone(),
                counts: [ca, cb],
                total_us: [da as f64 / 1e3, db as f64 / 1e3],
                diff_counts,
                diff_duration_us: (db - da) as f64 / 1e3,
                change,
            }
        })
        .collect();
    lines.sort_by(|x, y| {
        y.diff_duration_us
            .abs()
            .total_cmp(&x.diff_duration_us.abs())
            .then_with(|| x.name.cmp(&y.name))
    });
    Ok(NameDiff {
        labels: [a.label.clone(), b.label.clone()],
        ranks: [rank_a, rank_b],
        iterations: [iterations_a, iterations_b],
        device,
        short_names,
        lines,
    })
}

/// One side's rank, iterations and totals by name.
fn side_totals(
    side: &Side,
    device: Device,
    short_names: bool,
) -> Result<(Option<u32>, Vec<u64>, Totals), String> {
    let trace = side.cx.trace();
    let s = &trace.slices;
    let sources = sources_of(trace, side.rank)?;
    let rank = sources
        .first()
        .and_then(|src| trace.sources[src.index()].rank);
    let mine: Vec<bool> = {
        let mut mine = vec![false; trace.sources.len()];
        for src in &sources {
            mine[src.index()] = true;
        }
        mine
    };
    let in_side = |i: usize| correlate::source_of(trace, i).is_some_and(|src| mine[src.index()]);
    // The markers: (start, end, number), by start.
    let mut steps: Vec<(i64, i64, u64)> = (0..s.len())
        .filter(|&i| !correlate::is_device_work(trace, i) && in_side(i))
        .filter_map(|i| Some((s.ts[i], s.end(i), profiler_step(trace.str(s.name[i]))?)))
        .collect();
    steps.sort_unstable();
    let mut numbers: Vec<u64> = steps.iter().map(|&(_, _, n)| n).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let iterations: Vec<u64> = match side.steps {
        Some(range) => numbers
            .iter()
            .copied()
            .filter(|&n| range.contains(n))
            .collect(),
        None => numbers.first().copied().into_iter().collect(),
    };
    if iterations.is_empty() {
        return Err(match (numbers.is_empty(), side.steps) {
            (true, _) => format!(
                "{}: no ProfilerStep#N markers, which --by name takes its iterations from \
                 (HTA's rule); compare matched steps without --by name",
                side.label
            ),
            (false, Some(range)) => format!(
                "{}: no iteration in {range} (it has {}..={})",
                side.label,
                numbers[0],
                numbers[numbers.len() - 1]
            ),
            (false, None) => unreachable!("a first iteration exists"),
        });
    }
    let iteration_at = |ts: i64| -> Option<u64> {
        let before = steps.partition_point(|&(start, _, _)| start <= ts);
        steps[..before]
            .iter()
            .rev()
            .find(|&&(_, end, _)| ts < end)
            .map(|&(_, _, n)| n)
    };
    let correlation = side.cx.correlation();
    // By name id first: a name is text once, not per event.
    let mut by_id: HashMap<StrId, (u64, i64)> = HashMap::new();
    let category_trace = trace.strings.find("Trace");
    for i in 0..s.len() {
        if !in_side(i) || category_trace == Some(s.category[i]) {
            continue;
        }
        let on_device = correlate::is_device_work(trace, i);
        let wanted = match device {
            Device::Cpu => !on_device,
            Device::Gpu => on_device,
            Device::All => true,
        };
        if !wanted {
            continue;
        }
        let iteration = match on_device {
            false => iteration_at(s.ts[i]),
            true => correlation
                .launch_of(i)
                .and_then(|call| iteration_at(s.ts[call])),
        };
        if !iteration.is_some_and(|n| iterations.contains(&n)) {
            continue;
        }
        let entry = by_id.entry(s.name[i]).or_default();
        entry.0 += 1;
        entry.1 += s.dur[i];
    }
    let mut totals = Totals::new();
    for (id, (count, ns)) in by_id {
        let name = trace.str(id);
        let name = match short_names {
            true => shorten_name(name),
            false => name.to_string(),
        };
        let entry = totals.entry(name).or_default();
        entry.0 += count;
        entry.1 += ns;
    }
    Ok((rank, iterations, totals))
}

/// `ProfilerStep#N`'s N (spaces allowed around `#`, as HTA's pattern).
fn profiler_step(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("ProfilerStep")?.trim_start();
    let digits = rest.strip_prefix('#')?.trim_start();
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// HTA's `shorten_name`: template arguments, function arguments and return types
/// dropped, the last word kept; copies and sets keep their names.
pub fn shorten_name(name: &str) -> String {
    if ["Memcpy", "Memset", "dma"]
        .iter()
        .any(|p| name.starts_with(p))
        || (!name.contains('<') && !name.contains('('))
    {
        return name.to_string();
    }
    let mut stack: Vec<char> = Vec::new();
    for c in name.replace("->", "").chars() {
        let open = match c {
            '>' => '<',
            ')' => '(',
            _ => {
                stack.push(c);
                continue;
            }
        };
        while stack.last().is_some_and(|&top| top != open) {
            stack.pop();
        }
        stack.pop();
    }
    let kept: String = stack.into_iter().collect();
    kept.rsplit(' ').next().unwrap_or("").to_string()
}

impl Reported for NameDiff {
    fn report(&self) -> Report {
        let mut report = Report::default();
        let describe = |k: usize| {
            let rank = self.ranks[k].map_or("no rank".to_string(), |r| format!("rank {r}"));
            let its = &self.iterations[k];
            let iterations = match its.as_slice() {
                [one] => format!("iteration {one}"),
                _ => format!(
                    "iterations {}..={} ({})",
                    its[0],
                    its[its.len() - 1],
                    its.len()
                ),
            };
            format!(
                "{}: {}, {rank}, {iterations}",
                ["A", "B"][k],
                self.labels[k]
            )
        };
        report.line(Line::of(describe(0)));
        report.line(Line::of(describe(1)));
        let mut by_change: Vec<(&str, usize)> = Vec::new();
        for line in &self.lines {
            match by_change.iter_mut().find(|(c, _)| *c == line.change) {
                Some((_, n)) => *n += 1,
                None => by_change.push((line.change, 1)),
            }
        }
        let summary = ["added", "deleted", "increased", "decreased", "unchanged"]
            .iter()
            .map(|c| {
                let n = by_change
                    .iter()
                    .find(|(k, _)| k == c)
                    .map_or(0, |(_, n)| *n);
                format!("{n} {c}")
            })
            .collect::<Vec<_>>()
            .join(", ");
        report.line(Line::of(format!(
            "{} names grouped as HTA's TraceDiff does ({} events{}), by count: {summary}",
            self.lines.len(),
            match self.device {
                Device::Cpu => "host",
                Device::Gpu => "device",
                Device::All => "host and device",
            },
            if self.short_names {
                ", short names"
            } else {
                ""
            }
        )));
        report.blank();
        let mut table = Table::new(vec![
            Column::text("change"),
            Column::numeric("count A"),
            Column::numeric("count B"),
            Column::numeric("Δ count"),
            Column::numeric("total A").in_csv("total_a_us"),
            Column::numeric("total B").in_csv("total_b_us"),
            Column::numeric("Δ total").in_csv("diff_total_us"),
            Column::text("name"),
        ]);
        table.rows = self
            .lines
            .iter()
            .map(|l| {
                vec![
                    Value::text(l.change),
                    Value::Count(l.counts[0] as i64),
                    Value::Count(l.counts[1] as i64),
                    Value::Count(l.diff_counts),
                    Value::Duration(l.total_us[0] * 1e3),
                    Value::Duration(l.total_us[1] * 1e3),
                    Value::Duration(l.diff_duration_us * 1e3),
                    Value::text(l.name.clone()),
                ]
            })
            .collect();
        table.empty = Some("(no events on either side)");
        report.table(table);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_htas() {
        assert_eq!(
            shorten_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<int>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<int>, at::detail::Array<char*, 3>)"),
            "at::native::vectorized_elementwise_kernel"
        );
        assert_eq!(shorten_name("aten::mm"), "aten::mm");
        assert_eq!(
            shorten_name("Memcpy HtoD (Pinned -> Device)"),
            "Memcpy HtoD (Pinned -> Device)"
        );
        assert_eq!(shorten_name("f(a->b)"), "f");
    }

    #[test]
    fn profiler_steps_are_numbered_as_hta_reads_them() {
        assert_eq!(profiler_step("ProfilerStep#1009"), Some(1009));
        assert_eq!(profiler_step("ProfilerStep # 7"), Some(7));
        assert_eq!(profiler_step("ProfilerStep"), None);
        assert_eq!(profiler_step("Step#3"), None);
    }
}
