//! Finding an analysed body's passages in another body's fingerprints ([`overlap`]), and
//! the prefilter that skips bodies sharing none of them ([`Candidates`]).

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use super::{
    common, token_hash, tokenize, value_finish, value_step, Analysis, K, MAX_VALUE_TOKENS,
    VALUE_SEED, W,
};

/// A hasher for values that are already hashes (fingerprints): the value itself, so sets
/// of fingerprints skip SipHash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8) | u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// A set of fingerprints.
type HashSet64 = HashSet<u64, BuildHasherDefault<Prehashed>>;

/// The overlap between an analysed body and a set of fingerprints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// Bytes of this body's (best) view inside passages shared with the other body.
    pub bytes: u64,
    /// `bytes` per mille of that view's length.
    pub permille: u32,
    /// The longest shared passage, shortened to 160 characters.
    pub excerpt: String,
    /// The view it was found in.
    pub view: String,
}

/// Finds passages of `analysis` that also occur in the body `fingerprints` were taken of
/// (sorted): shingle hits no more than `W` shingles apart are joined into one passage, and
/// any run of tokens that equals a JSON leaf value of that body counts as shared.
pub fn overlap(analysis: &Analysis, fingerprints: &[u64]) -> Option<Overlap> {
    let set: HashSet64 = fingerprints.iter().copied().collect();
    let known = |h: &u64| set.contains(h) && !common::is_common(*h);
    let mut best: Option<Overlap> = None;
    for view in &analysis.views {
        let count = view.tokens.len();
        let mut covered = vec![false; count];
        let mut last_hit: Option<usize> = None;
        for (i, hash) in view.shingles.iter().enumerate() {
            if !known(hash) {
                continue;
            }
            let from = match last_hit {
                Some(previous) if i <= previous + W => previous,
                _ => i,
            };
            for slot in covered.iter_mut().take((i + K).min(count)).skip(from) {
                *slot = true;
            }
            last_hit = Some(i);
        }
        let hashes: Vec<u64> = view
            .tokens
            .iter()
            .map(|&(s, e)| token_hash(&view.text[s..e]))
            .collect();
        let mut by_value = vec![false; count];
        for start in 0..count {
            let mut state = VALUE_SEED;
            for len in 1..=MAX_VALUE_TOKENS.min(count - start) {
                state = value_step(state, hashes[start + len - 1]);
                if len == 1 && view.tokens[start].1 - view.tokens[start].0 < 12 {
                    continue;
                }
                if known(&value_finish(state, len)) {
                    for slot in covered.iter_mut().skip(start).take(len) {
                        *slot = true;
                    }
                    for slot in by_value.iter_mut().skip(start).take(len) {
                        *slot = true;
                    }
                }
            }
        }
        // Tokens inside known boilerplate are never shared data, even where a shingle
        // straddles the boilerplate's edge.
        for (i, hash) in view.shingles.iter().enumerate() {
            if common::is_common(*hash) {
                for slot in covered.iter_mut().skip(i).take(K) {
                    *slot = false;
                }
            }
        }
        // Runs of covered tokens become passages.
        let mut passages: Vec<(usize, usize)> = Vec::new();
        for (i, &c) in covered.iter().enumerate() {
            if !c {
                continue;
            }
            match passages.last_mut() {
                Some((_, end)) if *end + 1 == i => *end = i,
                _ => passages.push((i, i)),
            }
        }
        let span = |&(first, last): &(usize, usize)| (view.tokens[first].0, view.tokens[last].1);
        // A lone identifier or timestamp is a reference to the read, not its data; a
        // lone shingle (no more than K tokens, no value) under 24 bytes is chance — a
        // mail domain next to a country code — not a copy.
        passages.retain(|p| {
            let (s, e) = span(p);
            let chance = p.1 + 1 - p.0 <= K && e - s < 24 && !by_value[p.0..=p.1].contains(&true);
            !chance && !reference_like(&view.text[s..e])
        });
        if passages.is_empty() {
            continue;
        }
        let bytes: usize = passages.iter().map(|p| span(p).1 - span(p).0).sum();
        let longest = passages
            .iter()
            .map(span)
            .max_by_key(|(s, e)| e - s)
            .unwrap_or((0, 0));
        let excerpt = shorten(&view.text[longest.0..longest.1], 160);
        let permille = if view.text.is_empty() {
            0
        } else {
            ((bytes as u128 * 1000) / view.text.len() as u128).min(1000) as u32
        };
        let candidate = Overlap {
            bytes: bytes as u64,
            permille,
            excerpt,
            view: view.name.clone(),
        };
        if best.as_ref().is_none_or(|b| candidate.bytes > b.bytes) {
            best = Some(candidate);
        }
    }
    best
}

/// Whether a shared passage is only a reference rather than data: a lone link or path
/// (under 160 bytes, no whitespace), or under 64 bytes with at most one word (a token of
/// three or more letters and no digit) and no email address — an id, a timestamp, a
/// version, a digest, perhaps with its label.
fn reference_like(passage: &str) -> bool {
    let passage = passage.trim();
    let words = tokenize(passage)
        .iter()
        .filter(|&&(s, e)| {
            let token = &passage[s..e];
            token.chars().count() >= 3 && token.chars().all(char::is_alphabetic)
        })
        .count();
    let lone_link = passage.len() < 160
        && passage.contains('/')
        && !passage.contains(|c: char| c.is_whitespace() || matches!(c, '"' | '@'));
    lone_link || (passage.len() < 64 && words <= 1 && !passage.contains('@'))
}

/// One line of at most `max_chars` characters (line breaks become " | ").
fn shorten(text: &str, max_chars: usize) -> String {
    let line = text.trim().replace('\n', " | ");
    if line.chars().count() <= max_chars {
        return line;
    }
    let head: String = line.chars().take(max_chars).collect();
    format!("{head}…")
}

/// Every hash [`overlap`] could look up for one analysed body: its shingles and the value
/// hashes of each run of 1 to [`MAX_VALUE_TOKENS`] tokens, computed once. A read whose
/// fingerprints hold none of them cannot overlap the body, so comparing an effect with
/// many reads costs one lookup per read fingerprint for all but the reads it shares with.
#[derive(Debug, Default)]
pub struct Candidates(HashSet64);

impl Candidates {
    /// The candidates of `analysis`.
    pub fn of(analysis: &Analysis) -> Self {
        let mut set = HashSet64::default();
        for view in &analysis.views {
            set.extend(view.shingles.iter().copied());
            let hashes: Vec<u64> = view
                .tokens
                .iter()
                .map(|&(s, e)| token_hash(&view.text[s..e]))
                .collect();
            for start in 0..hashes.len() {
                let mut state = VALUE_SEED;
                for len in 1..=MAX_VALUE_TOKENS.min(hashes.len() - start) {
                    state = value_step(state, hashes[start + len - 1]);
                    if len == 1 && view.tokens[start].1 - view.tokens[start].0 < 12 {
                        continue;
                    }
                    set.insert(value_finish(state, len));
                }
            }
        }
        set.retain(|h| !common::is_common(*h));
        Self(set)
    }

    /// The candidate hashes (no common one), for a lookup in an index of many bodies'
    /// fingerprints: a body may overlap exactly when it holds one of them.
    pub fn hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().copied()
    }

    /// Whether a body with these fingerprints may overlap (then call [`overlap`]).
    pub fn may_overlap(&self, fingerprints: &[u64]) -> bool {
        fingerprints.iter().any(|h| self.0.contains(h))
    }
}
