//! Time limits of the workspace steps (snapshot, diff, rollback, keep, residue check) and
//! the bounded child processes of the `git` and `cmd` drivers.
//!
//! A [`Step`] carries its deadline and the path or command it is processing now. The
//! walkers check it at every path and every 64 KiB read, and a child process is killed
//! (its whole process group) when it passes, so a step that would wait forever ends with
//! [`SnapshotError::TimedOut`] naming the step and what it was doing. The workspace
//! decision also bounds each step's blocking task from outside (the deadline plus
//! [`GRACE`]) for a system call stuck in the kernel, which no check can interrupt.

use std::io::Read as _;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::SnapshotError;

/// Default time limit of one workspace step: 10 minutes (`--workspace-step-timeout`).
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// How long past its deadline a step's blocking task is awaited before the decision goes
/// on without it (it is then stuck in a system call).
pub const GRACE: Duration = Duration::from_secs(5);

/// One workspace step under a time limit: its name, deadline, and what it is doing now.
/// Clones share the "doing now" (the decision reads it when the task does not return).
#[derive(Debug, Clone)]
pub struct Step {
    name: &'static str,
    timeout: Duration,
    deadline: Instant,
    at: Arc<Mutex<String>>,
}

impl Step {
    /// Starts step `name` (`snapshot`, `diff`, `rollback`, `keep`, `residue check`), due
    /// `timeout` from now.
    pub fn new(name: &'static str, timeout: Duration) -> Self {
        Self {
            name,
            timeout,
            deadline: Instant::now() + timeout,
            at: Arc::new(Mutex::new(String::new())),
        }
    }

    /// The step's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The step's time limit.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Notes what the step processes now (a path, a command).
    pub fn at(&self, what: impl std::fmt::Display) {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        at.clear();
        std::fmt::Write::write_fmt(&mut *at, format_args!("{what}")).unwrap_or_default();
    }

    /// What the step processes now (empty before the first path).
    pub fn current(&self) -> String {
        self.at.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Time left before the deadline (zero once past it).
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Errors: [`SnapshotError::TimedOut`] once the deadline has passed.
    pub fn check(&self) -> Result<(), SnapshotError> {
        if Instant::now() >= self.deadline {
            return Err(self.timed_out());
        }
        Ok(())
    }

    /// The error of this step timing out, naming what it was processing.
    pub fn timed_out(&self) -> SnapshotError {
        let at = self.current();
        SnapshotError::TimedOut {
            step: self.name,
            secs: self.timeout.as_secs_f64(),
            at: if at.is_empty() {
                "(not started)".into()
            } else {
                at
            },
        }
    }
}

/// Runs `command` (stdin `input`, else empty; stdout and stderr captured) in a process
/// group of its own, and kills the group when `step`'s deadline passes. `what` names it
/// for the step and its errors (`git add -A -- .`, `the rollback command`).
///
/// Errors: [`SnapshotError::TimedOut`]; `Err(io)` when it cannot be started.
pub(super) fn output(
    mut command: Command,
    step: &Step,
    what: &str,
    input: Option<Vec<u8>>,
) -> Result<Result<Output, std::io::Error>, SnapshotError> {
    use std::os::unix::process::CommandExt as _;
    step.check()?;
    step.at(what);
    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Ok(Err(e)),
    };
    let group = rustix::process::Pid::from_child(&child);
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &input));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for (index, pipe) in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .enumerate()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = tx.send((index, bytes));
        });
    }
    drop(tx);
    let kill = |child: &mut std::process::Child| {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        let _ = child.kill();
        let _ = child.wait();
    };
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                kill(&mut child);
                return Ok(Err(e));
            }
        }
        if step.check().is_err() {
            kill(&mut child);
            return Err(step.timed_out());
        }
        std::thread::sleep(pause.min(step.remaining()));
        pause = (pause * 2).min(Duration::from_millis(50));
    };
    // What the command left in its group would hold the pipes open: it goes too.
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        match rx.recv_timeout(step.remaining()) {
            Ok((0, bytes)) => stdout = bytes,
            Ok((_, bytes)) => stderr = bytes,
            // A process that left the group still holds a pipe.
            Err(_) => return Err(step.timed_out()),
        }
    }
    Ok(Ok(Output {
        status,
        stdout,
        stderr,
    }))
}
