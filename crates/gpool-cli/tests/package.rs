//! Issue 43: `scripts/package.sh` makes a Debian package and a release
//! archive from one binary (here the one under test): the package holds the
//! binary, the three units (Type=notify, sandboxed, run from /usr/bin),
//! settings templates of mode 0600, man pages and completions; the archive
//! the same, with checksums that verify.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?}:\n{said}");
    said
}

#[test]
fn the_package_and_the_archive_hold_what_an_operator_installs() {
    let s = Scratch::new("package");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = s.0.join("dist");
    let said = run(Command::new("bash")
        .arg(root.join("scripts/package.sh"))
        .args(["--fast", "--bin", BIN, "--out"])
        .arg(&out));
    let deb = said.lines().find(|l| l.ends_with(".deb")).unwrap_or_else(|| panic!("no .deb named:\n{said}"));
    let tarball = said.lines().find(|l| l.ends_with(".tar.gz")).unwrap_or_else(|| panic!("no archive named:\n{said}"));

    let listing = run(Command::new("dpkg-deb").args(["-c", deb]));
    for want in [
        "./usr/bin/gpool",
        "./lib/systemd/system/gpool-up.service",
        "./lib/systemd/system/gpool-serve.service",
        "./lib/systemd/system/gpool-agent.service",
        "./usr/share/man/man1/gpool.1.gz",
        "./usr/share/man/man1/gpool-submit.1.gz",
        "./usr/share/bash-completion/completions/gpool",
        "./usr/share/zsh/vendor-completions/_gpool",
        "./usr/share/fish/vendor_completions.d/gpool.fish",
        "./etc/default/gpool-up",
    ] {
        assert!(listing.lines().any(|l| l.ends_with(want)), "{want} not in the package:\n{listing}");
    }
    let defaults = listing.lines().find(|l| l.ends_with("./etc/default/gpool-serve")).expect("settings");
    assert!(defaults.starts_with("-rw------- root/root"), "settings hold secrets: {defaults}");
    let info = run(Command::new("dpkg-deb").args(["-I", deb]));
    for script in ["postinst", "prerm", "postrm", "conffiles"] {
        assert!(info.contains(script), "no {script}:\n{info}");
    }
    let control = run(Command::new("dpkg-deb").args(["-f", deb, "Package", "Version", "Depends"]));
    assert!(control.contains("Package: gpool") && control.contains("Depends: libc6, adduser"), "{control}");

    // The units as installed: run from /usr/bin, Type=notify, sandboxed.
    let x = s.0.join("x");
    run(Command::new("dpkg-deb").args(["-x", deb]).arg(&x));
    for unit in ["gpool-up", "gpool-serve", "gpool-agent"] {
        let text = std::fs::read_to_string(x.join(format!("lib/systemd/system/{unit}.service"))).expect("unit");
        assert!(text.contains("ExecStart=/usr/bin/gpool ") && !text.contains("/usr/local/bin"), "{unit}:\n{text}");
        assert!(text.contains("Type=notify") && text.contains("ProtectSystem="), "{unit}:\n{text}");
    }
    let man = run(Command::new("gzip").arg("-dc").arg(x.join("usr/share/man/man1/gpool-submit.1.gz")));
    assert!(man.contains(".TH gpool-submit") && man.contains("\\-\\-gpus"), "{man}");

    // The archive: the same pieces, and checksums that verify.
    let names = run(Command::new("tar").args(["-tzf", tarball]));
    for want in
        ["/bin/gpool", "/systemd/gpool-serve.service", "/man/man1/gpool.1.gz", "/completions/_gpool", "/INSTALL"]
    {
        assert!(names.lines().any(|l| l.ends_with(want)), "{want} not in the archive:\n{names}");
    }
    let sums = run(Command::new("sha256sum").arg("-c").arg("SHA256SUMS").current_dir(&out));
    assert_eq!(sums.matches(": OK").count(), 2, "{sums}");
}
