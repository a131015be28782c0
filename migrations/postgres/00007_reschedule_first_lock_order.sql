-- Rescheduling moves a job's first check while it has never run, and the
-- jobs a statement locks are locked in one order (issue 9).
--
-- prescient_schedule with 'replace' kept the first check of a pending job,
-- even one that had never run: a job scheduled for 2030 and moved to the
-- next slot ran with a first check years after its last, and a check that
-- counts from its first check asked for a time years away (guard_horizon)
-- or in the past (guard_past). A job whose check has not yet run to a result
-- (last_check_at NULL) now moves its first check with its next one, as the
-- Go stores do on replace and on Reschedule; a job that has run keeps it.
-- It also checks the payload with prescient_validate_payload (migration
-- 00006: Go's size and nesting limits). Everything else is as in migration
-- 00004.
--
-- prescient_finish (under prescient_cancel and prescient_resolve) deleted
-- its jobs in whatever order the plan read them, and a concurrent call, or a
-- schedule of several jobs in one statement, that met the same jobs in
-- another order deadlocked (SQLSTATE 40P01), aborting one caller's
-- transaction. It now locks them first by (entity, entity_key, check_name)
-- in byte order, the order of every statement of the Go store that locks
-- several jobs. Everything else is as in migration 00001.
--
-- Pending jobs that the old rule left with a first check after their last
-- (rescheduled before they ever ran, then run) get their last check as their
-- first, the earliest slot known to have checked them, so that their history
-- records keep first <= last. It is not undone by Down.

-- +goose Up

-- prescient_schedule: as in migration 00004, except that 'replace' moves the
-- first check of a job that has never run to a result with its next check,
-- and the payload is checked by prescient_validate_payload.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_schedule(
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
    v_min  constant timestamptz := '1970-01-01T00:00:00Z';
    v_max  constant timestamptz := '2200-01-01T00:00:00Z';
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    PERFORM prescient_validate_name('check', p_check);
    IF p_at IS NULL OR NOT isfinite(p_at) THEN
        RAISE EXCEPTION 'prescient_schedule: the check time must be a finite time, got %', coalesce(p_at::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_at < v_min OR p_at >= v_max THEN
        RAISE EXCEPTION 'prescient_schedule: the check time % is outside the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)',
            rtrim(rtrim(to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_on_conflict IS NULL OR p_on_conflict NOT IN ('replace', 'keep') THEN
        RAISE EXCEPTION 'prescient_schedule: invalid conflict rule %: use ''replace'' or ''keep''',
            coalesce(to_json(p_on_conflict)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM prescient_validate_payload(p_entity, p_key, p_check, p_payload);

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
    -- A time just before the end of the range may round up past it.
    IF v_slot >= v_max THEN
        RAISE EXCEPTION 'prescient_schedule: the check time % rounds up to the slot %, outside the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)',
            rtrim(rtrim(to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z',
            rtrim(rtrim(to_char(v_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    INSERT INTO prescient_jobs AS j
        (entity, entity_key, check_name, first_check_at, next_check_at, payload, created_at, updated_at)
    VALUES (p_entity, p_key, p_check, v_slot, v_slot, p_payload, v_now, v_now)
    ON CONFLICT (entity, entity_key, check_name) DO UPDATE
        SET first_check_at = CASE WHEN j.last_check_at IS NULL THEN excluded.next_check_at ELSE j.first_check_at END,
            next_check_at = excluded.next_check_at,
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
-- meanwhile are skipped. Used by prescient_cancel and prescient_resolve. As
-- in migration 00001, except that it locks the jobs before moving them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_finish(p_ids bigint[], p_outcome text) RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n int;
BEGIN
    -- Lock first, in the order of every statement that locks several jobs
    -- (by identity, in byte order): a DELETE takes its locks in whatever
    -- order its plan reads the rows, and two calls, or a call and a
    -- concurrent schedule of several jobs, that lock the same jobs in
    -- different orders deadlock.
    PERFORM 1 FROM prescient_jobs j WHERE j.id = ANY (p_ids)
    ORDER BY j.entity COLLATE "C", j.entity_key COLLATE "C", j.check_name COLLATE "C"
    FOR UPDATE;
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

-- Pending jobs left with a first check after their last (see above).
UPDATE prescient_jobs SET first_check_at = last_check_at WHERE last_check_at < first_check_at;

-- +goose Down

-- As in migration 00004.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_schedule(
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
    v_min  constant timestamptz := '1970-01-01T00:00:00Z';
    v_max  constant timestamptz := '2200-01-01T00:00:00Z';
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    PERFORM prescient_validate_name('check', p_check);
    IF p_at IS NULL OR NOT isfinite(p_at) THEN
        RAISE EXCEPTION 'prescient_schedule: the check time must be a finite time, got %', coalesce(p_at::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_at < v_min OR p_at >= v_max THEN
        RAISE EXCEPTION 'prescient_schedule: the check time % is outside the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)',
            rtrim(rtrim(to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z'
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
    -- A time just before the end of the range may round up past it.
    IF v_slot >= v_max THEN
        RAISE EXCEPTION 'prescient_schedule: the check time % rounds up to the slot %, outside the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)',
            rtrim(rtrim(to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z',
            rtrim(rtrim(to_char(v_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z'
            USING ERRCODE = 'invalid_parameter_value';
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

-- As in migration 00001.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_finish(p_ids bigint[], p_outcome text) RETURNS int
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
