//! The command's syscall filter (docs/containment.md, "The syscall filter"): set by
//! `airlock fence-exec` just before it executes the command, with `no_new_privs`, so the
//! command and everything it starts get it and cannot lift it.
//!
//! A deny list, as container runtimes' default profiles are: every call here fails with
//! `EPERM`, every other call is allowed. The list is of calls that act on the host's
//! kernel as a whole rather than on the command's own namespaces, or that widen the
//! kernel surface an agent can reach for no need of its own. The program is built by
//! `seccompiler` from the numbers; no BPF is written by hand.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use crate::FenceError;

/// The refused calls, each with why (the list docs/containment.md prints).
pub const REFUSED: &[(&str, i64, &str)] = &[
    ("init_module", libc::SYS_init_module, "loads code into the host's kernel"),
    ("finit_module", libc::SYS_finit_module, "loads code into the host's kernel"),
    ("delete_module", libc::SYS_delete_module, "unloads the host's kernel modules"),
    ("kexec_load", libc::SYS_kexec_load, "replaces the running kernel"),
    ("kexec_file_load", libc::SYS_kexec_file_load, "replaces the running kernel"),
    ("reboot", libc::SYS_reboot, "reboots or halts the machine"),
    ("bpf", libc::SYS_bpf, "loads programs into the kernel (a frequent privilege-escalation surface)"),
    ("perf_event_open", libc::SYS_perf_event_open, "observes other processes and the kernel; a frequent exploit surface"),
    ("keyctl", libc::SYS_keyctl, "the kernel keyring is not namespaced: keys of the host's users"),
    ("add_key", libc::SYS_add_key, "the kernel keyring is not namespaced"),
    ("request_key", libc::SYS_request_key, "the kernel keyring is not namespaced; may run a host upcall"),
    ("userfaultfd", libc::SYS_userfaultfd, "stalls the kernel at a chosen page fault, a standard exploit primitive"),
    ("open_by_handle_at", libc::SYS_open_by_handle_at, "opens a file by handle, past mount and path restrictions (the 'shocker' escape)"),
    ("name_to_handle_at", libc::SYS_name_to_handle_at, "makes handles for open_by_handle_at"),
    ("swapon", libc::SYS_swapon, "changes the host's swap"),
    ("swapoff", libc::SYS_swapoff, "changes the host's swap"),
    ("acct", libc::SYS_acct, "switches process accounting for the host"),
    ("settimeofday", libc::SYS_settimeofday, "sets the host's clock (time is not namespaced)"),
    ("clock_settime", libc::SYS_clock_settime, "sets the host's clock"),
    ("clock_adjtime", libc::SYS_clock_adjtime, "adjusts the host's clock"),
    ("syslog", libc::SYS_syslog, "reads and clears the kernel's log (kernel addresses)"),
    ("quotactl", libc::SYS_quotactl, "changes the host's disk quotas"),
    ("iopl", libc::SYS_iopl, "raw I/O port access"),
    ("ioperm", libc::SYS_ioperm, "raw I/O port access"),
    ("lookup_dcookie", libc::SYS_lookup_dcookie, "kernel profiling interface"),
    ("io_uring_setup", libc::SYS_io_uring_setup, "a large kernel surface with a record of escapes (refused by default by Docker and others); programs fall back to ordinary I/O"),
    ("io_uring_enter", libc::SYS_io_uring_enter, "as io_uring_setup"),
    ("io_uring_register", libc::SYS_io_uring_register, "as io_uring_setup"),
];

fn arch() -> Result<TargetArch, FenceError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| {
        FenceError::Setup(format!(
            "no syscall filter for {}: {e}",
            std::env::consts::ARCH
        ))
    })
}

/// The compiled filter: each call of [`REFUSED`] fails with `EPERM`.
///
/// # Errors
/// [`FenceError::Setup`] when seccompiler cannot build it (an architecture it lacks).
pub fn program() -> Result<BpfProgram, FenceError> {
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        REFUSED.iter().map(|(_, nr, _)| (*nr, Vec::new())).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch()?,
    )
    .map_err(|e| FenceError::Setup(format!("syscall filter: {e}")))?;
    BpfProgram::try_from(filter).map_err(|e| FenceError::Setup(format!("syscall filter: {e}")))
}

/// Sets `no_new_privs` and installs [`program`] on the calling thread (inherited by what
/// it executes and starts).
///
/// # Errors
/// [`FenceError::Setup`] when the kernel refuses either.
pub fn install() -> Result<(), FenceError> {
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| FenceError::Setup(format!("no_new_privs: {e}")))?;
    let program = program()?;
    seccompiler::apply_filter(&program)
        .map_err(|e| FenceError::Setup(format!("cannot install the syscall filter: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_builds_and_names_each_call_once() {
        let program = program().expect("filter");
        assert!(!program.is_empty());
        let names: std::collections::BTreeSet<_> = REFUSED.iter().map(|(n, _, _)| n).collect();
        assert_eq!(names.len(), REFUSED.len());
    }
}
