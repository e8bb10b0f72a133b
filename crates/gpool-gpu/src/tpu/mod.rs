//! Google Cloud TPUs (`google.com/tpu`): the `tpu-info` parser and a
//! [`Backend`](crate::Backend) for the chips of a TPU VM ([`Tpu`]).

pub mod backend;
pub mod tpu_info;

pub use backend::{HBM_MIB, Tpu, chips_in, generation};
pub use tpu_info::{TpuChip, TpuInfo, TpuUsage, parse_tpu_info};
