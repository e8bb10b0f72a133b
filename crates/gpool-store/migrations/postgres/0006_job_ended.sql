-- When a job ended, as a column: `gpool acct` asks for the jobs that ended
-- in a period (issue 42) and must not read every document to find them.
ALTER TABLE jobs ADD COLUMN ended_ms BIGINT;
UPDATE jobs SET ended_ms = (doc::jsonb ->> 'ended_ms')::bigint;
CREATE INDEX jobs_ended ON jobs (ended_ms, id);
-- Users see only their own jobs: their periods are a range of this one.
CREATE INDEX jobs_user_ended ON jobs (user_name, ended_ms, id);
