//! Counts of allowed and rejected requests over time, in bounded memory:
//! buckets of one second while the log spans at most [`MAX_BUCKETS`]
//! seconds; past that, neighbouring buckets merge and the width doubles, so
//! a log of any length keeps at most [`MAX_BUCKETS`] buckets per series.

/// The most buckets a series keeps.
pub const MAX_BUCKETS: usize = 1024;

/// Several series (e.g. one per plan) on one time axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timelines {
    start_ms: Option<u64>,
    width_ms: u64,
    series: Vec<Vec<[u64; 2]>>,
}

impl Timelines {
    /// `count` empty series, one-second buckets from the first time added.
    pub fn new(count: usize) -> Self {
        Self {
            start_ms: None,
            width_ms: 1000,
            series: vec![Vec::new(); count],
        }
    }

    /// `count` empty series on the axis of `other` (same start and width),
    /// so that charts of both line up.
    pub fn on_axis_of(other: &Timelines, count: usize) -> Self {
        Self {
            start_ms: other.start_ms,
            width_ms: other.width_ms,
            series: vec![Vec::new(); count],
        }
    }

    /// Counts one request of series `index` at `time_ms` (a time before the
    /// first bucket adds buckets before it: a log's lines need not be in
    /// order).
    pub fn add(&mut self, index: usize, time_ms: u64, allowed: bool) {
        let mut start = *self.start_ms.get_or_insert(time_ms - time_ms % 1000);
        if time_ms < start {
            start = self.reach_back_to(time_ms, start);
        }
        let mut bucket = (time_ms.saturating_sub(start) / self.width_ms) as usize;
        while bucket >= MAX_BUCKETS {
            self.coarsen();
            bucket = (time_ms.saturating_sub(start) / self.width_ms) as usize;
        }
        let series = &mut self.series[index];
        if series.len() <= bucket {
            series.resize(bucket + 1, [0, 0]);
        }
        series[bucket][usize::from(!allowed)] += 1;
    }

    /// Moves the first bucket back from `start` to hold `time_ms`, with
    /// empty buckets before the counted ones, coarsened first so that no
    /// series passes [`MAX_BUCKETS`]. Returns the new start.
    fn reach_back_to(&mut self, time_ms: u64, start: u64) -> u64 {
        let longest = |series: &[Vec<[u64; 2]>]| series.iter().map(Vec::len).max().unwrap_or(0);
        let mut back = (start - time_ms).div_ceil(self.width_ms);
        while back + longest(&self.series) as u64 > MAX_BUCKETS as u64 {
            self.coarsen();
            back = (start - time_ms).div_ceil(self.width_ms);
        }
        // Never before the epoch: a time within the epoch's first bucket of a
        // log that starts years later goes to the first bucket.
        let back = back.min(start / self.width_ms);
        let empty = back as usize;
        for series in self.series.iter_mut().filter(|s| !s.is_empty()) {
            series.splice(0..0, std::iter::repeat_n([0, 0], empty));
        }
        let start = start - back * self.width_ms;
        self.start_ms = Some(start);
        start
    }

    /// Doubles the bucket width, merging pairs of buckets.
    fn coarsen(&mut self) {
        self.width_ms *= 2;
        for series in &mut self.series {
            let merged = series
                .chunks(2)
                .map(|pair| {
                    pair.iter()
                        .fold([0, 0], |sum, b| [sum[0] + b[0], sum[1] + b[1]])
                })
                .collect();
            *series = merged;
        }
    }

    /// The start of the first bucket, epoch ms (`None` when nothing was added).
    pub fn start_ms(&self) -> Option<u64> {
        self.start_ms
    }

    /// The width of a bucket in ms.
    pub fn width_ms(&self) -> u64 {
        self.width_ms
    }

    /// The buckets of series `index`: `[allowed, rejected]` each.
    pub fn series(&self, index: usize) -> &[[u64; 2]] {
        &self.series[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_seconds_until_the_span_is_too_long_then_they_merge() {
        let mut timelines = Timelines::new(2);
        timelines.add(0, 5_500, true);
        timelines.add(0, 5_999, false);
        timelines.add(1, 7_000, true);
        assert_eq!(timelines.start_ms(), Some(5_000));
        assert_eq!(timelines.series(0), &[[1, 1]]);
        assert_eq!(timelines.series(1), &[[0, 0], [0, 0], [1, 0]]);
        let last = 5_000 + 1000 * MAX_BUCKETS as u64; // the first second past the cap
        timelines.add(1, last, false);
        assert_eq!(timelines.width_ms(), 2000);
        assert_eq!(timelines.series(1)[1], [1, 0]);
        assert_eq!(timelines.series(1)[MAX_BUCKETS / 2], [0, 1]);
        let total: u64 = timelines
            .series(0)
            .iter()
            .chain(timelines.series(1))
            .map(|b| b[0] + b[1])
            .sum();
        assert_eq!(total, 4);
    }

    /// A line earlier than the first is counted in its own second, with
    /// buckets added before the first (they went to the first bucket, so a
    /// report drew them seconds late); one far earlier coarsens the buckets
    /// first rather than add millions of them.
    #[test]
    fn an_earlier_time_adds_buckets_before_the_first() {
        let mut timelines = Timelines::new(2);
        timelines.add(0, 10_500, true);
        timelines.add(1, 12_000, false);
        timelines.add(0, 8_200, false);
        assert_eq!(timelines.start_ms(), Some(8_000));
        assert_eq!(timelines.series(0), &[[0, 1], [0, 0], [1, 0]]);
        assert_eq!(
            timelines.series(1),
            &[[0, 0], [0, 0], [0, 0], [0, 0], [0, 1]]
        );

        timelines.add(1, 1_000, true);
        assert_eq!(timelines.start_ms(), Some(1_000));
        assert_eq!(timelines.series(1)[0], [1, 0]);
        assert_eq!(timelines.series(1).len(), 12);
    }

    /// A line from 1970 in a log of 2025: the buckets widen until both fit.
    #[test]
    fn a_far_earlier_time_widens_the_buckets_first() {
        let mut timelines = Timelines::new(1);
        let late = 1_764_669_610_500;
        timelines.add(0, late, true);
        timelines.add(0, late + 1_000, false);
        let early = 30 * 86_400_000;
        timelines.add(0, early, false);
        let (start, width) = (timelines.start_ms().unwrap(), timelines.width_ms());
        let series = timelines.series(0);
        assert!(series.len() <= MAX_BUCKETS, "{} buckets", series.len());
        assert!(start <= early && early - start < width, "{start} {width}");
        assert_eq!(series[0], [0, 1]);
        let at = ((late - start) / width) as usize;
        assert_eq!(series[at][0], 1);
        assert_eq!(series.iter().map(|b| b[0] + b[1]).sum::<u64>(), 3);
    }
}
