-- prescient_apply keeps one plan per session, a plan whose every shape is
-- bounded by the decisions it is given.
--
-- Migration 00009 had prescient_apply planned on every call: its join of
-- the decisions to the pending table, planned once while the table was empty,
-- walked the whole primary key per decision. Planning every call cost about a
-- fifth of a slot of batch checks at 100 jobs a transaction (28-30k against
-- 35-37k checks/s with a plan kept, alternating on one server). Now each
-- statement reaches the pending table only through its primary key with the
-- ids it touches (= ANY of an array), and joins by hash (nested loops and
-- merge joins are off), so whatever the statistics said when the plan was
-- made, it reads one index entry per decision and hashes the decisions once:
-- made on an empty table, the plan for 2,000 decisions among 50,000 jobs is
-- the same hash join over 2,000 primary-key lookups. Applying one job at a
-- time by primary key was tried and was slower (27k against 36k checks/s).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_apply(p_ids bigint[], p_outcomes text[], p_nexts timestamptz[], p_checked boolean[],
    p_errs text[], p_add_us bigint[], p_reasons text[], p_late_us bigint[],
    p_slot timestamptz, p_now timestamptz, p_server text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_nestloop = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    WITH d AS MATERIALIZED (
        SELECT * FROM unnest(p_ids, p_outcomes, p_nexts, p_checked, p_errs, p_add_us, p_reasons, p_late_us)
            AS d(id, outcome, next, checked, err, add_us, reason, late_us)
    ), kept AS (
        UPDATE prescient_jobs j SET
            next_check_at = d.next,
            last_check_at = CASE WHEN d.checked THEN p_slot ELSE j.last_check_at END,
            check_count = j.check_count + d.checked::int,
            failure_count = CASE WHEN d.checked THEN 0 ELSE j.failure_count END + (d.err <> '')::int,
            last_error = CASE WHEN d.err <> '' THEN d.err WHEN d.checked THEN NULL ELSE j.last_error END,
            runtime_us = j.runtime_us + d.add_us,
            lateness_us = d.late_us,
            updated_at = p_now
        FROM d
        WHERE j.id = d.id AND d.outcome = ''
            AND j.id = ANY (ARRAY(SELECT k.id FROM d k WHERE k.outcome = ''))
    ), gone AS (
        DELETE FROM prescient_jobs j USING d
        WHERE j.id = d.id AND d.outcome <> ''
            AND j.id = ANY (ARRAY(SELECT g.id FROM d g WHERE g.outcome <> ''))
        RETURNING j.*, d.outcome, d.checked, nullif(d.err, '') AS err, d.add_us,
            nullif(d.reason, '') AS reason, d.late_us
    )
    INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
        last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
        created_at, finished_at, finished_by)
    SELECT id, entity, entity_key, check_name, outcome, first_check_at,
        CASE WHEN checked THEN p_slot ELSE last_check_at END,
        check_count + checked::int,
        CASE WHEN checked THEN 0 ELSE failure_count END + (err IS NOT NULL)::int,
        runtime_us + add_us,
        late_us,
        CASE WHEN err IS NOT NULL THEN err WHEN reason IS NOT NULL THEN reason WHEN checked THEN NULL ELSE last_error END,
        payload, created_at, p_now, p_server
    FROM gone;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_apply(p_ids bigint[], p_outcomes text[], p_nexts timestamptz[], p_checked boolean[],
    p_errs text[], p_add_us bigint[], p_reasons text[], p_late_us bigint[],
    p_slot timestamptz, p_now timestamptz, p_server text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
    WITH d AS MATERIALIZED (
        SELECT * FROM unnest(p_ids, p_outcomes, p_nexts, p_checked, p_errs, p_add_us, p_reasons, p_late_us)
            AS d(id, outcome, next, checked, err, add_us, reason, late_us)
    ), kept AS (
        UPDATE prescient_jobs j SET
            next_check_at = d.next,
            last_check_at = CASE WHEN d.checked THEN p_slot ELSE j.last_check_at END,
            check_count = j.check_count + d.checked::int,
            failure_count = CASE WHEN d.checked THEN 0 ELSE j.failure_count END + (d.err <> '')::int,
            last_error = CASE WHEN d.err <> '' THEN d.err WHEN d.checked THEN NULL ELSE j.last_error END,
            runtime_us = j.runtime_us + d.add_us,
            lateness_us = d.late_us,
            updated_at = p_now
        FROM d
        WHERE j.id = d.id AND d.outcome = ''
    ), gone AS (
        DELETE FROM prescient_jobs j USING d
        WHERE j.id = d.id AND d.outcome <> ''
        RETURNING j.*, d.outcome, d.checked, nullif(d.err, '') AS err, d.add_us,
            nullif(d.reason, '') AS reason, d.late_us
    )
    INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
        last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
        created_at, finished_at, finished_by)
    SELECT id, entity, entity_key, check_name, outcome, first_check_at,
        CASE WHEN checked THEN p_slot ELSE last_check_at END,
        check_count + checked::int,
        CASE WHEN checked THEN 0 ELSE failure_count END + (err IS NOT NULL)::int,
        runtime_us + add_us,
        late_us,
        CASE WHEN err IS NOT NULL THEN err WHEN reason IS NOT NULL THEN reason WHEN checked THEN NULL ELSE last_error END,
        payload, created_at, p_now, p_server
    FROM gone;
END
$$;
-- +goose StatementEnd
ALTER FUNCTION prescient_apply(bigint[], text[], timestamptz[], boolean[], text[], bigint[], text[], bigint[], timestamptz, timestamptz, text)
    SET plan_cache_mode = force_custom_plan;
