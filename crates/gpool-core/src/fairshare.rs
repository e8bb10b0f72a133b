//! Fair-share usage with exponential decay over a team → user hierarchy.
//!
//! Usage is GPU-seconds; every `half_life` it counts half as much. The
//! factor of a user is `2^(-U_team/S_team) · 2^(-U_user/S_user)`, with `U` the
//! normalised (decayed) usage and `S` the normalised share, as in Slurm's
//! classic fair-share algorithm, applied at both levels of the tree.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::policy::FairShare;
use crate::resources::GpuMilli;
use crate::time::Time;

#[derive(Clone, Debug, Default, PartialEq)]
struct Account {
    /// Decayed GPU-seconds as of the ledger's `last`.
    usage: f64,
    /// GPUs in use now (thousandths).
    rate: GpuMilli,
}

impl Account {
    fn usage_at(&self, dt: f64, half_life: f64) -> f64 {
        let rate = self.rate as f64 / 1000.0;
        if half_life <= 0.0 {
            return self.usage + rate * dt;
        }
        let decay = (-dt / half_life * std::f64::consts::LN_2).exp();
        // Integral of a constant rate under exponential decay over [0, dt].
        self.usage * decay + rate * half_life / std::f64::consts::LN_2 * (1.0 - decay)
    }
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
        let dt = now.since(self.last).as_secs_f64();
        let h = half_life.as_secs_f64();
        for a in self.teams.values_mut().chain(self.users.values_mut()) {
            a.usage = a.usage_at(dt, h);
        }
        self.last = now;
    }

    /// Changes the rate of `team`/`user` by `delta` GPUs (thousandths); call after [`UsageLedger::advance`].
    pub(crate) fn change_rate(&mut self, team: &Arc<str>, user: &Arc<str>, delta: i64) {
        let apply = |a: &mut Account| {
            a.rate = a.rate.saturating_add_signed(delta);
        };
        apply(self.teams.entry(team.clone()).or_default());
        apply(self.users.entry((team.clone(), user.clone())).or_default());
    }

    /// GPUs (thousandths) `user` of `team` holds right now.
    pub fn rate(&self, team: &str, user: &str) -> GpuMilli {
        self.users.iter().find(|((t, u), _)| &**t == team && &**u == user).map_or(0, |(_, a)| a.rate)
    }

    /// Decayed GPU-seconds of `team`/`user` at `now`.
    pub fn usage(&self, now: Time, cfg: &FairShare, team: &str, user: &str) -> f64 {
        let dt = now.since(self.last).as_secs_f64();
        let h = cfg.half_life.as_secs_f64();
        self.users.iter().find(|((t, u), _)| &**t == team && &**u == user).map_or(0.0, |(_, a)| a.usage_at(dt, h))
    }

    /// Current GPU rate of every user, for max-min fairness.
    pub(crate) fn rates(&self) -> impl Iterator<Item = (&(Arc<str>, Arc<str>), GpuMilli)> {
        self.users.iter().map(|(k, a)| (k, a.rate))
    }

    /// Fair-share factor of every user the ledger knows, at `now`.
    pub fn factors(&self, now: Time, cfg: &FairShare) -> BTreeMap<(Arc<str>, Arc<str>), Factor> {
        let f = self.factor_table(now, cfg);
        self.users.keys().filter_map(|k| Some((k.clone(), f.get(k)?))).collect()
    }

    /// What every factor at `now` depends on, to look up a few users' factors
    /// (a pass needs those of the users with pending jobs only).
    pub fn factor_table<'a>(&'a self, now: Time, cfg: &'a FairShare) -> FactorTable<'a> {
        let dt = now.since(self.last).as_secs_f64();
        let h = cfg.half_life.as_secs_f64();
        let team_usage: BTreeMap<&Arc<str>, f64> = self.teams.iter().map(|(t, a)| (t, a.usage_at(dt, h))).collect();
        let total: f64 = team_usage.values().sum();
        let team_shares: f64 = self.teams.keys().map(|t| cfg.team_share(t)).sum();
        let mut users_in_team: BTreeMap<&Arc<str>, f64> = BTreeMap::new();
        // Without configured shares every user's is 1: skip the name lookups.
        let equal = cfg.user_shares.is_empty();
        for (t, u) in self.users.keys() {
            *users_in_team.entry(t).or_default() += if equal { 1.0 } else { cfg.user_share(u) };
        }
        FactorTable { ledger: self, cfg, dt, h, team_usage, total, team_shares, users_in_team }
    }
}

