//! Reading examples/kubernetes/: its YAML documents and the airlock containers in them.

use std::path::{Path, PathBuf};
use std::process::Command;

use airlock::role::Role;
use serde_json::Value;

/// examples/kubernetes/.
fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kubernetes")
}

/// Every YAML document of every `*.yaml` there, as `(file, document)`.
pub(super) fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("examples/kubernetes")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the manifests: {files:?}");
    let mut docs = Vec::new();
    for file in files {
        let out = Command::new("python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
            ])
            .arg(&file)
            .output()
            .expect("python3 runs (with PyYAML: .ci/run installs python3-yaml)");
        assert!(
            out.status.success(),
            "{} does not parse as YAML: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let parsed: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON from python");
        let name = file
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        docs.extend(parsed.into_iter().map(|doc| (name.clone(), doc)));
    }
    docs
}

/// One airlock container of a manifest.
#[derive(Debug)]
pub(super) struct Container {
    /// `file: Kind/name/container`, for messages.
    pub(super) at: String,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<String>,
    pub(super) mounts: Vec<String>,
    pub(super) probe_paths: Vec<String>,
    pub(super) scrape_paths: Vec<String>,
}

impl Container {
    pub(super) fn subcommand(&self) -> &str {
        self.args.first().map_or("", String::as_str)
    }

    /// The `--flag` names in its args (`--flag=value` taken as `--flag`).
    pub(super) fn flags(&self) -> Vec<String> {
        self.args
            .iter()
            .filter(|a| a.starts_with("--"))
            .map(|a| a.split('=').next().unwrap_or(a).to_owned())
            .collect()
    }

    /// The value after `flag` (every one, for repeatable flags).
    pub(super) fn values(&self, flag: &str) -> Vec<&str> {
        self.args
            .windows(2)
            .filter(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
            .collect()
    }

    pub(super) fn role(&self) -> Role {
        match self.values("--role").first().copied() {
            Some("proxy") => Role::Proxy,
            Some("control") => Role::Control,
            Some("all") | None => Role::All,
            Some(other) => panic!("{}: --role {other}", self.at),
        }
    }
}

pub(super) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The containers running the airlock image (`airlock:…`) in `docs`.
pub(super) fn airlock_containers(docs: &[(String, Value)]) -> Vec<Container> {
    let mut found = Vec::new();
    for (file, doc) in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let template = match kind {
            "Pod" => doc,
            "Deployment" | "DaemonSet" | "StatefulSet" | "Job" => &doc["spec"]["template"],
            _ => continue,
        };
        let annotations = &template["metadata"]["annotations"];
        let scrape = annotations["prometheus.io/scrape"] == "true";
        let spec = &template["spec"];
        for list in ["initContainers", "containers"] {
            for container in spec[list].as_array().into_iter().flatten() {
                let image = container["image"].as_str().unwrap_or_default();
                if !image.starts_with("airlock:") {
                    continue;
                }
                let probes = ["livenessProbe", "readinessProbe", "startupProbe"];
                found.push(Container {
                    at: format!(
                        "{file}: {kind}/{}/{}",
                        doc["metadata"]["name"].as_str().unwrap_or("?"),
                        container["name"].as_str().unwrap_or("?")
                    ),
                    args: strings(&container["args"]),
                    env: container["env"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|e| e["name"].as_str().map(str::to_owned))
                        .collect(),
                    mounts: container["volumeMounts"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|m| m["mountPath"].as_str().map(str::to_owned))
                        .collect(),
                    probe_paths: probes
                        .iter()
                        .filter_map(|p| container[*p]["httpGet"]["path"].as_str())
                        .map(str::to_owned)
                        .collect(),
                    scrape_paths: scrape
                        .then(|| {
                            annotations["prometheus.io/path"]
                                .as_str()
                                .unwrap_or("/metrics")
                        })
                        .filter(|_| list == "containers")
                        .map(str::to_owned)
                        .into_iter()
                        .collect(),
                });
            }
        }
    }
    found
}
