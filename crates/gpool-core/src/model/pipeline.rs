//! A pipeline's shape: named stages with `needs:` edges that must form a
//! DAG, and a stage's fan-out over a matrix of values.
//!
//! Pure checks and expansion only. Once a pipeline is accepted its stage
//! instances are ordinary jobs whose dependencies (`afterok`) are the
//! instances of the stages they need, so the scheduler orders them with the
//! rules every job follows: a job starts only after everything it depends
//! on succeeded, a job whose dependency failed or was cancelled never
//! starts, and a job waiting on another is not pending demand.

use std::collections::BTreeMap;
use std::fmt;

/// Most instances one stage's matrix may expand to.
pub const MAX_MATRIX: usize = 256;
/// Most jobs (stage instances) one pipeline run may have.
pub const MAX_JOBS: usize = 1000;

/// A stage as the DAG check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageShape {
    pub name: String,
    pub needs: Vec<String>,
    /// Each key's values, in the order written.
    pub matrix: BTreeMap<String, Vec<String>>,
}

/// Why a pipeline cannot be accepted; each names the stage.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    #[error("the pipeline has no stages")]
    Empty,
    #[error("stage {index}: a stage needs a name")]
    Unnamed { index: usize },
    #[error(
        "stage {0:?}: a stage name is letters, digits, '-' and '_' (it names the stage's jobs and is what `needs:` refers to)"
    )]
    BadName(String),
    #[error("stage {0:?} is defined twice")]
    Duplicate(String),
    #[error("stage {stage:?} needs {need:?}, which is not a stage of this pipeline")]
    UnknownNeed { stage: String, need: String },
    #[error("stage {0:?} needs itself")]
    NeedsItself(String),
    #[error("stages form a cycle: {}", .0.join(" → "))]
    Cycle(Vec<String>),
    #[error("stage {stage:?}: matrix key {key:?} has no values")]
    EmptyMatrix { stage: String, key: String },
    #[error("stage {stage:?}: matrix key {key:?} is letters, digits and '_'")]
    BadMatrixKey { stage: String, key: String },
    #[error("stage {stage:?}: its matrix expands to {count} jobs; at most {MAX_MATRIX}")]
    MatrixTooLarge { stage: String, count: usize },
    #[error("the pipeline expands to {0} jobs; at most {MAX_JOBS}")]
    TooManyJobs(usize),
}

/// One job of a run: a stage, and its matrix values if it fans out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// Index of its stage in the pipeline as written.
    pub stage: usize,
    /// Its matrix values (empty without a matrix).
    pub values: BTreeMap<String, String>,
    /// Indices (into the run's instances) of every instance it needs.
    pub needs: Vec<usize>,
}

impl Instance {
    /// `train[lr=0.1,seed=2]`, or the stage's name without a matrix.
    pub fn label(&self, stage_name: &str) -> String {
        if self.values.is_empty() {
            return stage_name.to_string();
        }
        let vals: Vec<String> = self.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{stage_name}[{}]", vals.join(","))
    }
}

fn good_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Stage indices in an order where every stage comes after those it needs
/// (ties in the order written), or why there is none.
pub fn order(stages: &[StageShape]) -> Result<Vec<usize>, PipelineError> {
    if stages.is_empty() {
        return Err(PipelineError::Empty);
    }
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, s) in stages.iter().enumerate() {
        if s.name.is_empty() {
            return Err(PipelineError::Unnamed { index: i });
        }
        if !good_name(&s.name) {
            return Err(PipelineError::BadName(s.name.clone()));
        }
        if index.insert(&s.name, i).is_some() {
            return Err(PipelineError::Duplicate(s.name.clone()));
        }
    }
    let mut needs: Vec<Vec<usize>> = Vec::with_capacity(stages.len());
    for s in stages {
        let mut mine = Vec::new();
        for n in &s.needs {
            if *n == s.name {
                return Err(PipelineError::NeedsItself(s.name.clone()));
            }
            let Some(&j) = index.get(n.as_str()) else {
                return Err(PipelineError::UnknownNeed { stage: s.name.clone(), need: n.clone() });
            };
            if !mine.contains(&j) {
                mine.push(j);
            }
        }
        needs.push(mine);
    }
    // Kahn's algorithm, taking the earliest written stage that is ready.
    let mut waiting: Vec<usize> = needs.iter().map(Vec::len).collect();
    let mut out = Vec::with_capacity(stages.len());
    let mut done = vec![false; stages.len()];
    while out.len() < stages.len() {
        let Some(next) = (0..stages.len()).find(|&i| !done[i] && waiting[i] == 0) else {
            return Err(PipelineError::Cycle(cycle(stages, &needs, &done)));
        };
        done[next] = true;
        out.push(next);
        for (i, n) in needs.iter().enumerate() {
            if n.contains(&next) {
                waiting[i] -= 1;
            }
        }
    }
    Ok(out)
}

