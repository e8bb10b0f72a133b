//! Local OCI images for the container tests: busybox-static in an
//! otherwise empty root file system, imported into podman (no registry, no
//! internet); removed at drop.

use std::process::Command;

use super::Scratch;

/// A local image holding only busybox and a file saying where it is; removed at drop.
pub struct Image(pub String);

impl Image {
    pub fn build(s: &Scratch) -> Image {
        Image::build_with(s, "1", 0)
    }

    /// An image tagged `tag`, holding `padding` more bytes of random data (a layer of its own size).
    pub fn build_with(s: &Scratch, tag: &str, padding: usize) -> Image {
        Image::build_from(s, tag, padding, &[])
    }

    /// An image tagged `tag` with `files` (path in the image, content, mode) added.
    pub fn build_from(s: &Scratch, tag: &str, padding: usize, files: &[(&str, &[u8], u32)]) -> Image {
        let tar = rootfs_tar(s, tag, padding, files);
        let name = format!("localhost/gpool-e2e-{}:{tag}", std::process::id());
        let out = Command::new("podman")
            .args(["import", "--change", "ENV PATH=/bin"])
            .arg(&tar)
            .arg(&name)
            .output()
            .expect("podman is installed (scripts/test.sh installs it)");
        assert!(out.status.success(), "podman import: {}", String::from_utf8_lossy(&out.stderr));
        Image(name)
    }
}

/// The image's root file system as a tar file (busybox, `/IMAGE`, `files`,
/// `padding` random bytes), for `podman import` or `docker import`.
pub fn rootfs_tar(s: &Scratch, tag: &str, padding: usize, files: &[(&str, &[u8], u32)]) -> std::path::PathBuf {
    let root = s.0.join(format!("rootfs-{tag}"));
    std::fs::create_dir_all(root.join("bin")).expect("rootfs");
    let busybox = ["/usr/bin/busybox", "/bin/busybox"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("busybox-static is installed (scripts/test.sh installs it)");
    std::fs::copy(busybox, root.join("bin/busybox")).expect("copy busybox");
    for cmd in ["sh", "cat", "echo", "test", "sleep", "env", "grep", "cp", "id", "ls"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(cmd)).expect("link");
    }
    std::fs::write(root.join("IMAGE"), "inside the image\n").expect("marker");
    for (path, content, mode) in files {
        let p = root.join(path);
        std::fs::write(&p, content).expect("a file of the image");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(*mode)).expect("its mode");
    }
    if padding > 0 {
        let mut data = vec![0u8; padding];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").expect("urandom"), &mut data)
            .expect("random");
        std::fs::write(root.join("PADDING"), data).expect("padding");
    }
    let tar = s.0.join(format!("rootfs-{tag}.tar"));
    assert!(Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").status().expect("tar").success());
    tar
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rmi", "-f", &self.0]).output();
    }
}
