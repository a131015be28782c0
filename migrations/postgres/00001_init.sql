-- prescient's PostgreSQL schema: the pending table, history, the slot ledger,
-- settings, the check catalog, server registrations, and the SQL API that lets
-- any language schedule, cancel and resolve inside its own transaction.
--
-- Every time is a timestamptz (microseconds); durations are bigint microseconds
-- in columns ending _us.

-- +goose Up

-- One row per pending job. next_check_at is always a slot boundary, so the
-- jobs due in slot T are exactly WHERE next_check_at = T, which the
-- (next_check_at, id) index answers in time proportional to the jobs due.
CREATE TABLE prescient_jobs (
    id             bigserial   PRIMARY KEY,
    entity         text        NOT NULL,
    entity_key     text        NOT NULL,
    check_name     text        NOT NULL,
    first_check_at timestamptz NOT NULL,
    next_check_at  timestamptz NOT NULL,
    last_check_at  timestamptz,
    check_count    int         NOT NULL DEFAULT 0 CHECK (check_count >= 0),
    failure_count  int         NOT NULL DEFAULT 0 CHECK (failure_count >= 0),
    last_error     text,
    runtime_us     bigint      NOT NULL DEFAULT 0,
    lateness_us    bigint      NOT NULL DEFAULT 0,
    payload        jsonb,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    CONSTRAINT prescient_jobs_identity UNIQUE (entity, entity_key, check_name)
);

CREATE INDEX prescient_jobs_due ON prescient_jobs (next_check_at, id);

-- Jobs that left the pending table, keeping the pending row's id.
CREATE TABLE prescient_history (
    id             bigint      PRIMARY KEY,
    entity         text        NOT NULL,
    entity_key     text        NOT NULL,
    check_name     text        NOT NULL,
    outcome        text        NOT NULL CHECK (outcome IN (
        'done', 'resolved', 'cancelled', 'guard_max_checks', 'guard_horizon', 'guard_past', 'failed'
    )),
    first_check_at timestamptz NOT NULL,
    last_check_at  timestamptz,
    check_count    int         NOT NULL,
    failure_count  int         NOT NULL,
    runtime_us     bigint      NOT NULL,
    lateness_us    bigint      NOT NULL,
    last_error     text,
    payload        jsonb,
    created_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL,
    finished_by    text        NOT NULL
);

CREATE INDEX prescient_history_finished ON prescient_history (finished_at);
CREATE INDEX prescient_history_entity ON prescient_history (entity, entity_key, finished_at);
CREATE INDEX prescient_history_check ON prescient_history (check_name, finished_at);
CREATE INDEX prescient_history_outcome ON prescient_history (outcome, finished_at);

-- The slot ledger: one row per server per fired slot. finished_at stays NULL
-- while the slot is in progress or if its server died in it.
CREATE TABLE prescient_slots (
    slot            timestamptz NOT NULL,
    server          text        NOT NULL,
    kind            text        NOT NULL,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    checked         int         NOT NULL DEFAULT 0,
    rescheduled     int         NOT NULL DEFAULT 0,
    failures        int         NOT NULL DEFAULT 0,
    unknown         int         NOT NULL DEFAULT 0,
    outcomes        jsonb       NOT NULL DEFAULT '{}',
    max_lateness_us bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (slot, server)
);

-- The slot grid the engine uses, so that prescient_schedule rounds exactly as
-- the engine does. At most one row.
CREATE TABLE prescient_settings (
    id            boolean PRIMARY KEY DEFAULT true CHECK (id),
    resolution_us bigint  NOT NULL CHECK (resolution_us > 0),
    offset_us     bigint  NOT NULL CHECK (offset_us >= 0 AND offset_us < resolution_us)
);

