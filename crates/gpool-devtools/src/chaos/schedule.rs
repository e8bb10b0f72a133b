//! The fault schedule of a chaos run: a pure function of its seed, so a
//! run that found something can be replayed with the same faults in the
//! same order (`gpool bench chaos --seed N`).

use std::time::Duration;

/// What a fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// `kill -9` an agent, start it again after the hold.
    AgentKill,
    /// `SIGSTOP` an agent for the hold, then `SIGCONT`.
    AgentStop,
    /// `kill -9` the leading control plane, start it again (as a standby) after the hold.
    LeaderKill,
    /// `SIGSTOP` the leader for the hold, then `SIGCONT`.
    LeaderStop,
    /// `kill -9` the standby, start it again after the hold.
    StandbyKill,
    /// `SIGSTOP` the standby for the hold, then `SIGCONT`.
    StandbyStop,
    /// The database server stopped (fast shutdown) for the hold, then started again.
    DbRestart,
    /// Every flush of the database server's disk takes `Fault::slow_ms` longer for the hold.
    SlowDisk,
    /// An agent's connections to every control plane cut (and refused) for the hold.
    NetCut,
    /// An agent's data directory (a small file system of its own) filled to
    /// the last byte for the hold.
    DiskFull,
    /// An agent cut off from everything: the control planes and its peers
    /// (their questions to it are refused) for the hold.
    Isolate,
    /// The database server stopped for the long outage (`--outage`), then started again.
    DbOutage,
    /// Both control planes stopped (`SIGSTOP`) for the long outage, then continued.
    PlanesStop,
    /// Both control planes killed (`kill -9`), started again after the long outage.
    PlanesKill,
}

impl Kind {
    pub(crate) const ALL: [Kind; 14] = [
        Kind::AgentKill,
        Kind::AgentStop,
        Kind::LeaderKill,
        Kind::LeaderStop,
        Kind::StandbyKill,
        Kind::StandbyStop,
        Kind::DbRestart,
        Kind::SlowDisk,
        Kind::NetCut,
        Kind::DiskFull,
        Kind::Isolate,
        Kind::DbOutage,
        Kind::PlanesStop,
        Kind::PlanesKill,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AgentKill => "agent-kill",
            Kind::AgentStop => "agent-stop",
            Kind::LeaderKill => "leader-kill",
            Kind::LeaderStop => "leader-stop",
            Kind::StandbyKill => "standby-kill",
            Kind::StandbyStop => "standby-stop",
            Kind::DbRestart => "db-restart",
            Kind::SlowDisk => "slow-disk",
            Kind::NetCut => "net-cut",
            Kind::DiskFull => "disk-full",
            Kind::Isolate => "isolate",
            Kind::DbOutage => "db-outage",
            Kind::PlanesStop => "planes-stop",
            Kind::PlanesKill => "planes-kill",
        }
    }

    /// The kind a name names (`--kinds`).
    pub(crate) fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether it takes away the database or every control plane: held for
    /// the long outage, and no job may die of it.
    pub(crate) fn is_outage(self) -> bool {
        matches!(self, Kind::DbOutage | Kind::PlanesStop | Kind::PlanesKill)
    }
}

/// One fault: what, on which agent (for agent faults), for how long, and
/// how long the cluster runs undisturbed after it heals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    pub kind: Kind,
    pub agent: usize,
    pub hold: Duration,
    pub calm: Duration,
    /// How much longer each flush takes (the slow-disk fault): 100 ms to 1 s.
    pub slow_ms: u64,
}

/// xorshift64*: small, seeded, the same everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `count` faults of `kinds` over `agents` agents: every kind once first (in
/// an order the seed shuffles), then kinds drawn at random. Holds are
/// 1–`max_hold` seconds (so some outlast an agent's lease and some do not;
/// the long outages hold for `--outage` instead), calms 2–5 s.
pub(crate) fn schedule(seed: u64, count: usize, agents: usize, max_hold: Duration, kinds: &[Kind]) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    let pool: Vec<Kind> = if kinds.is_empty() { Kind::ALL.to_vec() } else { kinds.to_vec() };
    let mut kinds = pool.clone();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let max_ms = max_hold.as_millis().max(1_000) as u64;
    (0..count)
        .map(|i| {
            let kind = if i < kinds.len() { kinds[i] } else { pool[rng.below(pool.len() as u64) as usize] };
            Fault {
                kind,
                agent: rng.below(agents as u64) as usize,
                hold: Duration::from_millis(1_000 + rng.below(max_ms - 999)),
                calm: Duration::from_millis(2_000 + rng.below(3_001)),
                slow_ms: 100 + rng.below(901),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_faults() {
        let a = schedule(7, 30, 3, Duration::from_secs(8), &[]);
        assert_eq!(a, schedule(7, 30, 3, Duration::from_secs(8), &[]));
        assert_ne!(a, schedule(8, 30, 3, Duration::from_secs(8), &[]));
    }

    #[test]
    fn every_kind_comes_once_the_run_is_long_enough_and_bounds_hold() {
        let faults = schedule(1, 20, 3, Duration::from_secs(8), &[]);
        let mut seen: Vec<Kind> = faults.iter().map(|f| f.kind).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, Kind::ALL.to_vec());
        for f in &faults {
            assert!(f.agent < 3);
            assert!(f.hold >= Duration::from_secs(1) && f.hold <= Duration::from_secs(8), "{f:?}");
            assert!(f.calm >= Duration::from_secs(2) && f.calm <= Duration::from_secs(5), "{f:?}");
            assert!((100..=1_000).contains(&f.slow_ms), "{f:?}");
        }
    }

    #[test]
    fn kinds_can_be_chosen_by_name() {
        let only = [Kind::named("db-outage").expect("a kind"), Kind::named("planes-stop").expect("a kind")];
        let faults = schedule(3, 5, 3, Duration::from_secs(8), &only);
        assert!(faults.iter().all(|f| only.contains(&f.kind)), "{faults:?}");
        assert_eq!(Kind::named("no-such-fault"), None);
        assert!(Kind::ALL.iter().all(|k| Kind::named(k.name()) == Some(*k)));
    }
}
