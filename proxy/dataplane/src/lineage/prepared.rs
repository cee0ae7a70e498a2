//! A run's analysed reads prepared once for many comparisons (the pass path checks every
//! request of a run against the same reads): an inverted index from fingerprint to read,
//! and a map of the reads' notable values and their credential fragments by the rolling
//! hash of 12-byte windows, so one
//! comparison costs about the request's own size, not the reads'.
//!
//! `PreparedReads::compare` finds the edges the staging analysis (`effect::compare`) finds over the
//! same reads, with one difference: the credential values searched for fragments are
//! the first `MAX_FRAGMENT_VALUES` of the reads, where `compare` takes the first of
//! those the request does not carry whole.

use std::collections::HashMap;

use airlock_ledger::fingerprint::Candidates;
use airlock_ledger::{EdgeKind, EffectId, Notable, ReadContent};

use super::effect::{
    content_edge, extend_fragment, fragment_credential_edge, fragment_results, is_incomplete,
    notable_edge, variable_start, Compared, RequestSide, MAX_FRAGMENT_VALUES, MIN_FRAGMENT,
};

/// Fingerprints are hashes already: the map keys them as they are.
type Identity = std::hash::BuildHasherDefault<IdentityHasher>;

/// The hasher of [`Identity`]: a `u64` key is its own hash.
#[derive(Debug, Default)]
struct IdentityHasher(u64);

impl std::hash::Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The reads of one run, prepared: positions refer to the slice given to
/// [`PreparedReads::new`], which `PreparedReads::compare` must be given again.
#[derive(Debug)]
pub struct PreparedReads {
    /// Positions (in the slice) of the reads prepared.
    reads: Vec<u32>,
    /// Fingerprint -> position of the first read holding it.
    by_fingerprint: HashMap<u64, u32, Identity>,
    /// Fingerprint -> positions of the further reads holding it (each read once).
    more_holders: HashMap<u64, Vec<u32>, Identity>,
    /// Seqs of the prepared reads whose analysis was cut short.
    incomplete: Vec<u64>,
    /// (read position, notable index) of each notable value searched.
    notables: Vec<(u32, u32)>,
    /// Notable values shorter than `MIN_FRAGMENT` (index into `notables`), searched
    /// with `contains`.
    short: Vec<usize>,
    /// The credential values searched for fragments: index into `notables`, and where
    /// the variable part starts.
    fragment_values: Vec<(usize, usize)>,
    /// `MIN_FRAGMENT`-byte windows by their rolling hash (`window_key`): the first
    /// of each value (a whole match starts there) and every window of each fragment
    /// value's variable part. The first entry of each chain.
    heads: HashMap<u64, u32, Identity>,
    /// The entries, chained through `next`.
    windows: Vec<Window>,
}

/// One window of `PreparedReads::heads`.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// The next entry with the same key (`u32::MAX`: none).
    next: u32,
    /// The value's index into `notables` (whole) or `fragment_values` (fragment).
    value: u32,
    /// `u32::MAX` for the start of a whole value, else the offset in the variable part.
    offset: u32,
}

/// Marks a `Window` that starts a whole value.
const WHOLE: u32 = u32::MAX;

/// The base of the rolling window hash.
const BASE: u64 = 0x100_0000_01b3;

/// The map key of a window's rolling hash (mixed: the map keys it as it is).
fn window_key(rolling: u64) -> u64 {
    let mixed = rolling.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    mixed ^ (mixed >> 29)
}

/// The rolling hash of one `MIN_FRAGMENT`-byte window.
fn rolling_of(window: &[u8]) -> u64 {
    window.iter().fold(0u64, |h, b| {
        h.wrapping_mul(BASE).wrapping_add(u64::from(*b))
    })
}

