//! The typed success bodies of the admin API's reads that are not a run or an effect
//! summary (those are in [`super::render`]): reads, denials, env, lineage, fence, policy,
//! sign-in links, workspaces, savepoints and the effect detail. Each is what its handler
//! serializes, so `/v1/openapi.json` describes the wire (docs/admin-api.md).
//!
//! Fields holding a ledger record the API shows as stored (`Read`, `Denial`, a step, a
//! decision) are typed `Object` in the document; their fields are listed here.

use std::collections::BTreeMap;

use airlock_ledger::{Denial, EffectId, Read, RunId, WorkspaceRecord};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `GET /v1/runs/{id}/reads` → the run's journaled reads in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunReads {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// Each read as journaled: `{run_id, seq, method, url, status, request_bytes,
    /// response_bytes, response_digest, rule, created_at_ms, error, audit?, labels?, …}`
    /// (bytes are body bytes; times are ms since the Unix epoch).
    #[schema(value_type = Vec<Object>)]
    pub reads: Vec<Read>,
}

/// `GET /v1/runs/{id}/denials` → the run's journaled refusals in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunDenials {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// Each denial: `{run_id, seq, method, url, has_body, rule, reason_code,
    /// policy_revision, created_at_ms}` (`url` is `https://HOST:PORT` for a CONNECT).
    #[schema(value_type = Vec<Object>)]
    pub denials: Vec<Denial>,
}

/// `GET /v1/runs/{id}/env` → the environment a sandbox of the run needs.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunEnv {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// `NAME → VALUE`: proxy URLs, CA files, the manifest URL and credential placeholders.
    pub env: BTreeMap<String, String>,
    /// The same as POSIX shell `export NAME='VALUE'` lines, one per variable.
    pub shell: String,
}

/// A read node of the lineage graph.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadNode {
    /// `read:SEQ`.
    pub id: String,
    /// Always `read`.
    pub kind: &'static str,
    /// The read's place among the run's reads, from 1.
    pub seq: u64,
    /// The request method.
    pub method: String,
    /// The absolute request URL.
    pub url: String,
    /// The origin's status (`null` when it never answered).
    pub status: Option<u16>,
    /// Response body bytes relayed to the client.
    pub response_bytes: u64,
}

/// An effect node of the lineage graph.
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectNode {
    /// The effect id (`eff_…`).
    #[schema(value_type = String)]
    pub id: EffectId,
    /// Always `effect`.
    pub kind: &'static str,
    /// Its place in the run's staging order, from 1.
    pub seq: u64,
    /// The request method.
    pub method: String,
    /// The request URL.
    pub url: String,
    /// The effect's state (`staged`, `approved`, …).
    #[schema(value_type = String)]
    pub state: airlock_ledger::EffectState,
    /// Whether the content analysis has run on it.
    pub analyzed: bool,
}

/// A node of the lineage graph: a read or an effect (`kind` says which).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum LineageNode {
    /// A journaled read.
    Read(ReadNode),
    /// A staged effect.
    Effect(EffectNode),
}

/// Where a lineage edge starts, for reading the edge on its own.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EdgeSourceView {
    /// A read: `{kind: "read", seq, method, url}` (method and URL `null` when the read is
    /// not in the journal).
    Read {
        /// Always `read`.
        kind: &'static str,
        /// The read's sequence number in its run.
        seq: u64,
        /// Its method.
        method: Option<String>,
        /// Its URL.
        url: Option<String>,
    },
    /// An effect: `{kind: "effect", id}`.
    Effect {
        /// Always `effect`.
        kind: &'static str,
        /// The effect id (`eff_…`).
        #[schema(value_type = String)]
        id: EffectId,
    },
}

/// A lineage edge: from a read or an effect to an effect.
#[derive(Debug, Serialize, ToSchema)]
pub struct EdgeView {
    /// `read:SEQ` or the source effect's id.
    pub from: String,
    /// The source in full.
    pub source: EdgeSourceView,
    /// The effect it ends at (`eff_…`).
    #[schema(value_type = String)]
    pub to: EffectId,
    /// `content`, `credential`, `header` or `placeholder`.
    #[schema(value_type = String)]
    pub kind: airlock_ledger::EdgeKind,
    /// Bytes of the effect's normalised body inside shared passages.
    pub overlap_bytes: u64,
    /// `overlap_bytes` per mille of the effect's normalised body (0–1000).
    pub overlap_permille: u32,
    /// A short sample of the shared text, or the value found.
    pub excerpt: Option<String>,
    /// Where it was found (the view, the header name, …).
    pub detail: Option<String>,
}

