//! Reports as data: what an analysis hands to whoever shows it — lines whose figures
//! are typed values, tables of typed cells under named columns, and trees — so that the
//! terminal, CSV, JSON (and the HTML report or a viewer) show the same figures and no
//! command formats a number its own way. A value's kind says how it is shown; the
//! CLI's `render` module is the one place that turns kinds into text.

use serde::Serialize;

/// A figure, as a report holds it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Text(String),
    Count(i64),
    /// A duration, in ns.
    Duration(f64),
    /// A duration (ns) and its share of something (a percentage with `decimals`
    /// digits; none is shown as `-`).
    Share {
        ns: f64,
        percent: Option<f64>,
        decimals: usize,
    },
    /// A percentage (0-100) with `decimals` digits; none is shown as `-`.
    Percent {
        value: Option<f64>,
        decimals: usize,
    },
    /// Bytes, in binary units for people (`1.50 MiB`).
    Bytes(i64),
    /// Bytes in tfprof's decimal units (`1.34MB`), as its tree views show them.
    TfprofBytes(i64),
    /// A plain number with `decimals` digits; none is shown as `-`.
    Number {
        value: Option<f64>,
        decimals: usize,
    },
    /// A series drawn `width` characters wide, each character the largest value of its
    /// part, scaled to the largest of all.
    Sparkline {
        values: Vec<u32>,
        width: usize,
    },
}

impl Value {
    pub fn text(text: impl Into<String>) -> Value {
        Value::Text(text.into())
    }

    /// A duration and its share of `of` (0 % of nothing).
    pub fn share_of(ns: f64, of: f64, decimals: usize) -> Value {
        Value::Share {
            ns,
            percent: Some(if of > 0.0 { 100.0 * ns / of } else { 0.0 }),
            decimals,
        }
    }

    pub fn percent(value: f64, decimals: usize) -> Value {
        Value::Percent {
            value: Some(value),
            decimals,
        }
    }

    pub fn number(value: f64, decimals: usize) -> Value {
        Value::Number {
            value: Some(value),
            decimals,
        }
    }
}

/// A line of prose with figures in it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Line(pub Vec<Piece>);

#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Text(String),
    Value(Value),
}

impl Line {
    pub fn new() -> Line {
        Line::default()
    }

    /// A line of text only.
    pub fn of(text: impl Into<String>) -> Line {
        Line::new().text(text)
    }

    pub fn text(mut self, text: impl Into<String>) -> Line {
        self.0.push(Piece::Text(text.into()));
        self
    }

    pub fn value(mut self, value: Value) -> Line {
        self.0.push(Piece::Value(value));
        self
    }
}

/// How durations are written in CSV, where cells are bare numbers.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum CsvTime {
    /// Microseconds with three decimals (tfprof's `*_micros` columns).
    #[default]
    Micros,
    /// Nanoseconds with one decimal (Nsight's `*_ns` columns).
    Nanos,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub title: &'static str,
    /// Its title in CSV, where it may carry its unit.
    pub csv_title: &'static str,
    /// Right-aligned: a column of numbers.
    pub numeric: bool,
}

impl Column {
    pub fn text(title: &'static str) -> Column {
        Column {
            title,
            csv_title: title,
            numeric: false,
        }
    }

    pub fn numeric(title: &'static str) -> Column {
        Column {
            title,
            csv_title: title,
            numeric: true,
        }
    }

    /// The column with another title in CSV.
    pub fn in_csv(mut self, csv_title: &'static str) -> Column {
        self.csv_title = csv_title;
        self
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Value>>,
    pub csv_time: CsvTime,
    /// Shown in text in place of a table without rows.
    pub empty: Option<&'static str>,
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Table {
        Table {
            columns,
            ..Table::default()
        }
    }
}

/// One part of a tree node's figures: a self and total pair (`self/total`), or one.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Pair(Value, Value),
    One(Value),
}

#[derive(Clone, Debug, PartialEq)]
pub struct TreeRow {
    pub depth: usize,
    pub name: String,
    pub parts: Vec<Part>,
}

/// A tree as indented lines under a legend of its figures, and as a table (the CSV
/// form, one row per node with its depth).
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    pub legend: String,
    pub rows: Vec<TreeRow>,
    pub table: Table,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Line(Line),
    Table(Table),
    Tree(Tree),
}

/// What a renderer shows: blocks in order; JSON is the analysis's own data (see
/// [`Reported`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub blocks: Vec<Block>,
}

impl Report {
    pub fn line(&mut self, line: Line) {
        self.blocks.push(Block::Line(line));
    }

    /// An empty line.
    pub fn blank(&mut self) {
        self.blocks.push(Block::Line(Line::new()));
    }

    pub fn table(&mut self, table: Table) {
        self.blocks.push(Block::Table(table));
    }

    /// The table CSV output holds: the report's first table, or its tree's.
    pub fn csv_table(&self) -> Option<&Table> {
        self.blocks.iter().find_map(|b| match b {
            Block::Table(t) => Some(t),
            Block::Tree(t) => Some(&t.table),
            Block::Line(_) => None,
        })
    }
}

/// An analysis's result that can be shown: its blocks for people and CSV, and itself
/// (serialized) for JSON.
pub trait Reported: Serialize {
    fn report(&self) -> Report;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CSV holds one table: a report's first, or its tree's (prose lines have none).
    #[test]
    fn csv_takes_the_first_table_or_the_trees() {
        let mut report = Report::default();
        report.line(Line::of("heading"));
        assert_eq!(report.csv_table(), None);
        let mut first = Table::new(vec![Column::text("first")]);
        first.rows.push(vec![Value::text("a")]);
        report.table(first.clone());
        report.table(Table::new(vec![Column::text("second")]));
        assert_eq!(report.csv_table(), Some(&first));
        let tree = Report {
            blocks: vec![
                Block::Line(Line::of("legend")),
                Block::Tree(Tree {
                    legend: "ops".into(),
                    rows: Vec::new(),
                    table: Table::new(vec![Column::numeric("depth")]),
                }),
            ],
        };
        assert_eq!(tree.csv_table().map(|t| t.columns[0].title), Some("depth"));
    }
}
