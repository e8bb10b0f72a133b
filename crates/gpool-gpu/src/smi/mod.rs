//! `nvidia-smi`: parsers for what it prints, and a [`Backend`](crate::Backend)
//! that runs it ([`NvidiaSmi`]).
//!
//! Each parser is a pure function over `&str`, one module per output:
//!
//! | output | module | function |
//! |---|---|---|
//! | `--query-gpu=… --format=csv` | [`csv`] | [`parse_query_gpu`] |
//! | `--query-compute-apps=… --format=csv` | [`csv`] | [`parse_compute_apps`] |
//! | `-L` | [`list`] | [`parse_list`] |
//! | the inventory from whichever of these answer | [`inventory`] | [`inventory::inventory`] |
//! | `mig -lgi`, `-lci`, `-lgip`, `-lcip`, `-lgipp`, `-cgi` | [`mig`] | [`parse_gpu_instances`], [`parse_compute_instances`], [`parse_gpu_instance_profiles`], [`parse_compute_instance_profiles`], [`parse_placements`], [`parse_create`] |
//! | `-q -x` | [`xml`] | [`parse_xml`] |
//! | `-q` | [`text`] | [`parse_text`] |
//! | `nvidia-smi` (the table) | [`table`] | [`parse_table`] |
//! | `dmon`, `pmon` | [`dmon`] | [`parse_dmon`], [`parse_pmon`] |
//! | `--version` | [`version`] | [`parse_version`] |
//! | `--help-query-gpu` | [`help`] | [`parse_help_query`] |
//! | `slurmd -G` (Slurm, not nvidia-smi) | [`gres`] | [`parse_gres`] |
//!
//! Rules they share: a missing value (`[N/A]`, `N/A`, `[Not Supported]`,
//! `ERR!`, `[Requested functionality has been deprecated]`) is `None`, never
//! zero and never an error; nothing depends on a GPU model name; no input
//! makes them panic; text that does not have the expected shape is a
//! [`GpuError::Parse`](crate::GpuError::Parse) naming the line.

pub mod backend;
pub mod commands;
pub mod csv;
pub mod dmon;
pub mod gres;
pub mod help;
pub mod inventory;
pub mod kmsg;
pub mod list;
pub mod mig;
pub mod report;
pub mod table;
pub mod text;
pub mod value;
pub mod version;
pub mod xml;

pub use crate::tool::find_in_path;
pub use backend::{NO_SMI_FOR_MIG, NvidiaSmi, apply_mig_layout_on_path};
pub use commands::{
    COMPUTE_APPS_ARGS, COMPUTE_APPS_FIELDS, INVENTORY_ARGS, INVENTORY_FIELDS, LIST_ARGS, MIG_LGI_ARGS, SAMPLE_ARGS,
    SAMPLE_FIELDS, TEXT_ARGS, XML_ARGS,
};
pub use csv::{ComputeApp, CsvTable, Query, QueryGpuRow, parse_compute_apps, parse_query_gpu};
pub use dmon::{DmonRow, PmonRow, parse_dmon, parse_pmon};
pub use gres::{Gres, parse_gres};
pub use help::{QueryField, parse_help_query};
pub use inventory::{Inventory, mig_inventory};
pub use list::{ListedGpu, ListedMig, parse_list};
pub use mig::{
    ComputeInstance, ComputeInstanceProfile, GpuInstance, GpuInstanceProfile, MigCreateError, MigCreateFailure,
    MigCreateReport, MigCreated, ProfilePlacements, parse_compute_instance_profiles, parse_compute_instances,
    parse_create, parse_gpu_instance_profiles, parse_gpu_instances, parse_placements,
};
pub use report::{Report, ReportGpu, ReportMigDevice};
pub use table::{SmiTable, TableGpu, TableMigDevice, TableProcess, parse_table};
pub use text::parse_text;
pub use version::{SmiVersion, parse_version};
pub use xml::parse_xml;
