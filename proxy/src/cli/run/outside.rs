//! `--check-residue-outside PATHS`: what the command changed outside the workspace. These
//! paths are only watched, never snapshotted or restored: each path's kind, size, mode,
//! modification and change times and inode are compared before and after. Unreadable
//! entries are skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use airlock_ledger::Changes;

/// A path's kind, size, mode and modification time (ns), as text.
type Stamp = String;

fn stamp(metadata: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let kind = if metadata.file_type().is_symlink() {
        "link"
    } else if metadata.is_dir() {
        "dir"
    } else {
        "file"
    };
    let size = if metadata.is_dir() {
        0
    } else {
        metadata.size()
    };
    // ctime and the inode too: a command can reset mtime (`touch -d`), not ctime.
    format!(
        "{kind} {size} {:o} {}.{} {}.{} {}",
        metadata.mode() & 0o7777,
        metadata.mtime(),
        metadata.mtime_nsec(),
        metadata.ctime(),
        metadata.ctime_nsec(),
        metadata.ino()
    )
}

/// Stamps of every path under `roots` (absolute paths), at most `limit` of them.
pub(super) fn scan(
    roots: &[PathBuf],
    exclude: &[PathBuf],
    limit: usize,
) -> BTreeMap<String, Stamp> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = roots.to_vec();
    while let Some(path) = stack.pop() {
        if out.len() >= limit || exclude.iter().any(|e| path.starts_with(e)) {
            continue;
        }
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        out.insert(path.display().to_string(), stamp(&metadata));
        if metadata.is_dir() {
            if let Ok(listing) = std::fs::read_dir(&path) {
                stack.extend(listing.flatten().map(|e| e.path()));
            }
        }
    }
    out
}

/// Paths added, modified and deleted between two scans.
pub(super) fn diff(before: &BTreeMap<String, Stamp>, after: &BTreeMap<String, Stamp>) -> Changes {
    let mut changes = Changes::default();
    for (path, old) in before {
        match after.get(path) {
            None => changes.deleted.push(path.clone()),
            Some(new) if new != old && !old.starts_with("dir ") => {
                changes.modified.push(path.clone())
            }
            Some(_) => {}
        }
    }
    changes.added = after
        .keys()
        .filter(|p| !before.contains_key(*p))
        .cloned()
        .collect();
    changes
}

/// Where cron, at and systemd keep jobs and units a command could schedule to run later,
/// outside the run (and outside any fence): each that exists is watched by every `airlock
/// run`, and what changed under it is residue (docs/run.md, "Residue").
pub(super) fn schedule_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = [
        "/var/spool/cron",
        "/var/spool/at",
        "/var/spool/atjobs",
        "/etc/crontab",
        "/etc/cron.d",
        "/etc/cron.hourly",
        "/etc/cron.daily",
        "/etc/cron.weekly",
        "/etc/cron.monthly",
        "/etc/systemd/system",
        "/etc/systemd/user",
        "/usr/lib/systemd/system",
        "/usr/lib/systemd/user",
        "/etc/profile.d",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        roots.push(home.join(".config/systemd/user"));
        roots.push(home.join(".local/share/systemd/user"));
    }
    roots.retain(|root| root.exists());
    roots
}

/// Absolute forms of the paths given.
pub(super) fn absolute(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect()
}

/// `local_address` of `/proc/net/tcp{,6}` (`0100007F:1F90`) as text.
fn socket_address(hex: &str, v6: bool) -> String {
    let (ip, port) = hex.split_once(':').unwrap_or((hex, "0"));
    let port = u16::from_str_radix(port, 16).unwrap_or(0);
    if v6 {
        return format!("[…]:{port}");
    }
    let ip = u32::from_str_radix(ip, 16).unwrap_or(0);
    // The kernel prints the address in host byte order (little-endian on the hosts we run).
    let ip = std::net::Ipv4Addr::from(ip.swap_bytes());
    format!("{ip}:{port}")
}

/// Socket inodes in LISTEN state, with their local address.
fn listening_sockets() -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && fields[3] == "0A" {
                out.insert(fields[9].to_owned(), socket_address(fields[1], v6));
            }
        }
    }
    out
}

/// Processes still running that the command started (their environment carries
/// `AIRLOCK_RUN=run`), each as `pid PID: COMMAND LINE`, with the addresses it listens on.
/// Linux only (`/proc`); empty elsewhere.
pub(super) fn leftover_processes(run: &str) -> Vec<serde_json::Value> {
    let marker = format!("AIRLOCK_RUN={run}");
    let listening = listening_sockets();
    let own = std::process::id();
    let mut out = Vec::new();
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in proc_dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == marker.as_bytes()) {
            continue;
        }
        let command = std::fs::read(entry.path().join("cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .split('\0')
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let mut listens: Vec<String> = std::fs::read_dir(entry.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|target| {
                let text = target.to_string_lossy().into_owned();
                let inode = text.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned();
                listening.get(&inode).cloned()
            })
            .collect();
        listens.sort();
        listens.dedup();
        out.push(serde_json::json!({ "pid": pid, "command": command, "listening": listens }));
    }
    out
}
