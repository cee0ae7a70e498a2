//! User namespaces mapped from outside and idmapped mounts: what lets root's fence run the
//! command as a non-zero host uid while it still owns the files it sees
//! (docs/containment.md, "Root inside the fence").
//!
//! A mapping is written into `/proc/PID/uid_map` and `gid_map` by a process of the
//! parent user namespace (user_namespaces(7)): root may map any range, which is how the
//! fence maps its user namespace's ids 1… to the subordinate range. An idmapped mount
//! (`mount_setattr(2)` with `MOUNT_ATTR_IDMAP`, Linux 5.12+) shows a filesystem's ids
//! through a user namespace's mapping, so a file the host sees owned by root is seen
//! inside owned by the command's root, and a file the command creates is written with
//! the host id its own maps back to.

use std::os::fd::{AsFd as _, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::FenceError;

/// How long a mapping may take to appear (it is written within milliseconds).
const MAP_WAIT: Duration = Duration::from_secs(10);

/// Host ids `start..start + count`: the range the fence maps its ids 1… onto, and the
/// command's ids 0… (in units of ids; `count` at most 65,536).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    /// The first host id.
    pub start: u32,
    /// How many ids.
    pub count: u32,
}

/// The range used when `/etc/subuid` (or `/etc/subgid`) gives root none: 100000–165535,
/// the range `useradd` hands the first user, which no system account uses.
pub const DEFAULT_RANGE: Range = Range {
    start: 100_000,
    count: 65_536,
};

/// Root's first subordinate range in `file` (`/etc/subuid` or `/etc/subgid`, subuid(5):
/// `NAME_OR_ID:START:COUNT` lines, for `root` or `0`), at most 65,536 ids and never one
/// that starts at 0; [`DEFAULT_RANGE`] when the file gives none.
pub fn subordinate(file: &Path) -> Range {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim().split(':');
            let (who, start, count) = (fields.next()?, fields.next()?, fields.next()?);
            if who != "root" && who != "0" {
                return None;
            }
            let (start, count) = (start.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
            (start > 0 && count > 0).then(|| Range {
                start,
                count: count.min(65_536),
            })
        })
        .next()
        .unwrap_or(DEFAULT_RANGE)
}

/// `uid_map` lines (`INSIDE OUTSIDE COUNT`) that show the ids `0..range.count` of a
/// filesystem as `range`, with `owner` and 0 swapped: a file `owner` owns is seen as
/// owned by the range's first id (the command's root), and what the command's root
/// creates is written as `owner`. Without `owner` (or with 0) it is the plain shift.
pub fn swapped(owner: u32, range: Range) -> String {
    let Range { start, count } = range;
    if owner == 0 {
        return format!("0 {start} {count}\n");
    }
    if owner >= count {
        // The owner is outside the shifted ids: map it alone, and leave 0 unmapped.
        let mut lines = format!("{owner} {start} 1\n");
        if count > 1 {
            lines.push_str(&format!("1 {} {}\n", start + 1, count - 1));
        }
        return lines;
    }
    let mut lines = format!("{owner} {start} 1\n0 {} 1\n", start + owner);
    if owner > 1 {
        lines.push_str(&format!("1 {} {}\n", start + 1, owner - 1));
    }
    if owner + 1 < count {
        lines.push_str(&format!(
            "{} {} {}\n",
            owner + 1,
            start + owner + 1,
            count - owner - 1
        ));
    }
    lines
}

fn own_userns() -> Result<std::path::PathBuf, FenceError> {
    std::fs::read_link("/proc/self/ns/user")
        .map_err(|e| FenceError::Setup(format!("cannot read /proc/self/ns/user: {e}")))
}

/// Waits until process `pid` is in a user namespace other than this process's (it has
/// called unshare(2)).
///
/// # Errors
/// [`FenceError::Setup`] when it exits first or does not within 10 s.
pub fn wait_for_userns(pid: u32) -> Result<(), FenceError> {
    let own = own_userns()?;
    let started = Instant::now();
    loop {
        match std::fs::read_link(format!("/proc/{pid}/ns/user")) {
            Ok(theirs) if theirs != own => return Ok(()),
            Ok(_) if started.elapsed() < MAP_WAIT => std::thread::sleep(Duration::from_micros(200)),
            Ok(_) => {
                return Err(FenceError::Setup(format!(
                    "process {pid} made no user namespace within {MAP_WAIT:?}"
                )))
            }
            Err(e) => {
                return Err(FenceError::Setup(format!(
                    "process {pid} ended before its user namespace could be mapped: {e}"
                )))
            }
        }
    }
}

/// Writes `gid_map` then `uid_map` of process `pid`'s user namespace.
///
/// # Errors
/// [`FenceError::Setup`] with the kernel's refusal.
pub fn write_maps(pid: u32, uids: &str, gids: &str) -> Result<(), FenceError> {
    for (file, lines) in [("gid_map", gids), ("uid_map", uids)] {
        let path = format!("/proc/{pid}/{file}");
        std::fs::write(&path, lines).map_err(|e| {
            FenceError::Setup(format!("cannot write {path} ({}): {e}", lines.trim()))
        })?;
    }
    Ok(())
}

