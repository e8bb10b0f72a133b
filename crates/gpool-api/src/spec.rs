//! The job spec users write: YAML (`gpool submit -f job.yaml`) or JSON (the
//! API). Kubernetes conventions: `resources` keyed by `nvidia.com/gpu` and
//! `nvidia.com/mig-<profile>`, `nodeSelector`, `affinity`. Unknown fields
//! are rejected with their name.
//!
//! ```yaml
//! name: train-llm
//! command: ["python", "train.py", "--epochs", "3"]   # or a string, run by /bin/sh -c
//! workdir: /home/ana/llm
//! env: {WANDB_MODE: offline}
//! resources:
//!   nvidia.com/gpu: 4          # or nvidia.com/mig-1g.10gb: 1, or gpool.io/gpu-memory: 20Gi
//!   cpu: 16
//!   memory: 64Gi
//! gpuModel: H100-80GB
//! replicas: 2                  # torchrun-style ranks, started together
//! queue: research
//! priority: high               # low | normal | high, or a number
//! preemptible: true
//! gracePeriod: 2m              # SIGTERM, then SIGKILL after this
//! stopSignal: SIGUSR1
//! timeLimit: 12h
//! retries: 2
//! dependsOn: [41]
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The command of a job: an argument vector, or a shell line.
///
/// Arguments that YAML reads as numbers or booleans (`--lr 0.1`, `true`) are
/// taken as the text they were written as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Command {
    Argv(Vec<String>),
    Shell(String),
}

