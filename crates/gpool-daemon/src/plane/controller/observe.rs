//! What the controller shows of telemetry: who holds which device, alerts,
//! a job's usage and advice, and what `/metrics` shows. (Reports from
//! agents are routed in `mod.rs`, `Controller::on_telemetry`.)

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use gpool_api as api;
use gpool_core::alert::Transition;
use gpool_core::{JobId, NodeId, Snapshot};
use gpool_store::Store;

use super::ApiError;
use super::docs::{JobDoc, ReplicaDoc};
use super::views::Reading;
use crate::plane::auth::Caller;
use crate::plane::metrics::{self, Scrape};
use crate::plane::telemetry::{DevRef, Holder};
use crate::plane::webhook::Notice;

impl Reading<'_> {
    /// UUIDs of the devices a replica record names (for the agent's sampler).
    pub(super) fn device_uuids(&self, r: &ReplicaDoc) -> Vec<String> {
        device_uuids(self.snap, r)
    }

    /// What the node's agent said about one of its GPUs (driver name, PCI bus id).
    pub(super) fn gpu_meta(&self, node: NodeId, index: u32) -> Option<&api::agent::GpuWire> {
        self.links.get(&node)?.doc.gpus.iter().find(|g| g.index == index)
    }

    /// Who holds each device of a node now.
    pub(super) fn holders(&self, node: NodeId) -> HashMap<DevRef, Holder> {
        let mut out = HashMap::new();
        let node_cpus = self.snap.node(node).map_or(0.0, |n| n.cpus_milli as f64 / 1000.0);
        for j in self.snap.jobs_on(node) {
            let (Some(job), Some(doc)) = (self.snap.job(j), self.jobs.get(&j.0)) else { continue };
            if self.pulling.contains_key(&j.0) {
                continue;
            }
            let Some(run) = job.running() else { continue };
            let here: Vec<(usize, &gpool_core::ReplicaPlacement)> =
                run.placement.iter().enumerate().filter(|(_, p)| p.node == node).collect();
            let requested: u64 = here.iter().map(|(_, p)| p.cpus_milli).sum();
            let cpus = Some(if requested > 0 { requested as f64 / 1000.0 } else { node_cpus });
            let holder = |mig_profile: Option<gpool_core::MigProfile>, memory_total_mb: u64| Holder {
                job: j.0,
                name: doc.name.clone(),
                user: doc.user.clone(),
                team: doc.team.clone(),
                queue: doc.queue.clone(),
                cpus,
                mig_profile,
                memory_total_mb,
                share_milli: None,
                rank: None,
                model: None,
                numa_node: None,
            };
            for (rank, p) in here {
                let (gpus, mig) = self.snap.replica_devices(p);
                let on = |d: &gpool_core::Device, h: Holder| Holder {
                    rank: Some(rank as u32),
                    model: Some(d.model.to_string()),
                    numa_node: d.numa_node,
                    ..h
                };
                for d in gpus {
                    match p.share {
                        Some(s) => {
                            let h = Holder { share_milli: Some(s.milli), ..holder(None, s.memory_mb) };
                            out.insert(DevRef::Share { gpu: d.index, job: j.0 }, on(d, h));
                        }
                        None => {
                            out.insert(DevRef::Gpu(d.index), on(d, holder(None, d.memory_mb)));
                        }
                    }
                }
                // Telemetry joins MIG readings by GPU-instance id: an instance
                // whose id the agent could not read has no readings to label.
                for (d, m) in mig {
                    let Some(gi_id) = m.gi_id else { continue };
                    out.insert(
                        DevRef::Mig { gpu: d.index, gi_id },
                        on(d, holder(Some(m.profile.clone()), m.memory_mb)),
                    );
                }
            }
        }
        out
    }

    pub(super) fn usage(&self, store: &mut dyn Store, d: &JobDoc) -> Result<api::JobUsageView, ApiError> {
        let rows = store.samples(d.id).map_err(|e| ApiError::new(500, e.to_string()))?;
        let summary = self.costs.usage_summary(self.snap, self.telemetry, d, self.now).unwrap_or_default();
        // A running job's samples since its last stored row, at full
        // resolution: a job a minute old has a curve too.
        let last = rows.iter().map(|r| r.at_ms).max().unwrap_or(i64::MIN);
        let recent: Vec<api::UsagePoint> = self
            .telemetry
            .job_usage(d.id)
            .map(|u| {
                u.devices
                    .into_iter()
                    .flat_map(|dev| {
                        let (name, total) = (dev.name, dev.memory_total_mb);
                        dev.points.into_iter().filter(move |p| p.at.as_millis() > last).map(move |p| api::UsagePoint {
                            at: api::time::rfc3339(p.at.as_millis()),
                            device: name.clone(),
                            gpu_util: p.util,
                            memory_mb: p.memory_used_mb,
                            memory_total_mb: total,
                            cpu_cores: None,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let points = rows
            .into_iter()
            .map(|r| api::UsagePoint {
                at: api::time::rfc3339(r.at_ms),
                device: r.device,
                gpu_util: r.gpu_util,
                memory_mb: r.memory_mb,
                memory_total_mb: r.memory_total_mb,
                cpu_cores: r.cpu_cores,
            })
            .chain(recent)
            .collect();
        Ok(api::JobUsageView { job: d.id, summary, points })
    }

    pub(super) fn advice(
        &self,
        store: &mut dyn Store,
        d: &JobDoc,
        min_span: Option<Duration>,
    ) -> Result<api::AdviceView, ApiError> {
        use gpool_core::advice::{Thresholds, advise};
        // A running job: its recent full-resolution series; a finished one: the stored rows.
        let mut usage = match self.telemetry.job_usage(d.id) {
            Some(u) => u,
            None => {
                use crate::plane::usage_rows::{coverage, decode_final_series, final_series_key, usage_from_rows};
                let rows = store.samples(d.id).map_err(|e| ApiError::new(500, e.to_string()))?;
                let mut u = usage_from_rows(&rows);
                // Minute rows judge a long run; a short one, its last series.
                let wanted = Thresholds::default();
                let (span, points) = coverage(&u);
                if span < min_span.unwrap_or(wanted.min_span) || points < wanted.min_points {
                    let kept = store.meta(&final_series_key(d.id)).ok().flatten();
                    if let Some(last) = kept.as_deref().and_then(decode_final_series)
                        && coverage(&last).1 > points
                    {
                        u = last;
                    }
                }
                u.ended = d.state.is_terminal();
                let cpus: u64 = d.run.as_ref().map_or(0, |r| r.replicas.iter().map(|x| x.cpus_milli).sum());
                u.cpus_allocated = (cpus > 0).then_some(cpus as f64 / 1000.0);
                u
            }
        };
        let summary = self.costs.usage_summary(self.snap, self.telemetry, d, self.now).unwrap_or_default();
        usage.runtime = Duration::from_secs_f64(summary.gpu_hours * 3600.0 / usage.devices.len().max(1) as f64);
        let price = self.costs.price_of(self.snap, d);
        usage.price_per_gpu_hour = price;
        let mut offered: Vec<(gpool_core::MigProfile, u64)> = self
            .snap
            .nodes()
            .flat_map(|(_, n)| n.devices.iter().filter_map(|dev| dev.mig.as_ref()).flatten())
            .map(|m| (m.profile.clone(), m.memory_mb))
            .collect();
        offered.sort_by_key(|(p, mem)| (p.compute_slices, *mem, p.to_string()));
        offered.dedup_by(|a, b| a.0 == b.0);
        usage.mig_offered = offered;
        let mut t = Thresholds::default();
        if let Some(s) = min_span {
            t.min_span = s;
        }
        let a = advise(&usage, &t);
        // The latest profile (`gpool profile`) confirms or corrects what utilisation suggests.
        let profile = super::profiles::latest(store, d.id).ok().flatten().map(|p| p.view());
        let profiled = |kind: &str| -> Option<String> {
            let p = profile.as_ref()?;
            let same =
                matches!((kind, p.bottleneck.as_str()), ("input_bound", "input-bound") | ("cpu_bound", "CPU-bound"));
            same.then(|| format!("profiled at {}: {}: {}", p.taken_at, p.bottleneck, p.why))
        };
        Ok(api::AdviceView {
            job: d.id,
            summary,
            p5_gpu_util: a.summary.p5_util,
            p95_gpu_util: a.summary.p95_util,
            price_per_gpu_hour: price,
            findings: a
                .findings
                .into_iter()
                .map(|f| api::FindingView {
                    kind: f.kind.as_str().into(),
                    summary: f.summary,
                    evidence: f.evidence.into_iter().chain(profiled(f.kind.as_str())).collect(),
                    suggestions: f.suggestions,
                    wasted_gpu_hours: f.wasted_gpu_hours,
                    wasted_usd: f.wasted_usd,
                })
                .collect(),
            profile,
        })
    }

    /// Alerts firing now; users see those about their own jobs and about GPUs.
    pub(super) fn alerts(&self, caller: &Caller) -> Vec<api::AlertView> {
        self.telemetry
            .active_alerts()
            .into_iter()
            .filter(|a| {
                caller.sees_all() || a.labels.iter().find(|(k, _)| k == "user").is_none_or(|(_, u)| *u == caller.user)
            })
            .map(|a| api::AlertView {
                rule: a.rule,
                severity: a.severity.as_str().into(),
                subject: a.subject,
                value: a.value,
                since: api::time::rfc3339(a.since.as_millis()),
                summary: a.summary,
                labels: a.labels.into_iter().collect(),
            })
            .collect()
    }

    /// Everything `/metrics` shows, read from the controller's state.
    pub(super) fn scrape(&self, now: i64) -> Scrape {
        let (mut gpus, mut amd, mut tpu, mut migs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (id, n) in self.snap.nodes() {
            let holders = self.holders(id);
            let job_labels = |h: &Holder| -> metrics::Labels {
                vec![
                    ("job_id", h.job.to_string()),
                    ("job_name", h.name.clone()),
                    ("user", h.user.clone()),
                    ("team", h.team.clone()),
                    ("queue", h.queue.clone()),
                ]
            };
            for d in &n.devices {
                let Some(track) = self.telemetry.gpu(&n.name, d.index) else { continue };
                let meta = self.gpu_meta(id, d.index);
                if d.kind == gpool_core::DeviceKind::Tpu {
                    // The labels of GKE's TPU device plugin.
                    let mut labels: metrics::Labels = vec![
                        ("make", "cloud-tpu".to_string()),
                        ("model", d.model.to_string()),
                        ("accelerator_id", d.index.to_string()),
                        ("hostname", n.name.to_string()),
                    ];
                    if let Some(topology) = n.labels.get(crate::plane::convert::TPU_TOPOLOGY_LABEL) {
                        labels.push(("tpu_topology", topology.to_string()));
                    }
                    labels.extend(holders.get(&DevRef::Gpu(d.index)).map(job_labels).unwrap_or_default());
                    tpu.push(metrics::GpuSeries { labels, sample: track.sample.clone() });
                    continue;
                }
                if d.kind == gpool_core::DeviceKind::AmdGpu {
                    // The labels of AMD's exporter.
                    let mut labels: metrics::Labels = vec![
                        ("gpu_id", d.index.to_string()),
                        ("serial_number", d.uuid.to_string()),
                        ("card_model", meta.map_or_else(|| d.model.to_string(), |m| m.name.clone())),
                        ("hostname", n.name.to_string()),
                    ];
                    labels.extend(holders.get(&DevRef::Gpu(d.index)).map(job_labels).unwrap_or_default());
                    amd.push(metrics::GpuSeries { labels, sample: track.sample.clone() });
                    continue;
                }
                let mut labels: metrics::Labels = vec![
                    ("gpu", d.index.to_string()),
                    ("UUID", d.uuid.to_string()),
                    ("pci_bus_id", meta.and_then(|m| m.pci_bus_id.clone()).unwrap_or_default()),
                    ("device", format!("nvidia{}", d.index)),
                    ("modelName", meta.map_or_else(|| d.model.to_string(), |m| m.name.clone())),
                    ("Hostname", n.name.to_string()),
                ];
                for m in d.mig.iter().flatten() {
                    let sample = track.sample.mig.iter().find(|x| Some(x.gi_id) == m.gi_id);
                    let mut l = labels.clone();
                    l.push(("GPU_I_PROFILE", m.profile.to_string()));
                    l.push(("GPU_I_ID", m.gi_id.map(|g| g.to_string()).unwrap_or_default()));
                    if let Some(h) = m.gi_id.and_then(|gi_id| holders.get(&DevRef::Mig { gpu: d.index, gi_id })) {
                        l.extend(job_labels(h));
                    }
                    migs.push(metrics::MigSeries {
                        labels: l,
                        memory_used_mb: sample.and_then(|x| x.memory_used_mb),
                        memory_total_mb: sample.and_then(|x| x.memory_total_mb).or(Some(m.memory_mb)),
                    });
                }
                if let Some(h) = holders.get(&DevRef::Gpu(d.index)) {
                    labels.extend(job_labels(h));
                }
                gpus.push(metrics::GpuSeries { labels, sample: track.sample.clone() });
            }
        }
        let mut queues: BTreeMap<String, metrics::QueueStat> = BTreeMap::new();
        let mut jobs_by_state: BTreeMap<String, u64> = BTreeMap::new();
        for d in self.jobs.values() {
            *jobs_by_state.entry(d.state.as_str().into()).or_default() += 1;
            let q = queues
                .entry(d.queue.clone())
                .or_insert_with(|| metrics::QueueStat { name: d.queue.clone(), ..metrics::QueueStat::default() });
            let gpus = self.snap.job(JobId(d.id)).map_or(0.0, |j| j.spec.requested_gpu_milli() as f64 / 1000.0);
            if d.state == api::JobState::Pending {
                q.pending_jobs += 1;
                q.pending_gpus += gpus;
            } else {
                q.running_jobs += 1;
            }
        }
        for q in self.snap.queues() {
            queues
                .entry(q.name.to_string())
                .or_insert_with(|| metrics::QueueStat { name: q.name.to_string(), ..metrics::QueueStat::default() });
        }
        for q in queues.values_mut() {
            q.used_gpus = self.snap.queue_usage(&q.name) as f64 / 1000.0;
        }
        let gpu_hours = self.costs.gpu_hours(self.snap, self.jobs, now);
        let mut alerts: BTreeMap<(String, String), u64> =
            self.telemetry.rules().iter().map(|r| ((r.name.clone(), r.severity.as_str().to_string()), 0)).collect();
        for a in self.telemetry.active_alerts() {
            *alerts.entry((a.rule, a.severity.as_str().into())).or_default() += 1;
        }
        Scrape {
            gpus,
            amd,
            tpu,
            migs,
            queues: queues.into_values().collect(),
            jobs_by_state,
            wait: self.pass.wait.clone(),
            passes: self.pass.passes.clone(),
            allocations_total: self.pass.allocations,
            preemptions_total: self.pass.preemptions,
            resizes_total: self.pass.resizes,
            gpu_hours,
            idle_gpu_seconds: self.telemetry.counters.idle_allocated_gpu_secs.clone(),
            energy_joules: self.telemetry.counters.energy_joules.clone(),
            job_energy: self
                .snap
                .running_jobs()
                .filter_map(|j| {
                    let wh = self.telemetry.summary(j.id.0)?.energy_wh?;
                    Some((j.id.0, self.jobs.get(&j.id.0)?.user.clone(), wh * 3600.0))
                })
                .collect(),
            cost: self.costs.cost_counters(self.snap, self.jobs, now),
            idle_cost: self.costs.waste_counters(self.snap, self.jobs, self.telemetry),
            nodes: self
                .snap
                .nodes()
                .map(|(_, n)| {
                    let ok = self.telemetry.node_error(&n.name).is_none();
                    (n.name.to_string(), n.state.as_str().to_string(), ok)
                })
                .collect(),
            gpu_health: self.faults.gpu_health(self.snap, self.telemetry),
            alerts,
            services: self.services.series(),
        }
    }
}

/// UUIDs of the devices a replica record names (for the agent's sampler).
pub(super) fn device_uuids(snap: &Snapshot, r: &ReplicaDoc) -> Vec<String> {
    let Some(node) = snap.node_id(&r.node).and_then(|id| snap.node(id)) else { return Vec::new() };

    let mut v: Vec<String> =
        r.gpus.iter().filter_map(|i| node.devices.iter().find(|d| d.index == *i)).map(|d| d.uuid.to_string()).collect();
    v.extend(r.mig.iter().cloned());
    v
}

/// An alert's transition as a webhook notice (Alertmanager's shape).
pub(super) fn alert_notice(t: &Transition, now: i64) -> Notice {
    let mut labels: BTreeMap<String, String> = t.labels.iter().cloned().collect();
    labels.insert("alertname".into(), t.rule.clone());
    labels.insert("severity".into(), t.severity.as_str().into());
    labels.insert("subject".into(), t.subject.clone());
    Notice {
        status: if t.firing { "firing" } else { "resolved" }.into(),
        labels,
        annotations: [("summary".to_string(), t.summary.clone())].into_iter().collect(),
        starts_at: api::time::rfc3339(t.since.as_millis()),
        ends_at: if t.firing { "0001-01-01T00:00:00Z".into() } else { api::time::rfc3339(now) },
    }
}
