//! The `dir` driver's reflinks (issue #22, snapshots), on real XFS and btrfs filesystems
//! the tests make in loop images and mount: a snapshot of a 32 MiB file, and its restore,
//! share the file's blocks instead of copying them, seen as the filesystem's used space.
//! Needs root and `mkfs.xfs` / `mkfs.btrfs` (xfsprogs, btrfs-progs; skipped with a message
//! otherwise, except under CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Driver, Step, Store};

/// A filesystem with reflinks the tests make: `mkfs.NAME` and its arguments.
#[derive(Clone, Copy)]
enum Kind {
    Xfs,
    Btrfs,
}

impl Kind {
    fn mkfs(self) -> (&'static str, &'static [&'static str], &'static str) {
        match self {
            Kind::Xfs => ("mkfs.xfs", &["-q", "-m", "reflink=1"], "xfsprogs"),
            Kind::Btrfs => ("mkfs.btrfs", &["-q"], "btrfs-progs"),
        }
    }
}

/// A mounted loop image of one [`Kind`], unmounted and removed on drop.
struct Mounted {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl Mounted {
    fn new(kind: Kind) -> Option<Self> {
        let (mkfs, args, package) = kind.mkfs();
        let root = rustix::process::geteuid().is_root();
        let tool = Command::new(mkfs).arg("-V").output().is_ok();
        if !root || !tool {
            let why = format!("needs root ({root}) and {mkfs} from {package} ({tool})");
            assert!(std::env::var_os("CI").is_none(), "under CI this test {why}");
            eprintln!("skipped: {why}");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("mkdir");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(320 << 20))
            .expect("image");
        run(Command::new(mkfs).args(args).arg(&image));
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mount));
        Some(Self { _dir: dir, mount })
    }

    /// Bytes used on the filesystem, after a sync.
    fn used(&self) -> u64 {
        let file = std::fs::File::open(&self.mount).expect("open the mount");
        rustix::fs::fsync(&file).expect("sync");
        rustix::fs::syncfs(&file).expect("syncfs");
        let stat = rustix::fs::fstatvfs(&file).expect("statvfs");
        (stat.f_blocks - stat.f_bfree) * stat.f_frsize
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

fn run(command: &mut Command) {
    let out = command.output().expect("spawn");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn random_file(path: &Path, bytes: usize) {
    let mut content = vec![0u8; bytes];
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for chunk in content.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(path, content).expect("write");
}

#[test]
fn a_dir_snapshot_and_its_restore_reflink_on_xfs_instead_of_copying() {
    snapshot_and_restore_share_blocks(Kind::Xfs);
}

#[test]
fn a_dir_snapshot_and_its_restore_reflink_on_btrfs_instead_of_copying() {
    snapshot_and_restore_share_blocks(Kind::Btrfs);
}

fn snapshot_and_restore_share_blocks(kind: Kind) {
    let Some(fs) = Mounted::new(kind) else { return };
    let data = fs.mount.join("data");
    let ws = fs.mount.join("ws");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::create_dir_all(&ws).expect("mkdir");
    const SIZE: usize = 32 << 20;
    random_file(&ws.join("big.bin"), SIZE);
    let store = Store::new(&data);
    let step = |name| Step::new(name, Duration::from_secs(60));
    let excludes = [data.clone()];

    let before = fs.used();
    let manifest = store
        .take(
            Driver::Dir,
            &ws,
            "run_t",
            &excludes,
            None,
            &step("snapshot"),
        )
        .expect("snapshot");
    let grew = fs.used().saturating_sub(before);
    assert!(
        grew < (SIZE as u64) / 4,
        "the snapshot of a {SIZE}-byte file took {grew} bytes: it was copied, not reflinked"
    );

    std::fs::write(ws.join("big.bin"), b"overwritten by the run").expect("overwrite");
    let before = fs.used();
    let not_restored = store
        .restore(&manifest, &excludes, &step("rollback"))
        .expect("restore");
    assert!(not_restored.is_empty());
    let grew = fs.used().saturating_sub(before);
    assert!(
        grew < (SIZE as u64) / 4,
        "restoring a {SIZE}-byte file took {grew} bytes: it was copied, not reflinked"
    );
    let residue = store
        .residue(
            &manifest,
            &excludes,
            &Default::default(),
            &step("residue check"),
        )
        .expect("residue");
    assert!(residue.is_empty(), "{residue:?}");
    assert_eq!(
        std::fs::metadata(ws.join("big.bin")).expect("stat").len(),
        SIZE as u64
    );
}
