//! One clock against another, from one-way constraints: the lines `y = (1 + d)·x + b`
//! (B's clock as a function of A's, `d` the drift) that keep every observed cause
//! before its effect, as in the convex-hull method (Duda et al. 1987, Poirier et al.
//! 2010: see `shared/notes/clock-sync.md`). Rather than walking the two hulls, the
//! feasible lines are read from their dual: for a drift `d`, the offsets that fit form
//! an interval `[G(d), F(d)]`, `F` concave and `G` convex, so every question (the drift
//! range, the widest fit, the extreme times at any `x`) is a search over one concave
//! function. Exact for the linear model, O(n) per evaluation.

/// The lines must pass below every `above` point and above every `below` point. For
/// B's start before A's end of one rendezvous, `(A's end, B's start)` is `below`; for
/// A's start before B's end, `(A's start, B's end)` is `above`. Times in ns.
#[derive(Clone, Debug, Default)]
pub struct Constraints {
    pub above: Vec<(i64, i64)>,
    pub below: Vec<(i64, i64)>,
}

/// The drift searched: clocks of real hosts drift by far less than 0.05 %.
const MAX_DRIFT: f64 = 5e-4;

#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// `y = x + drift·(x − origin) + offset`: B's time of A's time `x`.
    pub origin: i64,
    pub drift: f64,
    pub offset_ns: f64,
    /// The largest distance, over `[from, to]` of A's clock, between the fit and any
    /// line that keeps every constraint; `None` when the constraints conflict.
    pub bound_ns: Option<f64>,
    /// When no line keeps every constraint: by how much the best line misses the
    /// constraint it misses most (ns).
    pub conflict_ns: Option<f64>,
    /// Whether the constraints fix the drift (both kinds of point, spread in time);
    /// without, the drift is 0 and only the offset is fitted.
    pub drift_known: bool,
    pub points: usize,
}

impl Fit {
    /// B's time of A's time `x`.
    pub fn apply(&self, x: i64) -> f64 {
        x as f64 + self.drift * (x - self.origin) as f64 + self.offset_ns
    }
}

/// The dual of the constraints around `origin`: `F(d)` the lowest offset an `above`
/// point allows, `G(d)` the highest a `below` point needs.
struct Dual {
    above: Vec<(f64, f64)>,
    below: Vec<(f64, f64)>,
}

impl Dual {
    fn new(c: &Constraints, origin: i64) -> Dual {
        // y − x, so that the line's slope is the drift (near 0), not 1 + drift.
        let rel = |&(x, y): &(i64, i64)| ((x - origin) as f64, (y - x) as f64);
        Dual {
            above: c.above.iter().map(rel).collect(),
            below: c.below.iter().map(rel).collect(),
        }
    }

    fn f(&self, d: f64) -> f64 {
        self.above
            .iter()
            .map(|&(x, y)| y - d * x)
            .fold(f64::INFINITY, f64::min)
    }