impl PreparedReads {
    /// Prepares the reads of `all` that `keep` accepts (by position).
    pub fn new(all: &[(ReadContent, Vec<u64>)], keep: impl Fn(usize) -> bool) -> Self {
        let mut reads = Vec::new();
        let mut by_fingerprint: HashMap<u64, u32, Identity> = HashMap::default();
        let mut more_holders: HashMap<u64, Vec<u32>, Identity> = HashMap::default();
        let mut incomplete = Vec::new();
        let mut notables: Vec<(u32, u32)> = Vec::new();
        let mut short = Vec::new();
        let mut fragment_values = Vec::new();
        let mut heads: HashMap<u64, u32, Identity> = HashMap::default();
        let mut windows: Vec<Window> = Vec::new();
        let mut add = |window: &[u8], value: u32, offset: u32| {
            let at = windows.len() as u32;
            let next = heads
                .insert(window_key(rolling_of(window)), at)
                .unwrap_or(u32::MAX);
            windows.push(Window {
                next,
                value,
                offset,
            });
        };
        for (position, (content, fingerprints)) in all.iter().enumerate() {
            if !keep(position) {
                continue;
            }
            let at = position as u32;
            reads.push(at);
            if is_incomplete(content) {
                incomplete.push(content.seq);
            }
            for hash in fingerprints {
                match by_fingerprint.entry(*hash) {
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(at);
                    }
                    std::collections::hash_map::Entry::Occupied(first) if *first.get() != at => {
                        let holders = more_holders.entry(*hash).or_default();
                        if holders.last() != Some(&at) {
                            holders.push(at);
                        }
                    }
                    std::collections::hash_map::Entry::Occupied(_) => {}
                }
            }
            for (n, notable) in content.notable.iter().enumerate() {
                let bytes = notable.value.as_bytes();
                if bytes.is_empty() {
                    continue;
                }
                let pattern = notables.len();
                notables.push((at, n as u32));
                if bytes.len() < MIN_FRAGMENT {
                    short.push(pattern);
                } else {
                    add(&bytes[..MIN_FRAGMENT], pattern as u32, WHOLE);
                }
                if notable.kind == EdgeKind::Credential
                    && fragment_values.len() < MAX_FRAGMENT_VALUES
                {
                    let skip = variable_start(&notable.value);
                    let value = fragment_values.len() as u32;
                    fragment_values.push((pattern, skip));
                    let variable = bytes.get(skip..).unwrap_or_default();
                    for (offset, window) in variable.windows(MIN_FRAGMENT).enumerate() {
                        add(window, value, offset as u32);
                    }
                }
            }
        }
        Self {
            reads,
            by_fingerprint,
            more_holders,
            incomplete,
            notables,
            short,
            fragment_values,
            heads,
            windows,
        }
    }

    /// How many reads it holds.
    pub fn len(&self) -> usize {
        self.reads.len()
    }

    /// Whether it holds no read.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Compares `request` with the prepared reads of `all` (the slice given to
    /// [`Self::new`]): content edges from the reads sharing a candidate hash, edges for
    /// the notable values carried whole, and credential edges for fragments of at least
    /// `MIN_FRAGMENT` characters of the others.
    pub(crate) fn compare(
        &self,
        to: &EffectId,
        all: &[(ReadContent, Vec<u64>)],
        request: RequestSide,
    ) -> Compared {
        let RequestSide { analysis, haystack } = request;
        let mut edges = Vec::new();
        if self.reads.is_empty() {
            return Compared {
                edges,
                incomplete_reads: Vec::new(),
                analysis,
            };
        }
        let candidates = Candidates::of(&analysis);
        let mut shared: Vec<u32> = Vec::new();
        for hash in candidates.hashes() {
            if let Some(first) = self.by_fingerprint.get(&hash) {
                shared.push(*first);
                shared.extend(self.more_holders.get(&hash).into_iter().flatten());
            }
        }
        shared.sort_unstable();
        shared.dedup();
        for at in shared {
            let (content, fingerprints) = &all[at as usize];
            if let Some(edge) = content_edge(to, content.seq, &analysis, fingerprints) {
                edges.push(edge);
            }
        }
        let notable = |pattern: usize| -> (u64, &Notable) {
            let (at, n) = self.notables[pattern];
            let content = &all[at as usize].0;
            (content.seq, &content.notable[n as usize])
        };
        let hay = haystack.as_bytes();
        // The notable values found whole, and the best fragment of each value hit: kept
        // by pattern in small maps (a request hits few), never as arrays the size of the
        // index, which would cost every request a pass over all of it.
        let mut whole: Vec<usize> = Vec::new();
        for &pattern in &self.short {
            if haystack.contains(&notable(pattern).1.value) {
                whole.push(pattern);
            }
        }
        // Every window of the request, by rolling hash: whole values first, then the
        // fragments of those not carried whole.
        let mut hits: Vec<(usize, Window)> = Vec::new();
        if !self.heads.is_empty() && hay.len() >= MIN_FRAGMENT {
            let top = (0..MIN_FRAGMENT - 1).fold(1u64, |p, _| p.wrapping_mul(BASE));
            let mut rolling = rolling_of(&hay[..MIN_FRAGMENT]);
            for p in 0..=hay.len() - MIN_FRAGMENT {
                if p > 0 {
                    rolling = rolling
                        .wrapping_sub(u64::from(hay[p - 1]).wrapping_mul(top))
                        .wrapping_mul(BASE)
                        .wrapping_add(u64::from(hay[p + MIN_FRAGMENT - 1]));
                }
                let mut at = self
                    .heads
                    .get(&window_key(rolling))
                    .copied()
                    .unwrap_or(u32::MAX);
                while at != u32::MAX {
                    let window = self.windows[at as usize];
                    if window.offset == WHOLE {
                        let value = notable(window.value as usize).1.value.as_bytes();
                        if hay[p..].starts_with(value) && !whole.contains(&(window.value as usize))
                        {
                            whole.push(window.value as usize);
                        }
                    } else {
                        hits.push((p, window));
                    }
                    at = window.next;
                }
            }
        }
        whole.sort_unstable();
        for &pattern in &whole {
            let (seq, value) = notable(pattern);
            edges.push(notable_edge(to, seq, value));
        }
        // The best fragment of each fragment value hit, by its index in `fragment_values`.
        let mut best: std::collections::BTreeMap<u32, Option<(usize, usize)>> =
            std::collections::BTreeMap::new();
        for (p, window) in hits {
            let (pattern, skip) = self.fragment_values[window.value as usize];
            if whole.contains(&pattern) {
                continue;
            }
            let variable = &notable(pattern).1.value.as_bytes()[skip..];
            let offset = window.offset as usize;
            // The rolling hash only proposes: the bytes decide.
            if variable.get(offset..offset + MIN_FRAGMENT) != Some(&hay[p..p + MIN_FRAGMENT]) {
                continue;
            }
            extend_fragment(
                hay,
                p,
                variable,
                offset,
                best.entry(window.value).or_default(),
            );
        }
        if !best.is_empty() {
            let hit: Vec<(usize, usize)> = best
                .keys()
                .map(|&n| self.fragment_values[n as usize])
                .collect();
            let values: Vec<&str> = hit
                .iter()
                .map(|(pattern, _)| notable(*pattern).1.value.as_str())
                .collect();
            let skips: Vec<usize> = hit.iter().map(|(_, s)| *s).collect();
            let found = fragment_results(&values, &skips, best.into_values().collect());
            for ((pattern, _), found) in hit.iter().zip(found) {
                if let Some(found) = found {
                    let (seq, value) = notable(*pattern);
                    edges.push(fragment_credential_edge(to, seq, &value.value, found));
                }
            }
        }
        Compared {
            edges,
            incomplete_reads: self.incomplete.clone(),
            analysis,
        }
    }
}

