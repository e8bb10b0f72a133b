//! Degrade, never drop: a stand-in `nvidia-smi` answers from the recorded
//! captures of each machine in `data/nvidia-smi` and refuses one
//! sub-command at a time, the way a real one does for a user without root
//! (exit 4, "Insufficient Permissions") or on a GPU or driver that lacks
//! the feature (exit 3, "Not Supported"). Commands a capture did not record
//! fail as well (exit 2), as they would on a machine that cannot answer them.
//!
//! Every GPU is inventoried whenever anything that lists GPUs still answers;
//! every MIG device keeps the `MIG-…` UUID that pins it; and each refusal
//! that changed the outcome is named in [`Backend::degraded`].
//!
//! Captures left out, and why: `a100-pcie-80gb_*` and the default tables
//! (`*_nvidia-smi_*`) record nothing that lists GPUs with their UUIDs (the
//! table has none); the `mig -cgi`/`-lgip` captures describe creation, not a
//! machine.
//!
//! One test in its own binary, so that no other thread forks while a script
//! is still open for writing (ETXTBSY).
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gpool_gpu::smi::{self, NvidiaSmi};
use gpool_gpu::{Backend, GpuInfo};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/nvidia-smi")
}

/// A synthetic `mig -lgi` for the H100 MIG capture (its GPU instances 2, 3,
/// 9 and 10, as its `-q` shows; placements made up): that machine refused
/// `mig -lgi`, so the capture has none.
const H100_LGI: &str = "\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name             Profile  Instance   Placement    |
|                          ID       ID       Start:Size   |
|=========================================================|
|   0  MIG 1g.10gb         19        9          2:1       |
+---------------------------------------------------------+
|   0  MIG 1g.10gb         19       10          3:1       |
+---------------------------------------------------------+
|   0  MIG 2g.20gb         14        3          0:2       |
+---------------------------------------------------------+
|   0  MIG 3g.40gb          9        2          4:4       |
+---------------------------------------------------------+
";

/// One recorded machine: what each command printed, and what it has.
struct Machine {
    name: &'static str,
    /// (arguments, recorded file or inline text)
    answers: Vec<(&'static [&'static str], Answer)>,
    gpus: Vec<&'static str>,
    /// MIG device UUIDs of GPU 0, as `-L` lists them.
    mig: Vec<String>,
}