/// `GET /v1/runs/{id}/lineage` → the run's lineage graph.
#[derive(Debug, Serialize, ToSchema)]
pub struct Lineage {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// Reads first (in order), then effects (in staging order).
    pub nodes: Vec<LineageNode>,
    /// Every edge found so far.
    pub edges: Vec<EdgeView>,
}

/// `GET /v1/runs/{id}/fence` → where a fence's relay reaches airlock, and the run's counts.
#[derive(Debug, Serialize, ToSchema)]
pub struct FenceView {
    /// The Unix socket path the fence's relay connects to.
    pub socket: String,
    /// What airlock counted for the run: `{proxy_connections, connections_captured,
    /// connections_refused, dns_answered, dns_refused}`, each a count since start.
    #[schema(value_type = Object)]
    pub counts: airlock_dataplane::fence::FenceCounts,
}

/// `GET /v1/policy` → the policy in force.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyView {
    /// Its revision (`sha256:…` of the compiled policy).
    pub revision: String,
    /// 1 for the policy loaded at start, +1 per successful reload.
    pub generation: u64,
    /// `file` (start, watch or SIGHUP) or `admin` (`POST /v1/policy`).
    #[schema(value_type = String)]
    pub source: airlock_dataplane::policy_store::ReloadSource,
    /// When it was swapped in, ms since the Unix epoch.
    pub loaded_at_ms: u64,
    /// The policy file the server watches.
    pub path: String,
    /// The TOML text it was compiled from.
    pub text: String,
    /// Successful reloads since start.
    pub reloads: u64,
    /// Refused reloads since start.
    pub reload_failures: u64,
}

/// `POST /v1/policy` → the outcome of a reload that did not fail.
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyReloaded {
    /// The revision now in force.
    pub revision: String,
    /// Its generation.
    pub generation: u64,
    /// False when the text compiled to the revision already in force (nothing swapped).
    pub changed: bool,
}

/// `POST /v1/ui/sign-in-links` → a one-time link that signs a browser in.
#[derive(Debug, Serialize, ToSchema)]
pub struct SignInLink {
    /// `--ui-base-url` (default `http://ADMIN`) followed by `path`.
    pub link: String,
    /// `/login?code=…`.
    pub path: String,
    /// The reviewer the browser is signed in as (the token's name).
    pub reviewer: String,
    /// When the code expires, ms since the Unix epoch.
    pub expires_at_ms: u64,
}

/// `GET /healthz` while the ledger can write → 200 `{status: "ok"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthOk {
    /// Always `ok`.
    pub status: &'static str,
}

/// `GET /healthz` while the ledger cannot write → 503 with why.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthDegraded {
    /// Always `degraded`.
    pub status: &'static str,
    /// `ledger_degraded` (a storage fault being healed) or `ledger_low_space` (less free
    /// space than `--ledger-min-free-mib`).
    pub reason: Option<&'static str>,
    /// What the ledger reported.
    pub detail: Option<String>,
    /// Storage faults since start.
    pub storage_faults: u64,
    /// Times the ledger was reopened and proved writable after a fault.
    pub recoveries: u64,
}

/// A run's workspace (`POST|GET /v1/runs/{id}/workspace`, `POST …/workspace/steps`).
#[derive(Debug, Serialize, ToSchema)]
pub struct WorkspaceView {
    /// The run id (`run_…`); absent in the answer to a step.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub run: Option<RunId>,
    /// Absolute path of the workspace directory.
    pub path: String,
    /// Snapshot driver: `dir`, `overlay`, `overlay-root` (`overlay` under `--scope root`), `git` or `cmd`.
    pub driver: String,
    /// The snapshot taken when the run started.
    pub snapshot: String,
    /// When it was attached, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// Commands run in the workspace: `{kind, command, exit_code, success, duration_ms,
    /// note, output, containment, at_ms}` each.
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<airlock_ledger::StepRecord>,
    /// Savepoints, oldest first: `{name, snapshot, effect_seq, at_ms}` each.
    #[schema(value_type = Vec<Object>)]
    pub savepoints: Vec<airlock_ledger::Savepoint>,
    /// Decisions, oldest first; only the last may be unfinished.
    #[schema(value_type = Vec<Object>)]
    pub decisions: Vec<airlock_ledger::WorkspaceDecision>,
    /// A rollback could not be verified: the restored tree differs from the snapshot.
    pub rollback_unverified: bool,
    /// What the starting snapshot recorded without capturing it whole, one `PATH: why`
    /// each (absent when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshot_notes: Vec<String>,
    /// On attach only: what the first snapshot holds, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_contents: Option<String>,
    /// On attach with the `overlay` driver only: the run's overlay state directory, which
    /// `airlock run` mounts each step from (docs/run.md, "The overlay driver").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay_state: Option<String>,
}