/// What the server takes: a list whose first item names the program (any
/// scalar is an argument, as its text), or a shell line that is not blank.
impl schemars::JsonSchema for Command {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Command".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An argument vector ([python, train.py]; numbers and booleans are taken as the text they were written as), or a shell command line.",
            "oneOf": [
                {
                    "type": "array",
                    "minItems": 1,
                    "prefixItems": [{"type": ["string", "number", "boolean"], "minLength": 1}],
                    "items": {"type": ["string", "number", "boolean"]}
                },
                {"type": "string", "pattern": "\\S"}
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Command, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Command;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of arguments like [python, train.py] or a shell command line")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Command, E> {
                Ok(Command::Shell(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Command, A::Error> {
                let mut argv = Vec::new();
                while let Some(arg) = seq.next_element::<Arg>()? {
                    argv.push(arg.0);
                }
                Ok(Command::Argv(argv))
            }
        }
        d.deserialize_any(V)
    }
}

/// One argument: any scalar, as text.
struct Arg(String);

impl<'de> Deserialize<'de> for Arg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Arg, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Arg;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an argument (text, number or boolean)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Arg, E> {
                Ok(Arg(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Arg, E> {
                Ok(Arg(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Arg, E> {
                Ok(Arg(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Arg, E> {
                Ok(Arg(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Arg, E> {
                Ok(Arg(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl Command {
    /// The argument vector to execute.
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Argv(v) => v.clone(),
            Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            Command::Argv(v) => v.is_empty() || v[0].is_empty(),
            Command::Shell(s) => s.trim().is_empty(),
        }
    }
}

/// A label match expression (Kubernetes `matchExpressions`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchExpression {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A preferred expression with its weight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightedExpression {
    pub weight: u32,
    #[serde(flatten)]
    pub expression: MatchExpression,
}

/// Node affinity, simplified from Kubernetes: required expressions must all
/// hold; preferred ones add their weight to a node's score.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Affinity {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<MatchExpression>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred: Vec<WeightedExpression>,
}

/// A priority: a class name or a number.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Priority {
    Value(i32),
    Class(String),
}

/// A quantity: a number or a string with a unit (`32Gi`, `500m`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Quantity {
    Number(f64),
    Text(String),
}

impl Quantity {
    pub fn text(&self) -> String {
        match self {
            Quantity::Number(n) if n.fract() == 0.0 => format!("{n:.0}"),
            Quantity::Number(n) => n.to_string(),
            Quantity::Text(s) => s.clone(),
        }
    }
}

/// A duration: seconds as a number or text like `2h30m`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum DurationText {
    Seconds(f64),
    Text(String),
}

impl DurationText {
    pub fn text(&self) -> String {
        match self {
            DurationText::Seconds(s) => s.to_string(),
            DurationText::Text(t) => t.clone(),
        }
    }
}

fn one() -> u32 {
    1
}

/// A job as submitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub command: Command,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::patterns::ABSOLUTE_PATH))]
    pub workdir: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `nvidia.com/gpu`, `amd.com/gpu`, `google.com/tpu`, `gpool.io/gpu`,
    /// `nvidia.com/mig-<profile>`, `gpool.io/gpu-memory`, `cpu`, `memory`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    /// A multi-host TPU slice of this topology (`2x2x2`): one replica per
    /// host, all on hosts of one slice (nodes labelled
    /// `gpool.io/tpu-slice`) whose `gpool.io/tpu-topology` is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu_topology: Option<String>,
    /// A number, or `{min, max}` for an elastic job (docs/elastic.md).
    #[serde(default)]
    #[schemars(with = "ReplicasSchema")]
    pub replicas: Replicas,
    /// The advance reservation it runs in (`gpool reservation`): only on its GPUs, only in its window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default)]
    pub preemptible: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<DurationText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<DurationText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<DurationText>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Avoid nodes running jobs whose labels match all of one of these maps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anti_affinity: Vec<BTreeMap<String, String>>,
    /// Not to start before this time: RFC 3339 with its zone
    /// (`2026-12-01T02:00:00+01:00`, `2026-12-01T01:00:00Z`); Slurm's `--begin`.
    /// `gpool submit --begin` also takes a local time or `now+2h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin_at: Option<String>,
    /// A soft deadline (RFC 3339 with its zone): the job rises in the order
    /// as it nears, and is reported when it can no longer make it; never enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Start only after these jobs succeeded (Slurm's `afterok`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<u64>,
    /// Start only after these jobs ended, however they ended (`afterany`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_any: Vec<u64>,
    /// Start only after these jobs failed or were cancelled (`afternotok`): clean-up and fallbacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_not_ok: Vec<u64>,
    /// Once started, preempted by no one (priority, fair share, reclaim) for
    /// this long (`minRuntime: 5m`); overrides its queue's. Power and health
    /// stops still apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_runtime: Option<DurationText>,
    /// A job array, as sbatch's `--array`: `0-99`, `1,3,5-7`, `0-20:2`, with
    /// `%N` for at most N tasks running at once (`0-99%8`). The submission
    /// becomes one job per index, with consecutive ids; the first is the array's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// Retries after a failure (non-zero exit), with exponential back-off.
    #[serde(default)]
    pub retries: u32,
    /// When a node running it fails (or a replica is lost): `requeue` (default) or `fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_node_failure: Option<NodeFailure>,
    /// When a replica of its gang holds the others back (a GPU slowing down
    /// for heat, say): `requeue` stops the gang with its grace period and
    /// places it again away from that GPU; `none` (default) names it only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_straggler: Option<OnStraggler>,
    /// Whether it may run on spot nodes, which their provider can take back:
    /// `never`, `allowed` or `preferred` (default: its queue's, else `allowed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot: Option<String>,
    /// An OCI image to run the command in (podman or docker on the node),
    /// e.g. `pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Makes the spec an inference service: replicas behind the proxy,
    /// scaled on load (`gpool submit -f` applies it to `/api/v1/services`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// An interactive session (`gpool run --pty`): the command runs on a
    /// pseudo-terminal that clients attach to (`gpool attach`), once the
    /// first one has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interactive: Option<Interactive>,
    /// Ports the job listens on that the service proxy forwards to, at
    /// `/job-ID-PORT/` or the host `job-ID-PORT.…` (`--expose 8888` for a notebook).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<u16>,
}

/// An interactive session's settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Interactive {
    /// How long the job outlives its last client (and waits for its first)
    /// before it is ended and its GPUs released (default 60 s, 5 s to 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detach_grace: Option<DurationText>,
}

/// An inference service's settings: how its replicas are probed and scaled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The HTTP path a replica answers 2xx on once it is ready (default `/`).
    #[serde(default = "root_path")]
    pub readiness: String,
    #[serde(default)]
    pub replicas: ReplicaRange,
    /// The load one replica should carry (default `{inFlight: 4}`).
    #[serde(default)]
    pub target: ServiceTarget,
    /// How long the scaler must want more replicas before it adds them (default 0 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up_delay: Option<DurationText>,
    /// How long it must want fewer before it removes them (default 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay: Option<DurationText>,
    /// The load is averaged over this window (default 60 s, as Knative's);
    /// a tenth of it is the panic window that reacts to a sudden jump.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<DurationText>,
}

fn root_path() -> String {
    "/".into()
}

/// How many replicas a job runs: a number (a gang of that width), or
/// `{min: 2, max: 8}` for an elastic job, which runs with any number in
/// between and is resized by the scheduler (docs/elastic.md). Written back
/// as a number when `min == max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    pub min: u32,
    pub max: u32,
}

impl Replicas {
    pub const ONE: Replicas = Replicas { min: 1, max: 1 };

    /// A gang of exactly `n`.
    pub fn fixed(n: u32) -> Replicas {
        Replicas { min: n, max: n }
    }

    /// Whether it may run at more than one size.
    pub fn is_elastic(&self) -> bool {
        self.max > self.min
    }
}

impl Default for Replicas {
    fn default() -> Replicas {
        Replicas::ONE
    }
}

impl std::fmt::Display for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_elastic() { write!(f, "{}:{}", self.min, self.max) } else { write!(f, "{}", self.min) }
    }
}

impl std::str::FromStr for Replicas {
    type Err = String;
    /// `4`, or `2:8` for an elastic job (`--replicas`).
    fn from_str(s: &str) -> Result<Replicas, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("replicas {s:?}: expected a number (4) or MIN:MAX for an elastic job (2:8)"))
        };
        match s.split_once(':') {
            None => Ok(Replicas::fixed(num(s)?)),
            Some((a, b)) => {
                let (min, max) = (num(a)?, num(b)?);
                if min > max {
                    return Err(format!("replicas {s:?}: the minimum {min} is above the maximum {max}"));
                }
                Ok(Replicas { min, max })
            }
        }
    }
}

