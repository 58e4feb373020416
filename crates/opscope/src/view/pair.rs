//! Two traces on one page (`opscope view AFTER --against BEFORE`): the earlier run's
//! tracks above the later's, each group named for its side, their times moved so that
//! the two runs' first steps start together, and what `opscope diff BEFORE AFTER` says
//! first among the panels. The page's numbers of the later run's tracks, slices and
//! names follow the earlier's ([`Base`]); each answer is asked of the model a number
//! belongs to and joined.

use std::sync::{Arc, OnceLock};

use opscope_analysis::steps::{self, StepOptions};
use serde_json::Value;

use super::model::{Base, ViewModel, ViewParts};

/// The earlier run (`A`, first on the page) and the later (`B`).
pub struct Pair {
    pub before: Arc<ViewModel>,
    pub after: Arc<ViewModel>,
    /// The diff's section of the panels, made when first asked.
    pub diff: OnceLock<String>,
}

/// How the sides' groups are named on the page.
const SIDES: [&str; 2] = ["A", "B"];

impl Pair {
    /// The two models, numbered one after the other, their origins set so that their
    /// first steps (else their starts) meet at one time of the page.
    pub fn new(mut before: ViewModel, mut after: ViewModel) -> Pair {
        let first_step = |m: &ViewModel| {
            let found = steps::steps(&m.context(), &StepOptions::default());
            found
                .iter()
                .filter(|s| !matches!(s.found_by, steps::StepSource::Loader))
                .filter_map(|s| s.steps.first().map(|st| st.start_ns))
                .min()
                .unwrap_or(m.origin)
        };
        let (step_a, step_b) = (first_step(&before), first_step(&after));
        let lead = (step_a - before.origin).max(step_b - after.origin);
        for (m, step) in [(&mut before, step_a), (&mut after, step_b)] {
            let end = m.origin + m.span_ns;
            m.origin = step - lead;
            m.span_ns = (end - m.origin).max(1);
        }
        after.base = Base {
            track: before.tracks.len(),
            slice: before.trace.slices.len(),
            name: before.trace.strings.len() as u32,
        };
        Pair {
            before: Arc::new(before),
            after: Arc::new(after),
            diff: OnceLock::new(),
        }
    }

    fn sides(&self) -> [&ViewModel; 2] {
        [&self.before, &self.after]
    }

    /// The model page track `id` belongs to, and its own number for it.
    fn of_track(&self, id: usize) -> (&ViewModel, usize) {
        match id.checked_sub(self.after.base.track) {
            Some(local) => (&self.after, local),
            None => (&self.before, id),
        }
    }

    /// Both models' meta, the tracks of each under groups named for its side.
    pub fn meta_json(&self, generation: u64, note: &str) -> String {
        let mut tracks = Vec::new();
        let mut events = 0u64;
        for (side, m) in SIDES.iter().zip(self.sides()) {
            let mut meta: Value = serde_json::from_str(&m.meta_json(false, generation, note, None))
                .unwrap_or_default();
            events += meta["events"].as_u64().unwrap_or(0);
            for mut track in meta["tracks"]
                .as_array_mut()
                .map(std::mem::take)
                .unwrap_or_default()
            {
                let id = track["id"].as_u64().unwrap_or(0) as usize + m.base.track;
                track["id"] = id.into();
                track["group"] =
                    format!("{side} · {}", track["group"].as_str().unwrap_or("")).into();
                tracks.push(track);
            }
        }
        serde_json::json!({
            "title": format!("A: {} · B: {}", self.before.title, self.after.title),
            "span": self.before.span_ns.max(self.after.span_ns),
            // Links of the panels (B's reports) are in B's times.
            "origin": self.after.origin,
            "events": events,
            "tracks": tracks,
            "live": false,
            "generation": generation,
            "note": note,
        })
        .to_string()
    }

    /// The view of the page's `tracks`, each asked of its model.
    pub fn view_parts(
        &self,
        start: i64,
        end: i64,
        px: f64,
        tracks: &[(usize, usize)],
    ) -> ViewParts {
        let mut parts = ViewParts::default();
        for m in self.sides() {
            let mine: Vec<(usize, usize)> = tracks
                .iter()
                .map(|&(id, rows)| (self.of_track(id), rows))
                .filter(|((of, _), _)| std::ptr::eq(*of, m))
                .map(|((_, local), rows)| (local, rows))
                .collect();
            if !mine.is_empty() {
                parts = parts.join(m.view_parts(start, end, px, &mine));
            }
        }
        parts
    }

    pub fn track_count(&self) -> usize {
        self.after.base.track + self.after.tracks.len()
    }

    pub fn slice_json(&self, id: usize) -> Option<String> {
        match id.checked_sub(self.after.base.slice) {
            Some(local) => self.after.slice_json(local),
            None => self.before.slice_json(id),
        }
    }

    /// Both runs' steps, each process named for its side.
    pub fn steps_json(&self) -> String {
        let mut steps = Vec::new();
        let (mut first, mut last) = (i64::MAX, i64::MIN);
        for (side, m) in SIDES.iter().zip(self.sides()) {
            let found: Value = serde_json::from_str(m.steps_json()).unwrap_or_default();
            for span in found["spans"].as_array().into_iter().flatten() {
                first = first.min(span[0].as_i64().unwrap_or(i64::MAX));
                last = last.max(span[1].as_i64().unwrap_or(i64::MIN));
            }
            for mut step in found["steps"].as_array().cloned().unwrap_or_default() {
                step["process"] =
                    format!("{side} · {}", step["process"].as_str().unwrap_or("")).into();
                steps.push(step);
            }
        }
        let spans: Vec<[i64; 2]> = (first <= last)
            .then_some([first, last])
            .into_iter()
            .collect();
        serde_json::json!({ "spans": spans, "steps": steps }).to_string()
    }

    /// The first match after `after` in either run (past the last, the first), and
    /// how many match in both.
    pub fn search_json(&self, query: &str, after: i64) -> String {
        let found: Vec<Value> = self
            .sides()
            .iter()
            .map(|m| serde_json::from_str(&m.search_json(query, after)).unwrap_or_default())
            .collect();
        let matches: u64 = found
            .iter()
            .map(|f| f["matches"].as_u64().unwrap_or(0))
            .sum();
        let start = |f: &Value| f["slice"]["start"].as_i64();
        let next = found
            .iter()
            .filter(|f| start(f).is_some_and(|s| s > after))
            .min_by_key(|f| start(f))
            .or_else(|| {
                found
                    .iter()
                    .filter(|f| start(f).is_some())
                    .min_by_key(|f| start(f))
            });
        serde_json::json!({
            "matches": matches,
            "slice": next.map(|f| f["slice"].clone()),
        })
        .to_string()
    }
}
