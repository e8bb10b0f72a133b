//! Architecture rules of the whole workspace, read from the source files
//! (ARCHITECTURE.md names them): no import circle between sibling modules
//! of any crate (the rule of `modcycles.py`, ported so CI keeps it), the
//! daemon's wings apart, the core's rooms in their order, files of a
//! readable size, and `process::exit` only in the binary (libraries return
//! errors).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are module `[a, b]`; `lib.rs`/`main.rs` the root.
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts == ["lib"] || parts == ["main"] {
        return Vec::new();
    }
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The source without comments and with string literals emptied.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            i = text[i + 2..].find("*/").map_or(b.len(), |j| i + 2 + j + 2);
        } else if b[i..].starts_with(b"//") {
            i = text[i..].find('\n').map_or(b.len(), |j| i + j);
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `a::{b, c::{d, e}}` → `[a,b]`, `[a,c,d]`, `[a,c,e]` (aliases dropped).
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut depth = 0;
    let mut items = Vec::new();
    let mut cur = String::new();
    for ch in tree.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    items.push(cur);
    for item in items {
        let item = item.split(" as ").next().unwrap_or("").split_whitespace().collect::<String>();
        if item.is_empty() {
            continue;
        }
        if let Some((head, rest)) = item.split_once('{') {
            let rest = &rest[..rest.rfind('}').unwrap_or(rest.len())];
            let mut p = prefix.to_vec();
            p.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
            expand_use(rest, &p, out);
        } else {
            let mut p = prefix.to_vec();
            p.extend(item.split("::").filter(|s| !s.is_empty()).map(String::from));
            out.push(p);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `crate::`/`super::`/`self::` path a source names, in `use` or inline.
fn paths_in(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("use ") {
        let after = &rest[i + 4..];
        let boundary = i == 0 || !rest[..i].ends_with(is_ident);
        if boundary && ["crate", "super", "self"].iter().any(|k| after.trim_start().starts_with(k)) {
            let end = after.find(';').unwrap_or(after.len());
            expand_use(&after[..end], &[], &mut out);
        }
        rest = after;
    }
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if (i == 0 || !is_ident(chars[i - 1])) && is_ident(chars[i]) {
            let mut j = i;
            let mut segs = Vec::new();
            loop {
                let start = j;
                while j < chars.len() && is_ident(chars[j]) {
                    j += 1;
                }
                segs.push(chars[start..j].iter().collect::<String>());
                if j + 2 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' && is_ident(chars[j + 2]) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 && ["crate", "super", "self"].contains(&segs[0].as_str()) {
                out.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn resolve(here: &Module, path: &[String]) -> Option<Module> {
    match path.first().map(String::as_str) {
        Some("crate") => Some(path[1..].to_vec()),
        Some("super") | Some("self") => {
            let mut base = here.clone();
            let mut i = 0;
            while i < path.len() && (path[i] == "super" || path[i] == "self") {
                if path[i] == "super" {
                    base.pop()?;
                }
                i += 1;
            }
            base.extend(path[i..].iter().cloned());
            Some(base)
        }
        _ => None,
    }
}

/// Circles between sibling modules, given each module's (stripped) source.
fn circles(sources: &BTreeMap<Module, String>) -> Vec<(Module, Module)> {
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in sources {
        for p in paths_in(text) {
            let Some(mut target) = resolve(module, &p) else { continue };
            while !target.is_empty() && !sources.contains_key(&target) {
                target.pop();
            }
            if target.is_empty() || &target == module {
                continue;
            }
            let k = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if k == module.len() || k == target.len() {
                continue; // parent and child
            }
            edges.entry(module[..=k].to_vec()).or_default().insert(target[..=k].to_vec());
        }
    }
    let reaches = |from: &Module, to: &Module| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            if &m == to {
                return true;
            }
            if seen.insert(m.clone()) {
                stack.extend(edges.get(&m).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut found = Vec::new();
    for (a, bs) in &edges {
        for b in bs {
            if a < b && reaches(b, a) || a > b && reaches(b, a) && !edges.get(b).is_some_and(|x| x.contains(a)) {
                found.push((a.clone(), b.clone()));
            }
        }
    }
    found
}

/// Each crate's modules (files under a `tests` folder are test code, left out).
fn crate_sources(src: &Path) -> BTreeMap<Module, String> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(src).ok()?.to_path_buf();
            if rel.iter().any(|p| p == "tests") {
                return None;
            }
            Some((module_of(&rel), strip(&std::fs::read_to_string(&f).ok()?)))
        })
        .collect()
}

fn crates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    out.sort();
    out
}

#[test]
fn no_crate_has_an_import_circle_between_sibling_modules() {
    let mut all = Vec::new();
    for c in crates() {
        for (a, b) in circles(&crate_sources(&c.join("src"))) {
            all.push(format!("{}: {} <-> {}", c.display(), a.join("::"), b.join("::")));
        }
    }
    assert!(
        all.is_empty(),
        "import circles between sibling modules (move what both need into a module of its own):\n{}",
        all.join("\n")
    );
    assert!(crates().len() >= 7, "expected the workspace's crates");
}

#[test]
fn the_circle_check_finds_a_circle_and_only_a_circle() {
    let src = |pairs: &[(&str, &str)]| -> BTreeMap<Module, String> {
        pairs.iter().map(|(m, t)| (m.split('/').map(String::from).collect(), strip(t))).collect()
    };
    let circle = src(&[
        ("a", "use crate::b::Thing;"),
        ("b", "fn f() { super::c::g() }"),
        ("c", "use crate::{a::X, d}; // crate::nothing"),
        ("d", ""),
    ]);
    assert!(!circles(&circle).is_empty(), "a → b → c → a is a circle");
    let fine = src(&[
        ("a", "use crate::b::Thing;\nlet s = \"crate::a\";"),
        ("b", "use crate::c;"),
        ("c", "/* use crate::a; */"),
        ("p", "use self::q::Y;"),
        ("p/q", "use super::Z;"),
    ]);
    assert!(circles(&fine).is_empty(), "{:?}", circles(&fine));
}

/// Issue 37: no file of the workspace over 800 lines, and none of the
/// daemon's source over 600.
#[test]
fn files_stay_readable_in_size() {
    let mut big = Vec::new();
    for c in crates() {
        let daemon = c.ends_with("gpool-daemon");
        for dir in ["src", "tests"] {
            let mut files = Vec::new();
            rs_files(&c.join(dir), &mut files);
            for f in files {
                let lines = std::fs::read_to_string(&f).map_or(0, |t| t.lines().count());
                let limit = if daemon && dir == "src" { 600 } else { 800 };
                if lines > limit {
                    big.push(format!("{} has {lines} lines (at most {limit}): split it by concept", f.display()));
                }
            }
        }
    }
    assert!(big.is_empty(), "{}", big.join("\n"));
}

/// `impl Controller` blocks in the controller's sources (tests left out), per file.
fn controller_extensions(dir: &Path) -> BTreeMap<String, usize> {
    let mut files = Vec::new();
    rs_files(dir, &mut files);
    let mut found = BTreeMap::new();
    for f in files.iter().filter(|f| !f.components().any(|c| c.as_os_str() == "tests")) {
        let text = strip(&std::fs::read_to_string(f).unwrap_or_default());
        let n = text.matches("impl Controller").count() + text.matches("impl super::Controller").count();
        if n > 0 {
            let rel = f.strip_prefix(dir).unwrap_or(f).display().to_string();
            found.insert(rel, n);
        }
    }
    found
}

/// Issue 37: the controller's state is in parts its rooms own. Only the
/// routers (`mod.rs`, `requests.rs`, `lifecycle.rs`, `nodes.rs`,
/// `restore.rs`) extend `Controller`; every other room is a type, or
/// functions, given what it touches (ARCHITECTURE.md, "The controller's rooms").
#[test]
fn only_the_routers_extend_the_controller() {
    let dir = workspace().join("crates/gpool-daemon/src/plane/controller");
    let found = controller_extensions(&dir);
    let total: usize = found.values().sum();
    assert!(total > 0, "no impl Controller found under {}: the rule reads the wrong place", dir.display());
    assert!(
        total <= 5,
        "{total} impl Controller blocks (at most 5): {found:?}; give the room its own type and pass it what it reads"
    );
}

#[test]
fn the_extension_count_sees_a_new_impl_block() {
    let dir = std::env::temp_dir().join(format!("gpool-impl-count-{}", std::process::id()));
    let _ = std::fs::create_dir_all(dir.join("tests"));
    let _ = std::fs::write(dir.join("a.rs"), "impl Controller {}\n// impl Controller\n");
    let _ = std::fs::write(dir.join("b.rs"), "impl super::Controller { fn f() {} }\nimpl Other {}\n");
    let _ = std::fs::write(dir.join("tests/c.rs"), "impl Controller {}\n");
    let found = controller_extensions(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found, BTreeMap::from([("a.rs".to_string(), 1), ("b.rs".to_string(), 1)]));
}

#[test]
fn only_the_binary_exits_the_process() {
    let mut found = Vec::new();
    for c in crates() {
        let mut files = Vec::new();
        rs_files(&c.join("src"), &mut files);
        for f in files {
            let text = strip(&std::fs::read_to_string(&f).unwrap_or_default());
            // The binary may end itself (`main`, and output's quiet exit on a closed pipe).
            if text.contains("process::exit(") && !f.to_string_lossy().contains("gpool-cli/src/") {
                found.push(f.display().to_string());
            }
        }
    }
    assert!(found.is_empty(), "process::exit outside the binary's main (return an error instead): {found:?}");
}

#[test]
fn the_daemons_wings_do_not_touch() {
    let src = workspace().join("crates/gpool-daemon/src");
    assert!(src.join("node").is_dir() && src.join("plane").is_dir(), "the daemon has a node and a plane wing");
    // The three process wirings (`up`, `serve`, `agent`) sit at the root; no wing reaches into one.
    let rules: [(&str, &[&str]); 5] = [
        ("node", &["plane", "up", "serve", "agent"]),
        ("plane", &["node", "up", "serve", "agent"]),
        ("protocol", &["node", "plane", "up", "serve", "agent", "wiring"]),
        ("wiring", &["node", "plane", "up", "serve", "agent"]),
        ("accounts", &["node", "plane", "up", "serve", "agent", "wiring"]),
    ];
    let mut broken = Vec::new();
    for (module, text) in crate_sources(&src) {
        let Some(wing) = module.first() else { continue };
        let imported: BTreeSet<String> =
            paths_in(&text).iter().filter_map(|p| resolve(&module, p)?.first().cloned()).collect();
        if wing != "up" && imported.contains("up") {
            broken.push(format!("{} imports crate::up (the one-box wiring)", module.join("::")));
        }
        for (from, forbidden) in &rules {
            if wing == from {
                for f in forbidden.iter().filter(|f| imported.contains(**f)) {
                    broken.push(format!("{} imports crate::{f}", module.join("::")));
                }
            }
        }
    }
    assert!(broken.is_empty(), "the wings talk through crate::protocol only:\n{}", broken.join("\n"));
}

/// `unsafe` is forbidden by the workspace's lints; the two crates that need
/// it set their own lints (denied but in place) and no other crate may:
/// `gpool-bpf` (a system call no safe crate wraps) and `gpool-spawn` (the
/// one `pre_exec` of a job's start).
#[test]
fn unsafe_code_lives_in_gpool_bpf_and_gpool_spawn_only() {
    let crates = workspace().join("crates");
    let block = concat!("unsafe", " {");
    let mut broken = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let inherits = manifest.contains("[lints]\nworkspace = true");
        let mut files = Vec::new();
        rs_files(&dir, &mut files);
        let with_unsafe: Vec<String> = files
            .iter()
            .filter(|f| {
                std::fs::read_to_string(f)
                    .is_ok_and(|t| t.lines().any(|l| !l.trim_start().starts_with("//") && l.contains(block)))
            })
            .map(|f| f.display().to_string())
            .collect();
        match name.as_str() {
            "gpool-bpf" | "gpool-spawn" => {
                assert!(manifest.contains("unsafe_code = \"deny\""), "{name} denies unsafe but in place")
            }
            _ if !inherits => broken.push(format!("{name} does not take the workspace's lints")),
            _ if !with_unsafe.is_empty() => broken.push(format!("{name} has unsafe code: {with_unsafe:?}")),
            _ => {}
        }
    }
    assert!(broken.is_empty(), "{broken:?}");
}

/// Every file of the workspace, as paths relative to its root ("crates/…").
fn workspace_files() -> Vec<String> {
    let root = workspace();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            if p.is_dir() {
                out.push(format!("{}/", p.strip_prefix(&root).unwrap_or(&p).display()));
                stack.push(p);
            } else {
                out.push(p.strip_prefix(&root).unwrap_or(&p).display().to_string());
            }
        }
    }
    out
}

/// Issue 37: ARCHITECTURE.md cannot drift. Every path it cites in
/// backticks (`node/outage.rs`, `crates/gpool-core/src/`) names a file or
/// folder of the workspace (a path names the files whose path ends with
/// it), and every room of the controller is in it.
#[test]
fn architecture_md_cites_only_paths_that_exist_and_every_controller_room() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let files = workspace_files();
    let exists = |cited: &str| {
        files.iter().any(|f| f == cited || f.ends_with(&format!("/{cited}")) || f.trim_end_matches('/') == cited)
    };
    let mut missing = Vec::new();
    for (i, quoted) in text.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || quoted.contains(' ') || quoted.contains('*') || quoted.contains("::") {
            continue;
        }
        let path_like = quoted.ends_with(".rs") || (quoted.contains('/') && quoted.ends_with('/'));
        let plain = quoted.chars().all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c));
        if path_like && plain && !quoted.starts_with('/') && !exists(quoted) {
            missing.push(quoted.to_string());
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "ARCHITECTURE.md cites paths that do not exist: {missing:?}");
    let rooms = workspace().join("crates/gpool-daemon/src/plane/controller");
    let mut absent = Vec::new();
    for e in std::fs::read_dir(&rooms).expect("controller").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".rs") && !text.contains(&format!("`{name}`")) && !text.contains(&format!("/{name}`")) {
            absent.push(name);
        }
    }
    absent.sort();
    assert!(absent.is_empty(), "controller rooms ARCHITECTURE.md does not name: {absent:?}");
}