enum Answer {
    File(&'static str),
    Text(&'static str),
}

fn machines() -> Vec<Machine> {
    use Answer::{File, Text};
    let zero = "GPU-00000000-0000-0000-0000-000000000000";
    let h100_mig: Vec<String> = (0..4).map(|i| format!("MIG-0000000{i}-0000-0000-0000-00000000000{i}")).collect();
    let old: Vec<String> = (7..14).map(|gi| format!("MIG-GPU-0069414c-9f30-41f9-d5d8-87890423f0c4/{gi}/0")).collect();
    let x8 = std::fs::read_to_string(data().join("h100-80gb-hbm3-x8_q_535.161.08.txt")).expect("x8");
    let x8_uuids: Vec<&'static str> = x8
        .lines()
        .filter_map(|l| l.trim().strip_prefix("GPU UUID")?.split(':').nth(1).map(str::trim))
        .map(|u| &*Box::leak(u.to_string().into_boxed_str()))
        .collect();
    let xml_only = |name, file, uuid| Machine {
        name,
        answers: vec![(smi::XML_ARGS, File(file))],
        gpus: vec![uuid],
        mig: Vec::new(),
    };
    vec![
        Machine {
            name: "h100",
            answers: vec![
                (smi::INVENTORY_ARGS, File("h100-80gb-hbm3_query-gpu_load.csv")),
                (smi::LIST_ARGS, File("h100-80gb-hbm3_nvidia-smi-L.txt")),
                (smi::TEXT_ARGS, File("h100-80gb-hbm3_q_load.txt")),
            ],
            gpus: vec![zero],
            mig: Vec::new(),
        },
        // As recorded: `mig -lgi` was not answered.
        Machine {
            name: "h100-mig",
            answers: vec![
                (smi::INVENTORY_ARGS, File("h100-80gb-hbm3-mig_query-gpu_load.csv")),
                (smi::LIST_ARGS, File("h100-80gb-hbm3-mig_nvidia-smi-L.txt")),
                (smi::TEXT_ARGS, File("h100-80gb-hbm3-mig_q_load.txt")),
            ],
            gpus: vec![zero],
            mig: h100_mig.clone(),
        },
        Machine {
            name: "h100-mig+lgi",
            answers: vec![
                (smi::INVENTORY_ARGS, File("h100-80gb-hbm3-mig_query-gpu_load.csv")),
                (smi::LIST_ARGS, File("h100-80gb-hbm3-mig_nvidia-smi-L.txt")),
                (smi::MIG_LGI_ARGS, Text(H100_LGI)),
                (smi::TEXT_ARGS, File("h100-80gb-hbm3-mig_q_load.txt")),
            ],
            gpus: vec![zero],
            mig: h100_mig,
        },
        Machine {
            name: "h100-x8",
            answers: vec![(smi::TEXT_ARGS, File("h100-80gb-hbm3-x8_q_535.161.08.txt"))],
            gpus: x8_uuids,
            mig: Vec::new(),
        },
        Machine {
            name: "a10",
            answers: vec![(smi::TEXT_ARGS, File("a10_q_535.129.03.txt"))],
            gpus: vec!["GPU-73d12ef7-f589-f867-4259-c7090ab44736"],
            mig: Vec::new(),
        },
        xml_only("a100-80gb-mig", "a100-sxm4-80gb-mig_q-x.xml", "GPU-513536b6-7d19-9063-b049-1e69664bb298"),
        xml_only("a100-40gb-mig", "a100-sxm4-40gb-mig_q-x.xml", "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a"),
        xml_only("t4", "tesla-t4_q-x.xml", "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"),
        xml_only("a10g", "a10g_q-x.xml", "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"),
        xml_only("p100", "tesla-p100-pcie-16gb_q-x.xml", "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e"),
        Machine {
            name: "a100-40gb-docs",
            answers: vec![
                (smi::LIST_ARGS, File("a100-sxm4-40gb_nvidia-smi-L_mig-3g-3g.txt")),
                (smi::MIG_LGI_ARGS, File("a100-sxm4-40gb_mig-lgi_3g-3g.txt")),
            ],
            gpus: vec!["GPU-e86cb44c-6756-fd30-cd4a-1e6da3caf9b0"],
            mig: vec![
                "MIG-c7384736-a75d-5afc-978f-d2f1294409fd".into(),
                "MIG-a28ad590-3fda-56dd-84fc-0a0b96edc58d".into(),
            ],
        },
        Machine {
            name: "a100-40gb-old-driver",
            answers: vec![(smi::LIST_ARGS, File("a100-pcie-40gb_nvidia-smi-L_mig-7x1g_old-uuid-format.txt"))],
            gpus: vec!["GPU-0069414c-9f30-41f9-d5d8-87890423f0c4"],
            mig: old,
        },
    ]
}

/// How a sub-command is refused: exit code and what it prints.
const REFUSALS: [(i32, &str); 2] = [(4, "Insufficient Permissions"), (3, "Not Supported")];

/// Writes a stand-in that answers `m`'s recordings and refuses `refused`.
fn standin(dir: &Path, m: &Machine, refused: Option<(&[&str], i32, &str)>) -> NvidiaSmi {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    let mut arms = String::new();
    if let Some((args, code, why)) = refused {
        arms.push_str(&format!(
            "  \"{}\") echo \"Unable to run that query for GPU 0: {why}\"; echo \"{why}\" >&2; exit {code} ;;\n",
            args.join(" ")
        ));
    }
    for (i, (args, answer)) in m.answers.iter().enumerate() {
        let file = match answer {
            Answer::File(f) => data().join(f),
            Answer::Text(t) => {
                let p = dir.join(format!("answer{i}"));
                std::fs::write(&p, t).expect("answer");
                p
            }
        };
        // `--query-gpu` is answered with the whole recorded table: columns are read by name.
        let pattern = if args[0].starts_with("--query-gpu=") {
            "--query-gpu=*".to_string()
        } else {
            format!("\"{}\"", args.join(" "))
        };
        arms.push_str(&format!("  {pattern}) cat '{}' ;;\n", file.display()));
    }
    let script = dir.join("nvidia-smi");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$*\" in\n{arms}  *) echo \"stand-in nvidia-smi: not recorded: $*\" >&2; exit 2 ;;\nesac\n",
            dir.join("log").display()
        ),
    )
    .expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    NvidiaSmi::at(script)
}

