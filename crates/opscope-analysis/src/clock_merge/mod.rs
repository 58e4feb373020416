//! Many hosts onto one clock: each clock domain (a host the trace names, else a file)
//! is put on a reference domain's clock with an offset and a drift fitted to what the
//! traces hold (a rank leaves a collective no earlier than the last rank entered it),
//! and an error bound that any correction keeping those constraints lies within.

pub mod fit;
mod rendezvous;

use hashbrown::HashMap;
use opscope_model::clock::MERGED_CLOCK_PREFIX;
use opscope_model::{ClockDomain, LinearTransform, SourceId, Trace};
use serde::Serialize;

use fit::{Constraints, Fit};

#[derive(Clone, Debug, Default)]
pub struct MergeOptions {
    /// A clock domain per file, whatever hosts the files name.
    pub clock_per_file: bool,
}

/// One clock domain and the correction put on it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DomainReport {
    /// The host, or the file.
    pub name: String,
    pub files: Vec<String>,
    pub reference: bool,
    /// Added to the domain's times at its first event (ns): the correction there.
    pub offset_ns: f64,
    /// The correction's drift: a domain time `x` becomes `x + offset + drift·(x − its
    /// first event)`, drift in parts per million.
    pub drift_ppm: f64,
    /// How far off the correction may be at worst over the domain's time span.
    pub bound_ns: Option<f64>,
    /// The constraints could not all be kept: by how much the best fit misses.
    pub conflict_ns: Option<f64>,
    /// Rendezvous points used, against the domain it was fitted to.
    pub points: usize,
    /// The domain it was fitted to (`None` for the reference, or when nothing links
    /// it to the others: then it keeps its own clock).
    pub against: Option<String>,
    /// Whether the constraints fix the drift too (else offset only).
    pub drift_known: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq, Default)]
pub struct MergeReport {
    pub domains: Vec<DomainReport>,
}

impl MergeReport {
    /// Whether any domain was moved.
    pub fn moved(&self) -> bool {
        self.domains
            .iter()
            .any(|d| !d.reference && d.against.is_some())
    }

    /// What a user must know: domains left on their own clocks, constraints that
    /// conflict.
    pub fn warnings(&self) -> Vec<String> {
        let Some(reference) = self.domains.iter().find(|d| d.reference) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for d in self.domains.iter().filter(|d| !d.reference) {
            if let (None, Some(conflict)) = (&d.against, d.conflict_ns) {
                out.push(format!(
                    "{}: its collectives cannot be matched with {}'s (their constraints \
                     conflict by {:.1} ms: events missing from a trace?); its times are its own",
                    d.name,
                    reference.name,
                    conflict / 1e6
                ));
            } else if d.against.is_none() {
                out.push(format!(
                    "{}: no collective links its clock to {}'s; its times are its own",
                    d.name, reference.name
                ));
            } else if let Some(conflict) = d.conflict_ns {
                out.push(format!(
                    "{}: the collectives' constraints on its clock conflict by {:.1} µs \
                     (no offset and drift keeps them all); the closest fit is used",
                    d.name,
                    conflict / 1e3
                ));
            }
        }
        out
    }
}

/// The largest conflict among constraints a correction is still made from (ns).
pub const MAX_CONFLICT_NS: f64 = 10_000.0;

/// A correction `y = x + drift·(x − origin) + offset`.
#[derive(Clone, Copy, Debug)]
struct Linear {
    origin: i64,
    drift: f64,
    offset: f64,
}

impl Linear {
    const IDENTITY: Linear = Linear {
        origin: 0,
        drift: 0.0,
        offset: 0.0,
    };

    fn of(f: &Fit) -> Linear {
        Linear {
            origin: f.origin,
            drift: f.drift,
            offset: f.offset_ns,
        }
    }

    /// The shift at `x`, in ns: computed apart from `x` itself, whose f64 would round
    /// epoch-ns times to 256 ns.
    fn shift(&self, x: i64) -> f64 {
        self.drift * (x - self.origin) as f64 + self.offset
    }

    fn apply(&self, x: i64) -> i64 {
        x.saturating_add(self.shift(x).round() as i64)
    }

    /// `then` after `self`.
    fn then(&self, then: &Linear) -> Linear {
        Linear {
            origin: self.origin,
            drift: self.drift + then.drift + self.drift * then.drift,
            offset: self.offset
                + then.offset
                + then.drift * ((self.origin - then.origin) as f64 + self.offset),
        }
    }

