-- The check catalog records the entity a check watches, when it watches
-- one only (every declared check does; '' for any), and prescient_schedule
-- refuses a job of another entity for it: such a job could only fail, and
-- raise no alert (a typo, orders for order, was taken). A server of the
-- version before leaves entity as it finds it.

-- +goose Up
ALTER TABLE prescient_catalog ADD COLUMN entity text NOT NULL DEFAULT '';

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
    v_entity text;
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    PERFORM prescient_validate_name('check', p_check);
    -- A check recorded for one entity (a declared check's) runs no other:
    -- such a job could only fail, and raise no alert.
    SELECT c.entity INTO v_entity FROM prescient_catalog c WHERE c.check_name = p_check;
    IF v_entity <> '' AND v_entity <> p_entity THEN
        RAISE EXCEPTION 'prescient_schedule: check % watches entity % only: a job of entity % could only fail', p_check, v_entity, p_entity
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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

-- +goose Down
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
ALTER TABLE prescient_catalog DROP COLUMN entity;
