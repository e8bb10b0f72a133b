-- Who leads: the leader's backend and when it last renewed. A standby ends
-- the session of a leader that stopped renewing (a stopped or hung process
-- keeps its connection, and with it the leader lock, open).
CREATE TABLE leadership (
    id smallint PRIMARY KEY CHECK (id = 1),
    pid integer NOT NULL,
    renewed_at timestamptz NOT NULL
);
