//! `airlock run --network MODE`: choosing the mode, and running a step in a fence
//! (docs/containment.md).

use std::path::Path;

use airlock_fence::launch::Plan;
use airlock_fence::{Network, Prepared};
use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};

use crate::client::AdminClient;

/// `--network`: how the command reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkArg {
    /// A fence whose only route out is airlock: every TCP connection captured, airlock's
    /// DNS, no proxy credentials needed (default where namespaces can be made)
    Isolated,
    /// Proxy variables only: a client that ignores them is not stopped
    Env,
    /// No route at all: only the command's own loopback
    Offline,
}

impl From<NetworkArg> for Network {
    fn from(arg: NetworkArg) -> Self {
        match arg {
            NetworkArg::Isolated => Network::Isolated,
            NetworkArg::Env => Network::Env,
            NetworkArg::Offline => Network::Offline,
        }
    }
}

/// The mode a run uses and, when it was not the one asked for, why.
#[derive(Debug, Clone)]
pub(super) struct Chosen {
    pub(super) network: Network,
    pub(super) note: Option<String>,
}

/// `--network` as given, or `isolated` where a fence can be made and `env` (with a
/// warning on stderr) where it cannot.
///
/// # Errors
/// When `isolated` or `offline` was asked for and no fence can be made here.
pub(super) fn choose(
    asked: Option<NetworkArg>,
    checks: &airlock_fence::launch::Checks<'_>,
) -> anyhow::Result<Chosen> {
    match asked.map(Network::from) {
        Some(Network::Env) => Ok(Chosen {
            network: Network::Env,
            note: None,
        }),
        Some(network) => {
            airlock_fence::probe(network, checks).map_err(|why| {
                anyhow!(
                    "--network {} needs a fence, and none can be made here: {why}",
                    network.as_str()
                )
            })?;
            Ok(Chosen {
                network,
                note: None,
            })
        }
        None => match airlock_fence::probe(Network::Isolated, checks) {
            Ok(()) => Ok(Chosen {
                network: Network::Isolated,
                note: None,
            }),
            Err(why) if why.is_idmap() => Err(anyhow!(
                "no fence can be made here that keeps the command off host root: {why}"
            )),
            Err(why) => {
                let note = format!(
                    "no fence can be made here ({why}), so the command runs with proxy variables only \
                     (--network env): a client that ignores them reaches the network unstaged"
                );
                eprintln!("airlock: WARNING: {note}");
                Ok(Chosen {
                    network: Network::Env,
                    note: Some(note),
                })
            }
        },
    }
}

/// What a fenced step needs from the created run.
pub(super) struct FenceRun<'a> {
    pub(super) created: &'a Value,
    pub(super) run: &'a str,
    pub(super) network: Network,
    /// The run's layer ([`airlock_fence::root`]); `None` under root with
    /// `--allow-host-root`.
    pub(super) layer: Option<&'a Path>,
}

/// Prepares a fence for one step of `run` and returns it with the `unshare` command line.
pub(super) async fn prepare(
    fence: &FenceRun<'_>,
    client: &AdminClient,
    program: &str,
    args: &[String],
    workspace: &Path,
    env: &serde_json::Map<String, Value>,
) -> anyhow::Result<(Prepared, String, Vec<String>, Vec<(String, String)>)> {
    let created = fence.created;
    let socket = created["fence_socket"].as_str().ok_or_else(|| {
        anyhow!("the server did not name its fence socket (is it older than this airlock?)")
    })?;
    // From the API, not `ca_file`: that is the path as sandboxes see it (--advertise-ca).
    let ca_pem = client
        .get_text("/v1/ca")
        .await
        .context("cannot fetch airlock's CA certificate")?;
    let truststore = created["truststore"].as_str().map(Path::new);
    let proxy_port = created["proxy_url"]
        .as_str()
        .and_then(|url| url.rsplit(':').next())
        .and_then(|port| port.trim_end_matches('/').parse::<u16>().ok());
    let mut vars: std::collections::BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    vars.insert("AIRLOCK_RUN".into(), fence.run.to_owned());
    vars.insert("AIRLOCK_NETWORK".into(), fence.network.as_str().to_owned());
    let prepared = Prepared::new(Plan {
        network: fence.network,
        socket: Path::new(socket),
        run: fence.run,
        token: created["token"].as_str().unwrap_or_default(),
        proxy_port,
        ca_pem: &ca_pem,
        truststore,
        program,
        args,
        cwd: workspace,
        env: vars,
        layer: fence.layer,
    })?;
    let exe = std::env::current_exe().context("cannot find airlock's own binary")?;
    let (unshare, unshare_args, spec_env) = prepared.command_line(&exe);
    Ok((prepared, unshare, unshare_args, spec_env))
}

