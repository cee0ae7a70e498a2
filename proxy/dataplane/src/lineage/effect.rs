//! Effect analysis: compares a staged effect with its run's analysed reads and records
//! the read -> effect edges.

use airlock_ledger::fingerprint::{analyze_request, credential_like, overlap, Candidates};
use airlock_ledger::{
    now_ms, Edge, EdgeKind, EdgeSource, EffectId, EffectLineage, ReadContent, Store,
};

use super::{run_reads, Job, Seen};

/// DataPlane passages shorter than this (bytes of normalised text) make no edge.
const MIN_OVERLAP_BYTES: u64 = 24;
/// Shortest fragment of a credential-looking value that makes a credential edge.
pub(crate) const MIN_FRAGMENT: usize = 12;
/// Request headers that carry no data of the client's choosing worth analysing.
const ROUTINE_REQUEST_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "accept",
    "accept-encoding",
    "connection",
    "user-agent",
    "expect",
];

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
            let reads = ledger.read_contents(&record.run_id)?;
            analyse_effect(ledger, &record, &reads)
        }
    }
}

/// Analyses one staged effect against `reads` (the analysed reads of its run, with their
/// fingerprints) and stores its lineage. Reads sharing no candidate hash with the effect
/// ([`Candidates`]) are not compared passage by passage.
///
/// Errors: storage faults.
pub(super) fn analyse_effect(
    ledger: &dyn Store,
    record: &airlock_ledger::Effect,
    reads: &[(ReadContent, Vec<u64>)],
) -> Result<(), airlock_ledger::LedgerError> {
    let effect: EffectId = record.id.clone();
    let body = ledger.body(&record.body_digest)?.unwrap_or_default();
    let encoding = record
        .headers
        .iter()
        .find(|h| h.name == "content-encoding")
        .map(|h| String::from_utf8_lossy(h.value.as_bytes()).into_owned());
    let headers: Vec<(&str, &[u8])> = record
        .headers
        .iter()
        .map(|h| (h.name.as_str(), h.value.as_bytes()))
        .collect();
    let Compared {
        edges,
        incomplete_reads,
        analysis,
    } = compare(
        &effect,
        &record.url,
        &headers,
        &body,
        encoding.as_deref(),
        reads,
    );
    let lineage = EffectLineage {
        analyzed_at_ms: now_ms(),
        fingerprints: analysis.winnowed().len(),
        truncated: analysis.truncated,
        skipped: analysis.skipped.clone(),
        edges,
        incomplete_reads,
    };
    let stored = ledger.store_effect_lineage(&effect, &lineage);
    if stored.is_err() {
        // The effect stays "not analysed yet": flows hold it as unanalysed.
        crate::gaps::lineage_dropped();
    }
    stored
}

/// What [`compare`] found: the read -> request edges, the reads whose analysis was cut
/// short, and the request's own analysis (its views).
pub(crate) struct Compared {
    /// Edges from `reads` into the request, `to` the id given.
    pub(crate) edges: Vec<Edge>,
    /// Seqs of the reads compared whose analysis was skipped or truncated.
    pub(crate) incomplete_reads: Vec<u64>,
    /// The request's analysis.
    pub(crate) analysis: airlock_ledger::fingerprint::Analysis,
}

/// Compares one request (absolute `url`, `headers` as sent, `body` in its
/// `encoding`) with `reads` (analysed reads with their fingerprints): the same
/// comparison for a staged effect (`to` its id) and for a request about to pass
/// (`crate::flows::pass`). The URL after its authority and the non-routine header
/// values are analysed as views beside the body; a read's notable values are searched
/// whole in the URL, headers, body and views, and credential values in fragments of at
/// least 12 characters.
pub(crate) fn compare<'r>(
    to: &EffectId,
    url: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
    encoding: Option<&str>,
    reads: impl IntoIterator<Item = &'r (ReadContent, Vec<u64>)>,
) -> Compared {
    let RequestSide { analysis, haystack } = request_side(url, headers, body, encoding);
    let mut edges = Vec::new();
    let mut incomplete_reads = Vec::new();
    // Credential values not carried whole, searched for fragments in one pass.
    let mut fragment_candidates: Vec<(u64, String)> = Vec::new();
    let candidates = Candidates::of(&analysis);
    for (content, fingerprints) in reads {
        if is_incomplete(content) {
            incomplete_reads.push(content.seq);
        }
        if let Some(edge) = candidates
            .may_overlap(fingerprints)
            .then(|| content_edge(to, content.seq, &analysis, fingerprints))
            .flatten()
        {
            edges.push(edge);
        }
        for notable in &content.notable {
            if haystack.contains(&notable.value) {
                edges.push(notable_edge(to, content.seq, notable));
            } else if notable.kind == EdgeKind::Credential
                && fragment_candidates.len() < MAX_FRAGMENT_VALUES
            {
                fragment_candidates.push((content.seq, notable.value.clone()));
            }
        }
    }
    let values: Vec<&str> = fragment_candidates
        .iter()
        .map(|(_, v)| v.as_str())
        .collect();
    for ((seq, value), found) in fragment_candidates
        .iter()
        .zip(fragment_edges(&haystack, &values))
    {
        if let Some(found) = found {
            edges.push(fragment_credential_edge(to, *seq, value, found));
        }
    }
    Compared {
        edges,
        incomplete_reads,
        analysis,
    }
}

