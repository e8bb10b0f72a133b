-- Jobs: indexed columns for filters, the full record as JSON (TEXT, kept
-- byte for byte: the store does not interpret documents).
CREATE TABLE jobs (
    id           BIGINT PRIMARY KEY,
    user_name    TEXT   NOT NULL,
    team         TEXT   NOT NULL,
    queue        TEXT   NOT NULL,
    state        TEXT   NOT NULL,
    submitted_ms BIGINT NOT NULL,
    doc          TEXT   NOT NULL
);
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_user ON jobs (user_name, id);

-- API tokens, stored as SHA-256 of the secret.
CREATE TABLE tokens (
    hash       TEXT PRIMARY KEY,
    user_name  TEXT   NOT NULL,
    team       TEXT   NOT NULL,
    role       TEXT   NOT NULL,
    created_ms BIGINT NOT NULL
);

-- What happened, in order: the API's event stream and job history.
CREATE TABLE events (
    seq     BIGINT PRIMARY KEY,
    at_ms   BIGINT NOT NULL,
    job_id  BIGINT,
    kind    TEXT   NOT NULL,
    message TEXT   NOT NULL
);
CREATE INDEX events_job ON events (job_id, seq);

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
