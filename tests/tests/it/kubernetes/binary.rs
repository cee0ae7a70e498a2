//! What the binary offers a manifest: its `--help` flags and env names, and a running airlock.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use airlock::role::Role;
use airlock_tests::{airlock_bin, curl_blocking, Fixture};

/// `airlock SUBCOMMAND --help`: its `--flag` names and its `[env: NAME=…]` (or, for a
/// hidden value, `[env: NAME]`) names.
pub(super) fn help(subcommand: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let out = Command::new(airlock_bin())
        .args([subcommand, "--help"])
        .output()
        .expect("airlock --help");
    assert!(out.status.success(), "airlock {subcommand} --help failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags = BTreeSet::new();
    let mut env = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(rest) = line
            .strip_prefix("--")
            .or_else(|| line.split_once(", --").map(|(_, rest)| rest))
        {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            flags.insert(format!("--{name}"));
        }
        let mut rest = line;
        while let Some(at) = rest.find("[env: ") {
            rest = &rest[at + "[env: ".len()..];
            // `[env: NAME=VALUE]`, or `[env: NAME]` for a variable whose value clap hides.
            let name = rest.split(['=', ']']).next().unwrap_or_default();
            env.insert(name.to_owned());
        }
    }
    (flags, env)
}

/// `GET url` (with the bearer `token`): the status.
pub(super) fn status_of(url: &str, token: Option<&str>) -> u16 {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut args = vec![url];
    if let Some(auth) = &auth {
        args.extend(["-H", auth.as_str()]);
    }
    curl_blocking(&BTreeMap::new(), &args).status
}

/// A running airlock of `role` (on the embedded store): what answers a container's probe
/// and scrape paths.
pub(super) fn running(role: Role) -> (Fixture, airlock_tests::Airlock) {
    let fx = Fixture::new();
    let args: &[&str] = match role {
        Role::Control => &["--role", "control", "--advertise-proxy", "127.0.0.1:9"],
        Role::Proxy => &["--role", "proxy"],
        _ => &[],
    };
    let airlock = fx.start("version = 1\ndefault = \"deny\"\n", args);
    (fx, airlock)
}
