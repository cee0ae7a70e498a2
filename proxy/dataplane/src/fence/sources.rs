//! Runs bound to a source address or CIDR (`POST /v1/runs {"source": …}`), for fences
//! operators build in front of `airlock serve --transparent` and `--dns`: a connection or
//! query from inside a source belongs to its run, with no credentials.

use std::net::IpAddr;

use airlock_ledger::RunId;
use ipnet::IpNet;

/// The table of bound sources.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    bound: Vec<(IpNet, RunId)>,
}

impl Sources {
    /// Binds `net` to `run`. `open` tells whether a run still is; a net that overlaps an
    /// open run's is refused with that run.
    pub(crate) fn bind(
        &mut self,
        net: IpNet,
        run: RunId,
        open: impl Fn(&RunId) -> bool,
    ) -> Result<(), RunId> {
        if let Some(holder) = self.holder(net, open) {
            return Err(holder);
        }
        self.bound.push((net, run));
        Ok(())
    }

    /// The open run whose source overlaps `net`, if any (sources of runs `open` says are
    /// closed are forgotten first).
    pub(crate) fn holder(&mut self, net: IpNet, open: impl Fn(&RunId) -> bool) -> Option<RunId> {
        self.bound.retain(|(_, r)| open(r));
        self.bound
            .iter()
            .find(|(other, _)| other.contains(&net.network()) || net.contains(&other.network()))
            .map(|(_, holder)| holder.clone())
    }

    /// The run whose source holds `ip` (the most specific one).
    pub(crate) fn run_for(&self, ip: IpAddr) -> Option<RunId> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        self.bound
            .iter()
            .filter(|(net, _)| net.contains(&ip))
            .max_by_key(|(net, _)| net.prefix_len())
            .map(|(_, run)| run.clone())
    }
}

/// Parses a `source`: an address (a /32 or /128) or a CIDR.
///
/// # Errors
/// A message naming what was expected.
pub fn parse_source(raw: &str) -> Result<IpNet, String> {
    let raw = raw.trim();
    raw.parse::<IpNet>()
        .map(|net| net.trunc())
        .or_else(|_| raw.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!("{raw:?} is not an IP address or CIDR (10.0.0.7, 10.0.0.0/24, fd00::/64)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u8) -> RunId {
        RunId::parse(&format!("run_01M8SYRWRYCTWG14A4XQR5ZW2{n}")).expect("run id")
    }

    #[test]
    fn a_source_belongs_to_the_most_specific_open_run_and_overlaps_are_refused() {
        let mut sources = Sources::default();
        let open = |_: &RunId| true;
        sources
            .bind(parse_source("10.0.0.0/24").expect("net"), run(1), open)
            .expect("bind");
        assert_eq!(
            sources.bind(parse_source("10.0.0.7").expect("ip"), run(2), open),
            Err(run(1))
        );
        assert_eq!(
            sources.run_for("10.0.0.9".parse().expect("ip")),
            Some(run(1))
        );
        assert_eq!(sources.run_for("10.0.1.9".parse().expect("ip")), None);
        // Once run 1 is closed its source is free again.
        sources
            .bind(parse_source("10.0.0.7").expect("ip"), run(2), |r| {
                *r != run(1)
            })
            .expect("rebind");
        assert_eq!(
            sources.run_for("10.0.0.7".parse().expect("ip")),
            Some(run(2))
        );
        assert!(parse_source("nope").is_err());
    }
}
