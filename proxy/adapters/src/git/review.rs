//! What a push changes, for reviewers: the pushed commits (id, author, message) and the
//! paths they change with a diffstat, read from the request's pack ([`super::pack`]).
//!
//! The pack holds only objects the server lacks, so a commit's parent, and the trees and
//! blobs it shares with the parent, are often absent. Where both sides of a change are in
//! the pack the change is exact (added, modified, deleted, with line counts); where the
//! older side is on the server only, an object in the pack under a path means the path was
//! added or changed (`changed`, its new line count known, its removed lines not), and an
//! object absent from the pack means the path is unchanged. Deletions against the server's
//! tree cannot be seen; [`PushReview::notes`] says so, as it says what a thin pack or a
//! limit left unread. Line counts trim the common head and tail and then count the lines
//! of each side without a match on the other (moves inside a file count as unchanged).

use std::collections::{BTreeMap, HashSet, VecDeque};

use serde_json::{json, Value};

use super::pack::{hex, Kind, Pack};
use super::{PushRequest, ZERO_ID};

/// Commits walked per push at most.
const MAX_COMMITS: usize = 500;
/// Paths listed per push at most.
const MAX_PATHS: usize = 2_000;
/// Lines of a blob compared for line counts at most (bigger files get no counts).
const MAX_LINES: usize = 20_000;

/// A pushed commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Object id (hex).
    pub id: String,
    /// `Name <email>` of the author.
    pub author: String,
    /// The message's first line.
    pub subject: String,
    /// Paths it changes against its first parent, with line counts.
    pub paths: Vec<PathStat>,
}

/// How a path changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// New in the push.
    Added,
    /// Both sides in the pack, contents differ.
    Modified,
    /// Removed (seen only where the older tree is in the pack).
    Deleted,
    /// Added or changed: the older side is on the server only.
    Changed,
}

impl Change {
    fn letter(self) -> &'static str {
        match self {
            Change::Added => "A",
            Change::Modified => "M",
            Change::Deleted => "D",
            Change::Changed => "A/M",
        }
    }
}

/// One path of the diffstat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathStat {
    /// Path from the repository root.
    pub path: String,
    /// How it changed over the pushed commits.
    pub change: Change,
    /// Lines added (`None`: binary, or too large).
    pub added: Option<u64>,
    /// Lines removed (`None`: unknown, the older side is not in the pack; or binary).
    pub removed: Option<u64>,
}

/// What a push changes, as far as its pack tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushReview {
    /// Pushed commits, newest first per ref.
    pub commits: Vec<CommitInfo>,
    /// Changed paths, sorted.
    pub paths: Vec<PathStat>,
    /// Objects the pack announces.
    pub objects: u32,
    /// What could not be read or shown, in words.
    pub notes: Vec<String>,
}

struct Commit {
    tree: String,
    parents: Vec<String>,
    author: String,
    subject: String,
}

fn parse_commit(data: &[u8]) -> Option<Commit> {
    let text = String::from_utf8_lossy(data);
    let (head, message) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut commit = Commit {
        tree: String::new(),
        parents: Vec::new(),
        author: String::new(),
        subject: message.lines().next().unwrap_or("").trim().to_owned(),
    };
    for line in head.lines() {
        if let Some(tree) = line.strip_prefix("tree ") {
            commit.tree = tree.trim().to_owned();
        } else if let Some(parent) = line.strip_prefix("parent ") {
            commit.parents.push(parent.trim().to_owned());
        } else if let Some(author) = line.strip_prefix("author ") {
            // `Name <email> SECONDS TZ`
            commit.author = match author.rfind('>') {
                Some(end) => author[..=end].to_owned(),
                None => author.to_owned(),
            };
        }
    }
    (!commit.tree.is_empty()).then_some(commit)
}

struct Entry {
    name: String,
    is_tree: bool,
    id: String,
}

fn parse_tree(data: &[u8]) -> Option<Vec<Entry>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let space = at + data[at..].iter().position(|&b| b == b' ')?;
        let nul = space + data[space..].iter().position(|&b| b == 0)?;
        let id = data.get(nul + 1..nul + 21)?;
        let mode = &data[at..space];
        out.push(Entry {
            name: String::from_utf8_lossy(&data[space + 1..nul]).into_owned(),
            is_tree: mode == b"40000" || mode == b"040000",
            id: hex(id),
        });
        at = nul + 21;
    }
    Some(out)
}

/// A path over the push: its oldest change, the blob before it, the blob after the
/// newest change, and the newest change.
type Span = (Change, Option<String>, Option<String>, Change);