/// One cycle among the stages not yet ordered (each of them needs another
/// of them, so following `needs` from any of them comes back round).
fn cycle(stages: &[StageShape], needs: &[Vec<usize>], done: &[bool]) -> Vec<String> {
    let Some(start) = (0..stages.len()).find(|&i| !done[i]) else { return Vec::new() };
    let mut path = vec![start];
    let mut at = start;
    loop {
        let Some(&next) = needs[at].iter().find(|&&j| !done[j]) else { return Vec::new() };
        if let Some(pos) = path.iter().position(|&p| p == next) {
            let mut names: Vec<String> = path[pos..].iter().map(|&i| stages[i].name.clone()).collect();
            names.push(stages[next].name.clone());
            // Written in the direction work flows: what is needed first.
            names.reverse();
            return names;
        }
        path.push(next);
        at = next;
    }
}

/// Every combination of a matrix's values (keys in name order, values in
/// the order written); one empty combination without a matrix.
pub fn combinations(stage: &StageShape) -> Result<Vec<BTreeMap<String, String>>, PipelineError> {
    let mut count = 1usize;
    for (k, vs) in &stage.matrix {
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PipelineError::BadMatrixKey { stage: stage.name.clone(), key: k.clone() });
        }
        if vs.is_empty() {
            return Err(PipelineError::EmptyMatrix { stage: stage.name.clone(), key: k.clone() });
        }
        count = count.saturating_mul(vs.len());
    }
    if count > MAX_MATRIX {
        return Err(PipelineError::MatrixTooLarge { stage: stage.name.clone(), count });
    }
    let mut out = vec![BTreeMap::new()];
    for (k, vs) in &stage.matrix {
        out = out
            .into_iter()
            .flat_map(|base| {
                vs.iter().map(move |v| {
                    let mut m = base.clone();
                    m.insert(k.clone(), v.clone());
                    m
                })
            })
            .collect();
    }
    Ok(out)
}

/// A run's jobs: each stage's instances, stages in [`order`], each instance
/// needing every instance of every stage its stage needs (a fanned-out
/// stage is done when all of its instances are).
pub fn expand(stages: &[StageShape]) -> Result<Vec<Instance>, PipelineError> {
    let order = order(stages)?;
    let mut per_stage: Vec<Vec<usize>> = vec![Vec::new(); stages.len()];
    let mut out: Vec<Instance> = Vec::new();
    for &s in &order {
        let combos = combinations(&stages[s])?;
        let needs: Vec<usize> = stages[s]
            .needs
            .iter()
            .filter_map(|n| stages.iter().position(|x| x.name == *n))
            .flat_map(|j| per_stage[j].iter().copied())
            .collect::<std::collections::BTreeSet<usize>>()
            .into_iter()
            .collect();
        for values in combos {
            per_stage[s].push(out.len());
            out.push(Instance { stage: s, values, needs: needs.clone() });
            if out.len() > MAX_JOBS {
                let total = stages.iter().map(|st| combinations(st).map_or(0, |c| c.len())).sum();
                return Err(PipelineError::TooManyJobs(total));
            }
        }
    }
    Ok(out)
}

/// Where a run stands, from its jobs' states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RunState {
    /// No job has started yet.
    Pending,
    /// Some job is running, or some ended and others wait.
    Running,
    Succeeded,
    /// Every job ended and one failed (a stage failed, or could never start).
    Failed,
    /// Every job ended and one was cancelled (none failed on its own).
    Cancelled,
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        })
    }
}

/// How one job of a run stands, as [`run_state`] needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageState {
    Waiting,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

/// A run's state from its jobs'. A run with a cancelled stage is cancelled
/// once everything ended, though the stages after it failed (they could
/// never start): the cancellation is what happened to it.
pub fn run_state(jobs: &[StageState]) -> RunState {
    let ended = |s: &StageState| matches!(s, StageState::Succeeded | StageState::Failed | StageState::Cancelled);
    if !jobs.iter().all(ended) {
        let started = jobs.iter().any(|s| *s != StageState::Waiting);
        return if started { RunState::Running } else { RunState::Pending };
    }
    if jobs.contains(&StageState::Cancelled) {
        RunState::Cancelled
    } else if jobs.contains(&StageState::Failed) {
        RunState::Failed
    } else {
        RunState::Succeeded
    }
}