/// How many credential values not carried whole are searched for fragments in one
/// comparison.
pub(crate) const MAX_FRAGMENT_VALUES: usize = 4096;

/// Whether a read's analysis was cut short (skipped for a reason other than a body that
/// is not text, or truncated): an effect compared with it has incomplete lineage.
pub(crate) fn is_incomplete(content: &ReadContent) -> bool {
    content
        .skipped
        .as_deref()
        .is_some_and(|why| !why.ends_with("is not text"))
        || content.truncated
}

/// The content edge from read `seq` into `to` when `analysis` shares passages of at
/// least [`MIN_OVERLAP_BYTES`] with the read's `fingerprints`.
pub(crate) fn content_edge(
    to: &EffectId,
    seq: u64,
    analysis: &airlock_ledger::fingerprint::Analysis,
    fingerprints: &[u64],
) -> Option<Edge> {
    let found = overlap(analysis, fingerprints).filter(|o| o.bytes >= MIN_OVERLAP_BYTES)?;
    Some(Edge {
        from: EdgeSource::Read { seq },
        to: to.clone(),
        kind: EdgeKind::Content,
        overlap_bytes: found.bytes,
        overlap_permille: found.permille,
        excerpt: Some(mask_secrets(&found.excerpt)),
        detail: Some(format!("shared passages found in the {} view", found.view)),
    })
}

/// The edge from read `seq` into `to` for a notable value of the read carried whole.
pub(crate) fn notable_edge(to: &EffectId, seq: u64, notable: &airlock_ledger::Notable) -> Edge {
    let (excerpt, detail) = match notable.kind {
        EdgeKind::Credential => (
            mask(&notable.value),
            "carries a credential-looking value that arrived in this read".to_owned(),
        ),
        _ => (
            mask_secrets(&notable.value.chars().take(80).collect::<String>()),
            format!(
                "carries the value of response header {}",
                notable.name.as_deref().unwrap_or("?")
            ),
        ),
    };
    Edge {
        from: EdgeSource::Read { seq },
        to: to.clone(),
        kind: notable.kind,
        overlap_bytes: notable.value.len() as u64,
        overlap_permille: 0,
        excerpt: Some(excerpt),
        detail: Some(detail),
    }
}

/// The credential edge from read `seq` into `to` for a fragment of `value` (`found`:
/// bytes and detail, from [`fragment_results`]).
pub(crate) fn fragment_credential_edge(
    to: &EffectId,
    seq: u64,
    value: &str,
    (bytes, detail): (u64, String),
) -> Edge {
    Edge {
        from: EdgeSource::Read { seq },
        to: to.clone(),
        kind: EdgeKind::Credential,
        overlap_bytes: bytes,
        overlap_permille: 0,
        excerpt: Some(mask(value)),
        detail: Some(detail),
    }
}

/// A request as the comparison reads it: its analysis (the body's views, plus the URL
/// after its authority and the non-routine header values as views) and the text a
/// notable value is searched in (URL, header values, views and the body).
pub(crate) struct RequestSide {
    /// The request's analysis.
    pub(crate) analysis: airlock_ledger::fingerprint::Analysis,
    /// URL, header values, views and body, newline-separated.
    pub(crate) haystack: String,
}

/// The [`RequestSide`] of one request (absolute `url`, `headers` as sent, `body` in its
/// `encoding`).
pub(crate) fn request_side(
    url: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
    encoding: Option<&str>,
) -> RequestSide {
    // The URL after its authority and the non-routine header values are analysed
    // as views too: data leaves in a query or a header as well as in a body.
    let target = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|at| rest[at..].to_owned()))
        .unwrap_or_else(|| url.to_owned());
    let header_values: Vec<String> = headers
        .iter()
        .filter(|(name, _)| !ROUTINE_REQUEST_HEADERS.contains(name))
        .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
        .collect();
    let mut extra: Vec<(&str, &str)> = vec![("url", target.as_str())];
    extra.extend(header_values.iter().map(|v| ("header", v.as_str())));
    let analysis = analyze_request(body, encoding, &extra);
    let mut haystack = url.to_owned();
    for (_, value) in headers {
        haystack.push('\n');
        haystack.push_str(&String::from_utf8_lossy(value));
    }
    for view in &analysis.views {
        haystack.push('\n');
        haystack.push_str(&view.text);
    }
    haystack.push('\n');
    haystack.push_str(&String::from_utf8_lossy(body));
    RequestSide { analysis, haystack }
}

/// Known fixed parts of credential-looking values, which fragments must not be made of.
const FIXED_PREFIXES: [&str; 12] = [
    "github_pat_",
    "sk_live_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xapp-",
    "sk-",
    "AKIA",
];