/// A raw change: path, how, older and newer blob ids.
type Raw = (String, Change, Option<String>, Option<String>);

struct Walker<'p> {
    pack: &'p Pack,
    changes: Vec<Raw>,
    notes: HashSet<String>,
}

impl Walker<'_> {
    fn tree(&self, id: &str) -> Option<Vec<Entry>> {
        match self.pack.get(id) {
            Some((Kind::Tree, data)) => parse_tree(data),
            _ => None,
        }
    }

    /// Every blob under tree `id` at `prefix`, as `change` (added or deleted).
    fn all(&mut self, prefix: &str, id: &str, change: Change) {
        let Some(entries) = self.tree(id) else {
            self.notes.insert(format!(
                "paths under {prefix}/ are not listed: that tree is not in the pack"
            ));
            return;
        };
        for e in entries {
            let path = join(prefix, &e.name);
            if e.is_tree {
                self.all(&path, &e.id, change);
            } else if change == Change::Deleted {
                self.push(path, change, Some(e.id), None);
            } else {
                self.push(path, change, None, Some(e.id));
            }
        }
    }

    fn push(&mut self, path: String, change: Change, old: Option<String>, new: Option<String>) {
        if self.changes.len() < MAX_PATHS * 4 {
            self.changes.push((path, change, old, new));
        }
    }

    /// Changes from tree `old` (`None`: no such tree) to tree `new`, at `prefix`.
    fn diff(&mut self, prefix: &str, old: Option<&str>, new: &str) {
        if old == Some(new) {
            return;
        }
        let Some(new_entries) = self.tree(new) else {
            // The server has this tree: nothing new under it.
            return;
        };
        let Some(old) = old else {
            return self.all(prefix, new, Change::Added);
        };
        let Some(old_entries) = self.tree(old) else {
            // The older tree is on the server only: what the pack holds is new.
            for e in new_entries {
                if self.pack.get(&e.id).is_none() {
                    continue;
                }
                let path = join(prefix, &e.name);
                if e.is_tree {
                    self.diff_against_server(&path, &e.id);
                } else {
                    self.push(path, Change::Changed, None, Some(e.id));
                }
            }
            return;
        };
        let mut names: BTreeMap<&str, (Option<&Entry>, Option<&Entry>)> = BTreeMap::new();
        for e in &old_entries {
            names.entry(&e.name).or_default().0 = Some(e);
        }
        for e in &new_entries {
            names.entry(&e.name).or_default().1 = Some(e);
        }
        for (name, sides) in names {
            let path = join(prefix, name);
            match sides {
                (Some(a), Some(b)) if a.id == b.id => {}
                (Some(a), Some(b)) if a.is_tree && b.is_tree => {
                    self.diff(&path, Some(&a.id), &b.id)
                }
                (Some(a), Some(b)) if !a.is_tree && !b.is_tree => self.push(
                    path,
                    Change::Modified,
                    Some(a.id.clone()),
                    Some(b.id.clone()),
                ),
                (old, new) => {
                    if let Some(a) = old {
                        if a.is_tree {
                            self.all(&path, &a.id, Change::Deleted);
                        } else {
                            self.push(path.clone(), Change::Deleted, Some(a.id.clone()), None);
                        }
                    }
                    if let Some(b) = new {
                        if b.is_tree {
                            self.all(&path, &b.id, Change::Added);
                        } else {
                            self.push(path, Change::Added, None, Some(b.id.clone()));
                        }
                    }
                }
            }
        }
    }

    fn diff_against_server(&mut self, prefix: &str, new: &str) {
        // An unknown older tree: reuse `diff` with an id the pack cannot hold.
        self.diff(prefix, Some(ZERO_ID), new);
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Text lines of a blob, `None` for binary (a NUL in the first 8000 bytes, as git's
/// `buffer_is_binary`) or too many lines.
fn lines(data: &[u8]) -> Option<Vec<&[u8]>> {
    if data[..data.len().min(8000)].contains(&0) {
        return None;
    }
    let lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
    (lines.len() <= MAX_LINES).then_some(lines)
}

/// `(added, removed)` lines from `old` to `new`.
fn line_counts(old: &[&[u8]], new: &[&[u8]]) -> (u64, u64) {
    let head = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let (old, new) = (&old[head..], &new[head..]);
    let tail = old
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old, new) = (&old[..old.len() - tail], &new[..new.len() - tail]);
    let mut counts: std::collections::HashMap<&[u8], i64> = std::collections::HashMap::new();
    for line in old {
        *counts.entry(line).or_default() += 1;
    }
    let mut added = 0;
    for line in new {
        match counts.get_mut(line) {
            Some(n) if *n > 0 => *n -= 1,
            _ => added += 1,
        }
    }
    let removed: i64 = counts.values().filter(|n| **n > 0).sum();
    (added, removed as u64)
}

/// `(added, removed)` lines of a change, from the lines of its older and newer blob
/// (outer `None`: not in the pack; inner `None`: binary or too large).
fn counts(
    change: Change,
    old: Option<Option<Vec<&[u8]>>>,
    new: Option<Option<Vec<&[u8]>>>,
) -> (Option<u64>, Option<u64>) {
    match (change, old, new) {
        (Change::Added, _, Some(Some(n))) => (Some(n.len() as u64), Some(0)),
        (Change::Deleted, Some(Some(o)), _) => (Some(0), Some(o.len() as u64)),
        (Change::Deleted, None, _) => (Some(0), None),
        (Change::Modified, Some(Some(o)), Some(Some(n))) => {
            let (a, r) = line_counts(&o, &n);
            (Some(a), Some(r))
        }
        // The older side is on the server only: the lines it has now, removed unknown.
        (Change::Changed | Change::Modified, _, Some(Some(n))) => (Some(n.len() as u64), None),
        _ => (None, None),
    }
}

/// Reads what `push` changes from `pack`.
pub fn review(push: &PushRequest, pack: &Pack) -> PushReview {
    let mut out = PushReview {
        objects: pack.announced,
        ..PushReview::default()
    };
    let mut walker = Walker {
        pack,
        changes: Vec::new(),
        notes: HashSet::new(),
    };
    let mut seen = HashSet::new();
    let mut queue: VecDeque<String> = push
        .commands
        .iter()
        .filter(|c| c.new != ZERO_ID)
        .map(|c| c.new.clone())
        .collect();
    let mut per_commit: Vec<(usize, usize)> = Vec::new();
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let Some(commit) = pack
            .get(&id)
            .and_then(|(kind, data)| (kind == Kind::Commit).then(|| parse_commit(data)).flatten())
        else {
            continue;
        };
        if out.commits.len() >= MAX_COMMITS {
            walker
                .notes
                .insert(format!("only the first {MAX_COMMITS} commits are shown"));
            break;
        }
        let parent = commit.parents.first().cloned();
        let parent_tree =
            parent
                .as_deref()
                .map(|p| match pack.get(p).and_then(|(_, d)| parse_commit(d)) {
                    Some(parent) => parent.tree,
                    // The parent is on the server: so is its tree.
                    None => ZERO_ID.to_owned(),
                });
        if commit.parents.len() > 1 {
            walker
                .notes
                .insert("merge commits are compared with their first parent".to_owned());
        }
        if pack.get(&commit.tree).is_none() && parent_tree.as_deref() != Some(commit.tree.as_str())
        {
            walker.notes.insert(format!(
                "commit {} has a tree the server already has: its changes are not listed",
                &id[..7]
            ));
        }
        let start = walker.changes.len();
        walker.diff("", parent_tree.as_deref(), &commit.tree);
        per_commit.push((start, walker.changes.len()));
        out.commits.push(CommitInfo {
            id: id.clone(),
            author: commit.author,
            subject: commit.subject,
            paths: Vec::new(),
        });
        queue.extend(commit.parents);
    }
    let blob = |id: &Option<String>| -> Option<Option<Vec<&[u8]>>> {
        let (_, data) = pack.get(id.as_deref()?)?;
        Some(lines(data))
    };
    for (commit, (start, end)) in out.commits.iter_mut().zip(&per_commit) {
        let mut paths: Vec<PathStat> = walker.changes[*start..*end]
            .iter()
            .map(|(path, change, old, new)| {
                let (added, removed) = counts(*change, blob(old), blob(new));
                PathStat {
                    path: path.clone(),
                    change: *change,
                    added,
                    removed,
                }
            })
            .collect();
        paths.sort_by(|a, b| a.path.cmp(&b.path));
        paths.dedup_by(|a, b| a.path == b.path);
        commit.paths = paths;
    }
    // Over the push: each path's state before its oldest change and after its newest
    // (commits are walked newest first, so the last change seen is the oldest).
    let mut range: BTreeMap<&str, Span> = BTreeMap::new();
    for (start, end) in &per_commit {
        for (path, change, old, new) in &walker.changes[*start..*end] {
            range
                .entry(path.as_str())
                .and_modify(|e| {
                    e.0 = *change;
                    e.1 = old.clone();
                })
                .or_insert((*change, old.clone(), new.clone(), *change));
        }
    }
    let mut stats: BTreeMap<String, PathStat> = BTreeMap::new();
    for (path, (first, before, after, last)) in range {
        let change = match (first, last) {
            (Change::Added, Change::Deleted) => continue,
            (_, Change::Deleted) => Change::Deleted,
            (Change::Added, _) => Change::Added,
            (Change::Changed, _) => Change::Changed,
            _ => Change::Modified,
        };
        let (before, after) = match change {
            Change::Added => (None, after),
            Change::Deleted => (before, None),
            _ => (before, after),
        };
        let (added, removed) = counts(change, blob(&before), blob(&after));
        stats.insert(
            path.to_owned(),
            PathStat {
                path: path.to_owned(),
                change,
                added,
                removed,
            },
        );
    }
    out.paths = stats.into_values().take(MAX_PATHS).collect();
    if out.paths.iter().any(|p| p.change == Change::Changed) {
        walker.notes.insert(
            "A/M paths: the previous version is on the server, not in the pack, so lines removed and deleted paths are not known".to_owned(),
        );
    }
    if !pack.unresolved.is_empty() {
        walker.notes.insert(format!(
            "{} object(s) not readable (diff not available: thin pack delta against base {}); a path whose new content is such a delta is listed only where its older version is in the pack",
            pack.unresolved.len(),
            short(&pack.unresolved[0])
        ));
    }
    if let Some(error) = &pack.error {
        walker.notes.insert(format!("diff incomplete: {error}"));
    }
    let wanted = push.commands.iter().filter(|c| c.new != ZERO_ID).count();
    if out.commits.is_empty() && wanted > 0 && pack.error.is_none() {
        walker
            .notes
            .insert("no pushed commit is in the pack (the server has them)".to_owned());
    }
    let mut notes: Vec<String> = walker.notes.into_iter().collect();
    notes.sort();
    out.notes = notes;
    out
}

