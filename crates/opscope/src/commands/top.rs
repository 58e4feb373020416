//! `opscope top`: every recorded job on this host, live, from the agent: its processes
//! by rank and role, step times, events per second, CPU, memory and busiest ops. A
//! terminal view as `htop` and `py-spy top` are (ratatui); `--once` prints one snapshot.

use opscope_agent::metrics::{percent_key, LIVE_METRICS};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use opscope_analysis::report::Value;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use crate::output::{self, TextOrJson};
use opscope_agent::client::AgentAddress;
use opscope_agent::snapshot::{self, JobState, OpState, Snapshot};
use opscope_agent::triggers;
use opscope_engine::render::text;

#[derive(clap::Args)]
#[command(
    about = "Live view of every recorded job on this host (from `opscope agent`)",
    long_about = "Live view of every recorded job on this host, from `opscope agent`: jobs, \
                  then the selected job's processes (ranks, DataLoader workers, launchers) and \
                  its busiest ops over the last 1, 10 and 60 seconds, refreshed every second.\n\n\
                  Keys: Up/Down choose a job, Enter opens it (all its ops), s changes the ops' \
                  order, p pauses, q leaves.",
    after_help = "Examples:\n  opscope top\n  opscope top --once\n  opscope top --once --format json | jq '.jobs[].steps'"
)]
pub struct Args {
    /// Print one snapshot and exit.
    #[arg(long)]
    once: bool,
    /// Output format (with --once).
    #[arg(long, value_enum, default_value_t)]
    format: TextOrJson,
    /// Time between two refreshes.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = triggers::parse_duration)]
    interval: Duration,
    #[command(flatten)]
    agent: AgentAddress,
}

pub fn run(args: Args) -> Result<()> {
    use std::io::IsTerminal;
    let first = args.agent.snapshot()?;
    if args.once {
        return output::print(args.format, &first);
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "`opscope top` draws on a terminal, and this is none: use `opscope top --once` \
             for one snapshot (`--format json` for scripts)"
        );
    }
    let mut terminal = ratatui::try_init().context("cannot take over the terminal")?;
    let result = View::new(first).run(&mut terminal, &args);
    ratatui::restore();
    result
}

/// How the ops of a job are ordered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpOrder {
    Time10s,
    Time1s,
    Calls1s,
    Name,
}

impl OpOrder {
    fn next(self) -> OpOrder {
        match self {
            OpOrder::Time10s => OpOrder::Time1s,
            OpOrder::Time1s => OpOrder::Calls1s,
            OpOrder::Calls1s => OpOrder::Name,
            OpOrder::Name => OpOrder::Time10s,
        }
    }

    fn title(self) -> &'static str {
        match self {
            OpOrder::Time10s => "time over 10 s",
            OpOrder::Time1s => "time over 1 s",
            OpOrder::Calls1s => "calls/s",
            OpOrder::Name => "name",
        }
    }

    fn sort(self, ops: &mut [OpState]) {
        match self {
            OpOrder::Time10s => ops.sort_by(|a, b| b.time_ms_10s.total_cmp(&a.time_ms_10s)),
            OpOrder::Time1s => ops.sort_by(|a, b| b.time_ms_1s.total_cmp(&a.time_ms_1s)),
            OpOrder::Calls1s => ops.sort_by_key(|o| std::cmp::Reverse(o.calls_1s)),
            OpOrder::Name => ops.sort_by(|a, b| a.name.cmp(&b.name)),
        }
    }
}

struct View {
    snapshot: Snapshot,
    jobs: TableState,
    open: bool,
    paused: bool,
    order: OpOrder,
    error: Option<String>,
}

impl View {
    fn new(snapshot: Snapshot) -> View {
        let mut jobs = TableState::default();
        jobs.select(busiest(&snapshot));
        View {
            snapshot,
            jobs,
            open: false,
            paused: false,
            order: OpOrder::Time10s,
            error: None,
        }
    }

