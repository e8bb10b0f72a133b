//! Fair-share usage with exponential decay over a team → user hierarchy,
//! kept per accelerator kind.
//!
//! Usage is GPU-seconds; every `half_life` it counts half as much. The
//! factor of a user is `2^(-U_team/S_team) · 2^(-U_user/S_user)`, with `U` the
//! normalised (decayed) usage and `S` the normalised share, as in Slurm's
//! classic fair-share algorithm, applied at both levels of the tree.
//!
//! Each kind (NVIDIA GPUs, AMD GPUs, TPUs) has its own usage: a job's factor
//! weighs the use of the kinds it may run on ([`crate::JobSpec::fair_share_kinds`]),
//! so a team that lives on TPUs is not pushed back on GPUs, and a job for
//! "any GPU" answers for the team's use of every GPU kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::model::resources::{DeviceKind, KindMask, KindUnits};
use crate::model::time::Time;
use crate::policies::policy::FairShare;

const KINDS: usize = DeviceKind::ALL.len();

#[derive(Clone, Debug, Default, PartialEq)]
struct Account {
    /// Decayed GPU-seconds per kind as of the ledger's `last`.
    usage: [f64; KINDS],
    /// Units in use now per kind (thousandths of a GPU or chip).
    rate: KindUnits,
    /// A team's users the ledger knows (0 for a user's own account): what a
    /// pass divides the team's share by when users have no configured shares.
    members: u32,
}

/// Decay over one interval: the same for every account, so it is computed
/// once per interval, not once per account and kind (an `exp` each).
#[derive(Clone, Copy, Debug)]
struct Decay {
    dt: f64,
    half_life: f64,
    /// What one unit of usage is worth after `dt`.
    factor: f64,
}

impl Decay {
    fn over(dt: f64, half_life: f64) -> Decay {
        let factor = if half_life <= 0.0 { 1.0 } else { (-dt / half_life * std::f64::consts::LN_2).exp() };
        Decay { dt, half_life, factor }
    }
}

impl Account {
    fn usage_at(&self, d: Decay) -> [f64; KINDS] {
        let mut out = [0.0; KINDS];
        for k in DeviceKind::ALL {
            let (u, rate) = (self.usage[k.index()], self.rate.get(k) as f64 / 1000.0);
            out[k.index()] = if d.half_life <= 0.0 {
                u + rate * d.dt
            } else {
                // Integral of a constant rate under exponential decay over [0, dt].
                u * d.factor + rate * d.half_life / std::f64::consts::LN_2 * (1.0 - d.factor)
            };
        }
        out
    }
}

fn masked(usage: &[f64; KINDS], kinds: KindMask) -> f64 {
    DeviceKind::ALL.into_iter().filter(|k| kinds.contains(*k)).map(|k| usage[k.index()]).sum()
}

/// Decayed usage per team and user. Advanced by the snapshot whenever the set
/// of running jobs changes; read at any later time without mutation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageLedger {
    last: Time,
    teams: BTreeMap<Arc<str>, Account>,
    users: BTreeMap<(Arc<str>, Arc<str>), Account>,
}

/// A user's fair-share factor in `[0, 1]`: 1 = has used nothing, 0.5 = used exactly their share.
pub type Factor = f64;

impl UsageLedger {
    /// Brings the decayed usage forward to `now`.
    pub(crate) fn advance(&mut self, now: Time, half_life: Duration) {
        if now <= self.last {
            return;
        }
        let d = Decay::over(now.since(self.last).as_secs_f64(), half_life.as_secs_f64());
        for a in self.teams.values_mut().chain(self.users.values_mut()) {
            a.usage = a.usage_at(d);
        }
        self.last = now;
    }

    /// Adds `units` to what `team`/`user` holds (or takes them away, with
    /// `add` false); call after [`UsageLedger::advance`]. With no units it
    /// makes the user known.
    pub(crate) fn change_rate(&mut self, team: &Arc<str>, user: &Arc<str>, units: &KindUnits, add: bool) {
        let apply = |a: &mut Account| {
            if add { a.rate.add_all(units) } else { a.rate.sub_all(units) }
        };
        let t = self.teams.entry(team.clone()).or_default();
        apply(t);
        match self.users.entry((team.clone(), user.clone())) {
            std::collections::btree_map::Entry::Occupied(mut a) => apply(a.get_mut()),
            std::collections::btree_map::Entry::Vacant(v) => {
                t.members += 1;
                apply(v.insert(Account::default()));
            }
        }
    }