fn short(id: &str) -> &str {
    if id.len() == 40 {
        &id[..7]
    } else {
        id
    }
}

impl PushReview {
    /// One line for the effect summary: `'subject' (Author <a@b>), …; 3 path(s)
    /// changed: a.txt +3 -0, …`, cut to about `max` characters.
    pub fn line(&self, max: usize) -> String {
        let commits: Vec<String> = self
            .commits
            .iter()
            .map(|c| format!("'{}' ({})", super::super::excerpt(&c.subject, 50), c.author))
            .collect();
        let paths: Vec<String> = self
            .paths
            .iter()
            .map(|p| format!("{} {}", p.path, p.stat()))
            .collect();
        let mut out = commits.join(", ");
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&format!("{} path(s) changed", self.paths.len()));
        if !paths.is_empty() {
            out.push_str(&format!(": {}", paths.join(", ")));
        }
        if let Some(note) = self
            .notes
            .iter()
            .find(|n| n.contains("thin pack") || n.contains("incomplete"))
        {
            out.push_str(&format!(" ({note})"));
        }
        if out.chars().count() > max {
            out = out.chars().take(max).collect();
            out.push('…');
        }
        out
    }

    /// The review as JSON for the admin API: `{commits: [{id, author, subject, paths}],
    /// paths: [{path, change, added, removed}], objects, notes}`.
    pub fn to_json(&self) -> Value {
        json!({
            "commits": self.commits.iter().map(|c| json!({"id": c.id, "author": c.author, "subject": c.subject, "paths": c.paths.iter().map(PathStat::to_json).collect::<Vec<_>>()})).collect::<Vec<_>>(),
            "paths": self.paths.iter().map(PathStat::to_json).collect::<Vec<_>>(),
            "objects": self.objects,
            "notes": self.notes,
        })
    }
}

impl PathStat {
    /// `{path, change, added, removed}`; `change` is `A`, `M`, `D` or `A/M` (added or
    /// changed: the previous version is on the server); a count is `null` when unknown.
    pub fn to_json(&self) -> Value {
        json!({"path": self.path, "change": self.change.letter(), "added": self.added, "removed": self.removed})
    }

    /// `+3 -1`, `+3 -?` (removed lines unknown: `+3` is then the lines it has now) or
    /// `(binary or too large)`.
    pub fn stat(&self) -> String {
        match (self.added, self.removed) {
            (Some(a), Some(r)) => format!("+{a} -{r}"),
            (Some(a), None) => format!("+{a} -?"),
            _ => "(binary or too large)".to_owned(),
        }
    }
}
