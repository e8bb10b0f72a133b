//! Whole GPUs shared by several jobs ([`crate::GpuRequest::Share`]): what
//! each shared GPU of a node has given out.
//!
//! A GPU is either free (its bit in `NodeFree::gpus`), held whole, or shared:
//! listed here and out of `gpus`, so a whole-GPU job never lands on it. It
//! goes back to `gpus` when its last share is released.

use crate::model::job::GpuShare;

/// What has been given out of one shared GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotShare {
    /// The whole-GPU slot (bit index of `ReplicaPlacement::gpus`).
    pub(crate) slot: u8,
    /// Compute given out, in thousandths.
    pub(crate) milli: u16,
    pub(crate) memory_mb: u64,
    /// Replicas holding a share of it.
    pub(crate) holders: u16,
}

fn slot_of(gpu_bit: u64) -> Option<u8> {
    (gpu_bit != 0).then(|| gpu_bit.trailing_zeros() as u8)
}

/// Records a share of the GPU in `gpu_bit` (which the caller takes out of `gpus`).
pub(crate) fn take(shares: &mut Vec<SlotShare>, gpu_bit: u64, share: GpuShare) {
    let Some(slot) = slot_of(gpu_bit) else { return };
    match shares.iter_mut().find(|s| s.slot == slot) {
        Some(s) => {
            s.milli = s.milli.saturating_add(share.milli);
            s.memory_mb = s.memory_mb.saturating_add(share.memory_mb);
            s.holders += 1;
        }
        None => shares.push(SlotShare { slot, milli: share.milli, memory_mb: share.memory_mb, holders: 1 }),
    }
}

/// Gives a share back; the GPU returns to `gpus` when no share is left on it.
pub(crate) fn release(shares: &mut Vec<SlotShare>, gpus: &mut u64, gpu_bit: u64, share: GpuShare) {
    let Some(slot) = slot_of(gpu_bit) else { return };
    let Some(pos) = shares.iter().position(|s| s.slot == slot) else {
        // Released into an empty working copy (e.g. adding up what a start wants).
        *gpus |= gpu_bit;
        return;
    };
    let s = &mut shares[pos];
    s.milli = s.milli.saturating_sub(share.milli);
    s.memory_mb = s.memory_mb.saturating_sub(share.memory_mb);
    s.holders = s.holders.saturating_sub(1);
    if s.holders == 0 {
        shares.swap_remove(pos);
        *gpus |= gpu_bit;
    }
}

/// Compute (thousandths) and memory left on `slot`, if it is shared; a free
/// GPU has all of it, a GPU held whole none (the caller knows which is which).
pub(crate) fn left(shares: &[SlotShare], slot: usize, device_mb: u64) -> Option<(u16, u64)> {
    shares
        .iter()
        .find(|s| usize::from(s.slot) == slot)
        .map(|s| (1000u16.saturating_sub(s.milli), device_mb.saturating_sub(s.memory_mb)))
}

/// Whether `share` fits in what is left.
pub(crate) fn fits(left: (u16, u64), share: GpuShare) -> bool {
    share.milli <= left.0 && share.memory_mb <= left.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_free_again_only_when_its_last_share_leaves() {
        let quarter = GpuShare { milli: 250, memory_mb: 20_000 };
        let (mut shares, mut gpus) = (Vec::new(), 0b10u64);
        for _ in 0..4 {
            take(&mut shares, 0b10, quarter);
            gpus &= !0b10;
        }
        assert_eq!(left(&shares, 1, 80_000), Some((0, 0)));
        assert!(!fits((0, 0), quarter));
        for k in 0..4 {
            assert_eq!(gpus, 0, "share {k} still holds it");
            release(&mut shares, &mut gpus, 0b10, quarter);
        }
        assert_eq!(gpus, 0b10);
        assert!(shares.is_empty());
        assert_eq!(left(&shares, 1, 80_000), None);
    }
}