    fn g(&self, d: f64) -> f64 {
        self.below
            .iter()
            .map(|&(x, y)| y - d * x)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// The width of the offsets that fit at drift `d` (negative: they conflict).
    fn width(&self, d: f64) -> f64 {
        self.f(d) - self.g(d)
    }
}

/// The maximum of a concave function on `[lo, hi]`: its argument.
fn argmax(lo: f64, hi: f64, f: impl Fn(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (lo, hi);
    for _ in 0..200 {
        let m1 = lo + (hi - lo) / 3.0;
        let m2 = hi - (hi - lo) / 3.0;
        if f(m1) < f(m2) {
            lo = m1;
        } else {
            hi = m2;
        }
    }
    (lo + hi) / 2.0
}

/// Where a function that is ≥ 0 at `inside` and < 0 at `outside` crosses 0.
fn crossing(mut inside: f64, mut outside: f64, f: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..200 {
        let m = (inside + outside) / 2.0;
        if f(m) >= 0.0 {
            inside = m;
        } else {
            outside = m;
        }
    }
    inside
}

/// The fit of B's clock to A's from `c`, its bound over A's times `[from, to]`; `None`
/// without both kinds of point (nothing bounds the offset on one side).
pub fn fit(c: &Constraints, from: i64, to: i64) -> Option<Fit> {
    if c.above.is_empty() || c.below.is_empty() {
        return None;
    }
    let origin = from;
    let dual = Dual::new(c, origin);
    let widest = argmax(-MAX_DRIFT, MAX_DRIFT, |d| dual.width(d));
    let width = dual.width(widest);
    let points = c.above.len() + c.below.len();
    if width < 0.0 {
        return Some(Fit {
            origin,
            drift: widest,
            offset_ns: (dual.f(widest) + dual.g(widest)) / 2.0,
            bound_ns: None,
            conflict_ns: Some(-width / 2.0),
            drift_known: true,
            points,
        });
    }
    // The drifts that fit: where the width is ≥ 0. Reaching the search's edge means
    // the points do not fix the drift (one instant, or one kind of point per side).
    let near_edge = |d: f64| d.abs() > MAX_DRIFT * 0.999;
    let d_lo = crossing(widest, -MAX_DRIFT * 1.000_001, |d| {
        if d < -MAX_DRIFT {
            -1.0
        } else {
            dual.width(d)
        }
    });
    let d_hi = crossing(widest, MAX_DRIFT * 1.000_001, |d| {
        if d > MAX_DRIFT {
            -1.0
        } else {
            dual.width(d)
        }
    });
    let drift_known = !near_edge(d_lo) && !near_edge(d_hi);
    // Without a known drift, offset only: the drift that fits nearest 0. The bound
    // still spans every drift that fits (up to the search's edge), so it says how far
    // an unknown drift can take the times.
    let drift = if drift_known {
        widest
    } else {
        0f64.clamp(d_lo, d_hi)
    };
    let offset = (dual.f(drift) + dual.g(drift)) / 2.0;
    // The extreme times any fitting line gives at x, against the fit's.
    let bound_at = |x: i64| {
        let x = (x - origin) as f64;
        let hi_d = argmax(d_lo, d_hi, |d| d * x + dual.f(d));
        let lo_d = argmax(d_lo, d_hi, |d| -(d * x + dual.g(d)));
        let here = drift * x + offset;
        let highest = hi_d * x + dual.f(hi_d);
        let lowest = lo_d * x + dual.g(lo_d);
        (highest - here).max(here - lowest).max(0.0)
    };
    Some(Fit {
        origin,
        drift,
        offset_ns: offset,
        // Both distances are convex in x: largest at an end.
        bound_ns: Some(bound_at(from).max(bound_at(to))),
        conflict_ns: None,
        drift_known,
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rendezvous between two hosts whose clocks differ by `offset` and `drift`: each
    /// rank enters at its own time, all leave together `latency` after the last enters.
    fn rendezvous(offset: f64, drift: f64, n: usize, latency: i64) -> Constraints {
        let b_of = |t: i64| (t as f64 * (1.0 + drift) + offset).round() as i64;
        let mut c = Constraints::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |m: i64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as i64
        };
        for k in 0..n {
            let t = 1_000_000_000 + k as i64 * 10_000_000;
            let (enter_a, enter_b) = (t + rand(50_000), t + rand(50_000));
            let leave = enter_a.max(enter_b) + latency;
            let (leave_a, leave_b) = (leave + rand(2_000), leave + rand(2_000));
            c.below.push((leave_a, b_of(enter_b)));
            c.above.push((enter_a, b_of(leave_b)));
        }
        c
    }

    #[test]
    fn a_known_offset_and_drift_are_found_within_the_bound() {
        for (offset, drift) in [(350_000.0, 20e-6), (-780_000.0, -35e-6), (0.0, 0.0)] {
            let c = rendezvous(offset, drift, 200, 20_000);
            let (from, to) = (1_000_000_000, 3_000_000_000);
            let f = fit(&c, from, to).unwrap();
            let bound = f.bound_ns.unwrap();
            assert!(f.drift_known);
            for x in [from, (from + to) / 2, to] {
                let truth = x as f64 * (1.0 + drift) + offset;
                assert!(
                    (f.apply(x) - truth).abs() <= bound + 1.0,
                    "at {x}: fit {} truth {truth} bound {bound}",
                    f.apply(x)
                );
            }
            assert!(bound < 25_000.0, "{bound}");
            assert!((f.drift - drift).abs() < 5e-6, "{f:?}");
        }
    }

    #[test]
    fn one_rendezvous_fixes_the_offset_only() {
        let c = rendezvous(1_000.0, 0.0, 1, 10_000);
        let f = fit(&c, 0, 2_000_000_000).unwrap();
        assert!(!f.drift_known);
        assert_eq!(f.drift, 0.0);
        let at = c.above[0].0;
        assert!((f.apply(at) - (at as f64 + 1_000.0)).abs() <= f.bound_ns.unwrap());
    }

    #[test]
    fn conflicting_constraints_say_by_how_much() {
        // B's clock must be ≥ 10-11 µs ahead of A's (it entered that late after A
        // left), and ≥ 1 µs behind (A entered after B left): no line does both; the
        // best one misses each side by half the 12 µs gap.
        let c = Constraints {
            below: vec![(1_000, 11_000), (2_000_000, 2_011_000)],
            above: vec![(6_000, 5_000), (2_006_000, 2_005_000)],
        };
        let f = fit(&c, 0, 3_000_000).unwrap();
        assert!(f.bound_ns.is_none());
        let conflict = f.conflict_ns.unwrap();
        assert!((conflict - 6_000.0).abs() < 10.0, "{conflict}");
        assert!(fit(&Constraints::default(), 0, 1).is_none());
    }
}
