-- prescient_outbox and prescient_deliveries: the events checks raise
-- (checks.Job.Emit) and their delivery to the configured sinks.
--
-- An event is recorded in the transaction of the check that raised it, with
-- one pending delivery per sink of the check, so that it exists exactly when
-- the check's result commits: a failed check's events roll back with its
-- other writes. The servers then deliver it, at least once: a delivery is
-- claimed with a lease (next_attempt_at moves to the lease's end, so that no
-- other server takes it meanwhile), sent, and its result recorded; a server
-- that dies while sending leaves the delivery due again once the lease ends.
--
-- A consumer in any language may read prescient_outbox directly: its rows
-- never change once written. The postgres sink NOTIFYs a channel with an
-- event's id for consumers that LISTEN.

-- +goose Up

-- One row per event. idempotency_key is entity/key/check/stage (names hold
-- no '/', so it is unambiguous): a stage is raised once per job identity,
-- however often the job's checks run, and receivers deduplicate on it.
CREATE TABLE prescient_outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at      timestamptz NOT NULL,
    job_id          bigint      NOT NULL,
    entity          text        NOT NULL,
    entity_key      text        NOT NULL,
    check_name      text        NOT NULL,
    stage           text        NOT NULL,
    event           text        NOT NULL,
    severity        text        NOT NULL DEFAULT '',
    payload         jsonb,
    idempotency_key text        NOT NULL,
    CONSTRAINT prescient_outbox_idempotency UNIQUE (idempotency_key)
);

-- One row per event and sink. attempts counts the sends started (a claim
-- adds one); a result is recorded only by the claim that started the
-- attempt (the row still has its attempts), so that a server whose lease
-- ran out cannot overwrite a newer attempt's result.
CREATE TABLE prescient_deliveries (
    event_id        bigint      NOT NULL REFERENCES prescient_outbox (id) ON DELETE CASCADE,
    sink            text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        int         NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL,
    lease_owner     text,
    last_status     int,
    last_error      text,
    delivered_at    timestamptz,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (event_id, sink)
);

-- Events by age, for pruning with history (HistoryPrune).
CREATE INDEX prescient_outbox_created ON prescient_outbox (created_at);

-- The due deliveries of one sink, soonest first: what a sink's worker claims.
CREATE INDEX prescient_deliveries_due ON prescient_deliveries (sink, next_attempt_at) WHERE state = 'pending';
-- The dead deliveries, for status and `prescient deliveries --state dead`.
CREATE INDEX prescient_deliveries_dead ON prescient_deliveries (sink, event_id) WHERE state = 'dead';
-- Deliveries made recently, for status.
CREATE INDEX prescient_deliveries_delivered ON prescient_deliveries (delivered_at) WHERE state = 'delivered';

-- +goose Down
DROP TABLE prescient_deliveries;
DROP TABLE prescient_outbox;
