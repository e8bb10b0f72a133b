-- Tokens expire (NULL: never) and remember when they were last used
-- (written at most once a minute per token).
ALTER TABLE tokens ADD COLUMN expires_ms BIGINT;
ALTER TABLE tokens ADD COLUMN last_used_ms BIGINT;
