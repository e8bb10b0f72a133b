//! The Gittins index of a job over the run times of jobs like it.
//!
//! A scheduler that does not know how long a job runs, but knows how long
//! jobs like it ran, minimises mean completion time on one server by serving
//! the job with the highest *Gittins index* (Gittins 1989; Aalto, Ayesta and
//! Righter 2009): over every further quantum Δ of service, the chance that
//! the job ends within Δ divided by the service it is expected to use in Δ,
//! taking the best Δ. For a job with attained service `a` whose like jobs
//! ran `s₁ … sₙ`:
//!
//! ```text
//!            #{ a < sᵢ ≤ a + Δ }
//! G(a) = max ─────────────────────────────────── ,  over the sᵢ > a
//!         Δ  Σ_{sᵢ > a} min(sᵢ − a, Δ)
//! ```
//!
//! Least attained service is this rule when run times have a decreasing
//! hazard rate (the longer a job has run, the longer it will run), and
//! shortest-job-first when they are known exactly (one sample). Computed
//! over the jobs *like it* (the same user, name, GPU count and queue, with
//! `runtime_history`'s fallbacks), it tells a stream of short jobs from a
//! user's long sweeps without trusting one estimate. docs/scheduling.md
//! ("Within a level: the Gittins index") says how `within_level=gittins`
//! uses it.
//!
//! This module returns the inverse, the *Gittins cost*: the least expected
//! service spent per completion, in the samples' unit (lower first). It is
//! pure and costs O(n log n) in the samples.

/// The expected service per completion of the best next quantum for a job
/// that has attained `attained` (same unit as `samples`), over the run
/// times of jobs like it; `None` when no sample is longer than `attained`
/// (the job has outrun everything like it: nothing is known of its end).
pub fn gittins_cost(samples: &[u64], attained: u64) -> Option<u64> {
    let mut alive: Vec<u64> = samples.iter().filter(|s| **s > attained).map(|s| s - attained).collect();
    if alive.is_empty() {
        return None;
    }
    alive.sort_unstable();
    let m = alive.len() as u128;
    let mut best: Option<(u128, u128)> = None; // (cost, completions), compared as cost ÷ completions
    let mut done_sum: u128 = 0;
    for (k, &delta) in alive.iter().enumerate() {
        done_sum += u128::from(delta);
        // Only the last of equal run times gives the quantum its completions.
        if alive.get(k + 1) == Some(&delta) {
            continue;
        }
        let completions = k as u128 + 1;
        let cost = done_sum + (m - completions) * u128::from(delta);
        if best.is_none_or(|(c, n)| cost * n < c * completions) {
            best = Some((cost, completions));
        }
    }
    best.map(|(c, n)| u64::try_from(c.div_ceil(n)).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_is_its_remaining_time() {
        assert_eq!(gittins_cost(&[100], 0), Some(100));
        assert_eq!(gittins_cost(&[100], 30), Some(70));
        assert_eq!(gittins_cost(&[100], 100), None, "outlived");
    }

    #[test]
    fn equal_samples_are_one_known_run_time() {
        assert_eq!(gittins_cost(&[60, 60, 60, 60], 0), Some(60));
    }

    #[test]
    fn a_few_short_runs_among_long_ones_make_a_short_quantum_worth_trying() {
        // Half end at 10, half at 1,000: serving 10 first completes half the
        // jobs for 10 each (cost 10 ÷ 0.5 = 20); serving to the end costs
        // the mean, 505.
        assert_eq!(gittins_cost(&[10, 10, 1000, 1000], 0), Some(20));
        // Once past 10, only the long runs are left: 990 to go.
        assert_eq!(gittins_cost(&[10, 10, 1000, 1000], 10), Some(990));
    }

    #[test]
    fn under_a_heavy_tail_a_job_past_most_of_its_like_runs_costs_more() {
        // Run times doubling from 1 to 1,024: the longer a job has run, the
        // longer it is likely to run (least attained service first). The
        // samples are discrete, so this holds between them, not at every step.
        let samples = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
        let costs: Vec<u64> = [0, 20, 300].iter().map(|a| gittins_cost(&samples, *a).expect("alive")).collect();
        assert!(costs.windows(2).all(|w| w[0] < w[1]), "{costs:?}");
    }
}
