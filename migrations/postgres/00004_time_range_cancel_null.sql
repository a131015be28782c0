-- Hardening of the SQL API (issue 9).
--
-- prescient_schedule refuses check times outside the range the engine
-- supports, [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z) (Go's slots.MinTime
-- and slots.MaxTime), as the Go client does: it used to store year 9999 as
-- asked, which the engine could not fire, judge or print. Everything else is
-- as in migration 00001.
--
-- prescient_cancel refuses a NULL check, as every function refuses every
-- other NULL argument: it used to cancel every check of the entity.
-- Cancelling every check stays the two-argument call prescient_cancel(entity,
-- key), now a function of its own.

-- +goose Up

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

-- prescient_cancel(entity, key, check) no longer has a default for the check,
-- so that prescient_cancel(entity, key) can be a function of its own. A
-- default cannot be removed by CREATE OR REPLACE, so the old function is
-- renamed, replaced by the two new ones, which are given its privileges (a
-- database that revoked EXECUTE from PUBLIC and granted it to application
-- roles keeps working), and dropped.

-- prescient_copy_acl makes the privileges on function p_to those on p_from.
-- It exists only while this migration runs.
-- +goose StatementBegin
CREATE FUNCTION prescient_copy_acl(p_from regprocedure, p_to regprocedure) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_role text;
    v_opt  boolean;
BEGIN
    FOR v_role IN
        SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END
        FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
        WHERE p.oid = p_to AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', p_to, v_role);
    END LOOP;
    FOR v_role, v_opt IN
        SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.is_grantable
        FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
        WHERE p.oid = p_from AND a.privilege_type = 'EXECUTE'
          AND a.grantee <> (SELECT t.proowner FROM pg_proc t WHERE t.oid = p_to)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', p_to, v_role)
            || CASE WHEN v_opt THEN ' WITH GRANT OPTION' ELSE '' END;
    END LOOP;
END
$$;
-- +goose StatementEnd

ALTER FUNCTION prescient_cancel(text, text, text) RENAME TO prescient_cancel_00001;

-- prescient_cancel moves the entity's pending job of check p_check to history
-- as cancelled, in the caller's transaction, and returns how many it moved (0
-- is not an error). A NULL or empty key or check is an error: to cancel
-- every check of the entity, call prescient_cancel(entity, key).
-- +goose StatementBegin
CREATE FUNCTION prescient_cancel(p_entity text, p_key text, p_check text) RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    IF p_check IS NULL THEN
        RAISE EXCEPTION 'prescient_cancel: the check is NULL: name the check to cancel, or call prescient_cancel(entity, key) to cancel every check of the entity'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM prescient_validate_name('check', p_check);
    RETURN prescient_finish(ARRAY(
        SELECT j.id FROM prescient_jobs j
        WHERE j.entity = p_entity AND j.entity_key = p_key AND j.check_name = p_check), 'cancelled');
END
$$;
-- +goose StatementEnd

-- prescient_cancel moves every pending job of the entity to history as
-- cancelled, in the caller's transaction, and returns how many it moved (0 is
-- not an error; a NULL or empty key is).
-- +goose StatementBegin
CREATE FUNCTION prescient_cancel(p_entity text, p_key text) RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM prescient_validate_name('entity', p_entity);
    PERFORM prescient_validate_key(p_entity, p_key);
    RETURN prescient_finish(ARRAY(
        SELECT j.id FROM prescient_jobs j
        WHERE j.entity = p_entity AND j.entity_key = p_key), 'cancelled');
END
$$;
-- +goose StatementEnd

SELECT prescient_copy_acl('prescient_cancel_00001(text, text, text)', 'prescient_cancel(text, text, text)');
SELECT prescient_copy_acl('prescient_cancel_00001(text, text, text)', 'prescient_cancel(text, text)');
DROP FUNCTION prescient_cancel_00001(text, text, text);
DROP FUNCTION prescient_copy_acl(regprocedure, regprocedure);

-- +goose Down

-- As in migration 00001: the three-argument function gets its default back
-- (a default can be added in place, so its privileges stay).
DROP FUNCTION prescient_cancel(text, text);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_cancel(p_entity text, p_key text, p_check text DEFAULT NULL) RETURNS int
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

-- As in migration 00001.
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