fn mig_uuids(g: &GpuInfo) -> Vec<String> {
    g.mig.iter().flatten().map(|m| m.uuid.clone()).collect()
}

#[test]
fn every_recorded_machine_keeps_its_gpus_whichever_sub_command_is_refused() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("smi-refusals");
    let commands: [&[&str]; 5] =
        [smi::INVENTORY_ARGS, smi::LIST_ARGS, smi::MIG_LGI_ARGS, smi::XML_ARGS, smi::TEXT_ARGS];
    let mut cases = 0;
    for m in machines() {
        let dir = root.join(m.name);
        // Everything recorded answers: the whole machine, nothing degraded that was recorded.
        let mut smi = standin(&dir, &m, None);
        let gpus = smi.inventory().unwrap_or_else(|e| panic!("{}: {e}", m.name));
        let uuids: Vec<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
        assert_eq!(uuids, m.gpus, "{}", m.name);
        assert!(gpus.iter().all(|g| g.memory_mb > 0 && !g.name.is_empty()), "{}: {gpus:?}", m.name);
        assert_eq!(mig_uuids(&gpus[0]), m.mig, "{}", m.name);
        for args in commands {
            let listing_left = m.answers.iter().any(|(a, _)| *a != args && *a != smi::MIG_LGI_ARGS);
            for (code, why) in REFUSALS {
                cases += 1;
                let case = format!("{} with `{}` refused ({why})", m.name, args.join(" "));
                let mut smi = standin(&dir, &m, Some((args, code, why)));
                let gpus = match smi.inventory() {
                    Ok(g) => g,
                    Err(e) => {
                        // Only when the refused command was the one thing that listed GPUs,
                        // and then the error says what was refused and why.
                        assert!(!listing_left, "{case}: {e}");
                        let msg = e.to_string();
                        assert!(msg.contains(why) && msg.contains("nothing lists the GPUs"), "{case}: {msg}");
                        continue;
                    }
                };
                let uuids: Vec<&str> = gpus.iter().map(|g| g.uuid.as_str()).collect();
                assert_eq!(uuids, m.gpus, "{case}");
                assert!(gpus.iter().all(|g| g.uuid.starts_with("GPU-")), "{case}");
                let notes: Vec<String> = smi.degraded().iter().map(ToString::to_string).collect();
                if std::env::var_os("SHOW_NOTES").is_some() {
                    eprintln!("{case}:\n  {}", notes.join("\n  "));
                }
                let got = mig_uuids(&gpus[0]);
                if args == smi::LIST_ARGS && !m.mig.is_empty() && !m.mig[0].starts_with("MIG-GPU-") {
                    // Without `-L`, devices are named by their ids where `mig -lgi` and the report
                    // both answered; else none can be scheduled, and the note says so.
                    let named = got.iter().all(|u| u.starts_with(&format!("MIG-{}/", m.gpus[0])));
                    assert!(got.len() == m.mig.len() && named || got.is_empty(), "{case}: {got:?}");
                    assert!(
                        notes.iter().any(|n| n.contains("MIG device UUIDs unknown") && n.contains(why)),
                        "{case}: {notes:?}"
                    );
                } else if args == smi::LIST_ARGS && !m.mig.is_empty() {
                    // The old driver's UUIDs come from `-L` only: with it refused, the GPU stays, its devices do not.
                    assert!(got.is_empty() || got == m.mig, "{case}: {got:?}");
                } else {
                    assert_eq!(got, m.mig, "{case}: every MIG device keeps its UUID");
                }
                if args == smi::MIG_LGI_ARGS && m.answers.iter().any(|(a, _)| *a == smi::MIG_LGI_ARGS) {
                    let n = notes
                        .iter()
                        .find(|n| n.starts_with("MIG placement unknown"))
                        .unwrap_or_else(|| panic!("{case}: {notes:?}"));
                    assert!(n.contains("`nvidia-smi mig -lgi` failed") && n.contains(why), "{case}: {n}");
                }
                if args == smi::INVENTORY_ARGS && m.answers.iter().any(|(a, _)| *a == smi::INVENTORY_ARGS) {
                    assert!(notes.iter().any(|n| n.contains("--query-gpu") && n.contains(why)), "{case}: {notes:?}");
                }
            }
        }
    }
    assert_eq!(cases, 12 * 5 * 2);
}