    /// Units `user` of `team` holds right now, per kind.
    pub fn rate(&self, team: &str, user: &str) -> KindUnits {
        self.users
            .iter()
            .find(|((t, u), _)| &**t == team && &**u == user)
            .map_or_else(KindUnits::default, |(_, a)| a.rate)
    }

    /// Decayed GPU-seconds of `team`/`user` at `now` on the given kinds.
    pub fn usage(&self, now: Time, cfg: &FairShare, team: &str, user: &str, kinds: KindMask) -> f64 {
        let d = Decay::over(now.since(self.last).as_secs_f64(), cfg.half_life.as_secs_f64());
        self.users
            .iter()
            .find(|((t, u), _)| &**t == team && &**u == user)
            .map_or(0.0, |(_, a)| masked(&a.usage_at(d), kinds))
    }

    /// Current units of every user per kind, for max-min fairness.
    pub(crate) fn rates(&self) -> impl Iterator<Item = (&(Arc<str>, Arc<str>), KindUnits)> {
        self.users.iter().map(|(k, a)| (k, a.rate))
    }

    /// Fair-share factor on `kinds` of every user the ledger knows, at `now`.
    pub fn factors(&self, now: Time, cfg: &FairShare, kinds: KindMask) -> BTreeMap<(Arc<str>, Arc<str>), Factor> {
        let f = self.factor_table(now, cfg);
        self.users.keys().filter_map(|k| Some((k.clone(), f.get(k, kinds)?))).collect()
    }

    /// What every factor at `now` depends on, to look up a few users' factors
    /// (a pass needs those of the users with pending jobs only).
    pub fn factor_table<'a>(&'a self, now: Time, cfg: &'a FairShare) -> FactorTable<'a> {
        let d = Decay::over(now.since(self.last).as_secs_f64(), cfg.half_life.as_secs_f64());
        // Every pass builds one: no per-team map, a team's usage is worked out
        // again for each user looked up (the same arithmetic, the same value).
        let mut total = [0.0; KINDS];
        for a in self.teams.values() {
            for (t, x) in total.iter_mut().zip(a.usage_at(d)) {
                *t += x;
            }
        }
        let team_shares: f64 = self.teams.keys().map(|t| cfg.team_share(t)).sum();
        // Without configured shares every user's is 1: a team's sum is its member count.
        let users_in_team = (!cfg.user_shares.is_empty()).then(|| {
            let mut sums: BTreeMap<&Arc<str>, f64> = BTreeMap::new();
            for (t, u) in self.users.keys() {
                *sums.entry(t).or_default() += cfg.user_share(u);
            }
            sums
        });
        FactorTable { ledger: self, cfg, d, total, team_shares, users_in_team }
    }
}

/// Fair-share factors at one time (see [`UsageLedger::factor_table`]).
pub struct FactorTable<'a> {
    ledger: &'a UsageLedger,
    cfg: &'a FairShare,
    d: Decay,
    total: [f64; KINDS],
    team_shares: f64,
    /// Each team's sum of its users' configured shares; `None` when no user
    /// has one (then it is the team's member count).
    users_in_team: Option<BTreeMap<&'a Arc<str>, f64>>,
}

