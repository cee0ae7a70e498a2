//! The benchmark's command line: its flags, their defaults, and what `--quick` scales down.

use std::path::PathBuf;
use std::time::Duration;

use crate::load::LoadShape;
use crate::BoxError;

const USAGE: &str = "usage: airlock-bench [--quick] [--rounds N] [--seconds S] [--connections N]
       [--airlock PATH] [--baseline-airlock PATH] [--hyper-origin] [--no-mitmdump] [--no-hudsucker] [--no-squid]
       [--skip-pass] [--skip-staging] [--skip-pg-staging] [--skip-first-contact] [--skip-streaming]
       [--skip-release] [--skip-idle] [--skip-fence] [--fence-runs N] [--fence-requests N]";

/// Command-line options.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) quick: bool,
    pub(crate) rounds: usize,
    pub(crate) seconds: f64,
    pub(crate) connections: usize,
    pub(crate) airlock: Option<PathBuf>,
    /// A second airlock binary measured in the same pass rounds ("airlock baseline"), so
    /// that two builds compare within one run.
    pub(crate) baseline: Option<PathBuf>,
    pub(crate) hyper_origin: bool,
    pub(crate) mitmdump: bool,
    /// Whether squid (ssl_bump) is a peer in the pass rounds.
    pub(crate) squid: bool,
    pub(crate) hudsucker: bool,
    pub(crate) pass: bool,
    pub(crate) staging: bool,
    /// Staging on a throwaway PostgreSQL through two airlock instances (when installed).
    pub(crate) pg_staging: bool,
    pub(crate) first_contact: bool,
    pub(crate) streaming: bool,
    pub(crate) release: bool,
    pub(crate) idle: bool,
    pub(crate) fence: bool,
    /// `airlock run -- true` per mode, and requests per path per round (fence section).
    pub(crate) fence_runs: Option<usize>,
    pub(crate) fence_requests: Option<usize>,
}

impl Options {
    pub(crate) fn parse(args: &[String]) -> Result<Self, BoxError> {
        let mut options = Options {
            quick: false,
            rounds: 3,
            seconds: 10.0,
            connections: 16,
            airlock: None,
            baseline: None,
            hyper_origin: false,
            mitmdump: true,
            squid: true,
            hudsucker: true,
            pass: true,
            staging: true,
            pg_staging: true,
            first_contact: true,
            streaming: true,
            release: true,
            idle: true,
            fence: true,
            fence_runs: None,
            fence_requests: None,
        };
        let mut rounds = None;
        let mut seconds = None;
        let mut iter = args.iter();
        while let Some(arg) = iter.next() {
            let mut value = || iter.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--quick" => options.quick = true,
                "--rounds" => rounds = Some(value()?.parse()?),
                "--seconds" => seconds = Some(value()?.parse()?),
                "--connections" => options.connections = value()?.parse()?,
                "--airlock" => options.airlock = Some(PathBuf::from(value()?)),
                "--baseline-airlock" => options.baseline = Some(PathBuf::from(value()?)),
                "--hyper-origin" => options.hyper_origin = true,
                "--no-mitmdump" => options.mitmdump = false,
                "--no-squid" => options.squid = false,
                "--no-hudsucker" => options.hudsucker = false,
                "--skip-pass" => options.pass = false,
                "--skip-staging" => options.staging = false,
                "--skip-pg-staging" => options.pg_staging = false,
                "--skip-first-contact" => options.first_contact = false,
                "--skip-streaming" => options.streaming = false,
                "--skip-release" => options.release = false,
                "--skip-idle" => options.idle = false,
                "--skip-fence" => options.fence = false,
                "--fence-runs" => options.fence_runs = Some(value()?.parse()?),
                "--fence-requests" => options.fence_requests = Some(value()?.parse()?),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other:?}\n{USAGE}").into()),
            }
        }
        options.rounds = rounds.unwrap_or(if options.quick { 1 } else { 3 });
        options.seconds = seconds.unwrap_or(if options.quick { 0.5 } else { 10.0 });
        Ok(options)
    }

    pub(crate) fn shape(&self) -> LoadShape {
        LoadShape {
            connections: self.connections,
            warmup: if self.quick {
                Duration::from_millis(200)
            } else {
                Duration::from_secs(2)
            },
            duration: Duration::from_secs_f64(self.seconds),
        }
    }

    /// (first-contact names, streamed bytes, released effects, idle tunnels)
    pub(crate) fn counts(&self) -> (usize, u64, usize, usize) {
        if self.quick {
            (20, 16 << 20, 16, 50)
        } else {
            (12_000, 1 << 30, 1_000, 5_000)
        }
    }
}