/// The bytes and detail of a credential edge when `haystack` carries a fragment of at
/// least [`MIN_FRAGMENT`] characters of `value`'s variable part (past a known prefix; of
/// a JWT only the signature, as header and claims are shared by tokens of one issuer) —
/// a secret split
/// over several effects, or cut short. The longest fragment counts.
#[cfg(test)]
fn fragment_edge(haystack: &str, value: &str) -> Option<(u64, String)> {
    fragment_edges(haystack, &[value]).pop().flatten()
}

/// Where the variable part of a credential-looking `value` starts: past a known fixed
/// prefix; of a JWT only the signature (header and claims are shared by tokens of one
/// issuer).
pub(crate) fn variable_start(value: &str) -> usize {
    if value.starts_with("eyJ") {
        return value.rfind('.').map_or(0, |dot| dot + 1);
    }
    FIXED_PREFIXES
        .iter()
        .find(|p| value.starts_with(*p))
        .map_or(0, |p| p.len())
}

/// [`fragment_edge`] for each of `values`, in one pass over `haystack`.
fn fragment_edges(haystack: &str, values: &[&str]) -> Vec<Option<(u64, String)>> {
    let skips: Vec<usize> = values.iter().map(|v| variable_start(v)).collect();
    let mut windows: std::collections::HashMap<&[u8], Vec<(usize, usize)>> = Default::default();
    for (n, (value, &skip)) in values.iter().zip(&skips).enumerate() {
        let variable = value.as_bytes().get(skip..).unwrap_or_default();
        for (at, window) in variable.windows(MIN_FRAGMENT).enumerate() {
            windows.entry(window).or_default().push((n, at));
        }
    }
    let mut best: Vec<Option<(usize, usize)>> = vec![None; values.len()];
    let hay = haystack.as_bytes();
    if !windows.is_empty() {
        for p in 0..(hay.len() + 1).saturating_sub(MIN_FRAGMENT) {
            let Some(hits) = windows.get(&hay[p..p + MIN_FRAGMENT]) else {
                continue;
            };
            for &(n, o) in hits {
                extend_fragment(hay, p, &values[n].as_bytes()[skips[n]..], o, &mut best[n]);
            }
        }
    }
    fragment_results(values, &skips, best)
}

/// Extends a [`MIN_FRAGMENT`]-byte match of `variable[o..]` at `hay[p..]` as far as both
/// agree, and keeps it in `best` (offset in the variable part, length) when longer.
pub(crate) fn extend_fragment(
    hay: &[u8],
    p: usize,
    variable: &[u8],
    o: usize,
    best: &mut Option<(usize, usize)>,
) {
    let mut len = MIN_FRAGMENT;
    while o + len < variable.len() && p + len < hay.len() && variable[o + len] == hay[p + len] {
        len += 1;
    }
    if best.is_none_or(|(_, b)| len > b) {
        *best = Some((o, len));
    }
}

/// The bytes and detail of each value's longest fragment found (`best`: offset in its
/// variable part, past `skips`, and length), when it holds at least 6 distinct bytes.
pub(crate) fn fragment_results<S: AsRef<str>>(
    values: &[S],
    skips: &[usize],
    best: Vec<Option<(usize, usize)>>,
) -> Vec<Option<(u64, String)>> {
    best.into_iter()
        .enumerate()
        .map(|(n, found)| {
            let (offset, len) = found?;
            let value = values[n].as_ref();
            let start = skips[n] + offset;
            let fragment = &value.as_bytes()[start..start + len];
            let mut distinct = fragment.to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            (distinct.len() >= 6).then(|| {
                (
                    len as u64,
                    format!(
                        "carries a {len}-character fragment (characters {start}..{} of {}) of a credential-looking value that arrived in this read",
                        start + len,
                        value.len()
                    ),
                )
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::fragment_edge;

    #[test]
    fn fragments_of_a_credential_make_an_edge_but_fixed_parts_do_not() {
        let token = "ghp_R8xkP2mQ7vLw3nT9sZ4bY6cJ1dF5gH0aE2uK";
        let haystack = format!("{{\"seq\":2,\"part\":\"{}\"}}", &token[14..30]);
        let (bytes, detail) = fragment_edge(&haystack, token).expect("fragment found");
        assert_eq!(bytes, 16);
        assert!(
            detail.contains("16-character fragment (characters 14..30 of 40)"),
            "{detail}"
        );
        // The known prefix with a few characters, or 11 characters, are no fragment.
        assert_eq!(fragment_edge("ghp_R8xkP2mQ", token), None);
        assert_eq!(fragment_edge(&token[20..31], token), None);
        // A JWT's header and claims are shared by tokens of one issuer: only its
        // signature makes fragments.
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJzdmMtMzgifQ.c2lnbmF0dXJlLXZhbHVlLTEyMzQ1Njc4OTA";
        assert_eq!(
            fragment_edge(
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJvdGhlciI6MX0.b3RoZXI",
                jwt
            ),
            None
        );
        assert_eq!(fragment_edge("eyJzdWIiOiJzdmMtMzgifQ", jwt), None);
        let (bytes, _) =
            fragment_edge("sig=c2lnbmF0dXJlLXZhbHVl", jwt).expect("signature fragment");
        assert_eq!(bytes, 20);
    }
}
