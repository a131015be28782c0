-- prescient_outbox and prescient_deliveries: the events checks raise and
-- their delivery to the configured sinks, as in the PostgreSQL migration
-- 00008_outbox. Times are INTEGER microseconds since the Unix epoch (UTC),
-- the payload JSON as TEXT.

-- +goose Up
CREATE TABLE prescient_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at      INTEGER NOT NULL,
    job_id          INTEGER NOT NULL,
    entity          TEXT    NOT NULL,
    entity_key      TEXT    NOT NULL,
    check_name      TEXT    NOT NULL,
    stage           TEXT    NOT NULL,
    event           TEXT    NOT NULL,
    severity        TEXT    NOT NULL DEFAULT '',
    payload         TEXT    CHECK (payload IS NULL OR json_valid(payload)),
    idempotency_key TEXT    NOT NULL,
    CONSTRAINT prescient_outbox_idempotency UNIQUE (idempotency_key)
) STRICT;

CREATE TABLE prescient_deliveries (
    event_id        INTEGER NOT NULL REFERENCES prescient_outbox (id) ON DELETE CASCADE,
    sink            TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER NOT NULL,
    lease_owner     TEXT,
    last_status     INTEGER,
    last_error      TEXT,
    delivered_at    INTEGER,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (event_id, sink)
) STRICT;

-- Events by age, for pruning with history (HistoryPrune).
CREATE INDEX prescient_outbox_created ON prescient_outbox (created_at);
CREATE INDEX prescient_deliveries_due ON prescient_deliveries (sink, next_attempt_at) WHERE state = 'pending';
CREATE INDEX prescient_deliveries_dead ON prescient_deliveries (sink, event_id) WHERE state = 'dead';
CREATE INDEX prescient_deliveries_delivered ON prescient_deliveries (delivered_at) WHERE state = 'delivered';

-- +goose Down
DROP TABLE prescient_deliveries;
DROP TABLE prescient_outbox;
