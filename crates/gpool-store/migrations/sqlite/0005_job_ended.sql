-- When a job ended, as a column: `gpool acct` asks for the jobs that ended
-- in a period (issue 42) and must not read every document to find them.
ALTER TABLE jobs ADD COLUMN ended_ms INTEGER;
UPDATE jobs SET ended_ms = json_extract(doc, '$.ended_ms');
CREATE INDEX jobs_ended ON jobs (ended_ms, id);
-- Users see only their own jobs: their periods are a range of this one.
CREATE INDEX jobs_user_ended ON jobs (user_name, ended_ms, id);
