//! Every route of the API and how the OpenAPI document describes it, in one
//! place: aide builds the router and the document from the same calls. What
//! a handler reads (path, query, body) and answers comes from its signature
//! (`extract.rs`); what a signature cannot say is said here: the
//! operation's id, tag and summary, the statuses the controller answers
//! (404, 409, ...), and the answers that are not JSON.

use aide::axum::ApiRouter;
use aide::axum::routing::{delete_with, get_with, post_with, put_with};
use aide::generate::in_context;
use aide::openapi::{
    MediaType, OpenApi, ReferenceOr, RequestBody, Response, SchemaObject, SecurityRequirement, SecurityScheme,
    StatusCode, Tag,
};
use aide::transform::{TransformOpenApi, TransformOperation};

use super::extract::error_response;
use super::*;

/// Says more about an operation than its handler's signature can.
trait Doc: Sized {
    /// The operation's id, tag and summary.
    fn op(self, id: &str, tag: &str, summary: &str) -> Self;
    /// It may answer `status` with a JSON error, for `why`.
    fn says(self, status: u16, why: &str) -> Self;
    /// It answers `status` with a body of `content_type` that is not JSON.
    fn raw(self, status: u16, content_type: &str, what: &str) -> Self;
    /// Its request body is a stream of `content_type`.
    fn streams_in(self, content_type: &str, what: &str) -> Self;
    /// It needs no token.
    fn public(self) -> Self;
    /// Its request body may be left out.
    fn optional_body(self) -> Self;
}

impl Doc for TransformOperation<'_> {
    fn op(self, id: &str, tag: &str, summary: &str) -> Self {
        self.id(id).tag(tag).summary(summary)
    }

    fn says(mut self, status: u16, why: &str) -> Self {
        let r = in_context(|ctx| error_response(ctx, why));
        let op = self.inner_mut();
        op.responses
            .get_or_insert_with(Default::default)
            .responses
            .insert(StatusCode::Code(status), ReferenceOr::Item(r));
        self
    }

    fn raw(mut self, status: u16, content_type: &str, what: &str) -> Self {
        let schema = SchemaObject {
            json_schema: schemars::json_schema!({"type": "string"}),
            example: None,
            external_docs: None,
        };
        let media = MediaType { schema: Some(schema), ..MediaType::default() };
        let r = Response {
            description: what.to_string(),
            content: [(content_type.to_string(), media)].into_iter().collect(),
            ..Response::default()
        };
        let op = self.inner_mut();
        op.responses
            .get_or_insert_with(Default::default)
            .responses
            .insert(StatusCode::Code(status), ReferenceOr::Item(r));
        self
    }

    fn streams_in(mut self, content_type: &str, what: &str) -> Self {
        let body = RequestBody {
            description: Some(what.to_string()),
            content: [(content_type.to_string(), MediaType::default())].into_iter().collect(),
            required: true,
            ..RequestBody::default()
        };
        self.inner_mut().request_body = Some(ReferenceOr::Item(body));
        self
    }

    fn optional_body(mut self) -> Self {
        if let Some(ReferenceOr::Item(body)) = self.inner_mut().request_body.as_mut() {
            body.required = false;
        }
        self
    }

    fn public(mut self) -> Self {
        // An empty requirement: no token needed (the document's default asks for one).
        self.inner_mut().security = vec![SecurityRequirement::new()];
        self
    }
}

const NO_JOB: &str = "no such job (or not the caller's)";
const JOB_ENDED: &str = "the job is not in a state that allows it (it has ended, say)";
const NO_NODE: &str = "no such node";
const ADMINS: &str = "admins only";

async fn healthz() -> &'static str {
    "ok\n"
}

/// The routes of `/api/v1`, `/agent/v1`, `/metrics`, `/healthz` and `/tls/ca.pem`.
pub(super) fn routes() -> ApiRouter<AppState> {
    // Schemas as OpenAPI 3.1 has them (JSON Schema 2020-12: tuples are
    // `prefixItems`), kept under `components` and referred to.
    in_context(|ctx| {
        ctx.schema = schemars::generate::SchemaSettings::draft2020_12()
            .with(|s| {
                s.inline_subschemas = false;
                s.definitions_path = "#/components/schemas/".into();
            })
            .into_generator();
    });
    ApiRouter::new()
        .api_route("/healthz", get_with(healthz, |o| o.op("healthz", "meta", "liveness").public()))
        .api_route(
            "/api/v1/openapi.json",
            get_with(openapi, |o| {
                o.op("openapi", "meta", "this document").public().raw(200, "application/json", "OpenAPI 3.1 document")
            }),
        )
        .merge(jobs_routes())
        .merge(pipelines_routes())
        .merge(cluster_routes())
        .merge(access_routes())
        .merge(telemetry_routes())
        .merge(agent_routes())
        .merge(terminal_routes())
}

