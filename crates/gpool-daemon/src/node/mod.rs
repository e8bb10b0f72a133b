//! The node wing: what runs on a GPU node. The agent starts replicas under
//! shims and reports their ends; the sampler reads the devices; `remote`
//! is `gpool agent`, the agent's side of the agent protocol (`execute`
//! carries out its commands); `host` finds this machine's GPUs and
//! describes it; `container`, `pull` and `image_cache` run jobs in images. It speaks to the control plane
//! only through `crate::protocol` and never imports `crate::plane`.

pub mod account;
pub mod agent;
pub mod cgroup;
pub(crate) mod claim;
pub mod clock;
pub(crate) mod conn;
pub mod container;
pub mod container_env;
pub mod devices;
pub mod execute;
pub mod handover;
pub mod host;
pub mod image_cache;
pub mod job_dir;
pub mod lease;
pub(crate) mod log_shipper;
pub mod outage;
pub mod output;
pub mod peers;
pub mod pipeline_dir;
pub mod private_images;
pub mod profiler;
pub mod pull;
pub mod sampler;
pub(crate) mod session_gate;
pub mod shim;
pub mod spot_watch;
pub mod terminal;
pub mod terminal_link;
pub mod trust;
