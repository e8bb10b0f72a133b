//! Batch scripts as Slurm users write them: `gpool submit train.sbatch`
//! reads the script's `#SBATCH` lines (and `#GPOOL` lines, in `gpool
//! submit`'s own flags, which win over them), as sbatch does: directives
//! sit at the top, before the first command; the script then runs as the
//! job's command, under the interpreter its `#!` line names.
//!
//! Every sbatch option is either mapped to what means the same in gpool,
//! ignored with a word on standard error where it changes nothing about
//! how the job runs (mail), or refused with why (docs/slurm.md lists them).

use std::path::Path;

use anyhow::{Context, bail};

/// What a script's `#SBATCH` lines ask for, in gpool's terms.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Slurm {
    /// GPUs per replica (`--gres=gpu:N`, `--gres=gpu:MODEL:N`, `--gpus`, `--gpus-per-node`, `-G`).
    pub gpus: Option<u32>,
    pub gpu_model: Option<String>,
    /// Time limit as sbatch reads it (`--time`, `-t`).
    pub time: Option<String>,
    pub name: Option<String>,
    /// `--partition`: the quota queue.
    pub queue: Option<String>,
    /// Replicas: `--nodes × --ntasks-per-node`, or `--ntasks`.
    pub replicas: Option<u32>,
    pub cpus: Option<String>,
    pub memory: Option<String>,
    pub after: Vec<String>,
    pub begin: Option<String>,
    pub workdir: Option<String>,
    pub array: Option<String>,
    /// `--reservation`: the advance reservation it runs in.
    pub reservation: Option<String>,
    /// Options read and ignored (they do not change how the job runs), to say so.
    pub ignored: Vec<String>,
}

/// A batch script: its interpreter (from `#!`), its text, and its directives.
#[derive(Debug)]
pub(crate) struct Script {
    pub argv: Vec<String>,
    pub slurm: Slurm,
    /// The `#GPOOL` lines' words, for `gpool submit`'s own parser.
    pub gpool_words: Vec<String>,
}

/// The directives of a script's header: `#SBATCH` and `#GPOOL` lines up to the first command.
fn header(text: &str, tag: &str) -> Vec<String> {
    let mut words = Vec::new();
    for line in text.lines().skip_while(|l| l.starts_with("#!")) {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if !t.starts_with('#') {
            break;
        }
        if let Some(rest) = t.strip_prefix(tag).filter(|r| r.is_empty() || r.starts_with(char::is_whitespace)) {
            // A comment after the options ends them, as in sbatch.
            let rest = rest.split(" #").next().unwrap_or("");
            words.extend(shell_words(rest));
        }
    }
    words
}

/// Words as a shell splits a simple line: whitespace, single and double quotes.
fn shell_words(s: &str) -> Vec<String> {
    let (mut words, mut cur, mut quote, mut any) = (Vec::new(), String::new(), None::<char>, false);
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// sbatch's short options that take a value, and their long names.
const SHORT: &[(&str, &str)] = &[
    ("-J", "job-name"),
    ("-t", "time"),
    ("-p", "partition"),
    ("-N", "nodes"),
    ("-n", "ntasks"),
    ("-c", "cpus-per-task"),
    ("-G", "gpus"),
    ("-d", "dependency"),
    ("-a", "array"),
    ("-o", "output"),
    ("-e", "error"),
    ("-D", "chdir"),
    ("-A", "account"),
    ("-q", "qos"),
];

/// (option, value) pairs from sbatch's words: `--opt=v`, `--opt v`, `-x v`, `-xv`.
fn options(words: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut it = words.iter().peekable();
    while let Some(w) = it.next() {
        if let Some(long) = w.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None if FLAGS.contains(&long) => (long.to_string(), String::new()),
                None => {
                    let v = it.next().with_context(|| format!("#SBATCH --{long}: a value must follow"))?;
                    (long.to_string(), v.clone())
                }
            };
            out.push((name, value));
        } else if let Some((short, long)) = SHORT.iter().find(|(s, _)| w.starts_with(s)) {
            let attached = &w[short.len()..];
            let value = if attached.is_empty() {
                it.next().with_context(|| format!("#SBATCH {short}: a value must follow"))?.clone()
            } else {
                attached.trim_start_matches('=').to_string()
            };
            out.push(((*long).to_string(), value));
        } else {
            bail!("#SBATCH {w}: not an option gpool reads (see docs/slurm.md for those it takes)");
        }
    }
    Ok(out)
}