fn jobs_routes() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route(
            "/api/v1/jobs",
            post_with(jobs::submit, |o| {
                o.op("submitJobs", "jobs", "submit one job or a batch (all or nothing)")
                    .says(400, "a spec is not valid, or no node could ever run it: the error names the field")
            })
            .get_with(jobs::list, |o| o.op("listJobs", "jobs", "list jobs (own jobs for users)")),
        )
        .api_route(
            "/api/v1/jobs/{id}",
            get_with(jobs::get_job, |o| o.op("getJob", "jobs", "one job").says(404, NO_JOB)).delete_with(
                jobs::cancel,
                |o| {
                    o.op("deleteJob", "jobs", "cancel (same as POST .../cancel)").says(404, NO_JOB).says(409, JOB_ENDED)
                },
            ),
        )
        .api_route(
            "/api/v1/jobs/{id}/cancel",
            post_with(jobs::cancel, |o| {
                o.op("cancelJob", "jobs", "cancel: the stop signal, then SIGKILL after the grace period")
                    .says(404, NO_JOB)
                    .says(409, JOB_ENDED)
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/hold",
            post_with(holds::hold, |o| {
                o.op("holdJob", "jobs", "hold a pending job back: no pass starts it until it is released")
                    .says(404, NO_JOB)
                    .says(409, "the job is not pending")
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/release",
            post_with(holds::release, |o| {
                o.op("releaseJob", "jobs", "release a held job: it waits for a pass again")
                    .says(404, NO_JOB)
                    .says(409, "the job is not held")
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/logs",
            get_with(logs, |o| {
                o.op("jobLogs", "jobs", "a replica's output; with follow, streamed until the job ends")
                    .raw(200, "text/plain", "the output, as written")
                    .says(404, "no such job or replica, or it wrote nothing yet")
                    .says(429, "the caller follows too many logs at once")
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/attach",
            post_with(terminals::attach, |o| {
                o.op(
                    "attachJob",
                    "terminals",
                    "open a session on an interactive job's terminal; join its two streams within 30 s",
                )
                .says(404, NO_JOB)
                .says(409, "the job is not interactive, or not running")
            }),
        )
}

fn pipelines_routes() -> ApiRouter<AppState> {
    let no_run = "no such pipeline run (or not the caller's)";
    ApiRouter::new()
        .api_route(
            "/api/v1/pipelines",
            post_with(pipelines::submit, |o| {
                o.op(
                    "submitPipeline",
                    "pipelines",
                    "run a pipeline: every stage instance becomes a job; all accepted or none",
                )
                .says(400, "a cycle, an unknown need, or a stage no node could run: the error names the stage")
            })
            .get_with(pipelines::list, |o| o.op("listPipelines", "pipelines", "recent pipeline runs, newest first")),
        )
        .api_route(
            "/api/v1/pipelines/{run}",
            get_with(pipelines::get_run, |o| {
                o.op("getPipeline", "pipelines", "a pipeline run: its state and each stage's job").says(404, no_run)
            }),
        )
        .api_route(
            "/api/v1/pipelines/{run}/cancel",
            post_with(pipelines::cancel, |o| {
                o.op("cancelPipeline", "pipelines", "cancel every job of the run that has not ended")
                    .says(404, no_run)
                    .says(409, "the run has ended")
            }),
        )
        .api_route(
            "/api/v1/schedules",
            get_with(schedules::list, |o| o.op("listSchedules", "schedules", "recurring jobs and pipelines")),
        )
        .api_route(
            "/api/v1/schedules/{name}",
            put_with(schedules::apply, |o| {
                o.op(
                    "applySchedule",
                    "schedules",
                    "create or change a recurring job or pipeline (cron in a stated time zone)",
                )
            })
            .delete_with(schedules::delete, |o| {
                o.op("deleteSchedule", "schedules", "delete a schedule (what it submitted goes on)")
                    .says(404, "no such schedule")
            }),
        )
        .api_route(
            "/api/v1/services",
            get_with(services::list, |o| {
                o.op("listServices", "services", "inference services: replicas, load, latency")
            }),
        )
        .api_route(
            "/api/v1/services/{name}",
            put_with(services::apply, |o| {
                o.op(
                    "applyService",
                    "services",
                    "create a service, or update it (a rolling update) when its spec changed",
                )
                .says(409, "the name is another user's service")
            })
            .delete_with(services::delete, |o| {
                o.op("deleteService", "services", "delete a service; its replicas stop").says(404, "no such service")
            }),
        )
}

fn cluster_routes() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route("/api/v1/nodes", get_with(cluster::nodes, |o| o.op("listNodes", "nodes", "nodes and devices")))
        .api_route(
            "/api/v1/nodes/{name}/drain",
            post_with(node_admin::drain, |o| {
                o.op("drainNode", "nodes", "drain a node: running jobs finish, nothing new starts there")
                    .says(404, NO_NODE)
            }),
        )
        .api_route(
            "/api/v1/nodes/{name}/resume",
            post_with(node_admin::resume, |o| {
                o.op("resumeNode", "nodes", "let a drained node take new work").says(404, NO_NODE)
            }),
        )
        .api_route(
            "/api/v1/nodes/{name}/notice",
            post_with(node_admin::notice, |o| {
                o.op(
                    "noticeNode",
                    "nodes",
                    "a spot notice: nothing new starts there; its jobs checkpoint and are requeued",
                )
                .says(404, NO_NODE)
            }),
        )
        .api_route(
            "/api/v1/nodes/{name}/inject",
            post_with(node_admin::inject, |o| {
                o.op("injectFault", "nodes", "inject a fault into a simulated GPU (refused on real devices)")
                    .says(404, "no such node or GPU")
                    .says(409, "the node's GPUs are real")
            }),
        )
        .api_route(
            "/api/v1/nodes/{name}/restore",
            post_with(node_admin::restore, |o| {
                o.op("restoreGpu", "nodes", "bring a quarantined GPU back into service")
                    .says(404, "no such node or GPU")
                    .says(409, "the GPU is not quarantined")
            }),
        )
        .api_route(
            "/api/v1/health",
            get_with(node_admin::health, |o| o.op("gpuHealth", "nodes", "GPUs out of service for faults")),
        )
        .api_route("/api/v1/pools", get_with(pools, |o| o.op("listPools", "nodes", "elastic node pools")))
        .api_route("/api/v1/queues", get_with(queues, |o| o.op("listQueues", "queues", "queues, quotas and use")))
        .api_route(
            "/api/v1/overview",
            get_with(cluster::overview, |o| o.op("overview", "nodes", "the dashboard's overview")),
        )
        .api_route(
            "/api/v1/reservations",
            get_with(reservations::list, |o| o.op("listReservations", "reservations", "advance reservations"))
                .post_with(reservations::create, |o| {
                    o.op("createReservation", "reservations", "set GPUs aside for users or teams over a window")
                        .says(403, ADMINS)
                        .says(404, "no such node")
                        .says(409, "the name is taken, or the GPUs are reserved then")
                }),
        )
        .api_route(
            "/api/v1/reservations/{name}",
            delete_with(reservations::delete, |o| {
                o.op("deleteReservation", "reservations", "delete a reservation: its GPUs are anyone's at once")
                    .says(404, "no such reservation")
            }),
        )
        .api_route(
            "/api/v1/power",
            get_with(schedules::power, |o| o.op("listPower", "accounting", "power budgets and their use"))
                .put_with(schedules::set_power, |o| {
                    o.op("setPower", "accounting", "set a power budget live").says(404, "no such budget")
                }),
        )
        .api_route(
            "/api/v1/budgets",
            get_with(schedules::budgets, |o| o.op("listBudgets", "accounting", "monthly budgets")),
        )
        .api_route("/api/v1/cost", get_with(jobs::cost, |o| o.op("cost", "accounting", "what jobs cost, grouped")))
}

fn access_routes() -> ApiRouter<AppState> {
    ApiRouter::new()
        .api_route(
            "/api/v1/tokens",
            post_with(tokens::create_token, |o| o.op("createToken", "access", "create a token").says(403, ADMINS))
                .get_with(tokens::list_tokens, |o| o.op("listTokens", "access", "tokens, never their secrets")),
        )
        .api_route(
            "/api/v1/tokens/{id}",
            delete_with(tokens::revoke_token, |o| {
                o.op("revokeToken", "access", "revoke a token; the next request with it gets 401")
                    .says(404, "no such token")
            }),
        )
        .api_route("/api/v1/whoami", get_with(tokens::whoami, |o| o.op("whoami", "access", "the caller")))
        .api_route(
            "/api/v1/registries",
            get_with(registries::list, |o| o.op("listRegistries", "access", "the caller's logins to image registries")),
        )
        .api_route(
            "/api/v1/registries/{registry}",
            put_with(registries::login, |o| {
                o.op("registryLogin", "access", "store a login for the caller's jobs' images")
            })
            .delete_with(registries::logout, |o| {
                o.op("registryLogout", "access", "forget the caller's login to this registry")
                    .says(404, "no such login")
            }),
        )
}

fn telemetry_routes() -> ApiRouter<AppState> {
    let no_profile = "no such job, or it has no profile";
    ApiRouter::new()
        .api_route(
            "/api/v1/events",
            get_with(events::events, |o| o.op("events", "telemetry", "the event log, then live").says(404, NO_JOB)),
        )
        .api_route(
            "/api/v1/jobs/{id}/usage",
            get_with(jobs::usage, |o| {
                o.op("jobUsage", "telemetry", "a job's utilisation curve and usage").says(404, NO_JOB)
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/advice",
            get_with(jobs::advice, |o| {
                o.op("jobAdvice", "telemetry", "diagnosis and right-sizing advice").says(404, NO_JOB)
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/profile",
            post_with(profile::take, |o| {
                o.op("profileJob", "telemetry", "profile the running job now; answered when done")
                    .says(404, NO_JOB)
                    .says(409, "the job is not running, or a profile of it is being taken")
                    .says(422, "its nodes could not profile it (no py-spy, say)")
                    .says(504, "its nodes did not answer in time")
            })
            .get_with(profile::latest, |o| {
                o.op("jobProfile", "telemetry", "the job's latest profile").says(404, no_profile)
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/profile/flamegraph.svg",
            get_with(profile::flamegraph, |o| {
                o.op("jobFlamegraph", "telemetry", "a flame graph of the profile's stacks")
                    .raw(200, "image/svg+xml", "the flame graph")
                    .says(404, no_profile)
            }),
        )
        .api_route(
            "/api/v1/jobs/{id}/profile/timeline.svg",
            get_with(profile::timeline, |o| {
                o.op("jobTimeline", "telemetry", "the accelerators' use over the profile's window")
                    .raw(200, "image/svg+xml", "the timeline")
                    .says(404, no_profile)
            }),
        )
        .api_route("/api/v1/alerts", get_with(alerts, |o| o.op("alerts", "telemetry", "alerts firing now")))
        .api_route(
            "/metrics",
            get_with(metrics, |o| {
                o.op("metrics", "telemetry", "Prometheus exporter (with --metrics-auth: a token)").public().raw(
                    200,
                    "text/plain",
                    "Prometheus text format 0.0.4",
                )
            }),
        )
        .api_route(
            "/tls/ca.pem",
            get_with(ca_pem, |o| {
                o.op("caCertificate", "meta", "the CA certificate of a control plane started with --tls")
                    .public()
                    .raw(200, "application/x-pem-file", "the certificate")
                    .says(404, "this control plane serves plain HTTP")
            }),
        )
}

fn agent_routes() -> ApiRouter<AppState> {
    let epoch = "the node registered again since (a newer epoch): re-register";
    ApiRouter::new()
        .api_route(
            "/agent/v1/register",
            post_with(agent::register, |o| {
                o.op("agentRegister", "agent", "a node registers; a new epoch").says(409, epoch)
            }),
        )
        .api_route(
            "/agent/v1/commands",
            get_with(agent::commands, |o| o.op("agentCommands", "agent", "long poll for commands").says(409, epoch)),
        )
        .api_route(
            "/agent/v1/report",
            post_with(agent::report, |o| {
                o.op("agentReport", "agent", "replica events and telemetry; renews the lease").says(409, epoch)
            }),
        )
        .api_route(
            "/agent/v1/logs",
            post_with(agent::logs, |o| {
                o.op(
                    "agentLogs",
                    "agent",
                    "a chunk of a replica's output, appended at offset (none: a probe for the length)",
                )
                .optional_body()
                .says(404, NO_JOB)
                .response::<200, axum::Json<agent::Shipped>>()
                .response_with::<409, axum::Json<agent::Gap>, _>(|r| r.description("a gap: resend from length"))
            }),
        )
}

fn terminal_routes() -> ApiRouter<AppState> {
    let frames = "terminal frames (gpool_api::terminal): a 5-byte header, then the payload";
    let no_session = "no such session, or it has ended";
    let theirs = "the session is another caller's, or another node's";
    ApiRouter::new()
        .api_route(
            "/api/v1/terminals/{session}/input",
            post_with(terminals::client_input, |o| {
                o.op("terminalInput", "terminals", "the client's frames, streamed while it is attached")
                    .streams_in("application/octet-stream", frames)
                    .raw(204, "application/octet-stream", "the session ended")
                    .says(403, theirs)
                    .says(404, no_session)
            }),
        )
        .api_route(
            "/api/v1/terminals/{session}/output",
            get_with(terminals::client_output, |o| {
                o.op("terminalOutput", "terminals", "the job's frames, streamed until the session ends")
                    .raw(200, "application/octet-stream", frames)
                    .says(403, theirs)
                    .says(404, no_session)
            }),
        )
        .api_route(
            "/agent/v1/terminals/{session}/input",
            get_with(terminals::node_input, |o| {
                o.op("agentTerminalInput", "agent", "the client's frames, for the job's shim")
                    .raw(200, "application/octet-stream", frames)
                    .says(403, theirs)
                    .says(404, no_session)
            }),
        )
        .api_route(
            "/agent/v1/terminals/{session}/output",
            post_with(terminals::node_output, |o| {
                o.op("agentTerminalOutput", "agent", "the shim's frames, for the client")
                    .streams_in("application/octet-stream", frames)
                    .raw(204, "application/octet-stream", "the session ended")
                    .says(403, theirs)
                    .says(404, no_session)
            }),
        )
}

/// The document's own parts: what the API is, how callers authenticate, the tags.
pub(super) fn describe(api: TransformOpenApi<'_>) -> TransformOpenApi<'_> {
    let tags = [
        ("jobs", "submit, list, cancel and hold jobs; their logs"),
        ("pipelines", "multi-stage pipelines"),
        ("schedules", "recurring jobs and pipelines"),
        ("services", "inference services behind the proxy"),
        ("nodes", "nodes, pools, GPU health, the overview"),
        ("queues", "queues and quotas"),
        ("reservations", "advance reservations"),
        ("accounting", "cost, budgets, power"),
        ("access", "tokens, the caller, registry logins"),
        ("telemetry", "events, usage, advice, profiles, alerts, metrics"),
        ("terminals", "interactive sessions"),
        ("agent", "the agent protocol (node tokens)"),
        ("meta", "liveness, this document, the CA"),
    ];
    let mut api = api
        .title("gpool API")
        .version("1")
        .description(
            "Submit, watch and cancel GPU jobs; inspect nodes, queues and events. Every call except /healthz, \
             /metrics, /tls/ca.pem and this document needs 'Authorization: Bearer <token>', or, on the daemon's \
             machine, its Unix socket (DATA_DIR/gpool.sock), where the kernel names the caller and no token is \
             needed. Users see and cancel their own jobs; admins all. Errors are {\"error\": \"...\"} with a \
             4xx/5xx status. Generated from the handlers (aide).",
        )
        .security_scheme(
            "bearer",
            SecurityScheme::Http {
                scheme: "bearer".into(),
                bearer_format: None,
                description: None,
                extensions: Default::default(),
            },
        )
        .security_requirement("bearer");
    for (name, description) in tags {
        api = api.tag(Tag { name: name.into(), description: Some(description.into()), ..Tag::default() });
    }
    api
}

/// The OpenAPI document of [`routes`].
pub(super) fn document() -> OpenApi {
    let mut api = OpenApi::default();
    let _router = routes().finish_api_with(&mut api, describe);
    api
}
