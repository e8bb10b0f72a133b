//! Sends alert transitions to a webhook, in the format of Prometheus
//! Alertmanager's webhook receiver (version 4), so that tools that take
//! Alertmanager notifications (chat bridges, incident tools) take gpool's.
//!
//! A thread of its own does the HTTP: the controller hands notifications
//! over a bounded channel and never waits on the network. A notification
//! that cannot be delivered is reported on stderr and dropped (the alert
//! stays visible in the API and the event history).

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use serde::Serialize;

/// One alert as Alertmanager sends it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    /// `firing` or `resolved`.
    pub status: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: String,
    /// `0001-01-01T00:00:00Z` while firing.
    pub ends_at: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Payload<'a> {
    version: &'static str,
    receiver: &'static str,
    status: &'a str,
    alerts: &'a [Notice],
    group_labels: BTreeMap<String, String>,
    common_labels: BTreeMap<String, String>,
    common_annotations: BTreeMap<String, String>,
    external_url: &'a str,
}

/// The sending side, held by the controller.
#[derive(Clone, Debug)]
pub struct Webhook {
    tx: SyncSender<Vec<Notice>>,
}

impl Webhook {
    /// Starts the sender thread for `url`; `external_url` is the daemon's API address.
    pub fn spawn(url: String, external_url: String) -> std::io::Result<Webhook> {
        let (tx, rx) = std::sync::mpsc::sync_channel(256);
        std::thread::Builder::new().name("webhook".into()).spawn(move || deliver(&url, &external_url, rx))?;
        Ok(Webhook { tx })
    }

    /// Queues a batch; drops it (with a message) if the webhook is far behind.
    pub fn send(&self, notices: Vec<Notice>) {
        if notices.is_empty() {
            return;
        }
        match self.tx.try_send(notices) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(n)) => {
                tracing::warn!("alert webhook is not keeping up; {} notification(s) dropped", n.len());
            }
        }
    }
}

fn deliver(url: &str, external_url: &str, rx: Receiver<Vec<Notice>>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    for notices in rx {
        let status = if notices.iter().any(|n| n.status == "firing") { "firing" } else { "resolved" };
        let payload = Payload {
            version: "4",
            receiver: "gpool",
            status,
            alerts: &notices,
            group_labels: BTreeMap::new(),
            common_labels: BTreeMap::new(),
            common_annotations: BTreeMap::new(),
            external_url,
        };
        match agent.post(url).send_json(&payload) {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => tracing::warn!("alert webhook {url} answered HTTP {}", r.status().as_u16()),
            Err(e) => tracing::warn!("cannot deliver alerts to {url}: {e}"),
        }
    }
}
