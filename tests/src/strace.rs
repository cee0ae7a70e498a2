//! strace for durability tests: attach to a running airlock, record its system calls in
//! order, and find which came before which.
//!
//! strace(1) with `-f` attaches every thread of the process; `-yy` prints file
//! descriptors with their paths (`12</data/ledger/db>`); one output file keeps the calls of
//! all threads in the order strace saw them. A call interrupted by another thread's is
//! printed as `name(args <unfinished ...>` at its entry and `<... name resumed>…) = ret`
//! at its exit; an uninterrupted one is one line. So each call has an entry position and
//! an exit position in the file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// A running `strace -f -p PID`, writing to a file; [`Strace::finish`] stops it and parses.
pub struct Strace {
    child: Child,
    out: PathBuf,
}

/// One system call as traced: its thread, name, arguments (as strace printed them),
/// return value, and its entry and exit positions in the trace.
#[derive(Debug, Clone)]
pub struct Call {
    /// The thread.
    pub tid: u32,
    /// The system call's name (`fdatasync`).
    pub name: String,
    /// Its arguments as strace printed them, without the parentheses.
    pub args: String,
    /// Its return value as printed (`0`, `-1 ENOSPC (No space left on device)`).
    pub ret: String,
    /// The line of its entry in the trace (0-based).
    pub entry: usize,
    /// The line of its exit (`usize::MAX` when the trace ended first).
    pub exit: usize,
}

/// Whether `strace` can be run here; false with a reason to print when it cannot.
pub fn available() -> Result<(), String> {
    match Command::new("strace").arg("-V").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("strace -V failed: {:?}", out.status)),
        Err(e) => Err(format!("strace is not installed ({e})")),
    }
}

impl Strace {
    /// Attaches to every thread of `pid`, tracing `calls` (strace's `-e trace=` list),
    /// strings up to `max_string` bytes, into `out`. Returns once strace has attached.
    ///
    /// Errors: strace cannot start or attach (no ptrace permission).
    pub fn attach(pid: u32, calls: &str, max_string: usize, out: &Path) -> anyhow::Result<Self> {
        let log = out.with_extension("stderr");
        let child = Command::new("strace")
            .args(["-f", "-yy", "-qq", "-e", "signal=none", "-s"])
            .arg(max_string.to_string())
            .arg("-e")
            .arg(format!("trace={calls}"))
            .arg("-o")
            .arg(out)
            .arg("-p")
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("spawn strace")?;
        let mut strace = Self {
            child,
            out: out.to_path_buf(),
        };
        // strace writes nothing when attached; its threads are stopped and resumed, so
        // wait until /proc shows each thread traced.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = strace.child.try_wait()? {
                bail!(
                    "strace exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if all_threads_traced(pid)? {
                return Ok(strace);
            }
            if Instant::now() > deadline {
                bail!("strace did not attach to {pid} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Detaches strace (SIGINT) and parses what it wrote.
    ///
    /// Errors: the trace cannot be read.
    pub fn finish(mut self) -> anyhow::Result<Vec<Call>> {
        // SIGINT makes strace detach and flush its output.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).context("read the trace")?;
        Ok(parse(&text))
    }
}

impl Drop for Strace {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether every thread of `pid` has a tracer (`TracerPid` in /proc/PID/task/*/status).
fn all_threads_traced(pid: u32) -> anyhow::Result<bool> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let status = std::fs::read_to_string(task?.path().join("status")).unwrap_or_default();
        let traced = status
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .is_some_and(|v| v.trim() != "0");
        if !traced {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Parses strace `-f` output (`TID name(args) = ret`, with `<unfinished ...>` and
/// `<... name resumed>` pairs) into calls ordered by entry. Lines of other shapes (exits,
/// signals) are skipped.
pub fn parse(text: &str) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    let mut open: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for (pos, line) in text.lines().enumerate() {
        let Some((tid, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(tid) = tid.trim().parse::<u32>() else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((name, tail)) = resumed.split_once(" resumed>") else {
                continue;
            };
            if let Some(index) = open.remove(&tid) {
                let call = &mut calls[index];
                if call.name == name {
                    let (args, ret) = split_ret(tail);
                    call.args.push_str(args);
                    call.ret = ret.to_owned();
                    call.exit = pos;
                }
            }
            continue;
        }
        let Some((name, tail)) = rest.split_once('(') else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(args) = tail.strip_suffix(" <unfinished ...>") {
            open.insert(tid, calls.len());
            calls.push(Call {
                tid,
                name: name.to_owned(),
                args: args.to_owned(),
                ret: String::new(),
                entry: pos,
                exit: usize::MAX,
            });
        } else {
            let (args, ret) = split_ret(tail);
            calls.push(Call {
                tid,
                name: name.to_owned(),
                args: args.to_owned(),
                ret: ret.to_owned(),
                entry: pos,
                exit: pos,
            });
        }
    }
    calls
}

/// `args)   = ret` -> (`args`, `ret`), at the last ` = ` (strace pads short calls with
/// spaces before it).
fn split_ret(tail: &str) -> (&str, &str) {
    match tail.rfind(" = ") {
        Some(at) => {
            let args = tail[..at].trim_end();
            (
                args.strip_suffix(')').unwrap_or(args),
                tail[at + 3..].trim(),
            )
        }
        None => (tail, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_unfinished_and_resumed_calls_of_one_thread() {
        let text = "10 fdatasync(5</d/db> <unfinished ...>\n\
                    11 writev(7<TCP:[1->2]>, [{iov_base=\"HTTP/1.1 202\", iov_len=12}], 1) = 12\n\
                    10 <... fdatasync resumed>)     = 0\n\
                    12 fsync(9</d>)         = 0\n";
        let calls = parse(text);
        assert_eq!(calls.len(), 3);
        assert_eq!(
            (calls[2].args.as_str(), calls[2].ret.as_str()),
            ("9</d>", "0")
        );
        assert_eq!(calls[0].name, "fdatasync");
        assert_eq!((calls[0].entry, calls[0].exit), (0, 2));
        assert_eq!(calls[0].ret, "0");
        assert_eq!(calls[1].name, "writev");
        assert!(calls[1].args.contains("202"));
    }
}