/// Options that take no value.
const FLAGS: &[&str] = &["exclusive", "requeue", "no-requeue", "wait", "parsable", "hold"];

/// Slurm's memory (`--mem`): megabytes by default, or K/M/G/T suffixes (binary).
fn memory(v: &str) -> anyhow::Result<String> {
    let v = v.trim();
    let (num, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(v.len()));
    let unit = match unit.to_ascii_uppercase().as_str() {
        "" | "M" | "MB" => "Mi",
        "K" | "KB" => "Ki",
        "G" | "GB" => "Gi",
        "T" | "TB" => "Ti",
        _ => bail!("#SBATCH --mem={v}: expected a size such as 32G or 16000 (megabytes)"),
    };
    if num.is_empty() {
        bail!("#SBATCH --mem={v}: expected a size such as 32G or 16000 (megabytes)");
    }
    Ok(format!("{num}{unit}"))
}

fn count(name: &str, v: &str) -> anyhow::Result<u32> {
    v.trim().parse().with_context(|| format!("#SBATCH --{name}={v}: expected a whole number"))
}

/// `--gres=gpu:4`, `--gres=gpu:H100-80GB:4` (other generic resources are refused).
fn gres(v: &str, s: &mut Slurm) -> anyhow::Result<()> {
    for item in v.split(',') {
        let parts: Vec<&str> = item.split(':').collect();
        match parts.as_slice() {
            ["gpu"] => s.gpus = Some(1),
            ["gpu", n] if n.chars().all(|c| c.is_ascii_digit()) => s.gpus = Some(count("gres", n)?),
            ["gpu", model] => {
                s.gpu_model = Some((*model).to_string());
                s.gpus = Some(1);
            }
            ["gpu", model, n] => {
                s.gpu_model = Some((*model).to_string());
                s.gpus = Some(count("gres", n)?);
            }
            _ => bail!("#SBATCH --gres={v}: gpool reads gpu:N and gpu:MODEL:N; {item} is not one"),
        }
    }
    Ok(())
}

/// sbatch's options in gpool's terms; a refusal names the option and why.
pub(crate) fn slurm_options(words: &[String]) -> anyhow::Result<Slurm> {
    let mut s = Slurm::default();
    let (mut nodes, mut per_node, mut tasks) = (None, None, None);
    for (name, v) in options(words)? {
        match name.as_str() {
            "gres" => gres(&v, &mut s)?,
            "gpus" | "gpus-per-node" | "gpus-per-task" => {
                // `--gpus=H100-80GB:2` names a type too.
                match v.rsplit_once(':') {
                    Some((model, n)) => {
                        s.gpu_model = Some(model.to_string());
                        s.gpus = Some(count(&name, n)?);
                    }
                    None => s.gpus = Some(count(&name, &v)?),
                }
            }
            "time" => s.time = Some(v),
            "job-name" => s.name = Some(v),
            "reservation" => s.reservation = Some(v),
            "partition" => s.queue = Some(v),
            "nodes" => nodes = Some(count(&name, v.split('-').next().unwrap_or(&v))?),
            "ntasks-per-node" => per_node = Some(count(&name, &v)?),
            "ntasks" => tasks = Some(count(&name, &v)?),
            "cpus-per-task" => s.cpus = Some(v),
            "mem" => s.memory = Some(memory(&v)?),
            "dependency" => s.after.extend(v.split(',').map(str::to_string)),
            "begin" => s.begin = Some(v),
            "chdir" => s.workdir = Some(v),
            "array" => s.array = Some(v),
            "mail-type" | "mail-user" | "comment" | "parsable" | "requeue" | "export" | "open-mode" => {
                s.ignored.push(name)
            }
            "output" | "error" => bail!(
                "#SBATCH --{name}={v}: gpool keeps each replica's output and error itself (gpool logs ID, \
                 gpool logs ID --stderr); remove the line, or copy them at the script's end"
            ),
            "account" | "qos" => bail!(
                "#SBATCH --{name}={v}: gpool has no accounts or QOS; a job's team comes from its token and its \
                 priority from --priority (see docs/slurm.md)"
            ),
            other => bail!("#SBATCH --{other}: gpool does not take this option (docs/slurm.md lists those it does)"),
        }
    }
    s.replicas = match (nodes, per_node, tasks) {
        (Some(n), Some(k), _) => Some(n * k),
        (Some(n), None, None) => Some(n),
        (None, Some(k), None) => Some(k),
        (_, _, Some(t)) => Some(t),
        (None, None, None) => None,
    };
    Ok(s)
}

