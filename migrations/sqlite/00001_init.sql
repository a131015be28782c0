-- prescient's SQLite schema: the pending table, history, the slot ledger,
-- settings, the check catalog and server registrations, as in the PostgreSQL
-- schema.
--
-- Every time is an INTEGER of microseconds since the Unix epoch (UTC), so
-- that ordering and equality are exact and the indexes serve slot lookups;
-- durations are INTEGER microseconds in columns ending _us; JSON is TEXT
-- checked with json_valid. Tables are STRICT: a value of the wrong type is an
-- error, not silently stored.

-- +goose Up

-- One row per pending job. next_check_at is always a slot boundary, so the
-- jobs due in slot T are exactly WHERE next_check_at = T, answered by the
-- (next_check_at, id) index. AUTOINCREMENT keeps SQLite from reusing the id of
-- a job that moved to history, where the id is the primary key.
CREATE TABLE prescient_jobs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    entity         TEXT    NOT NULL,
    entity_key     TEXT    NOT NULL,
    check_name     TEXT    NOT NULL,
    first_check_at INTEGER NOT NULL,
    next_check_at  INTEGER NOT NULL,
    last_check_at  INTEGER,
    check_count    INTEGER NOT NULL DEFAULT 0 CHECK (check_count >= 0),
    failure_count  INTEGER NOT NULL DEFAULT 0 CHECK (failure_count >= 0),
    last_error     TEXT,
    runtime_us     INTEGER NOT NULL DEFAULT 0,
    lateness_us    INTEGER NOT NULL DEFAULT 0,
    payload        TEXT    CHECK (payload IS NULL OR json_valid(payload)),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    CONSTRAINT prescient_jobs_identity UNIQUE (entity, entity_key, check_name)
) STRICT;

CREATE INDEX prescient_jobs_due ON prescient_jobs (next_check_at, id);

-- Jobs that left the pending table, keeping the pending row's id.
CREATE TABLE prescient_history (
    id             INTEGER PRIMARY KEY,
    entity         TEXT    NOT NULL,
    entity_key     TEXT    NOT NULL,
    check_name     TEXT    NOT NULL,
    outcome        TEXT    NOT NULL CHECK (outcome IN (
        'done', 'resolved', 'cancelled', 'guard_max_checks', 'guard_horizon', 'guard_past', 'failed'
    )),
    first_check_at INTEGER NOT NULL,
    last_check_at  INTEGER,
    check_count    INTEGER NOT NULL,
    failure_count  INTEGER NOT NULL,
    runtime_us     INTEGER NOT NULL,
    lateness_us    INTEGER NOT NULL,
    last_error     TEXT,
    payload        TEXT    CHECK (payload IS NULL OR json_valid(payload)),
    created_at     INTEGER NOT NULL,
    finished_at    INTEGER NOT NULL,
    finished_by    TEXT    NOT NULL
) STRICT;

CREATE INDEX prescient_history_finished ON prescient_history (finished_at);
CREATE INDEX prescient_history_entity ON prescient_history (entity, entity_key, finished_at);
CREATE INDEX prescient_history_check ON prescient_history (check_name, finished_at);
CREATE INDEX prescient_history_outcome ON prescient_history (outcome, finished_at);

-- The slot ledger: one row per server per fired slot. finished_at stays NULL
-- while the slot is in progress or if its server died in it.
CREATE TABLE prescient_slots (
    slot            INTEGER NOT NULL,
    server          TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    started_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    checked         INTEGER NOT NULL DEFAULT 0,
    rescheduled     INTEGER NOT NULL DEFAULT 0,
    failures        INTEGER NOT NULL DEFAULT 0,
    unknown         INTEGER NOT NULL DEFAULT 0,
    outcomes        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(outcomes)),
    max_lateness_us INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, server)
) STRICT;

-- The slot grid the engine uses. At most one row.
CREATE TABLE prescient_settings (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    resolution_us INTEGER NOT NULL CHECK (resolution_us > 0),
    offset_us     INTEGER NOT NULL CHECK (offset_us >= 0 AND offset_us < resolution_us)
) STRICT;

-- The events each check awaits (a JSON array of strings), read by resolve.
CREATE TABLE prescient_catalog (
    check_name TEXT    PRIMARY KEY,
    awaits     TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(awaits) AND json_type(awaits) = 'array'),
    updated_at INTEGER NOT NULL
) STRICT;

-- Registered servers (positions is a JSON array of integers).
CREATE TABLE prescient_servers (
    name         TEXT    PRIMARY KEY,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    positions    TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(positions) AND json_type(positions) = 'array')
) STRICT;

-- +goose Down
DROP TABLE prescient_servers;
DROP TABLE prescient_catalog;
DROP TABLE prescient_settings;
DROP TABLE prescient_slots;
DROP TABLE prescient_history;
DROP TABLE prescient_jobs;
