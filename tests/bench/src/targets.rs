//! The targets of the performance issue (docs/performance.md "Targets"), each printed beside
//! the figure this run measured with PASS or MISS, so a reader sees the state at once.
//!
//! A target whose figure this run did not measure (a skipped section, a missing peer) is
//! listed as `not measured`, never as a pass.

use crate::rounds::Summary;

/// Which way a figure must lie against its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The figure must be at most the limit.
    AtMost,
    /// The figure must be at least the limit.
    AtLeast,
}

/// One target and, once measured, its figure.
#[derive(Clone, Debug)]
struct Target {
    /// What is measured, e.g. `pass 2 B: proxy CPU per request against hudsucker`.
    what: &'static str,
    /// The figure's unit as printed, e.g. `×` or `MiB`.
    unit: &'static str,
    bound: Bound,
    limit: f64,
    figure: Option<f64>,
}

impl Target {
    /// Whether the figure meets the limit; `None` when not measured.
    fn met(&self) -> Option<bool> {
        self.figure.map(|f| match self.bound {
            Bound::AtMost => f <= self.limit,
            Bound::AtLeast => f >= self.limit,
        })
    }
}

/// The targets, in the order they are printed.
#[derive(Debug)]
pub struct Targets {
    targets: Vec<Target>,
}

/// The targets' names, used by [`Targets::record`].
pub mod name {
    pub const PASS_2B_CPU: &str = "pass 2 B: proxy CPU µs/request, airlock / hudsucker";
    pub const PASS_2B_RATE: &str = "pass 2 B: req/s, airlock / hudsucker";
    pub const PASS_2B_P99: &str = "pass 2 B: p99, airlock / hudsucker";
    pub const PASS_64K_CPU: &str = "pass 64 KiB: proxy CPU µs/request, airlock / hudsucker";
    pub const PASS_PEAK_RSS: &str = "pass load (16 connections): airlock peak RSS";
    /// The read journal's work off the request path (airlock's lineage thread); its
    /// capture and submission on the request path are not counted.
    pub const JOURNAL_2B: &str =
        "pass 2 B: airlock's lineage thread (read journal) share of its CPU";
    pub const JOURNAL_64K: &str =
        "pass 64 KiB: airlock's lineage thread (read journal) share of its CPU";
    pub const IDLE_TUNNEL: &str = "idle intercepted tunnel: RSS above the line before";
    pub const STREAM_RSS: &str = "streaming: airlock peak VmRSS";
    pub const CONTACT_RSS: &str = "first contact up to the leaf cache's bound: airlock VmRSS";
    pub const STAGE_64: &str = "staging, 64 clients: effects/s";
    pub const STAGE_1_P50: &str = "staging, 1 client: p50";
    /// Issue #19's figure (docs/fleet.md "Throughput").
    pub const PG_STAGE_64: &str =
        "staging on PostgreSQL, 64 clients in 64 runs through two instances: effects/s";
    pub const RELEASE: &str = "release of the approved effects (1 origin): commit";
    pub const NEW_HOST: &str = "new-host CONNECT over cached, p50";
}

impl Default for Targets {
    fn default() -> Self {
        use name::*;
        use Bound::{AtLeast, AtMost};
        let target = |what, unit, bound, limit| Target {
            what,
            unit,
            bound,
            limit,
            figure: None,
        };
        Targets {
            targets: vec![
                target(PASS_2B_CPU, "×", AtMost, 1.0),
                target(PASS_2B_RATE, "×", AtLeast, 1.0),
                target(PASS_2B_P99, "×", AtMost, 1.0),
                target(PASS_64K_CPU, "×", AtMost, 1.0),
                target(PASS_PEAK_RSS, "MiB", AtMost, 40.0),
                target(JOURNAL_2B, "%", AtMost, 10.0),
                target(JOURNAL_64K, "%", AtMost, 10.0),
                target(IDLE_TUNNEL, "KiB", AtMost, 20.0),
                target(STREAM_RSS, "MiB", AtMost, 64.0),
                target(CONTACT_RSS, "MiB", AtMost, 64.0),
                target(STAGE_64, "/s", AtLeast, 5_000.0),
                target(STAGE_1_P50, "ms", AtMost, 1.0),
                target(PG_STAGE_64, "/s", AtLeast, 3_000.0),
                target(RELEASE, "s", AtMost, 2.0),
                target(NEW_HOST, "ms", AtMost, 1.0),
            ],
        }
    }
}