-- The events each check awaits, read by resolve.
CREATE TABLE prescient_catalog (
    check_name text        PRIMARY KEY,
    awaits     text[]      NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Registered servers, for automatic ownership and status.
CREATE TABLE prescient_servers (
    name         text        PRIMARY KEY,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    positions    int[]       NOT NULL DEFAULT '{}'
);

-- prescient_validate_name raises invalid_parameter_value unless p_name may
-- name a check, an entity or an event, with the rule and message of Go's
-- checks.ValidateName.
-- +goose StatementBegin
CREATE FUNCTION prescient_validate_name(p_what text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RAISE EXCEPTION 'invalid % name %: use 1 to 100 letters, digits, ''_'', ''.'', '':'' or ''-'', starting with a letter, digit or ''_''',
            p_what, coalesce(to_json(p_name)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- prescient_validate_key raises invalid_parameter_value unless p_key may be
-- the key of an entity, with the limit and message of the Go client
-- (prescient.KeyMax bytes).
-- +goose StatementBegin
CREATE FUNCTION prescient_validate_key(p_entity text, p_key text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 512 THEN
        RAISE EXCEPTION 'entity %: key must be 1 to 512 bytes, got %',
            p_entity, coalesce(octet_length(p_key)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- prescient_schedule schedules a check of an entity at p_at rounded up to the
-- slot grid saved by the engine (a time on a boundary stays), in the caller's
-- transaction. A time whose slot has begun by the start of the calling
-- statement (statement_timestamp(), not the transaction's now(), so that a
-- long transaction cannot schedule into a slot already fired) lands in the
-- next slot. When the job is already pending, p_on_conflict decides:
-- 'replace' moves its next check, replaces its payload when p_payload is not
-- NULL and clears its failures; 'keep' leaves it untouched. It returns the
-- job's next check time after the call. The key is at most 512 bytes and the
-- payload at most 65536 bytes of JSON text, as in the Go client; the payload
-- is measured as PostgreSQL prints the jsonb (with a space after each ':' and
-- ','), which may be longer than the text the caller sent.
-- +goose StatementBegin
CREATE FUNCTION prescient_schedule(
    p_entity text,
    p_key text,
    p_check text,
    p_at timestamptz,
    p_payload jsonb DEFAULT NULL,
    p_on_conflict text DEFAULT 'replace'
) RETURNS timestamptz
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_res  bigint;
    v_off  bigint;
    v_us   numeric;
    v_slot timestamptz;
    v_next timestamptz;
    v_now  timestamptz := statement_timestamp();
    v_size int;
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    PERFORM prescient_validate_name('check', p_check);
    IF p_at IS NULL OR NOT isfinite(p_at) THEN
        RAISE EXCEPTION 'prescient_schedule: the check time must be a finite time, got %', coalesce(p_at::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_on_conflict IS NULL OR p_on_conflict NOT IN ('replace', 'keep') THEN
        RAISE EXCEPTION 'prescient_schedule: invalid conflict rule %: use ''replace'' or ''keep''',
            coalesce(to_json(p_on_conflict)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_size := octet_length(p_payload::text);
    IF v_size > 65536 THEN
        RAISE EXCEPTION '%/%/%: payload is % bytes, more than the 65536 allowed', p_entity, p_key, p_check, v_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT resolution_us, offset_us INTO v_res, v_off FROM prescient_settings;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'prescient_schedule: no slot grid saved in prescient_settings'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Start a prescient server on this database once: it saves its grid.';
    END IF;
    -- extract(epoch) is numeric, so the arithmetic is exact; only the distance
    -- to the boundary (less than one slot) goes through an interval.
    v_us := extract(epoch FROM p_at) * 1000000;
    v_slot := p_at + ((v_off + ceil((v_us - v_off) / v_res) * v_res) - v_us)::float8 * interval '1 microsecond';
    -- A time that is not after now lands in the first slot after now, as in
    -- the Go client: a slot that has begun may already have been fired.
    IF v_slot <= v_now THEN
        v_us := extract(epoch FROM v_now) * 1000000;
        v_slot := v_now + ((v_off + (floor((v_us - v_off) / v_res) + 1) * v_res) - v_us)::float8 * interval '1 microsecond';
    END IF;

    INSERT INTO prescient_jobs AS j
        (entity, entity_key, check_name, first_check_at, next_check_at, payload, created_at, updated_at)
    VALUES (p_entity, p_key, p_check, v_slot, v_slot, p_payload, v_now, v_now)
    ON CONFLICT (entity, entity_key, check_name) DO UPDATE
        SET next_check_at = excluded.next_check_at,
            payload = coalesce(excluded.payload, j.payload),
            failure_count = 0,
            last_error = NULL,
            updated_at = excluded.updated_at
        WHERE p_on_conflict = 'replace'
    RETURNING j.next_check_at INTO v_next;

    IF v_next IS NULL THEN
        -- 'keep' on a pending job: the conflict locked the row, so it is there.
        SELECT j.next_check_at INTO v_next FROM prescient_jobs j
        WHERE j.entity = p_entity AND j.entity_key = p_key AND j.check_name = p_check;
    END IF;
    RETURN v_next;
END
$$;
-- +goose StatementEnd

-- prescient_finish moves the pending jobs p_ids to history with outcome
-- p_outcome, finished now (the statement's time) by 'sql', and returns how
-- many it moved. Jobs a concurrent processor holds are waited for; jobs gone
-- meanwhile are skipped. Used by prescient_cancel and prescient_resolve.
-- +goose StatementBegin
CREATE FUNCTION prescient_finish(p_ids bigint[], p_outcome text) RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n int;
BEGIN
    WITH gone AS (
        DELETE FROM prescient_jobs j WHERE j.id = ANY (p_ids)
        RETURNING j.*
    )
    INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
        last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
        created_at, finished_at, finished_by)
    SELECT id, entity, entity_key, check_name, p_outcome, first_check_at,
        last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
        created_at, statement_timestamp(), 'sql'
    FROM gone;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- prescient_cancel moves the entity's pending job of check p_check (every
-- check of the entity when p_check is NULL) to history as cancelled, in the
-- caller's transaction, and returns how many it moved (0 is not an error; a
-- NULL or empty key is).
-- +goose StatementBegin
CREATE FUNCTION prescient_cancel(p_entity text, p_key text, p_check text DEFAULT NULL) RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    IF p_check IS NOT NULL THEN
        PERFORM prescient_validate_name('check', p_check);
    END IF;
    RETURN prescient_finish(ARRAY(
        SELECT j.id FROM prescient_jobs j
        WHERE j.entity = p_entity AND j.entity_key = p_key
          AND (p_check IS NULL OR j.check_name = p_check)), 'cancelled');
END
$$;
-- +goose StatementEnd

-- prescient_resolve moves to history as resolved every pending job of the
-- entity whose check awaits p_event according to prescient_catalog, in the
-- caller's transaction, and returns how many it moved (0 is not an error; a
-- NULL or empty key is).
-- +goose StatementBegin
CREATE FUNCTION prescient_resolve(p_entity text, p_key text, p_event text) RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    PERFORM prescient_validate_name('event', p_event);
    RETURN prescient_finish(ARRAY(
        SELECT j.id FROM prescient_jobs j
        WHERE j.entity = p_entity AND j.entity_key = p_key
          AND j.check_name IN (SELECT c.check_name FROM prescient_catalog c WHERE p_event = ANY (c.awaits))), 'resolved');
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION prescient_resolve(text, text, text);
DROP FUNCTION prescient_cancel(text, text, text);
DROP FUNCTION prescient_finish(bigint[], text);
DROP FUNCTION prescient_schedule(text, text, text, timestamptz, jsonb, text);
DROP FUNCTION prescient_validate_key(text, text);
DROP FUNCTION prescient_validate_name(text, text);
DROP TABLE prescient_servers;
DROP TABLE prescient_catalog;
DROP TABLE prescient_settings;
DROP TABLE prescient_slots;
DROP TABLE prescient_history;
DROP TABLE prescient_jobs;
