//! `gpool services`: inference services, their endpoint, replicas and load;
//! `gpool services delete NAME`; and applying a service spec
//! (`gpool submit -f svc.yaml`, a spec with a `service:` block).

use anyhow::bail;
use gpool_api as api;

use super::ListArgs;
use crate::client::{Client, Connect};
use crate::output::{Output, emit, text};

/// `gpool services delete NAME`.
#[derive(clap::Args, Debug)]
pub(crate) struct DeleteArgs {
    /// The service's name.
    name: String,
    #[arg(long, short = 'o', value_enum, default_value_t = crate::config_file::default_output())]
    output: Output,
    #[command(flatten)]
    connect: Connect,
}

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let list: Vec<api::ServiceView> = a.connect.client()?.get("/services")?;
    if list.is_empty() && !a.output.is_data() {
        emit(
            "no services: apply one with gpool submit -f svc.yaml (a spec with a service: block; see docs/services.md)\n",
        );
        return Ok(());
    }
    emit(&render(&list, a.output)?);
    Ok(())
}

pub(crate) fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let v: api::ServiceView = a.connect.client()?.delete(&format!("/services/{}", a.name))?;
    match a.output {
        Output::Json | Output::Yaml => emit(&a.output.data(&v)?),
        Output::Table | Output::Wide => {
            emit(&format!("service {} deleted; its {} replica(s) stop\n", v.name, v.replicas.len()))
        }
    }
    Ok(())
}

/// Applies each service spec by its name (a batch of services and jobs is refused: apply them apart).
pub(crate) fn apply(client: &Client, specs: Vec<api::JobSpec>, output: Output) -> anyhow::Result<()> {
    if specs.iter().any(|s| s.service.is_none()) {
        bail!(
            "this file mixes jobs and services: put each service in a file of its own and apply it with gpool submit -f"
        );
    }
    let mut out = Vec::new();
    for s in specs {
        let Some(name) = s.name.clone() else {
            bail!("a service needs a name (name: llm): it is its address on the proxy, /NAME/");
        };
        let applied: api::ServiceApplied = client.put(&format!("/services/{name}"), &s)?;
        out.push(applied);
    }
    match output {
        Output::Json | Output::Yaml => emit(&output.data(&out)?),
        Output::Table | Output::Wide => emit(&text(
            out.iter()
                .map(|a| {
                    format!("service {} {} (generation {}); endpoint {}", a.name, a.outcome, a.generation, a.endpoint)
                })
                .collect(),
        )),
    }
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

/// A line a service: endpoint, ready/desired (min-max), load and latency.
pub(crate) fn render(list: &[api::ServiceView], output: Output) -> anyhow::Result<String> {
    if output.is_data() {
        return output.data(list);
    }
    let mut lines = vec![format!(
        "{:<16} {:<10} {:>5}/{:<7} {:>7} {:>8} {:>9} {:>9} {:>8}  {}",
        "SERVICE", "USER", "READY", "DESIRED", "MIN-MAX", "REQ/S", "P50 MS", "P99 MS", "FAILED", "ENDPOINT"
    )];
    for s in list {
        lines.push(format!(
            "{:<16} {:<10} {:>5}/{:<7} {:>7} {:>8.1} {:>9} {:>9} {:>8}  {}",
            s.name,
            s.user,
            s.ready,
            s.desired,
            format!("{}-{}", s.min, s.max),
            s.requests_per_second,
            ms(s.p50_ms),
            ms(s.p99_ms),
            s.failed_total,
            s.endpoint
        ));
    }
    Ok(text(lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    fn svc(name: &str, ready: u32, desired: u32, p: Option<f64>) -> api::ServiceView {
        api::ServiceView {
            name: name.into(),
            user: "ana".into(),
            endpoint: format!("http://127.0.0.1:8780/{name}/"),
            generation: 2,
            ready,
            desired,
            min: 0,
            max: 6,
            requests_per_second: 412.5,
            p50_ms: p,
            p99_ms: p.map(|x| x * 2.5),
            in_flight: 3.0,
            requests_total: 20_000,
            failed_total: 0,
            replicas: vec![api::ServiceReplicaView {
                job: 7,
                generation: 2,
                state: "running".into(),
                ready: true,
                draining: false,
                address: Some("127.0.0.1:41234".into()),
            }],
        }
    }

    #[test]
    fn services_render_as_a_table_and_as_json() {
        let list = [svc("llm", 5, 6, Some(51.2)), svc("embed", 0, 0, None)];
        assert_snapshot("services.table", &render(&list, Output::Table).expect("table"));
        let back: Vec<api::ServiceView> =
            serde_json::from_str(&render(&list, Output::Json).expect("json")).expect("parses back");
        assert_eq!(back, list);
        let yaml = render(&list, Output::Yaml).expect("yaml");
        assert!(yaml.starts_with("- name: llm\n"), "{yaml}");
        let back: Vec<api::ServiceView> = gpool_api::yaml::from_str(&yaml).expect("parses back");
        assert_eq!(back, list, "-o yaml is the same data as -o json");
    }
}
