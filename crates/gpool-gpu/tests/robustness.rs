//! No input makes a parser panic, and every error names a line of the input:
//! each recorded file through every parser, recorded files mutated at
//! random, and random text.

use std::path::PathBuf;
use std::sync::OnceLock;

use gpool_gpu::GpuError;
use gpool_gpu::smi::{self, Query};
use proptest::prelude::*;

fn fixtures() -> &'static [(String, String)] {
    static FILES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("data/nvidia-smi")
            .map(|e| e.expect("entry").path())
            .map(|p| {
                let text = std::fs::read_to_string(&p).expect("read");
                (p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), text)
            })
            .collect();
        files.sort();
        files
    })
}

/// Runs every parser (and what callers do with the results) on `text`.
fn every_parser(text: &str) -> Vec<(&'static str, Result<(), GpuError>)> {
    fn ok<T>(_: T) {}
    vec![
        ("query-gpu", smi::parse_query_gpu(text, None).map(|rows| rows.iter().for_each(|r| drop(r.to_info())))),
        ("query-gpu noheader", smi::parse_query_gpu(text, Some(smi::SAMPLE_FIELDS)).map(ok)),
        ("compute-apps", smi::parse_compute_apps(text, None).map(ok)),
        ("compute-apps noheader", smi::parse_compute_apps(text, Some(smi::COMPUTE_APPS_FIELDS)).map(ok)),
        ("csv", smi::CsvTable::parse(text, Query::Gpu, Some(smi::INVENTORY_FIELDS)).map(ok)),
        (
            "-L",
            smi::parse_list(text).map(|gpus| {
                for g in gpus {
                    drop(smi::mig_inventory(g.index, &g.mig, None, None));
                }
            }),
        ),
        (
            "-lgi",
            smi::parse_gpu_instances(text).map(|gis| {
                let listed = smi::parse_list(text).unwrap_or_default();
                for g in listed {
                    drop(smi::mig_inventory(g.index, &g.mig, Some(&gis), None));
                }
            }),
        ),
        ("-lci", smi::parse_compute_instances(text).map(ok)),
        ("-lgip", smi::parse_gpu_instance_profiles(text).map(ok)),
        ("-lcip", smi::parse_compute_instance_profiles(text).map(ok)),
        ("-lgipp", smi::parse_placements(text).map(ok)),
        ("-cgi", smi::parse_create(text).map(|r| drop(r.into_result()))),
        ("-q -x", smi::parse_xml(text).map(ok)),
        ("-q", smi::parse_text(text).map(ok)),
        ("table", smi::parse_table(text).map(|t| drop(t.samples()))),
        ("dmon", smi::parse_dmon(text).map(|rows| rows.iter().for_each(|r| drop(r.to_sample())))),
        ("pmon", smi::parse_pmon(text).map(ok)),
        ("--version", smi::parse_version(text).map(ok)),
        ("--help-query-gpu", smi::parse_help_query(text).map(ok)),
        ("slurmd -G", smi::parse_gres(text).map(|g| g.iter().for_each(|g| ok(g.mig_profile())))),
    ]
}

/// Errors are `Parse` errors with a line inside the input (or just past its end).
fn check(text: &str) -> Result<(), String> {
    let last = text.lines().count() + 1;
    for (parser, result) in every_parser(text) {
        match result {
            Ok(()) => {}
            Err(GpuError::Parse { line, .. }) if (1..=last).contains(&line) => {}
            Err(e) => return Err(format!("{parser}: {e} (input has {} lines)", last - 1)),
        }
    }
    Ok(())
}

#[test]
fn every_recorded_file_through_every_parser() {
    for (name, text) in fixtures() {
        if let Err(e) = check(text) {
            panic!("{name}: {e}");
        }
    }
}

/// An edit to a recorded file.
#[derive(Clone, Debug)]
enum Edit {
    Truncate(usize),
    DeleteLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Insert(usize, String),
    DeleteChars(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let junk = prop_oneof![
        Just("N/A".to_string()),
        Just("[N/A]".to_string()),
        Just("ERR!".to_string()),
        Just("|".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\n".to_string()),
        Just("    ".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("-1".to_string()),
        Just("<gpu>".to_string()),
        Just("</gpu>".to_string()),
        "[ -~\n\t|+=:,/<>\\[\\]é€]{0,12}",
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::Truncate),
        any::<usize>().prop_map(Edit::DeleteLine),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (any::<usize>(), junk).prop_map(|(at, s)| Edit::Insert(at, s)),
        (any::<usize>(), 0usize..40).prop_map(|(at, n)| Edit::DeleteChars(at, n)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    for e in edits {
        let n = lines.len().max(1);
        match e {
            Edit::Truncate(at) => lines.truncate(at % (n + 1)),
            Edit::DeleteLine(at) if !lines.is_empty() => drop(lines.remove(at % n)),
            Edit::DuplicateLine(at) if !lines.is_empty() => {
                let l = lines[at % n].clone();
                lines.insert(at % n, l);
            }
            Edit::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
            Edit::Insert(_, s) if lines.is_empty() => lines.push(s.clone()),
            Edit::DeleteChars(..) if lines.is_empty() => {}
            Edit::Insert(at, s) => {
                let line = &mut lines[at % n];
                let chars: Vec<char> = line.chars().collect();
                let pos = (at / n) % (chars.len() + 1);
                *line = chars[..pos].iter().chain(s.chars().collect::<Vec<_>>().iter()).chain(&chars[pos..]).collect();
            }
            Edit::DeleteChars(at, len) => {
                let line = &mut lines[at % n];
                let chars: Vec<char> = line.chars().collect();
                let pos = (at / n) % (chars.len() + 1);
                let end = (pos + len).min(chars.len());
                *line = chars[..pos].iter().chain(&chars[end..]).collect();
            }
            _ => {}
        }
    }
    lines.concat()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_recorded_files_never_panic(file in any::<usize>(), edits in prop::collection::vec(edit(), 1..8)) {
        let files = fixtures();
        let (name, text) = &files[file % files.len()];
        let mutated = apply(text, &edits);
        prop_assert!(check(&mutated).is_ok(), "{name} with {edits:?}: {:?}", check(&mutated));
    }

    #[test]
    fn random_text_never_panics(text in "[ -~\n\t|+=:,/<>\\[\\]%é]{0,600}") {
        prop_assert!(check(&text).is_ok(), "{:?}", check(&text));
    }

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        prop_assert!(check(&text).is_ok(), "{:?}", check(&text));
    }
}
