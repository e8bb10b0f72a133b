//! Accelerator kinds for the jobs of a trace that names none (`gpool sim
//! --job-kinds nvidia.com/gpu=3,amd.com/gpu=1,any=1`): each job draws its
//! kind by weight from a hash of its trace line, so the assignment is the
//! same on every run and for every policy compared.

use gpool_core::DeviceKind;

use crate::rng::Rng;
use crate::trace::TraceJob;

/// Weights of the kinds jobs ask for; `None` is "any GPU".
#[derive(Clone, Debug, PartialEq)]
pub struct KindMix(Vec<(Option<DeviceKind>, f64)>);

impl std::str::FromStr for KindMix {
    type Err = String;

    fn from_str(s: &str) -> Result<KindMix, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: write KIND=WEIGHT, e.g. nvidia.com/gpu=3,amd.com/gpu=1,any=1"))?;
            let kind = match name.trim() {
                "any" => None,
                k => Some(k.parse::<DeviceKind>()?),
            };
            let w: f64 = weight.trim().parse().map_err(|_| format!("{part:?}: the weight must be a number"))?;
            if !(w.is_finite() && w >= 0.0) {
                return Err(format!("{part:?}: the weight must be a number ≥ 0"));
            }
            if out.iter().any(|(k, _)| *k == kind) {
                return Err(format!("{name:?} is given twice"));
            }
            out.push((kind, w));
        }
        if out.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
            return Err("give at least one kind a weight above 0, e.g. nvidia.com/gpu=3,amd.com/gpu=1".into());
        }
        Ok(KindMix(out))
    }
}

impl KindMix {
    /// Gives every GPU job that names no kind one drawn from the mix.
    pub fn assign(&self, jobs: &mut [TraceJob]) {
        let weights: Vec<f64> = self.0.iter().map(|(_, w)| *w).collect();
        for j in jobs.iter_mut().filter(|j| j.kind.is_none() && j.gpus > 0 && j.mig.is_none()) {
            let mut rng = Rng::new(j.line as u64);
            j.kind = self.0[rng.weighted(&weights)].0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(n: usize) -> Vec<TraceJob> {
        let t = "submit,duration,gpus\n".to_string() + &"0,60,1\n".repeat(n);
        crate::trace::parse(&t, crate::trace::Format::Csv).expect("trace")
    }

    #[test]
    fn jobs_draw_their_kinds_by_weight_the_same_way_every_time() {
        let mix: KindMix = "nvidia.com/gpu=3, amd.com/gpu=1, any=0".parse().expect("mix");
        let (mut a, mut b) = (jobs(4000), jobs(4000));
        mix.assign(&mut a);
        mix.assign(&mut b);
        assert_eq!(a.iter().map(|j| j.kind).collect::<Vec<_>>(), b.iter().map(|j| j.kind).collect::<Vec<_>>());
        let amd = a.iter().filter(|j| j.kind == Some(DeviceKind::AmdGpu)).count();
        assert!((800..1200).contains(&amd), "about a quarter: {amd}");
        assert!(a.iter().all(|j| j.kind.is_some()), "no weight on any GPU");
    }

    #[test]
    fn a_bad_mix_says_what_to_write() {
        for (bad, says) in [
            ("nvidia.com/gpu", "KIND=WEIGHT"),
            ("fpga=1", "fpga"),
            ("any=x", "number"),
            ("any=-1", "≥ 0"),
            ("any=0", "above 0"),
            ("any=1,any=2", "twice"),
        ] {
            let e = bad.parse::<KindMix>().expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
