//! Dumps the agent writes by itself: `slow-step=2x` when a step takes more than twice
//! the median of those before it, `stall=60s` when a job that has made steps makes none
//! for that long (a hang). At most one dump per trigger and job per cool-down; the last
//! few kept.

use std::time::Duration;

use anyhow::{bail, Context, Result};

#[derive(Clone, Debug, PartialEq)]
pub enum Trigger {
    SlowStep { factor: f64 },
    Stall { after: Duration },
}

impl Trigger {
    /// `slow-step=2x` or `stall=60s`.
    pub fn parse(text: &str) -> Result<Trigger> {
        let (name, value) = text
            .split_once('=')
            .with_context(|| format!("`{text}`: expected slow-step=FACTORx or stall=SECONDSs"))?;
        match name {
            "slow-step" => {
                let factor: f64 = value
                    .trim_end_matches('x')
                    .parse()
                    .with_context(|| format!("`{value}`: expected a factor such as 2x"))?;
                if factor <= 1.0 || !factor.is_finite() {
                    bail!("slow-step={value}: the factor must be more than 1");
                }
                Ok(Trigger::SlowStep { factor })
            }
            "stall" => Ok(Trigger::Stall {
                after: parse_duration(value)?,
            }),
            _ => bail!("unknown trigger `{name}` (known: slow-step, stall)"),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Trigger::SlowStep { .. } => "slow-step",
            Trigger::Stall { .. } => "stall",
        }
    }
}

/// `500ms`, `30s`, `2m`, or a number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = number
        .trim()
        .parse()
        .with_context(|| format!("`{text}`: expected a duration such as 30s, 500ms or 2m"))?;
    if !(v >= 0.0 && v.is_finite()) {
        bail!("`{text}`: a duration must be positive");
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// One job's trigger state.
#[derive(Default)]
pub struct JobTriggers {
    /// Steps seen at the last check, and when the count last moved (agent ns).
    pub steps_seen: u64,
    pub last_progress_ns: u64,
    /// When each trigger last fired for this job (agent ns), by trigger name.
    pub fired: Vec<(&'static str, u64)>,
    /// Steps already compared with the median of those before them.
    pub steps_judged: u64,
}

impl JobTriggers {
    pub fn may_fire(&self, name: &'static str, now_ns: u64, cooldown: Duration) -> bool {
        self.fired
            .iter()
            .find(|(n, _)| *n == name)
            .is_none_or(|(_, at)| now_ns.saturating_sub(*at) >= cooldown.as_nanos() as u64)
    }

    pub fn fired(&mut self, name: &'static str, now_ns: u64) {
        self.fired.retain(|(n, _)| *n != name);
        self.fired.push((name, now_ns));
    }
}

/// Why a trigger fires for a job now, if it does.
pub fn check(
    trigger: &Trigger,
    job: &mut super::state::Job,
    now_ns: u64,
    cooldown: Duration,
) -> Option<String> {
    let steps = job.step_count();
    if steps != job.triggers.steps_seen {
        job.triggers.steps_seen = steps;
        job.triggers.last_progress_ns = now_ns;
    }
    match trigger {
        Trigger::SlowStep { factor } => {
            // Every step since the last check is judged once, fired for or not.
            let new = job.steps_after(job.triggers.steps_judged);
            job.triggers.steps_judged = steps;
            if !job.triggers.may_fire(trigger.name(), now_ns, cooldown) {
                return None;
            }
            let (number, ms, median) = new
                .into_iter()
                .filter_map(|(n, ms, median)| Some((n, ms, median?)))
                .find(|&(_, ms, median)| ms > factor * median)?;
            Some(format!(
                "slow-step: step {number} took {ms:.1} ms, {:.1}x the median {median:.1} ms of the steps before it (threshold {factor}x)",
                ms / median
            ))
        }
        Trigger::Stall { after } => {
            if !job.triggers.may_fire(trigger.name(), now_ns, cooldown) {
                return None;
            }
            let connected = job.processes.values().any(|p| p.connected);
            let idle = now_ns.saturating_sub(job.triggers.last_progress_ns);
            if steps > 0 && connected && idle >= after.as_nanos() as u64 {
                return Some(format!(
                    "stall: no step completed for {:.1} s (after {steps} steps; threshold {:.1} s)",
                    idle as f64 / 1e9,
                    after.as_secs_f64()
                ));
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_parse_and_bad_ones_say_why() {
        assert_eq!(
            Trigger::parse("slow-step=2x").unwrap(),
            Trigger::SlowStep { factor: 2.0 }
        );
        assert_eq!(
            Trigger::parse("stall=60s").unwrap(),
            Trigger::Stall {
                after: Duration::from_secs(60)
            }
        );
        assert_eq!(
            Trigger::parse("stall=500ms").unwrap(),
            Trigger::Stall {
                after: Duration::from_millis(500)
            }
        );
        for bad in ["slow-step=0.5x", "stall=abc", "slowstep=2x", "stall"] {
            assert!(Trigger::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    }

    /// A slow step is found even when normal steps followed it before the check, and
    /// is dumped for once; a stall needs steps before it and a connected process.
    #[test]
    fn a_slow_step_fires_once_even_among_later_steps_and_a_stall_after_silence() {
        use super::super::flight::Flight;
        use super::super::protocol::Hello;
        use super::super::state::State;
        let mut state = State::new(Flight::new(1 << 20, 1 << 40), 0);
        let hello = Hello {
            job: "j".into(),
            ..Hello::default()
        };
        let (key, process) = state.join(hello, 7, 1000, 0);
        let slow = Trigger::SlowStep { factor: 2.0 };
        let stall = Trigger::Stall {
            after: Duration::from_secs(60),
        };
        let cooldown = Duration::from_secs(300);
        let second = 1_000_000_000u64;
        let add = |state: &mut State, steps: &[f64]| {
            let p = state.process_mut(&key, process).unwrap();
            for &ms in steps {
                let start = p.last_step_start.max(0) + 1;
                p.add_step(start, ms);
            }
        };
        add(&mut state, &[10.0; 6]);
        let job = state.jobs.get_mut(&key).unwrap();
        assert_eq!(check(&slow, job, second, cooldown), None);
        assert_eq!(check(&stall, job, second, cooldown), None);
        add(&mut state, &[10.0, 35.0, 10.0, 11.0]);
        let job = state.jobs.get_mut(&key).unwrap();
        let why = check(&slow, job, 2 * second, cooldown).expect("step 8 is slow");
        assert!(
            why.starts_with("slow-step: step 8 took 35.0 ms, 3.5x"),
            "{why}"
        );
        job.triggers.fired(slow.name(), 2 * second);
        assert_eq!(check(&slow, job, 3 * second, cooldown), None, "judged once");
        // No step for 60 s with the process still there: a stall.
        assert_eq!(check(&stall, job, 61 * second, cooldown), None);
        let why = check(&stall, job, 63 * second, cooldown).expect("a stall");
        assert!(
            why.starts_with("stall: no step completed for 61.0 s"),
            "{why}"
        );
    }
}
