//! Counters and histograms exposed on the admin listener at `/metrics` in the Prometheus
//! text format (<https://prometheus.io/docs/instrumenting/exposition_formats/>). Label
//! values are host names and fixed words, never secrets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub mod histogram;

pub use histogram::Histogram;

/// What a request came to, for its log line and its duration histogram: the policy's
/// action, or `none` when it was answered before a decision (a closed run, a head over
/// its limits, the manifest, an authority mismatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestAction {
    /// Passed to its origin (or answered from a staged read).
    Pass,
    /// Staged (or refused by a staging limit).
    Stage,
    /// Denied (a `tunnel` decision inside an intercepted CONNECT is a denial too).
    Deny,
    /// A CONNECT tunneled without interception (`action = "tunnel"`); its duration is the
    /// tunnel's life.
    Tunnel,
    /// Answered before the policy decided.
    None,
}

impl RequestAction {
    /// Every action, in the order of the request duration histograms.
    pub const ALL: [RequestAction; 5] = [
        Self::Pass,
        Self::Stage,
        Self::Deny,
        Self::Tunnel,
        Self::None,
    ];

    /// The label value: `pass`, `stage`, `deny`, `tunnel` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Stage => "stage",
            Self::Deny => "deny",
            Self::Tunnel => "tunnel",
            Self::None => "none",
        }
    }

    /// The action of a policy decision.
    pub fn of(action: airlock_policy::Action) -> Self {
        match action {
            airlock_policy::Action::Pass => Self::Pass,
            airlock_policy::Action::Stage => Self::Stage,
            airlock_policy::Action::Deny | airlock_policy::Action::Tunnel => Self::Deny,
        }
    }
}

/// airlock's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests decided `pass`.
    pub passed: AtomicU64,
    /// Requests decided `stage` (and staged, or refused by a limit).
    pub staged: AtomicU64,
    /// Requests decided `deny`.
    pub denied: AtomicU64,
    /// TLS handshakes with clients that failed.
    pub client_handshake_failures: AtomicU64,
    /// Per CONNECT host: clients that rejected airlock's certificate with an alert
    /// (`unknown_ca`, `bad_certificate`, `certificate_unknown`): they do not trust
    /// airlock's CA, typically because they bundle their own roots (docs/cases.md C13).
    untrusted_ca: Mutex<BTreeMap<String, u64>>,
    /// Per credential: requests refused because they carried its placeholder to a host
    /// outside its bind.
    placeholder_off_host: Mutex<BTreeMap<String, u64>>,
    /// Seconds from a request's head arriving to its response's last byte leaving, by
    /// [`RequestAction`] (indexed as [`RequestAction::ALL`]).
    request_duration: [Histogram; 5],
    /// Seconds from a staged request's head arriving to its acknowledgement (the `2xx`
    /// head) being ready: body read, ledger write and flush included.
    pub stage_ack: Histogram,
}

impl Metrics {
    /// Counts a client that does not trust airlock's CA for `host`.
    pub fn client_untrusted_ca(&self, host: &str) {
        let mut map = self.untrusted_ca.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(host.to_owned()).or_insert(0) += 1;
    }

    /// Counts a request refused for carrying `credential`'s placeholder off its bind.
    pub fn credential_placeholder_off_host(&self, credential: &str) {
        let mut map = self
            .placeholder_off_host
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *map.entry(credential.to_owned()).or_insert(0) += 1;
    }

    /// Records a finished request's duration under its action.
    pub fn observe_request(&self, action: RequestAction, elapsed: std::time::Duration) {
        self.request_duration[action as usize].observe(elapsed);
    }

    /// The Prometheus text exposition; `in_flight` is the current number of requests.
    pub fn render(&self, in_flight: usize) -> String {
        let mut out = String::new();
        let labels: Vec<String> = RequestAction::ALL
            .iter()
            .map(|action| format!("action=\"{}\"", action.as_str()))
            .collect();
        let series: Vec<(&str, &Histogram)> = labels
            .iter()
            .zip(&self.request_duration)
            .map(|(label, histogram)| (label.as_str(), histogram))
            .collect();
        histogram::render_family(
            &mut out,
            "airlock_request_duration_seconds",
            "Seconds from a proxied request's head arriving to its response's last byte leaving, by policy action (none: answered before a decision; tunnel: the life of a tunnel).",
            &series,
        );
        histogram::render_family(
            &mut out,
            "airlock_stage_ack_duration_seconds",
            "Seconds from a staged request's head arriving to its acknowledgement being ready (body read, ledger write and flush).",
            &[("", &self.stage_ack)],
        );
        out.push_str("# HELP airlock_requests_total Proxied requests by policy action.\n");
        out.push_str("# TYPE airlock_requests_total counter\n");
        for (action, counter) in [
            ("pass", &self.passed),
            ("stage", &self.staged),
            ("deny", &self.denied),
        ] {
            out.push_str(&format!(
                "airlock_requests_total{{action=\"{action}\"}} {}\n",
                counter.load(Ordering::Relaxed)
            ));
        }
        out.push_str(
            "# HELP airlock_requests_in_flight Proxied requests whose response has not finished.\n",
        );
        out.push_str("# TYPE airlock_requests_in_flight gauge\n");
        out.push_str(&format!("airlock_requests_in_flight {in_flight}\n"));
        out.push_str("# HELP airlock_client_tls_handshake_failures_total TLS handshakes with clients that failed.\n");
        out.push_str("# TYPE airlock_client_tls_handshake_failures_total counter\n");
        out.push_str(&format!(
            "airlock_client_tls_handshake_failures_total {}\n",
            self.client_handshake_failures.load(Ordering::Relaxed)
        ));
        out.push_str("# HELP airlock_client_untrusted_ca_total Clients that rejected airlock's certificate: they do not trust the airlock CA (use a tunnel rule, or give them the CA).\n");
        out.push_str("# TYPE airlock_client_untrusted_ca_total counter\n");
        let map = self.untrusted_ca.lock().unwrap_or_else(|e| e.into_inner());
        for (host, count) in map.iter() {
            let host = host.replace('\\', "\\\\").replace('"', "\\\"");
            out.push_str(&format!(
                "airlock_client_untrusted_ca_total{{host=\"{host}\"}} {count}\n"
            ));
        }
        drop(map);
        out.push_str("# HELP airlock_credential_placeholder_off_host_total Requests refused for carrying a credential placeholder to a host outside its bind (exfiltration attempts).\n");
        out.push_str("# TYPE airlock_credential_placeholder_off_host_total counter\n");
        let map = self
            .placeholder_off_host
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (credential, count) in map.iter() {
            out.push_str(&format!(
                "airlock_credential_placeholder_off_host_total{{credential=\"{credential}\"}} {count}\n"
            ));
        }
        drop(map);
        out.push_str(&crate::gaps::DROPPED.render());
        out
    }
}