impl Serialize for Replicas {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_elastic() {
            ReplicaRange { min: self.min, max: self.max }.serialize(s)
        } else {
            s.serialize_u32(self.min)
        }
    }
}

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Replicas, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Replicas;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of replicas (2), or {min: 2, max: 8} for an elastic job")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Replicas, E> {
                u32::try_from(v).map(Replicas::fixed).map_err(|_| E::custom(format!("replicas: {v} is too many")))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Replicas, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("replicas: {v} is negative")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Replicas, A::Error> {
                let r = ReplicaRange::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                if r.min > r.max {
                    return Err(serde::de::Error::custom(format!("replicas: min {} is above max {}", r.min, r.max)));
                }
                Ok(Replicas { min: r.min, max: r.max })
            }
        }
        d.deserialize_any(V)
    }
}

/// What `replicas` looks like in the API document.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum ReplicasSchema {
    Fixed(u32),
    Elastic(ReplicaRange),
}

/// The fewest and the most replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplicaRange {
    #[serde(default = "one")]
    pub min: u32,
    #[serde(default = "one")]
    pub max: u32,
}

impl Default for ReplicaRange {
    fn default() -> ReplicaRange {
        ReplicaRange { min: 1, max: 1 }
    }
}

/// One of: requests in flight per replica, or requests per second per replica.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rps: Option<f64>,
}

impl Default for ServiceTarget {
    fn default() -> ServiceTarget {
        ServiceTarget { in_flight: Some(4.0), rps: None }
    }
}

/// What gpool does about a straggler in a job's gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnStraggler {
    /// Name it in `gpool advise`, an alert and an event.
    None,
    /// Also stop the gang (grace period, checkpoint) and place it again away from the slow GPU.
    Requeue,
}

/// What happens to a job when a node it runs on fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeFailure {
    /// Back to the queue (and resume from its checkpoint).
    Requeue,
    /// Fail it (for jobs that must not run twice, even after a crash).
    Fail,
}

