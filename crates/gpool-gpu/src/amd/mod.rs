//! AMD GPUs (`amd.com/gpu`): parsers for what `amd-smi` and `rocm-smi`
//! print as JSON, and a [`Backend`](crate::Backend) that runs them
//! ([`Amd`]). Parsers are pure functions over `&str`, read keys by meaning
//! (names changed between ROCm releases) and never panic; tested on the
//! recorded outputs in `data/amd/`.

pub mod amd_smi;
pub mod backend;
pub mod rocm_smi;
pub mod value;

pub use amd_smi::{AmdMetric, AmdStatic, parse_metric, parse_process, parse_static};
pub use backend::{AMD_METRIC_ARGS, AMD_PROCESS_ARGS, AMD_STATIC_ARGS, Amd, ROCM_SMI_ARGS, amd_model, name_and_model};
pub use rocm_smi::{RocmCard, parse_rocm_smi};
