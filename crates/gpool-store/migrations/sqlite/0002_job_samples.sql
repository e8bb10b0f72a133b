-- A job's telemetry, downsampled (one row per device per minute), kept
-- after the job ends so its utilisation curve and peak memory stay visible.
CREATE TABLE job_samples (
    job_id       INTEGER NOT NULL,
    at_ms        INTEGER NOT NULL,
    device       TEXT    NOT NULL,
    gpu_util     REAL,
    memory_mb    INTEGER,
    memory_total INTEGER NOT NULL,
    cpu_cores    REAL
);
CREATE INDEX job_samples_job ON job_samples (job_id, at_ms);