/// Fair-share factors at one time (see [`UsageLedger::factor_table`]).
pub struct FactorTable<'a> {
    ledger: &'a UsageLedger,
    cfg: &'a FairShare,
    dt: f64,
    h: f64,
    team_usage: BTreeMap<&'a Arc<str>, f64>,
    total: f64,
    team_shares: f64,
    users_in_team: BTreeMap<&'a Arc<str>, f64>,
}

impl FactorTable<'_> {
    /// The factor of `(team, user)`; `None` if the ledger does not know them.
    pub fn get(&self, key: &(Arc<str>, Arc<str>)) -> Option<Factor> {
        let a = self.ledger.users.get(key)?;
        let (t, u) = key;
        let tu = self.team_usage.get(t).copied().unwrap_or(0.0);
        let team_norm = if self.total > 0.0 { tu / self.total } else { 0.0 };
        let team_share = self.cfg.team_share(t) / self.team_shares.max(1e-9);
        let user_norm = if tu > 0.0 { a.usage_at(self.dt, self.h) / tu } else { 0.0 };
        let user_share = self.cfg.user_share(u) / self.users_in_team.get(t).copied().unwrap_or(1.0).max(1e-9);
        Some((-(team_norm / team_share)).exp2() * (-(user_norm / user_share)).exp2())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arc(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn usage_halves_every_half_life() {
        let cfg = FairShare { half_life: Duration::from_secs(100), ..FairShare::default() };
        let mut l = UsageLedger::default();
        let (t, u) = (arc("t"), arc("u"));
        l.change_rate(&t, &u, 1000);
        l.advance(Time::from_secs(100), cfg.half_life);
        l.change_rate(&t, &u, -1000);
        let at_stop = l.usage(Time::from_secs(100), &cfg, "t", "u");
        // Integral of 1 GPU over one half-life under decay: h/ln2 · 1/2.
        assert!((at_stop - 100.0 / std::f64::consts::LN_2 * 0.5).abs() < 1e-6, "{at_stop}");
        let later = l.usage(Time::from_secs(200), &cfg, "t", "u");
        assert!((later - at_stop / 2.0).abs() < 1e-6, "{later}");
    }

    #[test]
    fn heavier_users_get_smaller_factors_within_and_across_teams() {
        let cfg = FairShare::default();
        let mut l = UsageLedger::default();
        let (ta, tb) = (arc("a"), arc("b"));
        let (heavy, light, other) = (arc("heavy"), arc("light"), arc("other"));
        l.change_rate(&ta, &heavy, 3000);
        l.change_rate(&ta, &light, 1000);
        l.change_rate(&tb, &other, 0);
        l.advance(Time::from_secs(3600), cfg.half_life);
        let f = l.factors(Time::from_secs(3600), &cfg);
        let get = |t: &Arc<str>, u: &Arc<str>| f[&(t.clone(), u.clone())];
        assert!(get(&ta, &heavy) < get(&ta, &light));
        assert!(get(&ta, &light) < get(&tb, &other));
        assert_eq!(get(&tb, &other), 1.0);
    }

    #[test]
    fn no_usage_means_factor_one() {
        let mut l = UsageLedger::default();
        l.change_rate(&arc("t"), &arc("u"), 0);
        let f = l.factors(Time::from_secs(10), &FairShare::default());
        assert_eq!(f.values().copied().collect::<Vec<_>>(), vec![1.0]);
    }
}