impl WorkspaceView {
    /// The record as stored, with `run` when given.
    pub fn of(record: WorkspaceRecord, run: Option<RunId>) -> Self {
        Self {
            run,
            path: record.path,
            driver: record.driver,
            snapshot: record.snapshot,
            created_at_ms: record.created_at_ms,
            steps: record.steps,
            savepoints: record.savepoints,
            decisions: record.decisions,
            rollback_unverified: record.rollback_unverified,
            snapshot_notes: record.snapshot_notes,
            snapshot_contents: None,
            overlay_state: None,
        }
    }
}

/// `POST /v1/runs/{id}/savepoints` → the savepoint taken.
#[derive(Debug, Serialize, ToSchema)]
pub struct SavepointView {
    /// The run id (`run_…`).
    #[schema(value_type = String)]
    pub run: RunId,
    /// The name (unique within the run).
    pub name: String,
    /// The snapshot of the workspace.
    pub snapshot: String,
    /// Effects with a sequence number above this were staged after the savepoint.
    pub effect_seq: u64,
    /// When it was taken, ms since the Unix epoch.
    pub at_ms: u64,
    /// What the snapshot recorded without capturing it whole, one `PATH: why` each.
    pub snapshot_notes: Vec<String>,
}

/// A header as reviewers see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct HeaderView {
    /// The header name.
    pub name: String,
    /// Its value (lossy UTF-8), `[redacted]` for credentials.
    pub value: String,
}

/// A body as reviewers see it: UTF-8 text as `{text}`, anything else as `{base64}`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum BodyView {
    /// A UTF-8 body.
    Text {
        /// The body.
        text: String,
    },
    /// Any other body.
    Base64 {
        /// The body, standard base64 with padding.
        base64: String,
    },
}

/// An effect's approval, when it is approved.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    /// Who approved: the token's name, or the actor on a reviewer's behalf.
    pub by: String,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    /// Digest of the body approved (`sha256:…`).
    #[schema(value_type = String)]
    pub body_digest: airlock_ledger::Digest,
    /// Whether a reviewer approved this effect by itself (not in bulk).
    pub explicit: bool,
    /// The `review` flows it violated when approved.
    pub flows: Vec<String>,
}

/// An effect whose release waits for this one.
#[derive(Debug, Serialize, ToSchema)]
pub struct Dependent {
    /// The effect id (`eff_…`).
    #[schema(value_type = String)]
    pub id: EffectId,
    /// Its place in the run's staging order.
    pub seq: u64,
    /// The request method.
    pub method: String,
    /// The request URL.
    pub url: String,
    /// Its state.
    #[schema(value_type = String)]
    pub state: airlock_ledger::EffectState,
}

/// What the content analysis found for one effect.
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectLineageView {
    /// Whether the analysis has run.
    pub analyzed: bool,
    /// Fingerprints taken of the body (`null` before the analysis).
    pub fingerprints: Option<usize>,
    /// Bounds cut the analysis short (`null` before the analysis).
    pub truncated: Option<bool>,
    /// Why the analysis was skipped, when it was.
    pub skipped: Option<String>,
    /// Sequence numbers of reads whose bodies were not kept whole.
    pub incomplete_reads: Vec<u64>,
    /// Edges into this effect: placeholders it carries, then what the analysis found.
    pub sources: Vec<EdgeView>,
    /// Effects that depend on this one's placeholders.
    pub dependents: Vec<Dependent>,
}