impl Targets {
    /// Records the figure of the target named `what` (one of [`name`]); a later figure
    /// for the same target replaces an earlier one. Unknown names panic: they are a typo
    /// in this crate.
    pub fn record(&mut self, what: &str, figure: f64) {
        self.target_mut(what).figure = Some(figure);
    }

    /// The target named `what`; unknown names panic (a typo in this crate).
    fn target_mut(&mut self, what: &str) -> &mut Target {
        self.targets
            .iter_mut()
            .find(|t| t.what == what)
            .unwrap_or_else(|| panic!("no target named {what:?}"))
    }

    /// Records the pass table's ratios against hudsucker and airlock's peak RSS, for the
    /// workload `path` (`/small` or `/64k`). Nothing is recorded for a missing contestant.
    pub fn record_pass(&mut self, path: &str, summaries: &[Summary]) {
        let Some(airlock) = summaries.iter().find(|s| s.name == "airlock") else {
            return;
        };
        if let Some(peer) = summaries.iter().find(|s| s.name.starts_with("hudsucker")) {
            let cpu = airlock.cpu_us.zip(peer.cpu_us).map(|(a, b)| a.0 / b.0);
            match path {
                "/small" => {
                    if let Some(cpu) = cpu {
                        self.record(name::PASS_2B_CPU, cpu);
                    }
                    self.record(name::PASS_2B_RATE, airlock.rate.0 / peer.rate.0);
                    self.record(name::PASS_2B_P99, airlock.p99.0 / peer.p99.0);
                }
                _ => {
                    if let Some(cpu) = cpu {
                        self.record(name::PASS_64K_CPU, cpu);
                    }
                }
            }
        }
        if let Some((share, _)) = airlock.lineage_share {
            let what = match path {
                "/small" => name::JOURNAL_2B,
                _ => name::JOURNAL_64K,
            };
            self.record(what, share * 100.0);
        }
        if let Some(rss) = airlock.peak_rss_mib {
            // The worst of the two workloads.
            let target = self.target_mut(name::PASS_PEAK_RSS);
            target.figure = Some(target.figure.map_or(rss, |earlier| earlier.max(rss)));
        }
    }

    /// Prints the table: target, limit, figure, PASS / MISS / not measured; and a count.
    /// `caveat` (e.g. a debug build or `--quick`'s reduced counts) is printed above it.
    pub fn print(&self, caveat: Option<&str>) {
        println!("\n### targets (docs/performance.md \"Targets\")\n");
        if let Some(caveat) = caveat {
            println!("{caveat}\n");
        }
        println!("| target | limit | this run | |\n|---|---:|---:|---|");
        let (mut pass, mut miss) = (0, 0);
        for t in &self.targets {
            let sign = match t.bound {
                Bound::AtMost => "≤",
                Bound::AtLeast => "≥",
            };
            let (figure, verdict) = match (t.figure, t.met()) {
                (Some(f), Some(ok)) => {
                    if ok {
                        pass += 1;
                    } else {
                        miss += 1;
                    }
                    (format_figure(f, t.unit), if ok { "PASS" } else { "MISS" })
                }
                _ => ("–".to_owned(), "not measured"),
            };
            println!(
                "| {} | {sign} {} | {figure} | {verdict} |",
                t.what,
                format_figure(t.limit, t.unit)
            );
        }
        println!(
            "\n{pass} PASS, {miss} MISS, {} not measured",
            self.targets.len() - pass - miss
        );
    }
}

fn format_figure(value: f64, unit: &str) -> String {
    match unit {
        "×" => format!("{value:.2}×"),
        "/s" => format!("{value:.0}/s"),
        "ms" => format!("{value:.3} ms"),
        "%" => format!("{value:.1}%"),
        _ => format!("{value:.1} {unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_beyond_its_limit_is_a_miss_and_an_unrecorded_one_is_not_a_pass() {
        let mut targets = Targets::default();
        targets.record(name::STREAM_RSS, 63.9);
        targets.record(name::CONTACT_RSS, 64.1);
        targets.record(name::STAGE_64, 4_999.0);
        let verdict = |what: &str| {
            targets
                .targets
                .iter()
                .find(|t| t.what == what)
                .and_then(Target::met)
        };
        assert_eq!(verdict(name::STREAM_RSS), Some(true));
        assert_eq!(verdict(name::CONTACT_RSS), Some(false));
        assert_eq!(verdict(name::STAGE_64), Some(false));
        assert_eq!(verdict(name::RELEASE), None);
    }
}
