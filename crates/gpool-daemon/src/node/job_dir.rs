//! Directories the agent makes for a job and gives to its account (its
//! checkpoint directory, its pipeline run's directory), made without ever
//! following a symbolic link a user may have planted.
//!
//! `--checkpoint-root` may be a directory every user can write (a shared
//! file system's scratch space). Had the agent made `ROOT/job-7` with
//! `create_dir_all` and then `chown`ed and `chmod`ed that path, a user who
//! put a link `ROOT/job-7 -> /etc` there first would have been given
//! `/etc`. Here the directory is made and opened relative to its parent's
//! descriptor with `O_NOFOLLOW` (a link there is refused, never followed),
//! and its owner and mode are changed on that descriptor, which names the
//! directory that was checked and nothing a user could swap in between. A
//! directory that is already there must be root's or the job's account's:
//! someone else's is refused (it could hold their files or links).
//!
//! The two ways to fail are kept apart ([`DirError`]): what is at the path
//! is not the job's to use (the job fails, saying so), or the node ran out
//! of something or its disk failed (file descriptors, memory, room, a
//! read-only or failing file system): a fault of the node, after which the
//! job is requeued and the node held. Only those errors count as the node's:
//! any other (EACCES, ENOENT, EPERM...) can be caused by a user on a shared
//! `--checkpoint-root` (a directory of theirs the agent cannot open, renamed
//! away in a loop, on a file system where root is squashed), and counted as
//! the node's it would requeue the job and hold every node it lands on.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

/// Why a job's directory was not made.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// What is at the path is not the job's to use (a link, a file, someone
    /// else's directory, a swap while it was made): the job's doing or its
    /// neighbours', never the node's.
    #[error("{0}")]
    Refused(String),
    /// The node could not make it; the error keeps the system's kind.
    #[error("{0}")]
    Node(std::io::Error),
}

/// Whether an error says the node ran out of something or its disk failed
/// (nothing a user can cause at a path); see the module's comment.
fn node_fault(e: Errno) -> bool {
    matches!(e, Errno::MFILE | Errno::NFILE | Errno::NOMEM | Errno::IO | Errno::ROFS | Errno::NOSPC | Errno::DQUOT)
}

/// Makes (or finds) the directory `name` in `parent`, never following a
/// link at `name`, and gives it to `owner` (uid, gid) with `mode`; without
/// an owner it stays root's (the agent's) with `mode`.
pub fn make(parent: &Path, name: &str, owner: Option<(u32, u32)>, mode: u32) -> Result<(), DirError> {
    let at = || parent.join(name).display().to_string();
    let say = |what: String| DirError::Refused(format!("{}: {what}", at()));
    let fault = |what: &str, e: Errno| match node_fault(e) {
        true => DirError::Node(std::io::Error::new(std::io::Error::from(e).kind(), format!("{}: {what}: {e}", at()))),
        false => DirError::Refused(format!("{}: {what}: {e}", at())),
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(say("not a name of one directory".into()));
    }
    let dir = rustix::fs::open(parent, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| fault("cannot open its parent", e))?;
    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(fault("cannot make it", e)),
    }
    let fd: OwnedFd = rustix::fs::openat(
        &dir,
        name,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => {
            say("is a symbolic link or not a directory; gpool does not follow it, so the job cannot use it (remove it)"
                .into())
        }
        e => fault("cannot open it", e),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| fault("cannot read its owner", e))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me && owner.is_none_or(|(uid, _)| st.st_uid != uid) {
        return Err(say(format!(
            "belongs to uid {}, neither gpool's nor the job's account; gpool does not hand it over (remove it)",
            st.st_uid
        )));
    }
    if let Some((uid, gid)) = owner {
        rustix::fs::fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
            .map_err(|e| fault(&format!("cannot give it to uid {uid}"), e))?;
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| fault("cannot set its mode", e))?;
    // Not a mount point or link that moved meanwhile: the name still is this directory.
    let again = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|_| say("was removed while gpool made it; try again".into()))?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(say("was replaced while gpool made it; try again".into()));
    }
    Ok(())
}

/// A replica's directories: its pipeline run's `shared` one (with its
/// parent, DATA_DIR/pipelines, when `shared_in_data_dir`), its run
/// directory (the agent's) and its `checkpoint` one; `owner`'s where given.
pub fn make_for_job(
    shared: Option<&Path>,
    shared_in_data_dir: bool,
    run_dir: &Path,
    checkpoint: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(), DirError> {
    if let Some(d) = shared {
        if let Some(parent) = d.parent().filter(|_| shared_in_data_dir) {
            // DATA_DIR/pipelines: passable by the stages' accounts, not listable.
            make_path(parent, None, 0o711)?;
        }
        make_path(d, owner, 0o700)?;
    }
    // DATA_DIR/jobs is root's: any error there is the node's.
    std::fs::create_dir_all(run_dir).map_err(DirError::Node)?;
    make_path(checkpoint, owner, 0o700)
}

/// [`make`] for a path: its parent and last component.
pub fn make_path(path: &Path, owner: Option<(u32, u32)>, mode: u32) -> Result<(), DirError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(DirError::Refused(format!("{}: not a directory gpool can make", path.display())));
    };
    make(parent, name, owner, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("gpool-job-dir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch");
        d
    }

    #[test]
    fn only_running_out_or_a_failing_disk_is_the_nodes_fault() {
        // (errno, the node's fault): what a user can provoke at a path on a
        // shared root must fail the job, not requeue it and hold the node.
        let cases = [
            (Errno::MFILE, true),
            (Errno::NFILE, true),
            (Errno::NOMEM, true),
            (Errno::NOSPC, true),
            (Errno::DQUOT, true),
            (Errno::ROFS, true),
            (Errno::IO, true),
            (Errno::ACCESS, false),
            (Errno::PERM, false),
            (Errno::NOENT, false),
            (Errno::NOTDIR, false),
            (Errno::LOOP, false),
            (Errno::MLINK, false),
        ];
        for (e, want) in cases {
            assert_eq!(node_fault(e), want, "{e}");
        }
    }

    #[test]
    fn a_planted_link_is_refused_and_its_target_left_alone() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let root = scratch("link");
        let target = root.join("precious");
        std::fs::create_dir(&target).expect("target");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::os::unix::fs::symlink(&target, root.join("job-2")).expect("plant");
        let e = make(&root, "job-2", None, 0o700).expect_err("a link is refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let m = std::fs::metadata(&target).expect("target");
        assert_eq!(m.permissions().mode() & 0o777, 0o755, "the target's mode is untouched");
        // A file planted instead of a directory is refused too.
        std::fs::write(root.join("job-3"), b"x").expect("file");
        assert!(make(&root, "job-3", None, 0o700).is_err());
        // A directory of its own is made with its mode.
        make(&root, "job-4", None, 0o700).expect("made");
        let m = std::fs::metadata(root.join("job-4")).expect("made");
        assert!(
            m.is_dir() && m.permissions().mode() & 0o777 == 0o700 && m.uid() == rustix::process::geteuid().as_raw()
        );
        make(&root, "job-4", None, 0o711).expect("found again");
        assert!(make(&root, "../x", None, 0o700).is_err() && make(&root, "", None, 0o700).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