impl JobSpec {
    /// A spec running `argv` with no resources.
    pub fn new(argv: Vec<String>) -> JobSpec {
        JobSpec {
            name: None,
            command: Command::Argv(argv),
            workdir: None,
            env: BTreeMap::new(),
            resources: BTreeMap::new(),
            gpu_model: None,
            tpu_topology: None,
            replicas: Replicas::ONE,
            reservation: None,
            queue: None,
            priority: None,
            preemptible: false,
            grace_period: None,
            stop_signal: None,
            time_limit: None,
            estimate: None,
            node_selector: BTreeMap::new(),
            affinity: None,
            labels: BTreeMap::new(),
            anti_affinity: Vec::new(),
            depends_on: Vec::new(),
            after_any: Vec::new(),
            begin_at: None,
            deadline: None,
            after_not_ok: Vec::new(),
            array: None,
            min_runtime: None,
            retries: 0,
            on_node_failure: None,
            on_straggler: None,
            spot: None,
            image: None,
            service: None,
            interactive: None,
            expose: Vec::new(),
        }
    }
}

/// A batch submission: `{"jobs": [spec, …]}`. A single spec is sent bare.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    pub jobs: Vec<JobSpec>,
}

/// The most tasks one array may have.
pub const MAX_ARRAY_TASKS: usize = 10_000;

/// A job array's indexes, in order, and how many may run at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArraySpec {
    pub indexes: Vec<u32>,
    pub limit: Option<u32>,
}

