-- A job's telemetry, downsampled (one row per device per minute), kept
-- after the job ends so its utilisation curve and peak memory stay visible.
CREATE TABLE job_samples (
    job_id       BIGINT NOT NULL,
    at_ms        BIGINT NOT NULL,
    device       TEXT   NOT NULL,
    gpu_util     DOUBLE PRECISION,
    memory_mb    BIGINT,
    memory_total BIGINT NOT NULL,
    cpu_cores    DOUBLE PRECISION
);
CREATE INDEX job_samples_job ON job_samples (job_id, at_ms);