/// airlock's fence counts of `run` so far (`null` in env mode, or when the server does
/// not say).
pub(super) async fn counts(client: &AdminClient, run: &str, chosen: &Chosen) -> Value {
    match chosen.network {
        Network::Env => Value::Null,
        _ => client
            .get(&format!("/v1/runs/{run}/fence"))
            .await
            .map(|fence| fence["counts"].clone())
            .unwrap_or(Value::Null),
    }
}

/// The run record's containment for one step: the fence's report, and airlock's counts
/// for this step alone (`before` is what [`counts`] said when the step started: the
/// server counts per run).
pub(super) async fn containment(
    client: &AdminClient,
    run: &str,
    chosen: &Chosen,
    report: Option<&airlock_fence::Report>,
    before: &Value,
) -> Value {
    let after = counts(client, run, chosen).await;
    let count = |key: &str| {
        after[key]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(before[key].as_u64().unwrap_or(0))
    };
    let mut record = json!({
        "network": chosen.network.as_str(),
        "note": chosen.note,
        "setup_us": report.map(|r| (r.setup_ms * 1000.0) as u64),
        "proxy_connections": count("proxy_connections"),
        "connections_captured": count("connections_captured"),
        "connections_refused": count("connections_refused"),
        "dns_answered": count("dns_answered"),
        "dns_refused": count("dns_refused"),
        "relay_failures": report.map_or(0, |r| r.relay_failures),
        "relay_limited": report.map_or(0, |r| r.relay_limited),
        "connections_limited": count("connections_limited"),
        "dns_idle_closed": count("dns_idle_closed"),
        "dns_rate_limited": count("dns_rate_limited"),
        "left_running": report.map(|r| json!(r.left_running)).unwrap_or(json!([])),
    });
    if let Some(why) = report.and_then(|r| r.outside_unavailable.as_ref()) {
        record["outside_unavailable"] = json!(why);
    }
    record
}

/// The run's layer for a fenced mode (`isolated`, `offline`): a new directory of mode
/// 0700 in `$TMPDIR` that holds the overlays' upper directories of every step
/// ([`airlock_fence::root`]) and is removed when it is dropped (the run's end). Under
/// root the command also runs as the subordinate range; as an ordinary user it keeps the
/// user's id. `None` under `env`, and under root with `--allow-host-root`.
///
/// # Errors
/// `--snapshot overlay` under root's fence (overlayfs takes no idmapped mount, so the
/// command would be host root), `--keep-outside` without a layer, or a layer that
/// cannot be made.
pub(super) fn root_layer(
    chosen: &Chosen,
    allow_host_root: bool,
    snapshot: &str,
    keep_outside: bool,
) -> anyhow::Result<Option<Layer>> {
    let root = airlock_fence::launch::is_root();
    let fenced = chosen.network != Network::Env;
    let remap = fenced && root && !allow_host_root;
    if remap && snapshot == "overlay" {
        return Err(anyhow!(
            "--snapshot overlay under root's fence: overlayfs takes no idmapped mount, so the \
             command would run as host root; use --snapshot dir, or --allow-host-root to \
             accept that (docs/containment.md)"
        ));
    }
    let layered = fenced && !(root && allow_host_root);
    if keep_outside && !layered {
        return Err(anyhow!(
            "--keep-outside needs a fence with a layer (--network isolated or offline, and \
             under root without --allow-host-root): only there do writes outside the \
             workspace land in a layer of the run's"
        ));
    }
    if !layered {
        return Ok(None);
    }
    let layer = tempfile::Builder::new()
        .prefix("airlock-layer-")
        .tempdir()
        .context("cannot create the run's layer")?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(layer.path(), std::fs::Permissions::from_mode(0o700))
        .context("cannot make the run's layer private")?;
    Ok(Some(Layer(Some(layer))))
}

/// The run's layer, removed when dropped. As an ordinary user the overlays leave
/// directories only their owner may open again (overlayfs's `work` directory has mode
/// 0, and the command may have made others like it): they are opened up first, or the
/// removal would leave them behind in `$TMPDIR`.
pub(super) struct Layer(Option<tempfile::TempDir>);

impl Layer {
    /// The layer's directory.
    pub(super) fn path(&self) -> &Path {
        self.0.as_ref().map_or(Path::new(""), |dir| dir.path())
    }
}

impl Drop for Layer {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else {
            return;
        };
        if !airlock_fence::launch::is_root() {
            airlock_fence::root::open_up(dir.path());
        }
        drop(dir);
    }
}
