//! The lineage view of a run as a layered SVG: reads in the first column, effects in later
//! columns by dependency depth (an effect that carries a placeholder of another stands one
//! column to its right), edges drawn from source to effect and coloured by kind.

use std::collections::HashMap;

use airlock_ledger::{Edge, EdgeKind, EdgeSource, Effect, EffectId, Read};
use maud::{html, Markup};

const NODE_W: u32 = 230;
const NODE_H: u32 = 34;
const COL_GAP: u32 = 90;
const ROW_GAP: u32 = 12;
const PAD: u32 = 10;

/// The column of each effect: 1 plus the longest chain of effects it depends on.
fn depths(effects: &[Effect]) -> HashMap<EffectId, u32> {
    let mut depth: HashMap<EffectId, u32> = HashMap::new();
    // Effects depend only on earlier effects (a placeholder exists before it is carried),
    // so one pass in staging order settles every depth.
    for effect in effects {
        let d = effect
            .depends_on
            .iter()
            .filter_map(|dep| depth.get(&dep.effect))
            .max()
            .map_or(1, |d| d + 1);
        depth.insert(effect.id.clone(), d);
    }
    depth
}

pub(super) fn kind_name(kind: EdgeKind) -> &'static str {
    match kind {
        EdgeKind::Content => "content",
        EdgeKind::Credential => "credential",
        EdgeKind::Header => "header",
        EdgeKind::Placeholder => "placeholder",
    }
}

fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The path part of a URL with its host, for node labels.
pub fn host_path(url: &str) -> (String, String) {
    match url.parse::<http::Uri>() {
        Ok(uri) => (
            uri.host().unwrap_or("").to_owned(),
            uri.path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| "/".to_owned()),
        ),
        Err(_) => (String::new(), url.to_owned()),
    }
}

/// The run's lineage as an SVG (empty markup when the run has no edges and no effects).
/// Each effect is labelled with `sent_url(effect)`: the URL as it was sent, once the
/// release made its placeholders real.
pub fn svg(
    reads: &[Read],
    effects: &[Effect],
    edges: &[Edge],
    sent_url: &dyn Fn(&Effect) -> String,
) -> Markup {
    let depth = depths(effects);
    // Only reads that feed some effect are drawn; the others are listed in the reads table.
    let feeding: Vec<&Read> = reads
        .iter()
        .filter(|r| {
            edges
                .iter()
                .any(|e| matches!(e.from, EdgeSource::Read { seq } if seq == r.seq))
        })
        .collect();
    let mut rows_in_column: HashMap<u32, u32> = HashMap::new();
    let mut position: HashMap<String, (u32, u32)> = HashMap::new();
    let mut place = |key: String, column: u32| {
        let row = rows_in_column.entry(column).or_insert(0);
        let x = PAD + column * (NODE_W + COL_GAP);
        let y = PAD + *row * (NODE_H + ROW_GAP);
        *row += 1;
        position.insert(key, (x, y));
    };
    for read in &feeding {
        place(format!("read:{}", read.seq), 0);
    }
    for effect in effects {
        place(
            effect.id.to_string(),
            depth.get(&effect.id).copied().unwrap_or(1),
        );
    }
    let columns = rows_in_column.keys().max().copied().unwrap_or(0) + 1;
    let rows = rows_in_column.values().max().copied().unwrap_or(0);
    let width = PAD * 2 + columns * NODE_W + columns.saturating_sub(1) * COL_GAP;
    let height = PAD * 2 + rows * (NODE_H + ROW_GAP);
    let mut paths = Vec::new();
    for edge in edges {
        let from = match &edge.from {
            EdgeSource::Read { seq } => format!("read:{seq}"),
            EdgeSource::Effect { id } => id.to_string(),
        };
        let (Some(&(x1, y1)), Some(&(x2, y2))) =
            (position.get(&from), position.get(edge.to.as_str()))
        else {
            continue;
        };
        let (sx, sy) = (x1 + NODE_W, y1 + NODE_H / 2);
        let (tx, ty) = (x2, y2 + NODE_H / 2);
        let bend = (tx.saturating_sub(sx)) / 2;
        let title = match edge.kind {
            EdgeKind::Content => format!(
                "{from} -> {}: content, {} bytes ({}.{}%)",
                edge.to,
                edge.overlap_bytes,
                edge.overlap_permille / 10,
                edge.overlap_permille % 10
            ),
            kind => format!("{from} -> {}: {}", edge.to, kind_name(kind)),
        };
        paths.push((
            format!(
                "M{sx},{sy} C{},{sy} {},{ty} {tx},{ty}",
                sx + bend,
                tx.saturating_sub(bend)
            ),
            kind_name(edge.kind),
            title,
        ));
    }
    html! {
        svg.lineage xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox=(format!("0 0 {width} {height}")) role="img" aria-label="lineage graph" {
            defs {
                marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                    path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead" {}
                }
            }
            @for (d, class, title) in &paths {
                path class=(format!("edge {class}")) d=(d) marker-end="url(#arrow)" { title { (title) } }
            }
            @for read in &feeding {
                @if let Some(&(x, y)) = position.get(&format!("read:{}", read.seq)) {
                    @let (host, path) = host_path(&read.url);
                    g.node.read {
                        title { "read #" (read.seq) ": " (read.method) " " (read.url) }
                        rect x=(x) y=(y) width=(NODE_W) height=(NODE_H) rx="5" {}
                        text x=(x + 8) y=(y + 14) { "read #" (read.seq) " " (read.method) " " (short(&host, 18)) }
                        text.sub x=(x + 8) y=(y + 28) { (short(&path, 32)) }
                    }
                }
            }
            @for effect in effects {
                @if let Some(&(x, y)) = position.get(effect.id.as_str()) {
                    @let url = sent_url(effect);
                    @let (host, path) = host_path(&url);
                    a href=(format!("/effects/{}", effect.id)) {
                        g class=(format!("node effect state-{}", effect.state.as_str())) {
                            title { "effect #" (effect.seq) ": " (effect.method) " " (url) " (" (effect.state.as_str()) ")" }
                            rect x=(x) y=(y) width=(NODE_W) height=(NODE_H) rx="5" {}
                            text x=(x + 8) y=(y + 14) { "#" (effect.seq) " " (effect.method) " " (short(&host, 16)) " · " (effect.state.as_str()) }
                            text.sub x=(x + 8) y=(y + 28) { (short(&path, 32)) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_path() {
        assert_eq!(
            host_path("https://api.example.com:8443/a/b?c=1"),
            ("api.example.com".into(), "/a/b?c=1".into())
        );
        assert_eq!(short("abcdef", 4), "abc…");
    }
}
