//! Accelerators other than NVIDIA's, under their vendors' exporter names so
//! that the vendors' dashboards work: AMD GPUs as AMD's device-metrics
//! exporter names them (`gpu_gfx_activity`, `gpu_used_vram`, in MB), Cloud
//! TPU chips as GKE's TPU device plugin does (`duty_cycle`, `memory_used`
//! and `memory_total` in bytes, with `make="cloud-tpu"`, `model`,
//! `accelerator_id`). gpool's job labels come after the vendor's.

use gpool_gpu::GpuSample;

use super::exposition::{Families, Kind};
use super::{GpuSeries, pairs};

fn num(x: Option<u64>) -> Option<f64> {
    x.map(|v| v as f64)
}

/// Free memory: as read, else total less used.
fn free(total: Option<u64>, used: Option<u64>, free: Option<u64>) -> Option<u64> {
    free.or_else(|| Some(total?.saturating_sub(used?)))
}

type Get<'a> = &'a dyn Fn(&GpuSample) -> Option<f64>;

pub(super) fn render(f: &mut Families, amd: &[GpuSeries], tpu: &[GpuSeries]) {
    let mut gauge = |series: &[GpuSeries], name: &str, help: &str, get: Get<'_>| {
        f.add(name, Kind::Gauge, help, series.iter().map(|x| (get(&x.sample), pairs(&x.labels))));
    };
    gauge(amd, "gpu_gfx_activity", "Graphics engine usage (in %).", &|x| x.gpu_util_pct);
    gauge(amd, "gpu_umc_activity", "Memory controller usage (in %).", &|x| x.mem_util_pct);
    gauge(amd, "gpu_used_vram", "VRAM in use (in MB).", &|x| num(x.memory_used_mb));
    gauge(amd, "gpu_total_vram", "VRAM (in MB).", &|x| num(x.memory_total_mb));
    let amd_free: Get<'_> = &|x| num(free(x.memory_total_mb, x.memory_used_mb, x.memory_free_mb));
    gauge(amd, "gpu_free_vram", "VRAM free (in MB).", amd_free);
    gauge(amd, "gpu_power_usage", "Power draw (in W).", &|x| x.power_draw_w);
    gauge(amd, "gpu_edge_temperature", "Edge temperature (in C).", &|x| x.temperature_c);
    gauge(amd, "gpu_junction_temperature", "Junction (hotspot) temperature (in C).", &|x| x.junction_temperature_c);
    gauge(amd, "gpu_memory_temperature", "Memory temperature (in C).", &|x| x.memory_temperature_c);
    let bytes = |mib: Option<u64>| mib.map(|m| m as f64 * 1_048_576.0);
    gauge(tpu, "duty_cycle", "Percent of time the TPU chip was actively processing.", &|x| x.gpu_util_pct);
    gauge(tpu, "memory_used", "TPU high-bandwidth memory in use (in bytes).", &|x| bytes(x.memory_used_mb));
    gauge(tpu, "memory_total", "TPU high-bandwidth memory (in bytes).", &|x| bytes(x.memory_total_mb));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&'static str, &str)], sample: GpuSample) -> GpuSeries {
        GpuSeries { labels: labels.iter().map(|(k, v)| (*k, v.to_string())).collect(), sample }
    }

    #[test]
    fn amd_and_tpu_series_use_their_vendors_names_and_skip_absent_values() {
        let amd = [series(
            &[("gpu_id", "0"), ("card_model", "AMD Instinct MI300X")],
            GpuSample {
                gpu_util_pct: Some(87.0),
                memory_used_mb: Some(150_000),
                memory_total_mb: Some(196_592),
                junction_temperature_c: Some(71.0),
                slowdown_temperature_c: None,
                power_draw_w: Some(612.0),
                ..GpuSample::default()
            },
        )];
        let tpu = [series(
            &[("make", "cloud-tpu"), ("model", "tpu-v5p"), ("accelerator_id", "1"), ("job_id", "9")],
            GpuSample {
                gpu_util_pct: Some(42.5),
                memory_used_mb: Some(2048),
                memory_total_mb: Some(97_280),
                ..GpuSample::default()
            },
        )];
        let mut f = Families::default();
        render(&mut f, &amd, &tpu);
        let text = f.encode();
        let a = "{gpu_id=\"0\",card_model=\"AMD Instinct MI300X\"}";
        for want in ["gpu_gfx_activity", "gpu_used_vram", "gpu_free_vram", "gpu_junction_temperature"] {
            assert!(text.contains(&format!("{want}{a} ")), "{want}: {text}");
        }
        assert!(text.contains(&format!("gpu_free_vram{a} 46592\n")), "{text}");
        assert!(!text.contains("gpu_edge_temperature"), "an absent value is no series");
        let t = "{make=\"cloud-tpu\",model=\"tpu-v5p\",accelerator_id=\"1\",job_id=\"9\"}";
        assert!(text.contains(&format!("duty_cycle{t} 42.5\n")), "{text}");
        assert!(text.contains(&format!("memory_used{t} 2147483648\n")), "bytes, as GKE's: {text}");
        assert!(text.contains(&format!("memory_total{t} 102005473280\n")), "{text}");
        assert!(text.contains("# TYPE duty_cycle gauge\n"));
        let mut none = Families::default();
        render(&mut none, &[], &[]);
        assert!(none.encode().is_empty(), "no series, no families");
    }
}