impl FactorTable<'_> {
    /// The factor of `(team, user)` weighing their use of `kinds`; `None` if
    /// the ledger does not know them.
    pub fn get(&self, key: &(Arc<str>, Arc<str>), kinds: KindMask) -> Option<Factor> {
        let a = self.ledger.users.get(key)?;
        let (t, u) = key;
        let team = self.ledger.teams.get(t);
        let tu = team.map_or(0.0, |x| masked(&x.usage_at(self.d), kinds));
        let total = masked(&self.total, kinds);
        let team_norm = if total > 0.0 { tu / total } else { 0.0 };
        let team_share = self.cfg.team_share(t) / self.team_shares.max(1e-9);
        let user_norm = if tu > 0.0 { masked(&a.usage_at(self.d), kinds) / tu } else { 0.0 };
        let in_team = match &self.users_in_team {
            Some(sums) => sums.get(t).copied(),
            None => team.filter(|x| x.members > 0).map(|x| f64::from(x.members)),
        };
        let user_share = self.cfg.user_share(u) / in_team.unwrap_or(1.0).max(1e-9);
        Some((-(team_norm / team_share)).exp2() * (-(user_norm / user_share)).exp2())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::GpuMilli;

    fn arc(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    fn gpus(milli: GpuMilli) -> KindUnits {
        let mut k = KindUnits::default();
        k.add(DeviceKind::NvidiaGpu, milli);
        k
    }

    #[test]
    fn usage_halves_every_half_life() {
        let cfg = FairShare { half_life: Duration::from_secs(100), ..FairShare::default() };
        let mut l = UsageLedger::default();
        let (t, u) = (arc("t"), arc("u"));
        l.change_rate(&t, &u, &gpus(1000), true);
        l.advance(Time::from_secs(100), cfg.half_life);
        l.change_rate(&t, &u, &gpus(1000), false);
        let at_stop = l.usage(Time::from_secs(100), &cfg, "t", "u", KindMask::ALL);
        // Integral of 1 GPU over one half-life under decay: h/ln2 · 1/2.
        assert!((at_stop - 100.0 / std::f64::consts::LN_2 * 0.5).abs() < 1e-6, "{at_stop}");
        let later = l.usage(Time::from_secs(200), &cfg, "t", "u", KindMask::ALL);
        assert!((later - at_stop / 2.0).abs() < 1e-6, "{later}");
    }

    #[test]
    fn heavier_users_get_smaller_factors_within_and_across_teams() {
        let cfg = FairShare::default();
        let mut l = UsageLedger::default();
        let (ta, tb) = (arc("a"), arc("b"));
        let (heavy, light, other) = (arc("heavy"), arc("light"), arc("other"));
        l.change_rate(&ta, &heavy, &gpus(3000), true);
        l.change_rate(&ta, &light, &gpus(1000), true);
        l.change_rate(&tb, &other, &gpus(0), true);
        l.advance(Time::from_secs(3600), cfg.half_life);
        let f = l.factors(Time::from_secs(3600), &cfg, KindMask::ALL);
        let get = |t: &Arc<str>, u: &Arc<str>| f[&(t.clone(), u.clone())];
        assert!(get(&ta, &heavy) < get(&ta, &light));
        assert!(get(&ta, &light) < get(&tb, &other));
        assert_eq!(get(&tb, &other), 1.0);
    }

    #[test]
    fn no_usage_means_factor_one() {
        let mut l = UsageLedger::default();
        l.change_rate(&arc("t"), &arc("u"), &gpus(0), true);
        let f = l.factors(Time::from_secs(10), &FairShare::default(), KindMask::ALL);
        assert_eq!(f.values().copied().collect::<Vec<_>>(), vec![1.0]);
    }

    #[test]
    fn a_kinds_use_weighs_only_on_jobs_that_may_run_on_it() {
        let cfg = FairShare::default();
        let mut l = UsageLedger::default();
        let (ta, tb, u) = (arc("tpu-team"), arc("gpu-team"), arc("u"));
        let mut tpus = KindUnits::default();
        tpus.add(DeviceKind::Tpu, 8000);
        l.change_rate(&ta, &u, &tpus, true);
        l.change_rate(&tb, &u, &gpus(1000), true);
        l.advance(Time::from_secs(3600), cfg.half_life);
        let t = l.factor_table(Time::from_secs(3600), &cfg);
        let nvidia = KindMask::of([DeviceKind::NvidiaGpu]);
        let tpu = KindMask::of([DeviceKind::Tpu]);
        // On NVIDIA GPUs the TPU team has used nothing; on TPUs, everything.
        assert_eq!(t.get(&(ta.clone(), u.clone()), nvidia), Some(1.0));
        assert!(t.get(&(tb.clone(), u.clone()), nvidia).is_some_and(|f| f < 0.5));
        assert_eq!(t.get(&(tb.clone(), u.clone()), tpu), Some(1.0));
        // Over every kind, the TPU team's eight chips weigh more than one GPU.
        assert!(t.get(&(ta, u.clone()), KindMask::ALL) < t.get(&(tb, u), KindMask::ALL));
    }
}