    fn inverse(&self) -> Linear {
        let image = self.origin as f64 + self.offset;
        let origin = image.round() as i64;
        let rest = image - origin as f64;
        Linear {
            origin,
            // Not `1/(1 + d) − 1`: that loses d's digits to the 1 (190 ns at epoch-ns).
            drift: -self.drift / (1.0 + self.drift),
            offset: (self.origin - origin) as f64 - rest / (1.0 + self.drift),
        }
    }
}

/// The clock domains of `trace`: sources by host (sources naming none each their own),
/// or one per file.
fn domains(trace: &Trace, options: &MergeOptions) -> Vec<(String, Vec<SourceId>)> {
    let mut out: Vec<(String, Vec<SourceId>)> = Vec::new();
    // A file that gave no events (one that failed to read) has no clock to correct.
    let with_events = sources_with_events(trace);
    for (i, source) in trace.sources.iter().enumerate() {
        if !with_events[i] {
            continue;
        }
        let host = source
            .host
            .filter(|_| !options.clock_per_file)
            .map(|h| trace.str(h).to_string());
        let name = host.clone().unwrap_or_else(|| source.path.clone());
        match out.iter_mut().find(|d| host.is_some() && d.0 == name) {
            Some(d) => d.1.push(SourceId(i as u32)),
            None => out.push((name, vec![SourceId(i as u32)])),
        }
    }
    out
}

/// Which sources gave at least one slice, instant or counter sample.
fn sources_with_events(trace: &Trace) -> Vec<bool> {
    let mut used = vec![false; trace.tracks.len()];
    let tracks = trace
        .slices
        .track
        .iter()
        .chain(&trace.instants.track)
        .chain(&trace.counters.track);
    for &t in tracks {
        used[t as usize] = true;
    }
    let mut with_events = vec![false; trace.sources.len()];
    for (track, _) in trace.tracks.iter().zip(&used).filter(|(_, &u)| u) {
        if let Some(s) = crate::correlate::source_of_track(trace, track) {
            with_events[s.index()] = true;
        }
    }
    with_events
}

/// Puts every clock domain of `trace` on the reference domain's clock (the one holding
/// the lowest rank, else the first file), and says what it did. With one domain, or no
/// rendezvous between domains, nothing moves.
pub fn merge_clocks(trace: &mut Trace, options: &MergeOptions) -> MergeReport {
    let domains = domains(trace, options);
    let n = domains.len();
    if n == 0 {
        return MergeReport::default();
    }
    let mut domain_of_source = vec![usize::MAX; trace.sources.len()];
    for (d, (_, sources)) in domains.iter().enumerate() {
        for s in sources {
            domain_of_source[s.index()] = d;
        }
    }
    let reference = (0..n)
        .min_by_key(|&d| {
            domains[d]
                .1
                .iter()
                .map(|s| trace.sources[s.index()].rank.unwrap_or(u32::MAX))
                .min()
        })
        .unwrap_or(0);
    let spans = rendezvous::spans(trace, &domain_of_source, n);
    let pairs: HashMap<(usize, usize), Constraints> = if n > 1 {
        rendezvous::constraints(trace, &domain_of_source)
    } else {
        HashMap::new()
    };
    // Each pair's fit, either way round: B of A, with A's span for the bound.
    let mut edges: Vec<Vec<(usize, Linear, Fit)>> = vec![Vec::new(); n];
    let mut conflicts: Vec<Option<f64>> = vec![None; n];
    for (&(a, b), c) in &pairs {
        let (from, to) = spans[a];
        if let Some(f) = fit::fit(c, from, to) {
            if let Some(conflict) = f.conflict_ns.filter(|&c| c > MAX_CONFLICT_NS) {
                for d in [a, b] {
                    conflicts[d] = Some(conflicts[d].map_or(conflict, |x: f64| x.max(conflict)));
                }
            }
            let ab = Linear::of(&f);
            edges[a].push((b, ab, f.clone()));
            edges[b].push((a, ab.inverse(), f));
        }
    }
    // A fit whose constraints conflict by more than timestamps' own errors (CUPTI's
    // mapping of GPU times to the host's, a few µs) matched the wrong instances (a
    // trace that dropped events): it moves nothing, and is said.
    for list in &mut edges {
        list.retain(|(_, _, f)| f.conflict_ns.is_none_or(|c| c <= MAX_CONFLICT_NS));
    }
    let best = paths(&edges, reference);
    let mut report = MergeReport::default();
    let mut correction_of_domain: Vec<Option<Linear>> = vec![None; n];
    for (d, (name, sources)) in domains.iter().enumerate() {
        let files = sources
            .iter()
            .map(|s| trace.sources[s.index()].path.clone())
            .collect();
        let mut row = DomainReport {
            name: name.clone(),
            files,
            reference: d == reference,
            offset_ns: 0.0,
            drift_ppm: 0.0,
            bound_ns: (d == reference).then_some(0.0),
            conflict_ns: None,
            points: 0,
            against: None,
            drift_known: false,
        };
        if let (false, Some(path)) = (d == reference, &best[d]) {
            // Local times go to the reference's by the inverse.
            let correction = path.from_reference.inverse();
            let start = spans[d].0;
            row.offset_ns = correction.shift(start);
            row.drift_ppm = correction.drift * 1e6;
            row.bound_ns = (path.cost < UNBOUNDED).then_some(path.cost);
            row.conflict_ns = path.last.conflict_ns;
            row.points = path.last.points;
            row.against = Some(domains[path.via].0.clone());
            row.drift_known = path.last.drift_known;
            correction_of_domain[d] = Some(correction);
        } else if d != reference {
            row.conflict_ns = conflicts[d];
        }
        report.domains.push(row);
    }
    if n > 1 {
        apply(trace, &domains, &correction_of_domain, &report);
    }
    report
}

