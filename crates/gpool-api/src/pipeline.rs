//! Pipelines on the wire: the YAML users write (named stages, each a job
//! spec with `needs:` and an optional `matrix:`) and what the API shows of a
//! run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::spec::JobSpec;
use crate::view::JobState;

/// A pipeline: stages whose `needs:` form a DAG.
///
/// ```yaml
/// name: nightly
/// stages:
///   - name: prep
///     command: python prep.py --out $GPOOL_PIPELINE_DIR/data
///     resources: {cpu: 4}
///   - name: train
///     needs: [prep]
///     matrix: {lr: [0.1, 0.01]}
///     command: python train.py --lr {{matrix.lr}}
///     resources: {nvidia.com/gpu: 1}
///     retries: 2
///   - name: eval
///     needs: [train]
///     command: python eval.py
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PipelineSpec {
    /// Names the run's jobs (`nightly.train`); `gpool pipeline run` takes
    /// the file's name when it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Pipeline`, if given (a file read by `gpool submit -f` is told apart by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub stages: Vec<StageSpec>,
}

/// A stage: a job spec (every field of one, at the same level) with a
/// name, the stages it needs, and an optional matrix it fans out over.
/// `{{matrix.KEY}}` in its command, environment and working directory is
/// replaced by the instance's value, which its environment also holds as
/// `GPOOL_MATRIX_KEY`.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StageSpec {
    pub name: String,
    /// Stages that must all succeed (every instance of each) before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// Values to fan out over: one job per combination.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matrix: BTreeMap<String, Vec<String>>,
    #[serde(flatten)]
    pub job: JobSpec,
}

impl<'de> Deserialize<'de> for StageSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StageSpec, D::Error> {
        use serde::de::Error;
        let mut map = serde_json::Map::<String, Value>::deserialize(d)?;
        let name = match map.remove("name") {
            Some(Value::String(s)) => s,
            Some(other) => return Err(D::Error::custom(format!("stage name: expected text, got {other}"))),
            None => return Err(D::Error::custom("a stage needs a name (name: train)")),
        };
        let at = |e: &dyn std::fmt::Display| D::Error::custom(format!("stage {name:?}: {e}"));
        let needs = match map.remove("needs") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s],
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    other => Err(at(&format!("needs: expected stage names, got {other}"))),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(at(&format!("needs: expected a list of stage names, got {other}"))),
        };
        let matrix = match map.remove("matrix") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(keys)) => keys
                .into_iter()
                .map(|(k, v)| {
                    let Value::Array(items) = v else {
                        return Err(at(&format!("matrix.{k}: expected a list of values, got {v}")));
                    };
                    let values = items
                        .into_iter()
                        .map(|v| {
                            scalar(&v).ok_or_else(|| at(&format!("matrix.{k}: {v} is not a text, number or boolean")))
                        })
                        .collect::<Result<Vec<String>, _>>()?;
                    Ok((k, values))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(at(&format!("matrix: expected a map of lists (lr: [0.1, 0.01]), got {other}"))),
        };
        let job = JobSpec::deserialize(Value::Object(map)).map_err(|e| at(&e))?;
        Ok(StageSpec { name, needs, matrix, job })
    }
}

/// A matrix value as the text it was written as.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The answer to a pipeline submission.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelineCreated {
    /// The run's id (its first job's id).
    pub run: u64,
    /// Its jobs, one per stage instance, in an order where each comes after what it needs.
    pub jobs: Vec<u64>,
}

/// A pipeline run as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelineView {
    pub run: u64,
    pub name: String,
    pub user: String,
    /// `pending`, `running`, `succeeded`, `failed` or `cancelled`.
    pub state: String,
    pub submitted_at: String,
    /// Its jobs, each after what it needs.
    pub stages: Vec<StageView>,
}

/// One job of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageView {
    pub stage: String,
    /// The stage with its matrix values: `train[lr=0.1]`.
    pub label: String,
    pub job: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matrix: BTreeMap<String, String>,
    /// How many stages lie before it on its longest chain of `needs` (0: needs none).
    pub depth: u32,
    pub state: JobState,
    /// Why it waits, or why it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// Recent runs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PipelineList {
    pub runs: Vec<PipelineView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_a_job_spec_with_a_name_needs_and_a_matrix() {
        let yaml = "name: nightly\nstages:\n  - name: prep\n    command: echo prep\n    resources: {cpu: 2}\n  - name: train\n    needs: prep\n    matrix: {lr: [0.1, 1e-3], fast: [true]}\n    command: [python, train.py, --lr, '{{matrix.lr}}']\n    resources: {nvidia.com/gpu: 1}\n    retries: 2\n";
        let p: PipelineSpec = crate::yaml::from_str(yaml).expect("valid");
        assert_eq!(p.stages.len(), 2);
        let train = &p.stages[1];
        assert_eq!(train.needs, vec!["prep".to_string()]);
        assert_eq!(train.matrix["lr"], vec!["0.1".to_string(), "0.001".to_string()]);
        assert_eq!(train.matrix["fast"], vec!["true".to_string()]);
        assert_eq!(train.job.retries, 2);
        // Round trip through JSON, as the CLI sends it.
        let json = serde_json::to_string(&p).expect("json");
        let back: PipelineSpec = serde_json::from_str(&json).expect("back");
        assert_eq!(back, p);
    }

    #[test]
    fn a_stages_unknown_field_is_named_with_its_stage() {
        let err = crate::yaml::from_str::<PipelineSpec>("stages:\n  - name: a\n    command: x\n    gpus: 2\n")
            .expect_err("unknown");
        let err = err.to_string();
        assert!(err.contains(r#"stage "a""#) && err.contains("unknown field `gpus`"), "{err}");
        let err = crate::yaml::from_str::<PipelineSpec>("stages:\n  - command: x\n").expect_err("unnamed");
        assert!(err.to_string().contains("a stage needs a name"), "{err}");
        let err = crate::yaml::from_str::<PipelineSpec>("stages:\n  - name: a\n    command: x\n    matrix: {lr: 3}\n")
            .expect_err("bad matrix");
        assert!(err.to_string().contains("matrix.lr: expected a list"), "{err}");
        let err = crate::yaml::from_str::<PipelineSpec>("stage: []\n").expect_err("unknown top field");
        assert!(err.to_string().contains("unknown field `stage`"), "{err}");
    }
}