/// Reads a batch script: its interpreter, directives and what it asks for.
pub(crate) fn read(path: &Path) -> anyhow::Result<Script> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse(&text, &path.display().to_string())
}

pub(crate) fn parse(text: &str, name: &str) -> anyhow::Result<Script> {
    let Some(shebang) = text.lines().next().and_then(|l| l.strip_prefix("#!")) else {
        bail!("{name}: a batch script starts with its interpreter, e.g. #!/bin/bash (as sbatch requires)");
    };
    let mut argv = shell_words(shebang);
    if argv.is_empty() {
        bail!("{name}: its #! line names no interpreter");
    }
    // The script travels in the job's command: nodes need not see this file.
    argv.extend(["-c".to_string(), text.to_string(), name.to_string()]);
    let slurm = slurm_options(&header(text, "#SBATCH")).with_context(|| name.to_string())?;
    Ok(Script { argv, slurm, gpool_words: header(text, "#GPOOL") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_reads_as_sbatch_reads_it() {
        let text = "#!/bin/bash -l\n#SBATCH --gres=gpu:2 --time=1-00:00:00\n#SBATCH -J bars-sb\n\n#SBATCH --partition=research # the queue\n#SBATCH --nodes=2 --ntasks-per-node=4 -c 8 --mem=32G\n#SBATCH --dependency=afterok:12 --mail-type=END\n#GPOOL --image pytorch:2.5\necho hi\n#SBATCH --gres=gpu:8\n";
        let s = parse(text, "train.sbatch").expect("a script");
        assert_eq!(s.argv[..3], ["/bin/bash".to_string(), "-l".into(), "-c".into()]);
        assert_eq!((s.argv[3].as_str(), s.argv[4].as_str()), (text, "train.sbatch"));
        let want = Slurm {
            gpus: Some(2),
            time: Some("1-00:00:00".into()),
            name: Some("bars-sb".into()),
            queue: Some("research".into()),
            replicas: Some(8),
            cpus: Some("8".into()),
            memory: Some("32Gi".into()),
            after: vec!["afterok:12".into()],
            ignored: vec!["mail-type".into()],
            ..Slurm::default()
        };
        assert_eq!(s.slurm, want, "a directive after the first command is not one");
        assert_eq!(s.gpool_words, ["--image", "pytorch:2.5"]);
    }

    #[test]
    fn what_gpool_cannot_honour_is_refused_with_why() {
        let cases = [
            ("#SBATCH --output=slurm-%j.out", "gpool logs"),
            ("#SBATCH --account=proj1", "no accounts"),
            ("#SBATCH --gres=nvme:1", "gpu:N"),
            ("#SBATCH --licenses=matlab", "does not take"),
            ("#SBATCH --mem=lots", "megabytes"),
            ("#SBATCH -N", "must follow"),
            ("#SBATCH --nodes=two", "whole number"),
        ];
        for (line, want) in cases {
            let err = format!("{:#}", parse(&format!("#!/bin/sh\n{line}\ntrue\n"), "s.sh").expect_err(line));
            assert!(err.contains(want), "{line}: {err}");
        }
        let err = format!("{:#}", parse("echo no shebang\n", "s.sh").expect_err("no #!"));
        assert!(err.contains("#!/bin/bash"), "{err}");
    }

    #[test]
    fn short_options_and_gpu_types_read_as_in_slurm() {
        let words: Vec<String> =
            ["-t", "90", "-G", "H100-80GB:4", "-n3", "--mem=16000", "--begin=now+1h"].map(String::from).to_vec();
        let s = slurm_options(&words).expect("options");
        assert_eq!(
            (s.time.as_deref(), s.gpus, s.gpu_model.as_deref(), s.replicas, s.memory.as_deref(), s.begin.as_deref()),
            (Some("90"), Some(4), Some("H100-80GB"), Some(3), Some("16000Mi"), Some("now+1h"))
        );
    }
}
