//! NVIDIA XID errors: what each one means and what it asks of gpool.
//!
//! Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog"
//! (<https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html>,
//! Ampere and newer), its column "Resolution Bucket (Immediate Action)":
//!
//! - `RESET_GPU`, `RESTART_BM` (reboot the machine), `CONTACT_SUPPORT`
//!   (for an XID that is in use): the GPU cannot be trusted until it is
//!   reset or checked → [`XidAction::TakeGpuOut`].
//! - `RESTART_APP`: the application hit it (a bad address, an illegal
//!   instruction, a hung kernel); the GPU is fine → [`XidAction::EndJob`].
//! - `IGNORE` (and events the catalog marks informational, such as a
//!   recorded page retirement) → [`XidAction::Note`].
//!
//! An XID missing from the table is noted, never acted on: taking GPUs out
//! for events nobody classified would empty a fleet on a driver update.

/// What gpool does when a GPU raises an XID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidAction {
    /// The GPU is quarantined and whatever runs on it is requeued as an
    /// infrastructure failure.
    TakeGpuOut,
    /// The job on the GPU ends, failed, with the XID in its reason; the GPU
    /// stays in service.
    EndJob,
    /// Recorded in the node's events only.
    Note,
}

/// One XID as gpool knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XidInfo {
    pub xid: u64,
    pub action: XidAction,
    /// NVIDIA's description, short.
    pub meaning: &'static str,
}

use XidAction::{EndJob, Note, TakeGpuOut};

/// The XIDs gpool acts on, by number (sorted: looked up by binary search).
pub const XIDS: &[(u64, XidAction, &str)] = &[
    (8, EndJob, "GPU stopped processing"),
    (11, EndJob, "invalid or corrupted push buffer stream"),
    (13, EndJob, "graphics engine exception"),
    (31, EndJob, "GPU memory page fault"),
    (32, EndJob, "invalid or corrupted push buffer stream"),
    (38, TakeGpuOut, "driver firmware error"),
    (43, EndJob, "GPU stopped processing"),
    (44, EndJob, "graphics engine fault during context switch"),
    (45, Note, "preemptive cleanup, due to previous errors"),
    (48, TakeGpuOut, "double-bit ECC error"),
    (56, Note, "display engine error"),
    (57, TakeGpuOut, "error programming video memory interface"),
    (61, TakeGpuOut, "internal micro-controller breakpoint/warning"),
    (62, TakeGpuOut, "internal micro-controller halt"),
    (63, Note, "ECC page retirement or row remapping recorded"),
    (64, TakeGpuOut, "ECC page retirement or row remapping failed to record"),
    (68, EndJob, "video processor exception"),
    (69, EndJob, "graphics engine class error"),
    (74, TakeGpuOut, "NVLink error"),
    (79, TakeGpuOut, "GPU has fallen off the bus"),
    (92, TakeGpuOut, "high single-bit ECC error rate"),
    (94, TakeGpuOut, "contained ECC error (the GPU needs a reset to remap the row)"),
    (95, TakeGpuOut, "uncontained ECC error"),
    (109, EndJob, "context switch timeout"),
    (119, TakeGpuOut, "GSP RPC timeout"),
    (120, TakeGpuOut, "GSP error"),
    (121, Note, "C2C link corrected error"),
    (123, TakeGpuOut, "SPI PMU RPC write failure"),
    (136, TakeGpuOut, "link training failed"),
    (140, TakeGpuOut, "unrecovered ECC error"),
    (143, TakeGpuOut, "GPU initialization failure"),
    (144, TakeGpuOut, "NVLink SAW error"),
    (145, TakeGpuOut, "NVLink RLW error"),
    (149, TakeGpuOut, "NVLink NETIR error"),
    (154, Note, "GPU recovery action changed"),
];

/// What gpool knows of XID `xid`: unknown ones are [`XidAction::Note`].
pub fn xid(xid: u64) -> XidInfo {
    match XIDS.binary_search_by_key(&xid, |(x, _, _)| *x) {
        Ok(i) => XidInfo { xid, action: XIDS[i].1, meaning: XIDS[i].2 },
        Err(_) => XidInfo { xid, action: Note, meaning: "not in gpool's table: noted only" },
    }
}

impl std::fmt::Display for XidInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XID {} ({})", self.xid, self.meaning)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_without_repeats_so_lookups_find_every_entry() {
        assert!(XIDS.windows(2).all(|w| w[0].0 < w[1].0), "XIDS must stay sorted by number");
        for (x, action, _) in XIDS {
            assert_eq!(xid(*x).action, *action, "XID {x}");
        }
    }

    #[test]
    fn the_issues_examples_are_classified_as_nvidia_says() {
        for x in [48, 74, 79, 92, 94, 95, 119, 120] {
            assert_eq!(xid(x).action, XidAction::TakeGpuOut, "XID {x} is fatal to the GPU");
        }
        for x in [13, 31, 43] {
            assert_eq!(xid(x).action, XidAction::EndJob, "XID {x} is the application's");
        }
        assert_eq!(xid(63).action, XidAction::Note);
        assert_eq!(xid(9999).action, XidAction::Note, "unknown XIDs are only noted");
        assert_eq!(xid(79).to_string(), "XID 79 (GPU has fallen off the bus)");
    }
}
