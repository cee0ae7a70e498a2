//! Processes left running and the TCP sockets they listen on, read from `/proc`: every
//! process of the fence's PID namespace but PID 1 (zombies excepted) when a fenced command
//! ends, and the processes `airlock run --network env` finds by their run's
//! environment ([`processes`]).

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// A process the command left running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leftover {
    /// Its PID (inside the fence, for a fenced command).
    pub pid: u32,
    /// Its command line.
    pub command: String,
    /// `IP:PORT` (`[IPv6]:PORT`) of the TCP sockets it listens on.
    pub listening: Vec<String>,
}

/// Whether `pid` is a zombie (exited, not yet reaped): field 3 of its `stat` is `Z`.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// `local_address` of `/proc/net/tcp{,6}` (`0100007F:1F90`) as `IP:PORT`. The kernel
/// prints each 32-bit word of the address in host byte order (little-endian on x86 and
/// arm).
fn socket_address(hex: &str, v6: bool) -> String {
    let (ip, port) = hex.split_once(':').unwrap_or((hex, "0"));
    let port = u16::from_str_radix(port, 16).unwrap_or(0);
    let word = |i: usize| {
        ip.get(i * 8..i * 8 + 8)
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .unwrap_or(0)
            .swap_bytes()
    };
    if v6 {
        let mut bytes = [0u8; 16];
        for i in 0..4 {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i).to_be_bytes());
        }
        format!("[{}]:{port}", Ipv6Addr::from(bytes))
    } else {
        format!("{}:{port}", Ipv4Addr::from(word(0)))
    }
}

/// Socket inodes in LISTEN state, with their local address. Reading walks the kernel's
/// whole TCP table (~20 ms on a large host), so callers read it only when there is a
/// process to describe.
fn listening_sockets() -> HashMap<String, String> {
    let mut out = HashMap::new();
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

/// `pid`'s command line and listening sockets (those in `skip` left out).
fn describe(pid: u32, sockets: &HashMap<String, String>, skip: &[String]) -> Leftover {
    let dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    let command = std::fs::read(dir.join("cmdline"))
        .map(|c| {
            String::from_utf8_lossy(&c)
                .split('\0')
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let mut listening: Vec<String> = std::fs::read_dir(dir.join("fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|target| {
            let text = target.to_string_lossy().into_owned();
            let inode = text.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned();
            sockets.get(&inode).cloned()
        })
        .filter(|addr| !skip.contains(addr))
        .collect();
    listening.sort();
    listening.dedup();
    Leftover {
        pid,
        command,
        listening,
    }
}

/// The live processes `keep` selects, by PID, each described; empty without `/proc`.
fn select(keep: impl Fn(u32) -> bool, skip: &[String]) -> Vec<Leftover> {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| !is_zombie(*pid) && keep(*pid))
        .collect();
    if pids.is_empty() {
        return Vec::new();
    }
    let sockets = listening_sockets();
    let mut out: Vec<Leftover> = pids
        .into_iter()
        .map(|pid| describe(pid, &sockets, skip))
        .collect();
    out.sort_by_key(|l| l.pid);
    out
}

/// Processes of the fence other than PID 1, from `/proc` (the fence mounts its own). The
/// relay's own listeners (`own_listeners`) are left out of `listening`.
pub(crate) fn scan(own_listeners: &[String]) -> Vec<Leftover> {
    select(|pid| pid != 1, own_listeners)
}

/// Processes other than this one whose environment holds `marker` (`AIRLOCK_RUN=RUN`):
/// what a command run without a fence left running. Linux only (`/proc`).
pub fn processes(marker: &str) -> Vec<Leftover> {
    let own = std::process::id();
    select(
        |pid| {
            pid != own
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        },
        &[],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_addresses_read_in_host_byte_order() {
        assert_eq!(socket_address("0100007F:1F90", false), "127.0.0.1:8080");
        assert_eq!(
            socket_address("00000000000000000000000001000000:0050", true),
            "[::1]:80"
        );
    }
}
