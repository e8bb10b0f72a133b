//! The OpenAPI 3 description of `/api/v1`, served at `/api/v1/openapi.json`.
//! A test checks that every route of the router is described here.

pub const DOCUMENT: &str = r##"{
  "openapi": "3.0.3",
  "info": {
    "title": "gpool API",
    "version": "1",
    "description": "Submit, watch and cancel GPU jobs; inspect nodes, queues and events. Every call except /healthz and this document needs 'Authorization: Bearer <token>', or, on the daemon's machine, its Unix socket (DATA_DIR/gpool.sock), where the kernel names the caller and no token is needed. Users see and cancel their own jobs; admins all. Errors are {\"error\": \"...\"} with a 4xx/5xx status."
  },
  "components": {
    "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
    "schemas": {
      "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "string" } } },
      "JobSpec": {
        "type": "object", "required": ["command"], "additionalProperties": false,
        "properties": {
          "name": { "type": "string" },
          "command": { "oneOf": [ { "type": "array", "items": { "type": "string" }, "minItems": 1 }, { "type": "string", "description": "run by /bin/sh -c" } ] },
          "workdir": { "type": "string" },
          "env": { "type": "object", "additionalProperties": { "type": "string" } },
          "resources": { "type": "object", "description": "nvidia.com/gpu, nvidia.com/mig-<profile>, gpool.io/gpu-memory, gpool.io/gpu-fraction (a share of one GPU: 0.25, 25%, 250m or auto), cpu, memory", "additionalProperties": { "oneOf": [ { "type": "number" }, { "type": "string" } ] } },
          "gpuModel": { "type": "string", "example": "H100-80GB" },
          "replicas": { "type": "integer", "minimum": 1, "default": 1 },
          "queue": { "type": "string", "default": "default" },
          "priority": { "oneOf": [ { "type": "integer" }, { "type": "string", "enum": ["low", "normal", "high"] } ] },
          "preemptible": { "type": "boolean", "default": false },
          "gracePeriod": { "oneOf": [ { "type": "number" }, { "type": "string" } ], "description": "e.g. 30s (default), 2m" },
          "stopSignal": { "type": "string", "default": "SIGTERM" },
          "timeLimit": { "oneOf": [ { "type": "number" }, { "type": "string" } ] },
          "estimate": { "oneOf": [ { "type": "number" }, { "type": "string" } ] },
          "nodeSelector": { "type": "object", "additionalProperties": { "type": "string" } },
          "affinity": { "type": "object", "additionalProperties": false, "properties": {
            "required": { "type": "array", "items": { "$ref": "#/components/schemas/MatchExpression" } },
            "preferred": { "type": "array", "items": { "allOf": [ { "$ref": "#/components/schemas/MatchExpression" }, { "type": "object", "required": ["weight"], "properties": { "weight": { "type": "integer" } } } ] } } } },
          "labels": { "type": "object", "additionalProperties": { "type": "string" } },
          "antiAffinity": { "type": "array", "items": { "type": "object", "additionalProperties": { "type": "string" } } },
          "dependsOn": { "type": "array", "items": { "type": "integer" }, "description": "start after these jobs succeeded (Slurm's afterok)" },
          "afterAny": { "type": "array", "items": { "type": "integer" }, "description": "start after these jobs ended, however (afterany)" },
          "afterNotOk": { "type": "array", "items": { "type": "integer" }, "description": "start only after these jobs failed or were cancelled (afternotok)" },
          "retries": { "type": "integer", "minimum": 0, "maximum": 100, "default": 0 },
          "spot": { "type": "string", "enum": ["never", "allowed", "preferred"], "description": "whether it may run on spot nodes (default: its queue's, else allowed)" },
          "image": { "type": "string", "description": "an OCI image to run the command in (podman or docker on the node)" },
          "service": { "type": "object", "additionalProperties": false, "description": "makes the spec an inference service (PUT /api/v1/services/{name})", "properties": {
            "readiness": { "type": "string", "default": "/" },
            "replicas": { "type": "object", "properties": { "min": { "type": "integer", "default": 1 }, "max": { "type": "integer", "default": 1 } } },
            "target": { "type": "object", "description": "one of inFlight (requests at once per replica, default 4) or rps", "properties": { "inFlight": { "type": "number" }, "rps": { "type": "number" } } },
            "scaleUpDelay": { "oneOf": [ { "type": "number" }, { "type": "string" } ], "default": "0s" },
            "scaleDownDelay": { "oneOf": [ { "type": "number" }, { "type": "string" } ], "default": "60s" },
            "window": { "oneOf": [ { "type": "number" }, { "type": "string" } ], "default": "60s", "description": "load is averaged over it; a tenth of it is the panic window" } } }
        }
      },
      "Service": { "type": "object", "properties": {
        "name": { "type": "string" }, "user": { "type": "string" }, "endpoint": { "type": "string" }, "generation": { "type": "integer" },
        "ready": { "type": "integer" }, "desired": { "type": "integer" }, "min": { "type": "integer" }, "max": { "type": "integer" },
        "requests_per_second": { "type": "number" }, "p50_ms": { "type": "number" }, "p99_ms": { "type": "number" }, "in_flight": { "type": "number" },
        "requests_total": { "type": "integer" }, "failed_total": { "type": "integer" },
        "replicas": { "type": "array", "items": { "type": "object", "properties": { "job": { "type": "integer" }, "generation": { "type": "integer" }, "state": { "type": "string" }, "ready": { "type": "boolean" }, "draining": { "type": "boolean" }, "address": { "type": "string" } } } } } },
      "MatchExpression": { "type": "object", "required": ["key", "operator"], "properties": {
        "key": { "type": "string" }, "operator": { "type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"] },
        "values": { "type": "array", "items": { "type": "string" } } } },
      "Batch": { "type": "object", "required": ["jobs"], "additionalProperties": false, "properties": { "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/JobSpec" } } } },
      "Submitted": { "type": "object", "required": ["ids"], "properties": { "ids": { "type": "array", "items": { "type": "integer" } } } },
      "JobState": { "type": "string", "enum": ["pending", "starting", "running", "stopping", "succeeded", "failed", "cancelled", "timed_out"] },
      "Replica": { "type": "object", "properties": {
        "rank": { "type": "integer" }, "node": { "type": "string" }, "gpus": { "type": "array", "items": { "type": "integer" } },
        "mig": { "type": "array", "items": { "type": "string" } }, "cuda_visible_devices": { "type": "string" },
        "gpu_share": { "type": "object", "description": "its share of the one GPU in gpus, when it shares that GPU", "properties": { "milli": { "type": "integer" }, "memory_mb": { "type": "integer" } } } } },
      "Job": { "type": "object", "required": ["id", "name", "user", "team", "queue", "state", "priority", "submitted_at", "attempt", "restarts", "spec"], "properties": {
        "id": { "type": "integer" }, "name": { "type": "string" }, "user": { "type": "string" }, "team": { "type": "string" }, "queue": { "type": "string" },
        "state": { "$ref": "#/components/schemas/JobState" },
        "reason": { "type": "string", "description": "why a pending job waits, or why a finished one ended" },
        "priority": { "type": "integer" }, "submitted_at": { "type": "string", "format": "date-time" },
        "started_at": { "type": "string", "format": "date-time" }, "ended_at": { "type": "string", "format": "date-time" },
        "attempt": { "type": "integer" }, "restarts": { "type": "integer" },
        "replicas": { "type": "array", "items": { "$ref": "#/components/schemas/Replica" } },
        "exit": { "type": "object", "properties": { "code": { "type": "integer" }, "signal": { "type": "integer" } } },
        "spec": { "$ref": "#/components/schemas/JobSpec" } } },
      "JobList": { "type": "object", "required": ["jobs"], "properties": { "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/Job" } }, "next": { "type": "integer", "description": "pass as 'after' for the next page" } } },
      "Node": { "type": "object", "properties": {
        "name": { "type": "string" }, "state": { "type": "string" }, "pool": { "type": "string" }, "cpus": { "type": "number" }, "memory_mb": { "type": "integer" },
        "gpu_sharing": { "type": "string", "enum": ["off", "time-slicing", "mps"] },
        "free_cpus": { "type": "number" }, "free_memory_mb": { "type": "integer" }, "labels": { "type": "object" }, "source": { "type": "string" },
        "devices": { "type": "array", "items": { "type": "object" } }, "jobs": { "type": "array", "items": { "type": "integer" } } } },
      "CostReport": { "type": "object", "properties": {
        "by": { "type": "string" }, "since": { "type": "string", "format": "date-time" }, "total_dollars": { "type": "number" },
        "rows": { "type": "array", "items": { "type": "object", "properties": { "key": { "type": "string" }, "dollars": { "type": "number" }, "gpu_hours": { "type": "number" }, "jobs": { "type": "integer" } } } } } },
      "Pool": { "type": "object", "properties": {
        "name": { "type": "string" }, "kind": { "type": "string", "enum": ["on-demand", "spot", "reserved"] }, "gpus": { "type": "integer" },
        "gpu_model": { "type": "string" }, "cpus": { "type": "integer" }, "memory_gb": { "type": "integer" },
        "price_per_node_hour": { "type": "number" }, "min": { "type": "integer" }, "max": { "type": "integer" },
        "nodes": { "type": "integer" }, "creating": { "type": "integer" }, "deleting": { "type": "integer" }, "idle": { "type": "integer" },
        "node_names": { "type": "array", "items": { "type": "string" } }, "failures": { "type": "integer" },
        "available": { "type": "boolean" }, "retry_at": { "type": "string", "format": "date-time" } } },
      "Queue": { "type": "object", "properties": {
        "name": { "type": "string" }, "cohort": { "type": "string" }, "guarantee_gpus": { "type": "number" }, "max_gpus": { "type": "number" },
        "used_gpus": { "type": "number" }, "pending": { "type": "integer" }, "running": { "type": "integer" } } },
      "Event": { "type": "object", "properties": { "seq": { "type": "integer" }, "at": { "type": "string" }, "job": { "type": "integer" }, "user": { "type": "string" }, "kind": { "type": "string" }, "message": { "type": "string" } } },
      "TokenRequest": { "type": "object", "required": ["user"], "additionalProperties": false, "properties": { "user": { "type": "string" }, "team": { "type": "string" }, "role": { "type": "string", "enum": ["user", "admin", "node", "reader"], "description": "reader: reads everything, changes nothing (dashboards, Prometheus)" }, "ttl": { "type": "string", "example": "90d", "description": "accepted this long; absent: until revoked" } } },
      "TokenCreated": { "type": "object", "properties": { "token": { "type": "string", "description": "the secret, shown once" }, "id": { "type": "string" }, "user": { "type": "string" }, "team": { "type": "string" }, "role": { "type": "string" }, "expires_ms": { "type": "integer" } } },
      "Token": { "type": "object", "required": ["id", "user", "team", "role", "created_ms"], "properties": { "id": { "type": "string", "description": "the first 12 hex digits of the secret's SHA-256" }, "user": { "type": "string" }, "team": { "type": "string" }, "role": { "type": "string" }, "created_ms": { "type": "integer" }, "expires_ms": { "type": "integer" }, "last_used_ms": { "type": "integer", "description": "to the minute" } } },
      "WhoAmI": { "type": "object", "properties": { "user": { "type": "string" }, "team": { "type": "string" }, "role": { "type": "string" } } },
      "UsageSummary": { "type": "object", "description": "absent values are left out", "properties": {
        "gpu_hours": { "type": "number" }, "idle_gpu_hours": { "type": "number" }, "mean_gpu_util": { "type": "number" },
        "peak_memory_mb": { "type": "integer" }, "mean_cpu_cores": { "type": "number" }, "cost_usd": { "type": "number" } } },
      "JobUsage": { "type": "object", "properties": { "job": { "type": "integer" }, "summary": { "$ref": "#/components/schemas/UsageSummary" },
        "points": { "type": "array", "items": { "type": "object", "properties": {
          "at": { "type": "string", "format": "date-time" }, "device": { "type": "string" }, "gpu_util": { "type": "number" },
          "memory_mb": { "type": "integer" }, "memory_total_mb": { "type": "integer" }, "cpu_cores": { "type": "number" } } } } } },
      "Advice": { "type": "object", "properties": { "job": { "type": "integer" }, "summary": { "$ref": "#/components/schemas/UsageSummary" },
        "p5_gpu_util": { "type": "number" }, "p95_gpu_util": { "type": "number" }, "price_per_gpu_hour": { "type": "number" },
        "findings": { "type": "array", "items": { "type": "object", "properties": {
          "kind": { "type": "string", "enum": ["input_bound", "cpu_bound", "idle_gpu", "over_provisioned", "memory_bound", "not_enough_data", "healthy"] },
          "summary": { "type": "string" }, "evidence": { "type": "array", "items": { "type": "string" } },
          "suggestions": { "type": "array", "items": { "type": "string" } }, "wasted_gpu_hours": { "type": "number" }, "wasted_usd": { "type": "number" } } } } } },
      "Alert": { "type": "object", "properties": { "rule": { "type": "string" }, "severity": { "type": "string", "enum": ["info", "warning", "critical"] },
        "subject": { "type": "string" }, "value": { "type": "number" }, "since": { "type": "string", "format": "date-time" },
        "summary": { "type": "string" }, "labels": { "type": "object", "additionalProperties": { "type": "string" } } } }
    },
    "responses": {
      "Error": { "description": "error", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }
    }
  },
  "security": [ { "bearer": [] } ],
  "paths": {
    "/healthz": { "get": { "security": [], "summary": "liveness", "responses": { "200": { "description": "ok" } } } },
    "/api/v1/openapi.json": { "get": { "security": [], "summary": "this document", "responses": { "200": { "description": "OpenAPI document" } } } },
    "/api/v1/jobs": {
      "post": { "summary": "submit one job or a batch (all or nothing)", "requestBody": { "required": true, "content": {
          "application/json": { "schema": { "oneOf": [ { "$ref": "#/components/schemas/JobSpec" }, { "$ref": "#/components/schemas/Batch" } ] } },
          "application/yaml": { "schema": { "oneOf": [ { "$ref": "#/components/schemas/JobSpec" }, { "$ref": "#/components/schemas/Batch" } ] } } } },
        "responses": { "201": { "description": "committed", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Submitted" } } } },
          "400": { "$ref": "#/components/responses/Error" }, "401": { "$ref": "#/components/responses/Error" }, "413": { "description": "body too large" } } },
      "get": { "summary": "list jobs (own jobs for users)", "parameters": [
          { "name": "state", "in": "query", "schema": { "type": "string" }, "description": "comma-separated states, or 'active'" },
          { "name": "user", "in": "query", "schema": { "type": "string" } },
          { "name": "queue", "in": "query", "schema": { "type": "string" } },
          { "name": "after", "in": "query", "schema": { "type": "integer" }, "description": "cursor: ids greater than this" },
          { "name": "limit", "in": "query", "schema": { "type": "integer", "default": 100, "minimum": 1, "maximum": 1000 } } ],
        "responses": { "200": { "description": "a page", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/JobList" } } } }, "400": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/jobs/{id}": {
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } } ],
      "get": { "summary": "one job", "responses": { "200": { "description": "the job", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Job" } } } }, "404": { "$ref": "#/components/responses/Error" } } },
      "delete": { "summary": "cancel (same as POST .../cancel)", "responses": { "200": { "description": "the job", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Job" } } } }, "404": { "$ref": "#/components/responses/Error" }, "409": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/jobs/{id}/cancel": {
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } } ],
      "post": { "summary": "cancel: the stop signal, then SIGKILL after the grace period", "responses": { "200": { "description": "the job", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Job" } } } }, "404": { "$ref": "#/components/responses/Error" }, "409": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/jobs/{id}/logs": {
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } },
        { "name": "stream", "in": "query", "schema": { "type": "string", "enum": ["stdout", "stderr"], "default": "stdout" } },
        { "name": "rank", "in": "query", "schema": { "type": "integer", "default": 0 } },
        { "name": "follow", "in": "query", "schema": { "type": "boolean", "default": false } } ],
      "get": { "summary": "a replica's output; with follow, streamed until the job ends", "responses": { "200": { "description": "text", "content": { "text/plain": {} } }, "404": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/cost": { "get": { "summary": "what jobs that ran in the period cost, grouped (users see their own jobs)", "parameters": [ { "name": "by", "in": "query", "schema": { "type": "string", "enum": ["team", "user", "queue", "pool", "job"], "default": "team" } }, { "name": "since", "in": "query", "schema": { "type": "string", "default": "30d" } } ], "responses": { "200": { "description": "the report", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/CostReport" } } } }, "400": { "$ref": "#/components/responses/Error" } } } },
    "/api/v1/registries": { "get": { "summary": "the caller's logins to image registries: registry and user name, never the password", "responses": { "200": { "description": "logins", "content": { "application/json": { "schema": { "type": "array", "items": { "type": "object", "properties": { "registry": { "type": "string" }, "username": { "type": "string" } } } } } } } } } },
    "/api/v1/registries/{registry}": { "parameters": [ { "name": "registry", "in": "path", "required": true, "schema": { "type": "string" }, "example": "ghcr.io" } ],
      "put": { "summary": "store a login for the caller's jobs in images from this registry (handed only to those jobs' runtime)", "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["username", "password"], "additionalProperties": false, "properties": { "username": { "type": "string" }, "password": { "type": "string" } } } } } }, "responses": { "200": { "description": "stored" }, "400": { "$ref": "#/components/responses/Error" } } },
      "delete": { "summary": "forget the caller's login to this registry", "responses": { "200": { "description": "forgotten" }, "404": { "$ref": "#/components/responses/Error" } } } },
    "/api/v1/services": { "get": { "summary": "inference services: endpoint, ready and desired replicas, requests/s, p50/p99 latency (users see their own)", "responses": { "200": { "description": "services", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Service" } } } } } } } },
    "/api/v1/services/{name}": { "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "put": { "summary": "create a service, or update it (a rolling update) when its spec changed", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/JobSpec" } }, "application/yaml": {} } }, "responses": { "200": { "description": "updated or unchanged" }, "201": { "description": "created" }, "400": { "$ref": "#/components/responses/Error" }, "403": { "$ref": "#/components/responses/Error" } } },
      "delete": { "summary": "delete a service; its replicas stop", "responses": { "200": { "description": "the service as it was", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Service" } } } }, "404": { "$ref": "#/components/responses/Error" } } } },
    "/api/v1/pools": { "get": { "summary": "elastic node pools: shape, price, limits, nodes and health", "responses": { "200": { "description": "pools", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Pool" } } } } } } } },
    "/api/v1/nodes": { "get": { "summary": "nodes and devices", "responses": { "200": { "description": "nodes", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Node" } } } } } } } },
    "/api/v1/queues": { "get": { "summary": "queues, quotas and use", "responses": { "200": { "description": "queues", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Queue" } } } } } } } },
    "/api/v1/events": { "get": { "summary": "server-sent events; history after 'after', then live", "parameters": [
        { "name": "after", "in": "query", "schema": { "type": "integer" } }, { "name": "job", "in": "query", "schema": { "type": "integer" } } ],
      "responses": { "200": { "description": "text/event-stream of Event", "content": { "text/event-stream": { "schema": { "$ref": "#/components/schemas/Event" } } } } } } },
    "/api/v1/tokens": { "post": { "summary": "create a token (admins)", "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/TokenRequest" } } } },
      "responses": { "201": { "description": "the secret, shown once", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/TokenCreated" } } } }, "403": { "$ref": "#/components/responses/Error" } } },
      "get": { "summary": "tokens, never their secrets: every token for admins, one's own for others", "responses": { "200": { "description": "tokens", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Token" } } } } } } } },
    "/api/v1/tokens/{id}": { "delete": { "summary": "revoke a token (admins: any; others: their own); the next request with it gets 401", "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "string" }, "description": "its id or an unambiguous prefix of 6 or more hex digits" } ],
      "responses": { "200": { "description": "the revoked token", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Token" } } } }, "404": { "$ref": "#/components/responses/Error" } } } },
    "/api/v1/whoami": { "get": { "summary": "the caller", "responses": { "200": { "description": "who", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/WhoAmI" } } } } } } },
    "/api/v1/jobs/{id}/usage": {
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } } ],
      "get": { "summary": "a job's utilisation curve (one point per device per minute) and usage", "responses": { "200": { "description": "usage", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/JobUsage" } } } }, "404": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/jobs/{id}/advice": {
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } },
        { "name": "minSpan", "in": "query", "schema": { "type": "string", "default": "5m" }, "description": "judge on at least this much telemetry" } ],
      "get": { "summary": "diagnosis and right-sizing advice from the job's telemetry", "responses": { "200": { "description": "findings", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Advice" } } } }, "404": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/alerts": { "get": { "summary": "alerts firing now (users: about their jobs and about GPUs)", "responses": { "200": { "description": "alerts", "content": { "application/json": { "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Alert" } } } } } } } },
    "/api/v1/nodes/{name}/drain": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "post": { "summary": "drain a node (admins): running jobs finish, nothing new starts there", "responses": { "200": { "description": "the node", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Node" } } } }, "403": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/nodes/{name}/notice": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "post": { "summary": "a spot notice (admins, or the node's own token): nothing new starts there, and its jobs checkpoint within the notice and are requeued", "requestBody": { "content": { "application/json": { "schema": { "type": "object", "properties": { "in": { "type": "string", "description": "a duration, e.g. 2m" }, "seconds": { "type": "integer" } } } } } }, "responses": { "200": { "description": "the node", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Node" } } } }, "400": { "$ref": "#/components/responses/Error" }, "403": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } }
    },
    "/api/v1/nodes/{name}/resume": {
      "parameters": [ { "name": "name", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "post": { "summary": "let a drained node take new work (admins)", "responses": { "200": { "description": "the node", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Node" } } } }, "403": { "$ref": "#/components/responses/Error" }, "404": { "$ref": "#/components/responses/Error" } } }
    },
    "/agent/v1/register": { "post": { "summary": "agent protocol (node tokens): a node registers; starts a new epoch and re-synchronises (docs/cluster.md)", "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["node", "addr", "cpus", "memory_mb", "source", "gpus", "version"] } } } },
      "responses": { "200": { "description": "epoch and lease", "content": { "application/json": { "schema": { "type": "object", "properties": { "epoch": { "type": "integer" }, "lease_ms": { "type": "integer" }, "heartbeat_ms": { "type": "integer" }, "next_seq": { "type": "integer" } } } } } }, "403": { "$ref": "#/components/responses/Error" }, "409": { "$ref": "#/components/responses/Error" } } } },
    "/agent/v1/commands": { "get": { "summary": "agent protocol: long poll for commands (start, signal, reconcile, kill); 'after' acknowledges", "parameters": [
        { "name": "node", "in": "query", "required": true, "schema": { "type": "string" } }, { "name": "epoch", "in": "query", "required": true, "schema": { "type": "integer" } }, { "name": "after", "in": "query", "schema": { "type": "integer" } } ],
      "responses": { "200": { "description": "commands (empty after 20 s)", "content": { "application/json": { "schema": { "type": "object", "properties": { "commands": { "type": "array", "items": { "type": "object" } } } } } } }, "409": { "$ref": "#/components/responses/Error" } } } },
    "/agent/v1/report": { "post": { "summary": "agent protocol: replica events and telemetry; a heartbeat that renews the node's lease", "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object", "required": ["node", "epoch"] } } } },
      "responses": { "200": { "description": "taken" }, "409": { "$ref": "#/components/responses/Error" } } } },
    "/agent/v1/logs": { "post": { "summary": "agent protocol: a chunk of a replica's output, appended at 'offset'", "parameters": [
        { "name": "job", "in": "query", "required": true, "schema": { "type": "integer" } }, { "name": "rank", "in": "query", "required": true, "schema": { "type": "integer" } },
        { "name": "stream", "in": "query", "required": true, "schema": { "type": "string", "enum": ["stdout", "stderr"] } }, { "name": "offset", "in": "query", "required": true, "schema": { "type": "integer" } } ],
      "requestBody": { "required": true, "content": { "application/octet-stream": {} } },
      "responses": { "200": { "description": "the length now kept" }, "409": { "description": "a gap: the length kept, to resend from" } } } },
    "/metrics": { "get": { "security": [], "summary": "Prometheus exporter: DCGM-compatible GPU series with job labels, queue and usage series (with --metrics-auth: a reader's, user's or admin's token)", "responses": { "200": { "description": "Prometheus text format 0.0.4", "content": { "text/plain": {} } } } } },
    "/tls/ca.pem": { "get": { "security": [], "summary": "the CA certificate of a control plane started with --tls, which an agent checks against its pinned fingerprint", "responses": { "200": { "description": "PEM", "content": { "application/x-pem-file": {} } }, "404": { "$ref": "#/components/responses/Error" } } } }
  }
}
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_is_json_and_describes_every_route() {
        let doc: serde_json::Value = serde_json::from_str(DOCUMENT).expect("valid JSON");
        for (method, path) in crate::plane::http::ROUTES {
            assert!(doc["paths"][path][method].is_object(), "{method} {path} missing from the OpenAPI document");
        }
        let described: usize = doc["paths"].as_object().map_or(0, |p| {
            p.values().map(|v| v.as_object().map_or(0, |m| m.keys().filter(|k| *k != "parameters").count())).sum()
        });
        assert_eq!(
            described,
            crate::plane::http::ROUTES.len(),
            "the document describes routes the router does not have"
        );
    }
}
