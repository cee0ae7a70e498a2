//! What the command left running inside the fence: every process of the PID namespace but
//! PID 1 (zombies excepted), with the addresses it listens on.

use serde::{Deserialize, Serialize};

/// A process the command left running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leftover {
    /// Its PID inside the fence.
    pub pid: u32,
    /// Its command line.
    pub command: String,
    /// `IP:PORT` of the TCP sockets it listens on.
    pub listening: Vec<String>,
}

/// Whether `pid` is a zombie (exited, not yet reaped): field 3 of its `stat` is `Z`.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// `local_address` of `/proc/net/tcp` (`0100007F:1F90`) as `IP:PORT`.
fn socket_address(hex: &str) -> String {
    let (ip, port) = hex.split_once(':').unwrap_or((hex, "0"));
    let port = u16::from_str_radix(port, 16).unwrap_or(0);
    // The kernel prints the address in host byte order (little-endian on x86 and arm).
    let ip = std::net::Ipv4Addr::from(u32::from_str_radix(ip, 16).unwrap_or(0).swap_bytes());
    format!("{ip}:{port}")
}

fn listening() -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9 && fields[3] == "0A" {
                let addr = if v6 {
                    let port = fields[1].rsplit(':').next().unwrap_or("0");
                    format!("[::]:{}", u16::from_str_radix(port, 16).unwrap_or(0))
                } else {
                    socket_address(fields[1])
                };
                out.insert(fields[9].to_owned(), addr);
            }
        }
    }
    out
}

/// Processes of the fence other than PID 1 and `skip`, from `/proc` (the fence mounts its
/// own). The relay's own listeners are left out of `listening`.
pub(crate) fn scan(own_listeners: &[String]) -> Vec<Leftover> {
    // Listing sockets walks the kernel's whole TCP table (~20 ms): only when something
    // was left running.
    let any = std::fs::read_dir("/proc").is_ok_and(|dir| {
        dir.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|pid| pid != 1 && !is_zombie(pid))
        })
    });
    if !any {
        return Vec::new();
    }
    let sockets = listening();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == 1 {
            continue;
        }
        if is_zombie(pid) {
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
                sockets.get(&inode).cloned()
            })
            .filter(|addr| !own_listeners.contains(addr))
            .collect();
        listens.sort();
        listens.dedup();
        out.push(Leftover {
            pid,
            command,
            listening: listens,
        });
    }
    out.sort_by_key(|l| l.pid);
    out
}
