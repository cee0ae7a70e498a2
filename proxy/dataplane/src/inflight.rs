//! Reads in flight, marked on disk so that a crash cannot hide them (issue 38 item 5): a
//! read is journaled when its response ends, so one cut off by a SIGKILL or a power cut
//! leaves no record at all, although what it carried may already be in the agent's hands
//! and in an effect staged meanwhile. While the policy has flows, each run with a read
//! streaming is marked in `DATA/reads-in-flight.log` (a `+RUN` line, one `write(2)` to
//! the kernel, which survives the process being killed) and unmarked (`-RUN`) by a sweep
//! once a second after its last read ended. At the next start [`InFlightReads::open`]
//! returns the runs still marked, and the server flags each `lineage_incomplete`
//! ([`crate::gaps`]), after which flows hold its effects as `unanalysed`. The cost on the
//! pass path is a counter under a lock, and one line per run per second at most.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use airlock_ledger::RunId;
use tracing::warn;

/// The file's name in the data directory.
pub const FILE: &str = "reads-in-flight.log";

/// How often runs whose reads all ended are unmarked.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The marks of one data directory.
#[derive(Debug)]
pub struct InFlightReads {
    file: Mutex<File>,
    /// Per run: reads streaming now, and whether the run is marked in the file.
    runs: Mutex<HashMap<RunId, usize>>,
    /// Runs marked in the file.
    marked: Mutex<HashSet<RunId>>,
}

/// One read in flight, counted until dropped.
#[derive(Debug)]
pub struct InFlightGuard {
    marks: Arc<InFlightReads>,
    run: RunId,
}

impl InFlightReads {
    /// Opens the marks in `dir` (created when missing) and starts the sweep. Returns them
    /// with the runs the previous process left marked (a read of theirs was cut off), and
    /// empties the file.
    ///
    /// Errors: the file cannot be read, emptied or opened for appending.
    pub fn open(dir: &Path) -> io::Result<(Arc<Self>, Vec<RunId>)> {
        let path = dir.join(FILE);
        let mut text = String::new();
        match File::open(&path) {
            Ok(mut file) => {
                file.read_to_string(&mut text)?;
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let mut left: Vec<RunId> = Vec::new();
        for line in text.lines() {
            if let Some(run) = line.strip_prefix('+') {
                let run = RunId(run.to_owned());
                if !left.contains(&run) {
                    left.push(run);
                }
            } else if let Some(run) = line.strip_prefix('-') {
                left.retain(|r| r.0 != run);
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)?;
        drop(file);
        let file = OpenOptions::new().append(true).open(&path)?;
        let marks = Arc::new(Self {
            file: Mutex::new(file),
            runs: Mutex::default(),
            marked: Mutex::default(),
        });
        sweep_in_background(Arc::downgrade(&marks));
        Ok((marks, left))
    }

    /// Counts a read of `run` in flight until the guard is dropped; marks the run first
    /// when it is not marked yet.
    pub fn enter(self: &Arc<Self>, run: &RunId) -> InFlightGuard {
        *self
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(run.clone())
            .or_insert(0) += 1;
        let mut marked = self.marked.lock().unwrap_or_else(|e| e.into_inner());
        if !marked.contains(run) {
            // Before the read is forwarded: a crash from here on finds the mark.
            if self.append(&format!("+{}\n", run.0)) {
                marked.insert(run.clone());
            }
        }
        InFlightGuard {
            marks: self.clone(),
            run: run.clone(),
        }
    }

    /// Unmarks every marked run with no read in flight.
    pub fn sweep(&self) {
        let idle: Vec<RunId> = {
            let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            let marked = self.marked.lock().unwrap_or_else(|e| e.into_inner());
            marked
                .iter()
                .filter(|run| runs.get(*run).is_none_or(|n| *n == 0))
                .cloned()
                .collect()
        };
        for run in idle {
            let mut marked = self.marked.lock().unwrap_or_else(|e| e.into_inner());
            let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            if runs.get(&run).is_none_or(|n| *n == 0) && self.append(&format!("-{}\n", run.0)) {
                marked.remove(&run);
            }
        }
        self.runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, n| *n > 0);
    }

    fn append(&self, line: &str) -> bool {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match file.write_all(line.as_bytes()) {
            Ok(()) => true,
            Err(error) => {
                warn!(error = %error, "cannot mark reads in flight; a crash now could hide a cut-off read");
                false
            }
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut runs = self.marks.runs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = runs.get_mut(&self.run) {
            *n = n.saturating_sub(1);
        }
    }
}

fn sweep_in_background(marks: Weak<InFlightReads>) {
    let spawned = std::thread::Builder::new()
        .name("reads-in-flight".into())
        .spawn(move || loop {
            std::thread::sleep(SWEEP_EVERY);
            let Some(marks) = marks.upgrade() else {
                return;
            };
            marks.sweep();
        });
    if let Err(error) = spawned {
        warn!(error = %error, "cannot start the reads-in-flight sweep; runs stay marked until restart");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_left_marked_is_returned_once_and_an_unmarked_one_is_not() {
        let dir = tempfile::tempdir().expect("dir");
        let (marks, left) = InFlightReads::open(dir.path()).expect("open");
        assert!(left.is_empty());
        let cut = RunId("run_cut".into());
        let done = RunId("run_done".into());
        let held = marks.enter(&cut);
        drop(marks.enter(&done));
        marks.sweep();
        // The process dies with `cut`'s read in flight.
        std::mem::forget(held);
        drop(marks);
        let (_marks, left) = InFlightReads::open(dir.path()).expect("reopen");
        assert_eq!(left, vec![cut]);
        let (_marks, left) = InFlightReads::open(dir.path()).expect("again");
        assert!(left.is_empty(), "returned once: {left:?}");
    }
}