/// Reads sbatch's `--array` forms: `0-99`, `1,3,5-7`, `0-20:2`, each with an
/// optional `%N` (at most N tasks at once). Indexes are kept in the order
/// written, without repeats.
pub fn parse_array(text: &str) -> Result<ArraySpec, String> {
    let bad = |why: &str| format!("{text:?}: {why} (e.g. 0-99, 1,3,5-7, 0-20:2, 0-99%8)");
    let (list, limit) = match text.trim().split_once('%') {
        Some((l, n)) => {
            (l, Some(n.trim().parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| bad("%N needs N of 1 or more"))?))
        }
        None => (text.trim(), None),
    };
    let mut indexes = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for item in list.split(',') {
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => {
                (r, s.trim().parse::<u32>().ok().filter(|s| *s > 0).ok_or_else(|| bad("a step is 1 or more"))?)
            }
            None => (item, 1),
        };
        let num = |s: &str| s.trim().parse::<u32>().map_err(|_| bad("indexes are whole numbers"));
        let (from, to) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(range)?, num(range)?),
        };
        if to < from {
            return Err(bad("a range goes up"));
        }
        let mut i = from;
        while i <= to {
            if seen.insert(i) {
                indexes.push(i);
            }
            if indexes.len() > MAX_ARRAY_TASKS {
                return Err(bad(&format!("at most {MAX_ARRAY_TASKS} tasks")));
            }
            i = match i.checked_add(step) {
                Some(n) => n,
                None => break,
            };
        }
    }
    if indexes.is_empty() {
        return Err(bad("no index"));
    }
    Ok(ArraySpec { indexes, limit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_read_as_sbatch_reads_them() {
        let a = |t: &str| parse_array(t).map(|a| (a.indexes, a.limit));
        assert_eq!(a("0-3"), Ok((vec![0, 1, 2, 3], None)));
        assert_eq!(a("0-9%3").map(|(i, l)| (i.len(), l)), Ok((10, Some(3))));
        assert_eq!(a("1,3,5-7"), Ok((vec![1, 3, 5, 6, 7], None)));
        assert_eq!(a("0-20:5"), Ok((vec![0, 5, 10, 15, 20], None)));
        assert_eq!(a("3,1,3"), Ok((vec![3, 1], None)), "in the order written, once");
        for bad in ["", "a-b", "5-1", "0-9%0", "0-9:0", "0-99999", "1,,2"] {
            let e = parse_array(bad).expect_err(bad);
            assert!(e.contains("0-99%8"), "{bad}: {e}");
        }
    }

    #[test]
    fn yaml_specs_read_like_kubernetes() {
        let yaml = "name: t\ncommand: [python, train.py]\nresources:\n  nvidia.com/gpu: 4\n  memory: 64Gi\ngpuModel: H100-80GB\nreplicas: 2\npriority: high\ntimeLimit: 2h\n";
        let s: JobSpec = crate::yaml::from_str(yaml).expect("valid");
        assert_eq!(s.command.argv(), ["python", "train.py"]);
        assert_eq!(s.resources.get("nvidia.com/gpu"), Some(&Quantity::Number(4.0)));
        assert_eq!(s.priority, Some(Priority::Class("high".into())));
        assert_eq!(s.replicas, Replicas::fixed(2));
        let shell: JobSpec = crate::yaml::from_str("command: echo hi && sleep 1\n").expect("valid");
        assert_eq!(shell.command.argv(), ["/bin/sh", "-c", "echo hi && sleep 1"]);
        let scalars: JobSpec =
            crate::yaml::from_str("command: [python, train.py, --lr, 0.1, --epochs, 3, --fast, true]\n")
                .expect("valid");
        assert_eq!(scalars.command.argv(), ["python", "train.py", "--lr", "0.1", "--epochs", "3", "--fast", "true"]);
        let err = serde_json::from_str::<JobSpec>(r#"{"command": 5}"#).expect_err("a number is no command").to_string();
        assert!(err.contains("a list of arguments"), "{err}");
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = crate::yaml::from_str::<JobSpec>("command: [x]\ngpus: 4\n").expect_err("unknown");
        assert!(err.to_string().contains("unknown field `gpus`"), "{err}");
        let err =
            serde_json::from_str::<JobSpec>(r#"{"command":["x"],"affinity":{"requird":[]}}"#).expect_err("unknown");
        assert!(err.to_string().contains("requird"), "{err}");
    }

    #[test]
    fn a_service_block_reads_like_the_issue_example() {
        let yaml = "name: llm\ncommand: [python3, server.py]\nresources: {nvidia.com/gpu: 1}\nservice:\n  readiness: /health\n  replicas: {min: 0, max: 6}\n  target: {inFlight: 4}\n  scaleUpDelay: 0s\n  scaleDownDelay: 60s\n";
        let s: JobSpec = crate::yaml::from_str(yaml).expect("valid");
        let svc = s.service.expect("a service");
        assert_eq!(svc.readiness, "/health");
        assert_eq!(svc.replicas, ReplicaRange { min: 0, max: 6 });
        assert_eq!(svc.target.in_flight, Some(4.0));
        let bare: JobSpec = crate::yaml::from_str("command: [x]\nservice: {}\n").expect("defaults");
        let svc = bare.service.expect("a service");
        assert_eq!((svc.readiness.as_str(), svc.replicas.min, svc.target.in_flight), ("/", 1, Some(4.0)));
        let err = crate::yaml::from_str::<JobSpec>("command: [x]\nservice: {target: {qps: 3}}\n").expect_err("unknown");
        assert!(err.to_string().contains("qps"), "{err}");
    }

    #[test]
    fn batches_are_strict_too() {
        let batch: Batch =
            serde_json::from_str(r#"{"jobs":[{"command":["true"]},{"command":"true"}]}"#).expect("batch");
        assert_eq!(batch.jobs.len(), 2);
        assert!(serde_json::from_str::<Batch>(r#"{"jobs":[],"extra":1}"#).is_err());
    }

    #[test]
    fn replicas_are_a_number_or_an_elastic_range_and_bad_ones_say_what_to_write() {
        let parse = |r: &str| crate::yaml::from_str::<JobSpec>(&format!("command: [x]\nreplicas: {r}\n"));
        assert_eq!(parse("4").expect("number").replicas, Replicas::fixed(4));
        let elastic = parse("{min: 2, max: 8}").expect("range").replicas;
        assert_eq!((elastic, elastic.is_elastic()), (Replicas { min: 2, max: 8 }, true));
        assert_eq!(serde_json::to_value(elastic).expect("json"), serde_json::json!({"min": 2, "max": 8}));
        assert_eq!(serde_json::to_value(Replicas::fixed(3)).expect("json"), serde_json::json!(3));
        for (bad, says) in
            [("{min: 8, max: 2}", "above max"), ("-1", "negative"), ("{low: 2}", "low"), ("two", "a number")]
        {
            let e = parse(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!("2:8".parse::<Replicas>(), Ok(Replicas { min: 2, max: 8 }));
        assert_eq!("3".parse::<Replicas>().map(|r| r.to_string()), Ok("3".into()));
        assert!("8:2".parse::<Replicas>().is_err() && "x".parse::<Replicas>().is_err());
    }
}
