//! `nvidia-smi` output parsers and the backend that runs it.

use std::path::PathBuf;

use crate::{Backend, GpuError, GpuInfo, GpuSample};

/// The `nvidia-smi` backend (being written on the gpu branch).
pub struct NvidiaSmi {
    path: Option<PathBuf>,
}

impl NvidiaSmi {
    pub fn new(path: Option<PathBuf>) -> NvidiaSmi {
        NvidiaSmi { path }
    }
}

impl Backend for NvidiaSmi {
    fn name(&self) -> &'static str {
        "nvidia-smi"
    }
    fn inventory(&mut self) -> Result<Vec<GpuInfo>, GpuError> {
        Err(GpuError::Smi { args: format!("{:?}", self.path), why: "not yet".into() })
    }
    fn sample(&mut self) -> Result<Vec<GpuSample>, GpuError> {
        Err(GpuError::Smi { args: String::new(), why: "not yet".into() })
    }
}