/// How a domain is reached from the reference: the summed bound of its fits, the
/// reference's time to the domain's, the domain before it and the last fit.
#[derive(Clone)]
struct Path {
    cost: f64,
    from_reference: Linear,
    via: usize,
    last: Fit,
}

/// The cost of a fit whose constraints conflict: behind any bounded one.
const UNBOUNDED: f64 = 1e12;

/// The path of smallest summed bound from the reference to every domain (Dijkstra's).
fn paths(edges: &[Vec<(usize, Linear, Fit)>], reference: usize) -> Vec<Option<Path>> {
    let n = edges.len();
    let cost = |f: &Fit| {
        f.bound_ns
            .unwrap_or_else(|| UNBOUNDED + f.conflict_ns.unwrap_or(0.0))
    };
    let mut best: Vec<Option<Path>> = vec![None; n];
    let mut done = vec![false; n];
    let mut reached: Vec<Option<(f64, Linear)>> = vec![None; n];
    reached[reference] = Some((0.0, Linear::IDENTITY));
    loop {
        let next = (0..n)
            .filter_map(|d| reached[d].filter(|_| !done[d]).map(|(c, _)| (d, c)))
            .min_by(|x, y| f64::total_cmp(&x.1, &y.1));
        let Some((d, cost_here)) = next else { break };
        done[d] = true;
        let to_here = reached[d].map_or(Linear::IDENTITY, |r| r.1);
        for (to, link, f) in &edges[d] {
            let c = cost_here + cost(f);
            if !done[*to] && reached[*to].is_none_or(|(old, _)| c < old) {
                let from_reference = to_here.then(link);
                reached[*to] = Some((c, from_reference));
                best[*to] = Some(Path {
                    cost: c,
                    from_reference,
                    via: d,
                    last: f.clone(),
                });
            }
        }
    }
    best
}

