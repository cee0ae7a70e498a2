//! `mount_setattr(2)` (Linux 5.12+), which rustix 1.1 does not wrap
//! (`rustix::not_implemented::yet::mount_setattr`), and which the fence needs to make
//! idmapped mounts (`MOUNT_ATTR_IDMAP`) and read-only trees (`MOUNT_ATTR_RDONLY` with
//! `AT_RECURSIVE`). It is the workspace's only `unsafe` code: one `syscall(2)` call whose
//! arguments are a borrowed descriptor, a static empty C string and a pointer to a
//! `struct mount_attr` that lives on the stack for the whole call.

use std::os::fd::{AsRawFd as _, BorrowedFd};

/// `MOUNT_ATTR_RDONLY` (linux/mount.h): the mount is read-only.
pub const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// `MOUNT_ATTR_NOSUID`: set-user-ID and set-group-ID bits are ignored.
pub const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
/// `MOUNT_ATTR_NODEV`: device files cannot be opened.
pub const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
/// `MOUNT_ATTR_IDMAP`: the mount's ids are shifted by a user namespace's mapping.
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr`, `MOUNT_ATTR_SIZE_VER0` (32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(mount, "", AT_EMPTY_PATH [| AT_RECURSIVE], {attr_set: set, userns_fd})`:
/// sets the attributes `set` (the `MOUNT_ATTR_*` constants) on the mount that `mount`
/// refers to (an `open_tree(2)` descriptor), and on every mount under it when
/// `recursive`. `userns` is the user namespace whose mapping `MOUNT_ATTR_IDMAP` applies
/// (required with it, ignored without).
///
/// # Errors
/// The kernel's: `EINVAL` when the filesystem does not support idmapped mounts (overlayfs
/// among them) or the mount is attached (an idmapping can only be set on a detached
/// mount: `OPEN_TREE_CLONE`), `EPERM` without `CAP_SYS_ADMIN` in the filesystem's user
/// namespace, `ENOSYS` before Linux 5.12.
pub fn mount_setattr(
    mount: BorrowedFd<'_>,
    recursive: bool,
    set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    #[allow(unsafe_code)]
    // SAFETY: `mount` is a live descriptor borrowed for the call; the path is a static
    // NUL-terminated empty string; `attr` is a properly laid out `struct mount_attr` that
    // outlives the call, and its size is passed with it. The kernel only reads them.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            mount.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
