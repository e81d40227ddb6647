//! Stretches of wall-clock time and the two questions the timeline asks of them: how much time
//! a set of possibly overlapping stretches covers (so parallel work is counted once), and which
//! chain of them ran last-to-first up to the end (the critical path). Times are microseconds
//! since the Unix epoch, the precision the store keeps.

/// A stretch of time `[start, end]`, in microseconds since the epoch; `start <= end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub start: i64,
    pub end: i64,
}

impl Interval {
    /// The stretch from `start` to `end`; an `end` before `start` (clocks that stepped back)
    /// gives an empty stretch at `start` rather than a negative one.
    pub fn new(start: i64, end: i64) -> Interval {
        Interval {
            start,
            end: end.max(start),
        }
    }

    pub fn len(self) -> i64 {
        self.end - self.start
    }

    /// The part of this stretch inside `window`; `None` when they do not meet.
    pub fn clip(self, window: Interval) -> Option<Interval> {
        let start = self.start.max(window.start);
        let end = self.end.min(window.end);
        (start <= end).then_some(Interval { start, end })
    }
}

/// The time covered by at least one of `intervals`, each instant counted once.
/// O(n log n): sort by start, then one sweep merging overlaps.
pub fn covered(mut intervals: Vec<Interval>) -> i64 {
    intervals.sort_unstable_by_key(|i| (i.start, i.end));
    let mut total = 0;
    let mut current: Option<Interval> = None;
    for i in intervals {
        match &mut current {
            Some(c) if i.start <= c.end => c.end = c.end.max(i.end),
            _ => {
                total += current.map_or(0, Interval::len);
                current = Some(i);
            }
        }
    }
    total + current.map_or(0, Interval::len)
}

/// The chain of `activities` that determined the end, first to last, as indices into
/// `activities`.
///
/// Walks back from `horizon`: take the activity that ended last at or before the current time
/// (of several ending together, the one that started first: it held the end back longest),
/// then move the current time to its start and repeat, until nothing ends before it. What this
/// finds is what the run was waiting on at each moment, without needing the plan's
/// dependencies: a step can only start once what it needs has ended, so whatever ended last
/// before it started is what it was waiting for. O(n log n): one sort, then one binary search
/// per link.
pub fn critical_chain(activities: &[Interval], horizon: i64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..activities.len()).collect();
    // By end; among equal ends the earliest start last, so the binary search lands on it.
    order.sort_unstable_by_key(|&i| (activities[i].end, std::cmp::Reverse(activities[i].start)));
    let mut chain = Vec::new();
    let mut now = horizon;
    // Links are taken from ever lower positions in `order`, so a zero-length activity cannot be
    // taken twice and the walk always ends.
    let mut below = order.len();
    loop {
        let candidates = &order[..below];
        let n = candidates.partition_point(|&i| activities[i].end <= now);
        if n == 0 {
            break;
        }
        let pick = candidates[n - 1];
        chain.push(pick);
        now = activities[pick].start;
        below = n - 1;
    }
    chain.reverse();
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(start: i64, end: i64) -> Interval {
        Interval::new(start, end)
    }

    #[test]
    fn coverage_counts_overlaps_once() {
        let cases: [(&[(i64, i64)], i64); 6] = [
            (&[], 0),
            (&[(0, 10)], 10),
            (&[(0, 10), (5, 15)], 15),
            (&[(0, 10), (2, 3), (20, 25)], 15),
            (&[(20, 25), (0, 10), (10, 12)], 17),
            (&[(0, 0), (5, 5)], 0),
        ];
        for (input, want) in cases {
            let got = covered(input.iter().map(|&(s, e)| iv(s, e)).collect());
            assert_eq!(got, want, "{input:?}");
        }
    }

    #[test]
    fn clipping_and_backward_clocks() {
        assert_eq!(iv(5, 3).len(), 0);
        assert_eq!(iv(0, 10).clip(iv(5, 20)), Some(iv(5, 10)));
        assert_eq!(iv(0, 4).clip(iv(5, 20)), None);
    }

    #[test]
    fn the_chain_follows_what_ended_last_before_each_start() {
        // a 0-10, then b 10-30 and c 12-20 in parallel, then d 30-40 (after b, the slower).
        let acts = [iv(0, 10), iv(10, 30), iv(12, 20), iv(30, 40)];
        assert_eq!(critical_chain(&acts, 40), [0, 1, 3]);
        // Nothing ends before the horizon: an empty chain.
        assert_eq!(critical_chain(&acts, -1), Vec::<usize>::new());
        // A gap (orchestration) between links is allowed; a horizon past the end too.
        let acts = [iv(0, 10), iv(15, 20)];
        assert_eq!(critical_chain(&acts, 100), [0, 1]);
        // Equal ends: the longer one is taken.
        let acts = [iv(5, 10), iv(0, 10)];
        assert_eq!(critical_chain(&acts, 10), [1]);
        // Zero-length activities are each taken at most once, so the walk ends.
        let acts = [iv(5, 5), iv(5, 5)];
        assert_eq!(critical_chain(&acts, 5).len(), 2);
        let acts = [iv(5, 5), iv(0, 5)];
        assert_eq!(critical_chain(&acts, 9), [1]);
    }
}
