//! A latency histogram with fixed buckets on atomics, rendered in the Prometheus text
//! format (<https://prometheus.io/docs/instrumenting/exposition_formats/>): `_bucket`
//! lines with cumulative counts and an `le` label in seconds, `+Inf` last, then `_sum`
//! (seconds) and `_count`. Observing is a bucket search over [`BUCKETS`] and three relaxed
//! atomic adds: no lock, no allocation.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds: Prometheus's default buckets widened to 1 ms
/// below and 60 s above (a release may take up to `--release-timeout`).
pub const BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Observations of a duration, by bucket.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last one is past every bound (`+Inf`).
    buckets: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of the observations, in microseconds.
    sum_micros: AtomicU64,
    /// Number of observations.
    count: AtomicU64,
}

impl Histogram {
    /// Records one observation of `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Appends this histogram's series to `out` as `name` with `labels` (already
    /// formatted, `key="value"` pairs joined by commas, or empty). The counts are read one
    /// by one, so a scrape racing an observation may see it in some lines only, as with
    /// any lock-free client; `_count` is the sum of the buckets read, so the `+Inf` bucket
    /// always equals it.
    pub fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = match BUCKETS.get(i) {
                Some(bound) => bound.to_string(),
                None => "+Inf".to_owned(),
            };
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// Appends a histogram family: its `# HELP` and `# TYPE` lines, then each series (its
/// formatted labels and histogram).
pub fn render_family(out: &mut String, name: &str, help: &str, series: &[(&str, &Histogram)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (labels, histogram) in series {
        histogram.render_series(out, name, labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets_with_inf_equal_to_count() {
        let histogram = Histogram::default();
        histogram.observe(Duration::from_micros(500));
        histogram.observe(Duration::from_millis(20));
        histogram.observe(Duration::from_secs(120));
        let mut out = String::new();
        histogram.render_series(&mut out, "x_seconds", "action=\"pass\"");
        assert!(
            out.contains("x_seconds_bucket{action=\"pass\",le=\"0.001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{action=\"pass\",le=\"0.025\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{action=\"pass\",le=\"60\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{action=\"pass\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_count{action=\"pass\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_sum{action=\"pass\"} 120.0205\n"),
            "{out}"
        );
        assert_eq!(histogram.count(), 3);
    }
}