/// The sub-folders of `src`, recursively, as paths relative to it (`pass`, `pass/snapshot`).
fn sub_folders(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push(p.strip_prefix(src).unwrap_or(&p).to_string_lossy().into_owned());
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The folders `text` does not name in backticks, as `pass/`, `pass/snapshot/`
/// or with any prefix (`crates/gpool-core/src/pass/`).
fn folders_not_named(text: &str, folders: &[String]) -> Vec<String> {
    folders
        .iter()
        .filter(|f| !text.contains(&format!("`{f}/`")) && !text.contains(&format!("/{f}/`")))
        .cloned()
        .collect()
}

/// Issue 37: gpool-core is in rooms (at least five sub-folders by
/// concern), and ARCHITECTURE.md names every folder of it, so the map
/// follows the tree.
#[test]
fn gpool_core_is_in_rooms_and_architecture_md_names_each_folder() {
    let src = workspace().join("crates/gpool-core/src");
    let folders = sub_folders(&src);
    let rooms: Vec<&String> = folders.iter().filter(|f| !f.contains('/')).collect();
    assert!(
        rooms.len() >= 5,
        "gpool-core/src has {} sub-folders ({rooms:?}); keep it in rooms by concern",
        rooms.len()
    );
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let absent = folders_not_named(&text, &folders);
    assert!(
        absent.is_empty(),
        "gpool-core folders ARCHITECTURE.md does not name (as `pass/` or `crates/gpool-core/src/pass/`): {absent:?}"
    );
}

#[test]
fn the_room_check_sees_a_folder_left_out() {
    let folders = sub_folders(&workspace().join("crates/gpool-core/src"));
    assert!(folders.iter().any(|f| f == "pass") && folders.iter().any(|f| f == "pass/snapshot"), "{folders:?}");
    let folders = vec!["model".to_string(), "pass".to_string(), "pass/snapshot".to_string()];
    let text = "`model/` and `crates/gpool-core/src/pass/`; the pass and its snapshot (pass/snapshot/)";
    assert_eq!(folders_not_named(text, &folders), ["pass/snapshot"]);
    assert!(folders_not_named(&format!("{text} `pass/snapshot/`"), &folders).is_empty());
}

/// What each room of gpool-core may use (its `mod.rs` says why): a room
/// not listed here fails, so a new room comes with its rule.
const CORE_ROOMS: [(&str, &[&str]); 9] = [
    ("model", &[]),
    ("calendar", &["model"]),
    ("policies", &["model", "calendar"]),
    ("history", &[]),
    ("pass", &["model", "calendar", "policies", "history"]),
    ("planners", &["model", "calendar", "policies", "history", "pass"]),
    ("health", &["model"]),
    ("diagnosis", &["model", "health"]),
    ("accounting", &["model"]),
];

/// Each use of another room that its rule does not allow, as `from::module
/// uses room`, and each path that goes through the crate root's re-exports
/// (`crate::snapshot::Snapshot`) instead of naming the room, which would
/// hide the use from this check.
fn room_breaches(sources: &BTreeMap<Module, String>, rules: &[(&str, &[&str])]) -> Vec<String> {
    let mut broken = Vec::new();
    for (module, text) in sources {
        let Some(room) = module.first() else { continue };
        let Some((_, may)) = rules.iter().find(|(r, _)| r == room) else {
            broken.push(format!("{room} has no rule in CORE_ROOMS"));
            continue;
        };
        let paths = paths_in(text);
        for p in paths.iter().filter(|p| p.len() > 1 && p[0] == "crate" && !rules.iter().any(|(r, _)| *r == p[1])) {
            broken.push(format!("{} names crate::{} through the root (name its room)", module.join("::"), p[1]));
        }
        let used: BTreeSet<String> = paths.iter().filter_map(|p| resolve(module, p)?.first().cloned()).collect();
        for other in used.iter().filter(|u| *u != room && rules.iter().any(|(r, _)| r == *u)) {
            if !may.contains(&other.as_str()) {
                broken.push(format!("{} uses {other}", module.join("::")));
            }
        }
    }
    broken.sort();
    broken.dedup();
    broken
}

/// Issue 37: the core's rooms build on each other in one direction: the
/// model on nothing, the pass on the model, calendar, policies and history,
/// planners on the pass; health, diagnosis and accounting never on the pass.
#[test]
fn the_cores_rooms_use_only_the_rooms_below_them() {
    let broken = room_breaches(&crate_sources(&workspace().join("crates/gpool-core/src")), &CORE_ROOMS);
    assert!(broken.is_empty(), "gpool-core rooms out of order (see each room's mod.rs):\n{}", broken.join("\n"));
}

#[test]
fn the_room_order_check_sees_a_room_that_reaches_up() {
    let src = |pairs: &[(&str, &str)]| -> BTreeMap<Module, String> {
        pairs.iter().map(|(m, t)| (m.split('/').map(String::from).collect(), strip(t))).collect()
    };
    let rules: [(&str, &[&str]); 2] = [("model", &[]), ("pass", &["model"])];
    let fine = src(&[("model/job", "use super::node::Node;"), ("pass/plan", "use crate::model::job::Job;")]);
    assert!(room_breaches(&fine, &rules).is_empty());
    let up = src(&[("model/job", "fn f(p: &crate::pass::plan::Plan) {}"), ("extra/x", "")]);
    assert_eq!(room_breaches(&up, &rules), ["extra has no rule in CORE_ROOMS", "model::job uses pass"]);
    let root = src(&[("model/job", "use crate::{Plan, model::time::Time};")]);
    assert_eq!(room_breaches(&root, &rules), ["model::job names crate::Plan through the root (name its room)"]);
}

#[test]
fn the_drift_check_sees_a_renamed_path() {
    let files = workspace_files();
    assert!(files.iter().any(|f| f.ends_with("/node/outage.rs")), "the walk finds files");
    assert!(!files.iter().any(|f| f.ends_with("/node/no_such_room.rs")));
}

/// Issue 37: in the daemon, the wall clock is read in the controller's
/// `clock.rs` and the node wing's `clock.rs` only (time is passed in, so
/// tests can set it).
#[test]
fn the_daemon_reads_the_wall_clock_in_its_clock_files_only() {
    let mut files = Vec::new();
    rs_files(&workspace().join("crates/gpool-daemon/src"), &mut files);
    let readers: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("SystemTime::now")))
        .filter(|f| f.file_name().is_none_or(|n| n != "clock.rs"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(readers.is_empty(), "read the time through clock.rs: {readers:?}");
}
