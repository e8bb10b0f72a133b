//! What telemetry reads for the health checks of the core: a GPU's heat
//! (`gpool_core::heat`) and a gang's straggler (`gpool_core::straggler`).

use gpool_core::advice::DeviceSeries;
use gpool_core::heat::{HeatSample, throttle};
use gpool_core::straggler::{Straggler, WINDOW, find_straggler};
use gpool_core::time::Time;
use gpool_gpu::GpuSample;

use super::{DevRef, DevTrack, Holder, device_name};

/// The heat figures of a sample.
pub(super) fn heat_sample(s: &GpuSample) -> HeatSample {
    HeatSample {
        temperature_c: s.temperature_c,
        slowdown_c: s.slowdown_temperature_c,
        throttle: throttle::bits(s.throttle_reasons.as_deref().unwrap_or_default()),
    }
}

/// A device's series without points: what the straggler check compares it by.
pub(super) fn device_meta(node: &str, d: &DevRef, h: &Holder) -> DeviceSeries {
    DeviceSeries {
        name: device_name(node, d, h.mig_profile.as_ref()),
        memory_total_mb: h.memory_total_mb,
        mig_profile: h.mig_profile.clone(),
        points: Vec::new(),
        node: node.to_string(),
        gpu: Some(match d {
            DevRef::Gpu(i) | DevRef::Mig { gpu: i, .. } | DevRef::Share { gpu: i, .. } => *i,
        }),
        rank: h.rank,
        model: h.model.clone(),
        numa_node: h.numa_node,
        shared: matches!(d, DevRef::Share { .. }),
    }
}

/// The straggler of a job's devices now, judged on their last [`WINDOW`]
/// only (a copy of a few dozen points each, not of their whole history).
pub(super) fn straggler<'a>(devices: impl Iterator<Item = &'a DevTrack>, now: Time) -> Option<Straggler> {
    let from = now.minus(WINDOW);
    let recent: Vec<DeviceSeries> = devices
        .map(|d| DeviceSeries {
            points: d.recent.iter().rev().take_while(|p| p.at >= from).copied().collect::<Vec<_>>(),
            ..d.meta.clone()
        })
        .map(|mut d| {
            d.points.reverse();
            d
        })
        .collect();
    if recent.len() < 2 {
        return None;
    }
    find_straggler(&recent, now, WINDOW)
}
