//! Architecture invariant: the wire types do not depend on the domain (or
//! anything that does I/O), so API compatibility is decided here alone.

#[test]
fn wire_types_depend_on_serde_and_pure_helpers_only() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).expect("manifest");
    let deps = manifest.split("[dependencies]").nth(1).and_then(|r| r.split("\n[").next()).expect("[dependencies]");
    let names: Vec<&str> = deps
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split(['=', '.']).next())
        .map(str::trim)
        .collect();
    assert!(!names.is_empty());
    for n in names {
        // schemars describes the types (no I/O); jiff does calendar arithmetic and
        // formats instants in a zone it is given (the CLI reads the system's);
        // serde-saphyr is a format, YAML, as serde_json is JSON (src/yaml.rs).
        assert!(
            ["serde", "serde_json", "serde-saphyr", "thiserror", "schemars", "jiff"].contains(&n),
            "gpool-api must not depend on {n:?}"
        );
    }
}