    fn run(&mut self, terminal: &mut ratatui::DefaultTerminal, args: &Args) -> Result<()> {
        let interval = args.interval.max(Duration::from_millis(100));
        let mut next = Instant::now() + interval;
        loop {
            terminal.draw(|f| self.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(key) = event::read()? {
                    if key.kind != KeyEventKind::Press {
                        continue;
                    }
                    match key.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(())
                        }
                        KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
                        KeyCode::Char('s') => self.order = self.order.next(),
                        KeyCode::Enter => self.open = !self.open,
                        KeyCode::Down | KeyCode::Char('j') => self.jobs.select_next(),
                        KeyCode::Up | KeyCode::Char('k') => self.jobs.select_previous(),
                        _ => {}
                    }
                }
                continue;
            }
            next = Instant::now() + interval;
            if !self.paused {
                match args.agent.snapshot() {
                    Ok(s) => {
                        self.refresh(s);
                        self.error = None;
                    }
                    Err(e) => self.error = Some(format!("{e:#}")),
                }
            }
        }
    }

    /// Takes a new snapshot, keeping the same job selected.
    fn refresh(&mut self, snapshot: Snapshot) {
        let selected = self.selected().map(|j| (j.job.clone(), j.uid));
        self.snapshot = snapshot;
        let index = selected.and_then(|(name, uid)| {
            self.snapshot
                .jobs
                .iter()
                .position(|j| j.job == name && j.uid == uid)
        });
        self.jobs.select(index.or_else(|| busiest(&self.snapshot)));
    }

    fn selected(&self) -> Option<&JobState> {
        self.snapshot.jobs.get(self.jobs.selected()?)
    }

    fn draw(&mut self, frame: &mut Frame) {
        let a = &self.snapshot.agent;
        let mut status = format!(
            " agent {} · flight recorder {} of {} · {:.0} s held of {:.0} s",
            a.pid,
            text(&Value::Bytes(a.flight_bytes as i64)),
            text(&Value::Bytes(a.flight_bound as i64)),
            a.flight_held_s,
            a.flight_window_s
        );
        for gpu in &a.gpus {
            status.push_str(&format!(
                " · GPU {} {:.0}% {}",
                gpu.index,
                gpu.utilization_percent,
                text(&Value::Bytes(gpu.memory_used_bytes as i64))
            ));
        }
        if self.paused {
            status.push_str(" · PAUSED");
        }
        if let Some(e) = &self.error {
            status = format!(" {e}");
        }
        let keys = " ↑↓ job · Enter open · s order · p pause · q quit";
        let job_rows = self.snapshot.jobs.len().clamp(1, 8) as u16 + 3;
        let [head, jobs, detail, foot] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(if self.open { 0 } else { job_rows }),
            Constraint::Min(4),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        frame.render_widget(
            Paragraph::new(status).style(Style::new().add_modifier(Modifier::REVERSED)),
            head,
        );
        frame.render_widget(Paragraph::new(keys), foot);
        if !self.open {
            let rows = self.snapshot.jobs.iter().map(|j| {
                Row::new(
                    vec![
                        j.job.clone(),
                        j.source.clone(),
                        if j.ended {
                            "ended".to_string()
                        } else {
                            j.processes
                                .iter()
                                .filter(|p| p.connected)
                                .count()
                                .to_string()
                        },
                        j.events_per_s.to_string(),
                        ms(j.steps.last_ms),
                        ms(j.steps.median_ms),
                        trend(j.steps.trend_percent),
                        format!("{:.0}%", j.cpu_percent),
                    ]
                    .into_iter()
                    .chain(
                        LIVE_METRICS
                            .iter()
                            .map(|m| format!("{:.0}%", j.metric(&percent_key(m)))),
                    )
                    .chain([
                        text(&Value::Bytes(j.rss_bytes as i64)),
                        if j.gpus.is_empty() {
                            "-".to_string()
                        } else {
                            text(&Value::Bytes(j.gpu_memory_bytes as i64))
                        },
                    ])
                    .collect::<Vec<_>>(),
                )
            });
            let widths = [
                Constraint::Fill(2),
                Constraint::Length(12),
                Constraint::Length(6),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(7),
                Constraint::Length(6),
            ]
            .into_iter()
            .chain(LIVE_METRICS.iter().map(|_| Constraint::Length(6)))
            .chain([Constraint::Length(10), Constraint::Length(10)]);
            let header = [
                "job",
                "from",
                "procs",
                "events/s",
                "last step",
                "median",
                "trend",
                "CPU",
            ]
            .into_iter()
            .chain(LIVE_METRICS.iter().map(|m| m.column))
            .chain(["RSS", "GPU mem"]);
            let table = Table::new(rows, widths)
                .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
                .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
                .block(Block::bordered().title(" jobs "));
            frame.render_stateful_widget(table, jobs, &mut self.jobs);
        }
        let Some(job) = self.selected().cloned() else {
            frame.render_widget(
                Paragraph::new("no jobs: record one with `opscope record -- CMD`")
                    .block(Block::bordered()),
                detail,
            );
            return;
        };
        let process_rows = job.processes.len().clamp(1, 12) as u16 + 3;
        let [processes, ops] =
            Layout::vertical([Constraint::Length(process_rows), Constraint::Min(3)]).areas(detail);
        let rows = job.processes.iter().map(|p| {
            let mut cells = vec![
                p.pid.to_string(),
                if p.connected {
                    p.role.clone()
                } else {
                    format!("{} (ended)", p.role)
                },
                format!("{:.0}%", p.cpu_percent),
            ];
            cells.extend(
                LIVE_METRICS
                    .iter()
                    .map(|m| format!("{:.0}%", p.metric(&percent_key(m)))),
            );
            cells.extend([
                text(&Value::Bytes(p.rss_bytes as i64)),
                opscope_agent::snapshot::gpu_use_text(&p.gpus),
                p.events.to_string(),
                text(&snapshot::steps_text(p.steps.count)),
                ms(p.steps.last_ms),
                p.command.clone(),
            ]);
            Row::new(cells)
        });
        let widths = [
            Constraint::Length(8),
            Constraint::Length(18),
            Constraint::Length(6),
        ]
        .into_iter()
        .chain(LIVE_METRICS.iter().map(|_| Constraint::Length(6)))
        .chain([
            Constraint::Length(10),
            Constraint::Length(14),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Fill(1),
        ]);
        let header = ["pid", "role", "CPU"]
            .into_iter()
            .chain(LIVE_METRICS.iter().map(|m| m.column))
            .chain([
                "RSS",
                "GPU memory",
                "events",
                "steps",
                "last step",
                "command",
            ]);
        let table = Table::new(rows, widths)
            .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
            .block(
                Block::bordered()
                    .title(Line::from(format!(
                        " job {} · {} steps {} · median {} ",
                        job.job,
                        job.steps.count,
                        job.steps.found_by,
                        ms(job.steps.median_ms)
                    )))
                    .title_bottom(Line::from(match &job.advice {
                        Some(advice) => format!(" advice: {advice} "),
                        None => String::new(),
                    })),
            );
        frame.render_widget(table, processes);
        // A job watched from outside (`attach`) has no ops: its sampled hot functions.
        if job.top_ops.is_empty() && !job.hot_functions.is_empty() {
            let rows = job.hot_functions.iter().map(|f| {
                Row::new(vec![
                    format!("{:.1}%", f.percent_10s),
                    text(&Value::Duration(f.ns_10s as f64)),
                    format!("{} ({})", f.function, f.file),
                ])
            });
            let table = Table::new(
                rows,
                [
                    Constraint::Length(7),
                    Constraint::Length(11),
                    Constraint::Fill(1),
                ],
            )
            .header(
                Row::new(["own %", "own time", "function (file)"])
                    .style(Style::new().add_modifier(Modifier::BOLD)),
            )
            .block(Block::bordered().title(" hot functions of its sampled stacks, last 10 s "));
            frame.render_widget(table, ops);
            return;
        }
        let mut top = job.top_ops.clone();
        self.order.sort(&mut top);
        let rows = top.iter().map(|o| {
            Row::new(vec![
                o.name.clone(),
                o.kind.clone(),
                o.calls_1s.to_string(),
                duration(o.time_ms_1s),
                o.calls_10s.to_string(),
                duration(o.time_ms_10s),
                o.calls_60s.to_string(),
                duration(o.time_ms_60s),
            ])
        });
        let table = Table::new(
            rows,
            [
                Constraint::Fill(1),
                Constraint::Length(8),
                Constraint::Length(9),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(10),
                Constraint::Length(10),
            ],
        )
        .header(
            Row::new([
                "op",
                "kind",
                "calls/s",
                "time 1 s",
                "calls 10s",
                "time 10 s",
                "calls 60s",
                "time 60 s",
            ])
            .style(Style::new().add_modifier(Modifier::BOLD)),
        )
        .block(Block::bordered().title(format!(
            " ops by {}, as stats op counts them, in the last {:.0} s of events read ",
            self.order.title(),
            job.ops_read_s
        )));
        frame.render_widget(table, ops);
    }
}