/// A release attempt (the last one, with its answer).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleaseView {
    /// When it started, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When it finished (`null` while it runs or when it was cut short).
    pub finished_at_ms: Option<u64>,
    /// The origin's status.
    pub status: Option<u16>,
    /// The origin's response headers.
    pub headers: Vec<HeaderView>,
    /// The origin's kept response body.
    pub body: Option<BodyView>,
    /// Its length in bytes.
    pub body_len: u64,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// An earlier release attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct EarlierRelease {
    /// When it started, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When it finished.
    pub finished_at_ms: Option<u64>,
    /// The origin's status.
    pub status: Option<u16>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// `GET /v1/effects/{id}` → the summary with what a reviewer needs to decide.
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectDetail {
    /// The list fields.
    #[serde(flatten)]
    pub summary: super::render::EffectSummary,
    /// Placeholders handed out in the staged answer: `{token, path, …}` each.
    #[schema(value_type = Vec<Object>)]
    pub placeholders: Vec<airlock_ledger::Placeholder>,
    /// Effects whose placeholders this one carries: `{effect, token, …}` each.
    #[schema(value_type = Vec<Object>)]
    pub depends_on: Vec<airlock_ledger::Dependency>,
    /// The credential added at release: its name only, never its value.
    pub inject: Option<String>,
    /// The content analysis and the edges into and out of the effect.
    pub lineage: EffectLineageView,
    /// The request headers (credentials `[redacted]`).
    pub headers: Vec<HeaderView>,
    /// The request body (a rule's `redact` masks it).
    pub body: BodyView,
    /// Digest of the staged body (`sha256:…`).
    #[schema(value_type = String)]
    pub body_digest: airlock_ledger::Digest,
    /// The revision of the policy that staged it.
    pub policy_revision: String,
    /// Approve and reject decisions, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub decisions: Vec<airlock_ledger::DecisionRecord>,
    /// The approval, `null` when not approved.
    pub approval: Option<ApprovalView>,
    /// Whether flow rules hold it now: `held`, `blocked` or `null`.
    pub flow_hold: Option<&'static str>,
    /// The flow decision in full: the violations and what each asks.
    #[schema(value_type = Object)]
    pub flows: airlock_dataplane::flows::FlowCheck,
    /// The last release attempt, absent before one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseView>,
    /// The adapter's account beyond the summary (git: commits, paths, diffstat).
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
    /// The real values a release gave, as the UI shows them.
    #[schema(value_type = Option<Object>)]
    pub released: Value,
    /// Earlier release attempts, oldest first.
    pub earlier_releases: Vec<EarlierRelease>,
    /// The rule's `redact` entries, when it has some (masked headers read
    /// `[redacted]`, the body is masked). Set after serialization by the redaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub redacted: Option<Value>,
}

/// `POST /v1/runs` → the run, with what a sandbox needs to be one of its clients.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedRun {
    /// The run as every answer shows it.
    #[serde(flatten)]
    pub run: super::render::RunView,
    /// The run's proxy credential (the password of `proxy_url`); a secret.
    pub token: String,
    /// `http://RUN:TOKEN@HOST:PORT`, the proxy URL a sandbox's clients use.
    pub proxy_url: String,
    /// The CA certificate (PEM) a sandbox must trust, as the sandbox sees its path.
    pub ca_file: String,
    /// The environment of a sandbox of the run (`GET /v1/runs/{id}/env`'s `env`).
    pub env: BTreeMap<String, String>,
    /// The Unix socket a fence's relay connects to.
    pub fence_socket: String,
    /// A PKCS12 truststore (password `changeit`) for Java, `null` when there is none.
    #[schema(value_type = Option<String>)]
    pub truststore: Option<std::path::PathBuf>,
}

/// The effects of a run that flow rules hold now.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunFlows {
    /// Held until a reviewer approves each by itself (`eff_…` ids).
    #[schema(value_type = Vec<String>)]
    pub held: Vec<EffectId>,
    /// Blocked: a commit rejects them (`eff_…` ids).
    #[schema(value_type = Vec<String>)]
    pub blocked: Vec<EffectId>,
}

/// `GET /v1/runs/{id}` → the run with what flow rules hold of it now.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunDetail {
    /// The run as every answer shows it.
    #[serde(flatten)]
    pub run: super::render::RunView,
    /// The run's effects that flow rules hold now.
    pub flows: RunFlows,
}

/// `POST /v1/runs/{id}/abort` → the run, `aborted`, with each effect as it ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct AbortedRun {
    /// The run as every answer shows it.
    #[serde(flatten)]
    pub run: super::render::RunView,
    /// Each effect's summary (all `discarded`, or as they were when already final).
    pub effects_detail: Vec<super::render::EffectSummary>,
}

/// A flow a listed effect violates, in brief.
#[derive(Debug, Serialize, ToSchema)]
pub struct FlowBrief {
    /// The flow's id.
    pub flow: String,
    /// What the flow asks: `review`, `block`, …
    #[schema(value_type = String)]
    pub action: airlock_policy::FlowAction,
}

/// An effect as `GET /v1/runs/{id}/effects` lists it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ListedEffect {
    /// The summary.
    #[serde(flatten)]
    pub summary: super::render::EffectSummary,
    /// The flows it violates, in brief (`GET /v1/effects/{id}` has them in full).
    pub flows: Vec<FlowBrief>,
    /// Whether flow rules hold it now: `held`, `blocked` or `null`.
    pub flow_hold: Option<&'static str>,
    /// The real values its release gave and the origin's answer, as the UI shows them
    /// (`null` before a release).
    #[schema(value_type = Option<Object>)]
    pub released: Value,
}

/// `POST /v1/effects/{id}/approve|reject` → the summary with the approval.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecidedEffect {
    /// The summary.
    #[serde(flatten)]
    pub summary: super::render::EffectSummary,
    /// The approval, `null` when rejected.
    pub approval: Option<ApprovalView>,
}
