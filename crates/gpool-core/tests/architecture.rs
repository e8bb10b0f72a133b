//! Architecture invariant: gpool-core is pure. It depends on nothing that
//! does I/O, and its source never reads a clock, touches the file system or
//! network, spawns threads or draws random numbers.

use std::path::Path;

#[test]
fn core_dependencies_are_only_pure_crates() {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).expect("manifest");
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a [dependencies] table");
    let names: Vec<&str> = deps
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['=', '.']).next())
        .map(str::trim)
        .collect();
    let allowed = ["thiserror"];
    for n in &names {
        assert!(allowed.contains(n), "gpool-core must stay pure; {n:?} is not an allowed dependency ({allowed:?})");
    }
}

#[test]
fn core_source_uses_no_clock_io_threads_or_randomness() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::thread",
        "std::process",
        "std::env",
        "SystemTime",
        "Instant::now",
        "rand::",
        "tokio",
        "println!",
        "eprintln!",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Every file, in sub-folders too.
    let mut dirs = vec![src];
    let mut checked = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source");
                for f in forbidden {
                    assert!(!text.contains(f), "{} uses {f}: the core must stay pure", path.display());
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "expected the core's source files, found {checked}");
}