/// Waits until this process's user namespace has a uid mapping (written from outside).
///
/// # Errors
/// [`FenceError::Setup`] when none appears within 10 s.
pub fn wait_for_own_map() -> Result<(), FenceError> {
    let started = Instant::now();
    loop {
        let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        if !map.trim().is_empty() {
            return Ok(());
        }
        if started.elapsed() > MAP_WAIT {
            return Err(FenceError::Setup(format!(
                "no uid mapping was written for the fence within {MAP_WAIT:?}"
            )));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether this process holds any effective capability (`CapEff` of
/// `/proc/self/status` is not zero).
pub fn capable() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .is_some_and(|caps| caps.trim().chars().any(|c| c != '0'))
    })
}

/// A user namespace with these mappings, held by its descriptor: a short-lived
/// `unshare --user cat` makes it, is mapped from here (as root), and is killed once its
/// `/proc/PID/ns/user` is open.
///
/// # Errors
/// [`FenceError::Setup`] when `unshare` cannot run or the mapping is refused.
pub fn userns(uids: &str, gids: &str) -> Result<OwnedFd, FenceError> {
    let mut child = Command::new(crate::host::tool("unshare"))
        .args(["--user", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| FenceError::Setup(format!("cannot run unshare: {e}")))?;
    let result = (|| {
        wait_for_userns(child.id())?;
        write_maps(child.id(), uids, gids)?;
        let ns = std::fs::File::open(format!("/proc/{}/ns/user", child.id()))
            .map_err(|e| FenceError::Setup(format!("cannot open a user namespace: {e}")))?;
        Ok(OwnedFd::from(ns))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// A detached copy of the mount at `path` (with every mount under it when `recursive`),
/// shown through `userns`'s mapping.
///
/// # Errors
/// [`FenceError::Setup`] naming the path and the kernel's refusal (`EINVAL` for a
/// filesystem without idmapped mounts, such as overlayfs).
pub fn idmapped(path: &Path, userns: &OwnedFd, recursive: bool) -> Result<OwnedFd, FenceError> {
    use rustix::mount::{open_tree, OpenTreeFlags};
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    let tree = open_tree(rustix::fs::CWD, path, flags)
        .map_err(|e| FenceError::Setup(format!("cannot copy the mount {}: {e}", path.display())))?;
    airlock_sys::mount_setattr(
        tree.as_fd(),
        recursive,
        airlock_sys::MOUNT_ATTR_IDMAP,
        Some(userns.as_fd()),
    )
    .map_err(|e| {
        FenceError::Setup(format!(
            "the kernel refused an idmapped mount of {}: {e}",
            path.display()
        ))
    })?;
    Ok(tree)
}

/// Attaches a detached mount (`open_tree`'s) at `target`.
///
/// # Errors
/// [`FenceError::Setup`] with the kernel's refusal.
pub fn attach(tree: &OwnedFd, target: &Path) -> Result<(), FenceError> {
    use rustix::mount::{move_mount, MoveMountFlags};
    move_mount(
        tree.as_fd(),
        "",
        rustix::fs::CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| FenceError::Setup(format!("cannot mount over {}: {e}", target.display())))
}

/// Whether this kernel and the filesystems of `paths` take idmapped mounts (probe, as
/// root): each is copied detached and idmapped through a throwaway mapping, and nothing
/// is attached.
///
/// # Errors
/// The first refusal, naming the path.
pub fn probe(paths: &[&Path]) -> Result<(), FenceError> {
    let ns = userns(
        &format!("0 {} 1\n", DEFAULT_RANGE.start),
        &format!("0 {} 1\n", DEFAULT_RANGE.start),
    )?;
    for path in paths {
        idmapped(path, &ns, false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_shifted_and_an_owner_is_swapped_with_it() {
        let range = Range {
            start: 100_000,
            count: 65_536,
        };
        assert_eq!(swapped(0, range), "0 100000 65536\n");
        assert_eq!(
            swapped(1000, range),
            "1000 100000 1\n0 101000 1\n1 100001 999\n1001 101001 64535\n"
        );
        assert_eq!(
            swapped(1, range),
            "1 100000 1\n0 100001 1\n2 100002 65534\n"
        );
        assert_eq!(swapped(70_000, range), "70000 100000 1\n1 100001 65535\n");
    }

    #[test]
    fn subordinate_ranges_come_from_roots_line() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("subuid");
        std::fs::write(&file, "alice:165536:65536\nroot:231072:65536\n").expect("write");
        assert_eq!(
            subordinate(&file),
            Range {
                start: 231_072,
                count: 65_536
            }
        );
        std::fs::write(&file, "alice:165536:65536\n").expect("write");
        assert_eq!(subordinate(&file), DEFAULT_RANGE);
        assert_eq!(subordinate(&dir.path().join("none")), DEFAULT_RANGE);
    }
}
