//! Effect analysis: compares a staged effect with its run's analysed reads and records
//! the read -> effect edges.

use airlock_ledger::fingerprint::{analyze, credential_like, overlap};
use airlock_ledger::{now_ms, Edge, EdgeKind, EdgeSource, EffectLineage, Store};

use super::{run_reads, Job, Seen};

/// DataPlane passages shorter than this (bytes of normalised text) make no edge.
const MIN_OVERLAP_BYTES: u64 = 24;

pub(super) fn run_job(
    ledger: &dyn Store,
    seen: &mut Seen,
    job: Job,
) -> Result<(), airlock_ledger::LedgerError> {
    match job {
        job @ Job::Read { .. } => {
            run_reads(ledger, seen, vec![job]);
            Ok(())
        }
        Job::Effect { effect } => {
            let Some(record) = ledger.effect(&effect)? else {
                return Ok(());
            };
            let body = ledger.body(&record.body_digest)?.unwrap_or_default();
            let encoding = record
                .headers
                .iter()
                .find(|h| h.name == "content-encoding")
                .map(|h| String::from_utf8_lossy(h.value.as_bytes()).into_owned());
            let analysis = analyze(&body, encoding.as_deref());
            let mut haystack = record.url.clone();
            for header in &record.headers {
                haystack.push('\n');
                haystack.push_str(&String::from_utf8_lossy(header.value.as_bytes()));
            }
            for view in &analysis.views {
                haystack.push('\n');
                haystack.push_str(&view.text);
            }
            haystack.push('\n');
            haystack.push_str(&String::from_utf8_lossy(&body));
            let mut edges = Vec::new();
            let mut incomplete_reads = Vec::new();
            for (content, fingerprints) in ledger.read_contents(&record.run_id)? {
                if content
                    .skipped
                    .as_deref()
                    .is_some_and(|why| !why.ends_with("is not text"))
                    || content.truncated
                {
                    incomplete_reads.push(content.seq);
                }
                if let Some(found) =
                    overlap(&analysis, &fingerprints).filter(|o| o.bytes >= MIN_OVERLAP_BYTES)
                {
                    edges.push(Edge {
                        from: EdgeSource::Read { seq: content.seq },
                        to: effect.clone(),
                        kind: EdgeKind::Content,
                        overlap_bytes: found.bytes,
                        overlap_permille: found.permille,
                        excerpt: Some(mask_secrets(&found.excerpt)),
                        detail: Some(format!("shared passages found in the {} view", found.view)),
                    });
                }
                for notable in content.notable {
                    if haystack.contains(&notable.value) {
                        let (excerpt, detail) = match notable.kind {
                            EdgeKind::Credential => (
                                mask(&notable.value),
                                "carries a credential-looking value that arrived in this read"
                                    .to_owned(),
                            ),
                            _ => (
                                mask_secrets(&notable.value.chars().take(80).collect::<String>()),
                                format!(
                                    "carries the value of response header {}",
                                    notable.name.as_deref().unwrap_or("?")
                                ),
                            ),
                        };
                        edges.push(Edge {
                            from: EdgeSource::Read { seq: content.seq },
                            to: effect.clone(),
                            kind: notable.kind,
                            overlap_bytes: notable.value.len() as u64,
                            overlap_permille: 0,
                            excerpt: Some(excerpt),
                            detail: Some(detail),
                        });
                    }
                }
            }
            let lineage = EffectLineage {
                analyzed_at_ms: now_ms(),
                fingerprints: analysis.winnowed().len(),
                truncated: analysis.truncated,
                skipped: analysis.skipped.clone(),
                edges,
                incomplete_reads,
            };
            ledger.store_effect_lineage(&effect, &lineage)
        }
    }
}

/// `text` with every credential-looking value in it masked.
fn mask_secrets(text: &str) -> String {
    let mut out = text.to_owned();
    for secret in credential_like(text) {
        out = out.replace(&secret, &mask(&secret));
    }
    out
}

/// A secret's shape without its value: first four characters and the length.
fn mask(value: &str) -> String {
    let head: String = value.chars().take(4).collect();
    format!("{head}… ({} characters)", value.chars().count())
}