/// The job to show first: the running job with the most events per second (not one
/// that ended, perhaps another session's), else the first.
fn busiest(snapshot: &Snapshot) -> Option<usize> {
    let running = snapshot
        .jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| !j.ended)
        .max_by_key(|(i, j)| (j.events_per_s, j.events, std::cmp::Reverse(*i)));
    running
        .map(|(i, _)| i)
        .or((!snapshot.jobs.is_empty()).then_some(0))
}

fn duration(ms: f64) -> String {
    text(&Value::Duration(ms * 1e6))
}

fn ms(v: Option<f64>) -> String {
    text(&snapshot::ms(v))
}

fn trend(v: Option<f64>) -> String {
    text(&snapshot::trend(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first job shown is the busiest running one, not a job that ended (before,
    /// the first in the list: another session's, finished).
    #[test]
    fn the_busiest_running_job_is_shown_first() {
        let job = |name: &str, ended: bool, events_per_s: u64| JobState {
            job: name.into(),
            ended,
            events_per_s,
            ..JobState::default()
        };
        let mut snapshot = Snapshot {
            jobs: vec![
                job("old", true, 0),
                job("quiet", false, 10),
                job("busy", false, 900),
            ],
            ..Snapshot::default()
        };
        assert_eq!(busiest(&snapshot), Some(2));
        snapshot.jobs.truncate(1);
        assert_eq!(busiest(&snapshot), Some(0), "only ended jobs: the first");
        snapshot.jobs.clear();
        assert_eq!(busiest(&snapshot), None);
    }
}
