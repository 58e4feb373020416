//! Across ranks and devices: the spread (min, median, max) of each figure, and the
//! straggler — the one with the most of the figure the others wait for (computation
//! per device, step time per rank) — and by how much it exceeds the median.

use serde::Serialize;

use crate::report::{Column, Line, Table, Value};

/// One figure across ranks or devices.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Spread {
    pub metric: &'static str,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    /// Which has the least and the most (`rank 3 gpu 0`).
    pub min_at: String,
    pub max_at: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Straggler {
    pub at: String,
    /// The figure that names it (`compute_ns`, `median_step_ns`).
    pub metric: &'static str,
    pub value: f64,
    pub median: f64,
    /// How far it is above the median, in percent of the median.
    pub above_median_pct: f64,
}

/// How far above the median a rank's figure must be to be called a straggler: with
/// two ranks one is always above the median, by the noise of a run.
pub const STRAGGLER_PCT: f64 = 5.0;

impl Straggler {
    /// Whether it is a straggler at all: more than [`STRAGGLER_PCT`] above the median.
    pub fn stands_out(&self) -> bool {
        self.above_median_pct > STRAGGLER_PCT
    }

    /// `straggler: rank 1 computes 7.3 ms{per}, 12.0 % above the median 6.5 ms`, or
    /// where it does not stand out, that no rank does.
    pub fn line(&self, per: &str) -> Line {
        let (head, tail) = match self.stands_out() {
            true => (
                format!("straggler: {} computes ", self.at),
                " above the median ",
            ),
            false => (
                format!("no straggler: the most, {}, computes ", self.at),
                " above the median (more than 5 % would be one) ",
            ),
        };
        Line::of(head)
            .value(Value::Duration(self.value))
            .text(format!("{per}, "))
            .value(Value::percent(self.above_median_pct, 1))
            .text(tail)
            .value(Value::Duration(self.median))
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Across {
    /// Ranks or devices compared.
    pub compared: usize,
    pub spreads: Vec<Spread>,
    pub straggler: Option<Straggler>,
}

/// How a rank (and device) is named: `rank 3 gpu 0`, or the file without a rank.
pub fn label(file: &str, rank: Option<u32>, device: Option<&str>) -> String {
    let who = rank.map_or_else(|| file.to_string(), |rank| format!("rank {rank}"));
    match device {
        Some(device) => format!("{who} {device}"),
        None => who,
    }
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The items to compare, as groups of indices into `keys` in order of first
/// appearance: items with one key are one rank (or device) seen in several files;
/// an item without a key is a group of its own.
pub fn groups<K: PartialEq>(keys: &[Option<K>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let found = key
            .as_ref()
            .and_then(|key| groups.iter_mut().find(|g| keys[g[0]].as_ref() == Some(key)));
        match found {
            Some(group) => group.push(i),
            None => groups.push(vec![i]),
        }
    }
    groups
}

/// The spread of `values` (one per device, with its label); `None` when empty.
pub fn spread(metric: &'static str, values: &[(String, f64)]) -> Option<Spread> {
    let mut sorted: Vec<f64> = values.iter().map(|v| v.1).collect();
    sorted.sort_by(f64::total_cmp);
    // Ties go to the first device in report order.
    let min_at = values.iter().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let max_at = values.iter().rev().max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(Spread {
        metric,
        min: sorted[0],
        median: median(&sorted),
        max: sorted[sorted.len() - 1],
        min_at: min_at.0.clone(),
        max_at: max_at.0.clone(),
    })
}

/// The summary of two or more `items` (a label and its figures, the same figures in
/// the same order for each); the straggler is the one with the most `straggler_metric`.
/// `None` for fewer than two.
pub fn summarize(
    items: &[(String, Vec<(&'static str, f64)>)],
    straggler_metric: &'static str,
) -> Option<Across> {
    if items.len() < 2 {
        return None;
    }
    let metrics: Vec<&'static str> = items[0].1.iter().map(|m| m.0).collect();
    let spreads: Vec<Spread> = metrics
        .iter()
        .filter_map(|&metric| {
            let values: Vec<(String, f64)> = items
                .iter()
                .filter_map(|(label, figures)| {
                    let v = figures.iter().find(|f| f.0 == metric)?.1;
                    Some((label.clone(), v))
                })
                .collect();
            spread(metric, &values)
        })
        .collect();
    let straggler = spreads
        .iter()
        .find(|s| s.metric == straggler_metric)
        .filter(|s| s.max > 0.0)
        .map(|s| Straggler {
            at: s.max_at.clone(),
            metric: s.metric,
            value: s.max,
            median: s.median,
            above_median_pct: if s.median > 0.0 {
                100.0 * (s.max - s.median) / s.median
            } else {
                0.0
            },
        });
    Some(Across {
        compared: items.len(),
        spreads,
        straggler,
    })
}

/// The spread table of a cross-rank summary: one row per figure, with min, median,
/// max and who has the least and the most; `label` names a figure and `value` makes
/// one of its numbers a value.
pub fn spread_table(
    across: &Across,
    label: impl Fn(&'static str) -> &'static str,
    value: impl Fn(&'static str, f64) -> Value,
) -> Table {
    let mut table = Table::new(vec![
        Column::text(""),
        Column::numeric("min"),
        Column::numeric("median"),
        Column::numeric("max"),
        Column::text("least"),
        Column::text("most"),
    ]);
    for s in &across.spreads {
        table.rows.push(vec![
            Value::text(label(s.metric)),
            value(s.metric, s.min),
            value(s.metric, s.median),
            value(s.metric, s.max),
            Value::text(&s.min_at),
            Value::text(&s.max_at),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_names_the_extremes() {
        let values = vec![
            ("rank 0".to_string(), 10.0),
            ("rank 1".to_string(), 40.0),
            ("rank 2".to_string(), 20.0),
            ("rank 3".to_string(), 12.0),
        ];
        let s = spread("compute_ns", &values).unwrap();
        assert_eq!((s.min, s.median, s.max), (10.0, 16.0, 40.0));
        assert_eq!((s.min_at.as_str(), s.max_at.as_str()), ("rank 0", "rank 1"));
        assert!(spread("x", &[]).is_none());
        let tie = spread("x", &[("a".into(), 1.0), ("b".into(), 1.0)]).unwrap();
        assert_eq!((tie.min_at.as_str(), tie.max_at.as_str()), ("a", "a"));
    }

    #[test]
    fn the_straggler_and_by_how_much() {
        let items: Vec<(String, Vec<(&'static str, f64)>)> = [10.0, 12.0, 11.0]
            .iter()
            .enumerate()
            .map(|(r, &t)| {
                (
                    format!("rank {r}"),
                    vec![("step_ns", t), ("idle_ns", 20.0 - t)],
                )
            })
            .collect();
        let a = summarize(&items, "step_ns").unwrap();
        assert_eq!(a.compared, 3);
        let s = a.straggler.unwrap();
        assert_eq!((s.at.as_str(), s.value, s.median), ("rank 1", 12.0, 11.0));
        assert!((s.above_median_pct - 100.0 / 11.0).abs() < 1e-9);
        assert_eq!(a.spreads[1].min_at, "rank 1");
        assert!(summarize(&items[..1], "step_ns").is_none());
    }

    /// Of two ranks one is always above the median: 0.8 % above it is no straggler
    /// (the steps report named one at 0.8 %, where `advise` found none).
    #[test]
    fn a_rank_within_five_percent_is_no_straggler() {
        let text = |line: Line| -> String {
            line.0
                .iter()
                .map(|p| match p {
                    crate::report::Piece::Text(t) => t.clone(),
                    crate::report::Piece::Value(_) => "V".to_string(),
                })
                .collect()
        };
        let of = |slow: f64| {
            let items = vec![
                ("rank 0".to_string(), vec![("step_ns", 100.0)]),
                ("rank 1".to_string(), vec![("step_ns", slow)]),
            ];
            summarize(&items, "step_ns").unwrap().straggler.unwrap()
        };
        let close = of(101.6);
        assert!(!close.stands_out());
        assert!(text(close.line(" per step")).starts_with("no straggler: the most, rank 1"));
        let far = of(125.0);
        assert!(far.stands_out());
        assert_eq!(
            text(far.line(" per step")),
            "straggler: rank 1 computes V per step, V above the median V"
        );
    }
}