#[cfg(test)]
mod tests {
    use airlock_ledger::fingerprint::{analyze, credential_like};
    use airlock_ledger::{Edge, EdgeKind, EffectId, Notable, ReadContent};

    use super::PreparedReads;
    use crate::lineage::effect::compare;
    use crate::lineage::request_side;

    /// A read of `body` as the lineage worker stores it: fingerprints and the
    /// credential-looking values, plus a response header value.
    fn read(seq: u64, body: &str, header: Option<&str>) -> (ReadContent, Vec<u64>) {
        let analysis = analyze(body.as_bytes(), None);
        let mut notable: Vec<Notable> = credential_like(body)
            .into_iter()
            .map(|value| Notable {
                kind: EdgeKind::Credential,
                name: None,
                value,
            })
            .collect();
        if let Some(value) = header {
            notable.push(Notable {
                kind: EdgeKind::Header,
                name: Some("x-session-ref".into()),
                value: value.into(),
            });
        }
        let fingerprints = analysis.winnowed();
        (
            ReadContent {
                seq,
                notable,
                fingerprints: fingerprints.len(),
                truncated: false,
                skipped: None,
            },
            fingerprints,
        )
    }

    fn key(edges: &[Edge]) -> Vec<(String, String, u64)> {
        let mut keys: Vec<_> = edges
            .iter()
            .map(|e| {
                (
                    format!("{:?}", e.from),
                    format!("{:?}", e.kind),
                    e.overlap_bytes,
                )
            })
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn prepared_reads_find_the_edges_a_direct_comparison_finds() {
        let token = "ghp_R8xkP2mQ7vLw3nT9sZ4bY6cJ1dF5gH0aE2uK";
        let reads = vec![
            read(
                1,
                &format!(r#"{{"service":"payments","api_key":"{token}","owner":"platform team"}}"#),
                None,
            ),
            read(
                2,
                "The quarterly renewal report lists every enterprise customer whose contract ends before March, with the account manager responsible for each renewal.",
                Some("sess-7Hq2Lx9Pz4Kw"),
            ),
            read(3, r#"{"status":"green","build":412}"#, None),
        ];
        let prepared = PreparedReads::new(&reads, |_| true);
        let to = EffectId::generate();
        let requests = [
            "https://docs.example.com/search?q=weather+in+lisbon".to_owned(),
            format!("https://docs.example.com/log?k={token}"),
            format!("https://docs.example.com/log?part={}", &token[14..32]),
            "https://docs.example.com/c?ref=sess-7Hq2Lx9Pz4Kw".to_owned(),
            "https://docs.example.com/n?t=every+enterprise+customer+whose+contract+ends+before+March,+with+the+account+manager".to_owned(),
        ];
        let mut found = 0;
        for url in &requests {
            let direct = compare(&to, url, &[], b"", None, &reads);
            let fast = prepared.compare(&to, &reads, request_side(url, &[], b"", None));
            assert_eq!(key(&fast.edges), key(&direct.edges), "{url}");
            found += usize::from(!direct.edges.is_empty());
        }
        assert_eq!(found, 4, "all but the benign request carry something");
        // Keeping only some reads leaves the others out.
        let only_third = PreparedReads::new(&reads, |at| at == 2);
        let fast = only_third.compare(&to, &reads, request_side(&requests[1], &[], b"", None));
        assert!(fast.edges.is_empty());
    }
}
