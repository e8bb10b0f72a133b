-- Nodes the control plane knows: their state (a drain holds across
-- restarts and fail-overs) and the controller's document (inventory, labels).
CREATE TABLE nodes (
    name       TEXT PRIMARY KEY,
    state      TEXT   NOT NULL,
    doc        TEXT   NOT NULL,
    updated_ms BIGINT NOT NULL
);
