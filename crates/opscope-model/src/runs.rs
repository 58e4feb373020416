//! Sorting rows that arrive as ascending runs, as importers emit them: a track's events
//! in time order but a few streams of them interleaved, a trace's copies one after
//! another. Only the pieces where runs reach into each other are sorted.

/// Sorts `rows` by `key` as a stable sort would. Cheap when the rows come as ascending
/// runs of which few overlap: they are cut wherever every row before is below every
/// row after, and only the pieces that hold more than one run are sorted.
///
/// A merging sort of a 1 GB Kineto trace's largest track (1.8 million rows in about 90
/// runs) merged every run into the next, 74 ms; cut first, 42 ms.
pub fn sort_runs_by_key<T, K: Ord + Copy>(rows: &mut [T], key: impl Fn(&T) -> K) {
    sort_pieces(rows, &key, |piece| piece.sort_by_key(&key));
}

/// [`sort_runs_by_key`] for rows whose keys all differ: the pieces are sorted in place,
/// with no buffer of half their rows beside them.
pub fn sort_distinct_runs_by_key<T, K: Ord + Copy>(rows: &mut [T], key: impl Fn(&T) -> K) {
    sort_pieces(rows, &key, |piece| piece.sort_unstable_by_key(&key));
}

fn sort_pieces<T, K: Ord + Copy>(
    rows: &mut [T],
    key: &impl Fn(&T) -> K,
    mut sort: impl FnMut(&mut [T]),
) {
    if insertion_sort_if_near(rows, key) {
        return;
    }
    let n = rows.len();
    // Rows in many short runs (shuffled ones) are sorted whole: the runs' starts and
    // least keys are kept for at most one row in sixteen, not one in two.
    let most_runs = (n / 16).max(64);
    let mut starts = vec![0];
    for i in 1..n {
        if key(&rows[i]) < key(&rows[i - 1]) {
            if starts.len() == most_runs {
                sort(rows);
                return;
            }
            starts.push(i);
        }
    }
    // The least key of each run and the runs after it: a run ascends, so its least key
    // is its first row's.
    let mut lows = Vec::with_capacity(starts.len());
    let mut low = key(&rows[starts[starts.len() - 1]]);
    for &start in starts.iter().rev() {
        low = low.min(key(&rows[start]));
        lows.push(low);
    }
    lows.reverse();
    let (mut piece, mut unsorted) = (0, false);
    let mut run = 0;
    let mut high = key(&rows[0]);
    for i in 1..n {
        if starts.get(run + 1) == Some(&i) {
            run += 1;
            unsorted = true;
        }
        let k = key(&rows[i]);
        // Every row from here on is at least the lesser of this one (its run ascends
        // from here) and the least of the later runs. A cut never falls on a run's
        // start, whose row is below the one before.
        if high < k && lows.get(run + 1).is_none_or(|later| high < *later) {
            if unsorted {
                sort(&mut rows[piece..i]);
            }
            (piece, unsorted) = (i, false);
        }
        high = high.max(k);
    }
    if unsorted {
        sort(&mut rows[piece..]);
    }
}

/// Sorts `rows` by inserting each in place while none is far from it and the moves stay
/// few: Kineto's launch flows (each a few places from where it belongs). Gives up,
/// leaving the rows in some order, at the first row far from its place.
fn insertion_sort_if_near<T, K: Ord + Copy>(rows: &mut [T], key: &impl Fn(&T) -> K) -> bool {
    /// How far one row may move, and how many moves a row may take on average.
    const FAR: usize = 32;
    const MOVES_PER_ROW: usize = 2;
    let Some(first) = rows.first() else {
        return true;
    };
    let mut budget = rows.len() * MOVES_PER_ROW;
    // The greatest key so far, where the rows before it are sorted.
    let mut high = key(first);
    for i in 1..rows.len() {
        let k = key(&rows[i]);
        if k >= high {
            high = k;
            continue;
        }
        // Each swap keeps the rows a permutation of themselves, should this give up.
        let mut j = i;
        while j > 0 && k < key(&rows[j - 1]) {
            if i - j == FAR || budget == 0 {
                return false;
            }
            rows.swap(j - 1, j);
            j -= 1;
            budget -= 1;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{sort_distinct_runs_by_key, sort_runs_by_key};

    /// Rows from a small generator: runs of random lengths, each ascending from a
    /// random start, with repeated keys, so that pieces overlap, touch and tie.
    fn runs(mut seed: u64, rows: usize) -> Vec<(u32, usize)> {
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % below) as u32
        };
        let mut out = Vec::with_capacity(rows);
        while out.len() < rows {
            let (len, mut at) = (1 + next(40), next(400));
            for _ in 0..len {
                out.push((at, out.len()));
                at += next(4);
            }
        }
        out.truncate(rows);
        out
    }

    #[test]
    fn sorts_as_a_stable_sort_does() {
        for seed in 1..400u64 {
            let rows = runs(seed * 0x9e37_79b9, (seed as usize * 7) % 300);
            // By the key alone, so that ties must keep their order (the row's second
            // field is its place).
            let mut expected = rows.clone();
            expected.sort_by_key(|r| r.0);
            let mut got = rows.clone();
            sort_runs_by_key(&mut got, |r| r.0);
            assert_eq!(got, expected, "seed {seed}");
            // With the place in the key, every key differs.
            let mut got = rows.clone();
            sort_distinct_runs_by_key(&mut got, |&r| r);
            assert_eq!(got, expected, "seed {seed}, distinct keys");
        }
    }

    #[test]
    fn rows_a_few_places_out_sort_as_a_stable_sort_does() {
        for seed in 1..200u64 {
            let mut rows: Vec<(u32, usize)> = (0..300).map(|i| (i / 3, i as usize)).collect();
            let mut state = seed;
            for i in 0..rows.len() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let j = (i + (state >> 33) as usize % 6).min(rows.len() - 1);
                rows.swap(i, j);
            }
            for (place, row) in rows.iter_mut().enumerate() {
                row.1 = place;
            }
            let mut expected = rows.clone();
            expected.sort_by_key(|r| r.0);
            let mut got = rows.clone();
            sort_runs_by_key(&mut got, |r| r.0);
            assert_eq!(got, expected, "seed {seed}");
        }
    }

    /// Shuffled rows (a run of two on average) are sorted whole, stably.
    #[test]
    fn shuffled_rows_sort_as_a_stable_sort_does() {
        for seed in 1..20u64 {
            let mut state = seed;
            let rows: Vec<(u32, usize)> = (0..5000)
                .map(|i| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as u32 % 700, i)
                })
                .collect();
            let mut expected = rows.clone();
            expected.sort_by_key(|r| r.0);
            let mut got = rows.clone();
            sort_runs_by_key(&mut got, |r| r.0);
            assert_eq!(got, expected, "seed {seed}");
            let mut got = rows;
            sort_distinct_runs_by_key(&mut got, |&r| r);
            assert_eq!(got, expected, "seed {seed}, distinct keys");
        }
    }

    #[test]
    fn runs_that_do_not_overlap_are_left_in_place() {
        // Three runs, the second reaching into the first: only they are sorted.
        let mut rows = vec![1, 3, 5, 2, 4, 6, 10, 11, 12, 20];
        sort_runs_by_key(&mut rows, |&r| r);
        assert_eq!(rows, [1, 2, 3, 4, 5, 6, 10, 11, 12, 20]);
        let mut descending: Vec<i32> = (0..50).rev().collect();
        sort_runs_by_key(&mut descending, |&r| r);
        assert_eq!(descending, (0..50).collect::<Vec<_>>());
    }
}