/// Moves every event of each corrected domain, and gives its sources a clock of their
/// own that records the correction.
fn apply(
    trace: &mut Trace,
    domains: &[(String, Vec<SourceId>)],
    corrections: &[Option<Linear>],
    report: &MergeReport,
) {
    let mut of_source: Vec<Option<Linear>> = vec![None; trace.sources.len()];
    // The corrected times are the reference's: so is their offset to Unix time (as
    // the exports read it, `unix_offset_ns − to_global.offset_ns`).
    let reference = report.domains.iter().position(|d| d.reference).unwrap_or(0);
    let global_to_unix = domains[reference].1.first().and_then(|s| {
        let clock = trace
            .clocks
            .get(trace.sources[s.index()].clock.0 as usize)?;
        Some(clock.unix_offset_ns? - clock.to_global.offset_ns)
    });
    for (d, (name, sources)) in domains.iter().enumerate() {
        let Some(correction) = corrections[d] else {
            continue;
        };
        let row = &report.domains[d];
        let name = trace.intern(&format!("{MERGED_CLOCK_PREFIX}{name}"));
        // `LinearTransform` measures its drift from 0, the correction from its origin.
        let offset_ns =
            (correction.offset - correction.drift * correction.origin as f64).round() as i64;
        let clock = trace.add_clock(ClockDomain {
            name,
            to_global: LinearTransform {
                offset_ns,
                drift_ppb: correction.drift * 1e9,
                error_bound_ns: row.bound_ns.map(|b| b.ceil() as i64),
            },
            unix_offset_ns: global_to_unix.map(|g| g + offset_ns),
        });
        for s in sources {
            trace.sources[s.index()].clock = clock;
            of_source[s.index()] = Some(correction);
        }
    }
    let of_track: Vec<Option<Linear>> = trace
        .tracks
        .iter()
        .map(|t| rendezvous::source_of_track(trace, t).and_then(|s| of_source[s.index()]))
        .collect();
    let moved = |ts: i64, c: &Linear| c.apply(ts);
    let s = &mut trace.slices;
    for i in 0..s.ts.len() {
        if let Some(c) = &of_track[s.track[i] as usize] {
            let (start, end) = (moved(s.ts[i], c), moved(s.ts[i] + s.dur[i], c));
            s.ts[i] = start;
            s.dur[i] = (end - start).max(0);
        }
    }
    for (ts, &track) in trace.instants.ts.iter_mut().zip(&trace.instants.track) {
        if let Some(c) = &of_track[track as usize] {
            *ts = moved(*ts, c);
        }
    }
    for (ts, &track) in trace.counters.ts.iter_mut().zip(&trace.counters.track) {
        if let Some(c) = &of_track[track as usize] {
            *ts = moved(*ts, c);
        }
    }
    for (ts, &track) in trace.samples.ts.iter_mut().zip(&trace.samples.track) {
        if let Some(c) = &of_track[track as usize] {
            *ts = moved(*ts, c);
        }
    }
}

impl crate::report::Reported for MergeReport {
    fn report(&self) -> crate::report::Report {
        use crate::report::{Column, Report, Table, Value};
        let mut table = Table::new(vec![
            Column::text("clock domain"),
            Column::numeric("files"),
            Column::numeric("offset"),
            Column::numeric("drift (ppm)"),
            Column::numeric("bound"),
            Column::numeric("points"),
            Column::text("fitted to"),
        ]);
        for d in &self.domains {
            let bound = match (d.reference, d.bound_ns, d.conflict_ns) {
                (true, _, _) => Value::text("reference"),
                (_, Some(b), _) => Value::Duration(b),
                (_, None, Some(c)) => Value::text(format!("conflict {:.1} µs", c / 1e3)),
                _ => Value::text("none"),
            };
            table.rows.push(vec![
                Value::text(&d.name),
                Value::Count(d.files.len() as i64),
                Value::Duration(d.offset_ns),
                if d.drift_known || d.reference {
                    Value::number(d.drift_ppm, 3)
                } else {
                    Value::text("(offset only)")
                },
                bound,
                Value::Count(d.points as i64),
                Value::text(d.against.as_deref().unwrap_or("")),
            ]);
        }
        let mut out = Report::default();
        out.table(table);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrections_compose_and_invert() {
        let a = Linear {
            origin: 1_000_000_000,
            drift: 30e-6,
            offset: 500_000.0,
        };
        let b = Linear {
            origin: 1_200_000_000,
            drift: -10e-6,
            offset: -20_000.0,
        };
        // Epoch-ns times too: a correction must not round them to f64's 256 ns.
        for x in [
            1_000_000_000i64,
            2_500_000_000,
            4_000_000_000,
            1_700_000_000_123_456_789,
        ] {
            assert_eq!(Linear::IDENTITY.apply(x), x);
            let both = a.then(&b).apply(x);
            let step = b.apply(a.apply(x));
            assert!((both - step).abs() <= 1, "{both} {step}");
            let back = a.inverse().apply(a.apply(x));
            assert!((back - x).abs() <= 1, "{back} {x}");
        }
    }
}
