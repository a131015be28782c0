-- prescient_claim and prescient_apply: the engine's claim and decision
-- statements, with their plans pinned; prescient_jobs_due in PL/pgSQL; and
-- fewer history indexes to write per finished job.
--
-- The engine's functions are PL/pgSQL, which keeps each statement's plan for
-- the session: a LANGUAGE sql function that is not inlined (and a SET clause
-- prevents inlining) is planned again on every call, which cost the server
-- more than the work itself on groups of 50 jobs.

-- +goose Up

-- Every finished job writes one history row, and each index on history costs
-- the decision statement about 2.5 µs a job. History is read by finish time
-- (newest first, pruning), by entity, and by outcome when looking for
-- trouble: failed jobs and guard endings, which are rare, so only they are
-- indexed by outcome. A filter on a check name, or on a common outcome,
-- walks history newest first (bounded by its limit).
DROP INDEX prescient_history_check;
DROP INDEX prescient_history_outcome;
CREATE INDEX prescient_history_trouble ON prescient_history (outcome, finished_at)
    WHERE outcome IN ('failed', 'guard_max_checks', 'guard_horizon', 'guard_past');

-- prescient_jobs_due: as in migration 00002, in PL/pgSQL.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_jobs_due(p_slot timestamptz, p_after bigint, p_limit int)
RETURNS TABLE (id bigint, check_name text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT d.id, d.check_name FROM (
        SELECT j.id, j.check_name, j.next_check_at FROM prescient_jobs j
        WHERE (j.next_check_at, j.id) > (p_slot, p_after)
        ORDER BY j.next_check_at, j.id
        LIMIT p_limit
    ) d
    WHERE d.next_check_at = p_slot;
END
$$;
-- +goose StatementEnd

-- prescient_claim locks and returns the jobs among p_ids still due in p_slot
-- that no other transaction holds, in id order: the first statement of a
-- processing transaction. It reaches the rows by primary key only, whatever
-- the statistics say: the slot test is written so that no index can serve it
-- (planned with statistics taken before a burst of scheduling filled the
-- slot, "next_check_at = p_slot" looks selective, and PostgreSQL walks the
-- due index through the whole slot for every group), and a sequential scan
-- is off (with random_page_cost 4 a batch of 10,000 ids looks cheaper to
-- find by scanning the table).
-- +goose StatementBegin
CREATE FUNCTION prescient_claim(p_ids bigint[], p_slot timestamptz)
RETURNS TABLE (id bigint, entity text, entity_key text, check_name text, first_check_at timestamptz,
    check_count int, failure_count int, last_error text, payload jsonb, created_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT j.id, j.entity, j.entity_key, j.check_name, j.first_check_at, j.check_count, j.failure_count,
        j.last_error, j.payload, j.created_at
    FROM prescient_jobs j
    WHERE j.id = ANY (p_ids) AND (j.next_check_at = p_slot) IS TRUE
    ORDER BY j.id
    FOR UPDATE SKIP LOCKED;
END
$$;
-- +goose StatementEnd

-- prescient_apply applies the decisions of one processing transaction, in
-- one statement. The arrays run in parallel, one element per job: id,
-- outcome ('' keeps the job pending), next check, whether the check ran to
-- a result, error (''), runtime to add (µs), reason (''), lateness (µs).
-- Jobs with an outcome move to history, finished at p_now by p_server; the
-- others stay pending until their next check. Every job is reached by
-- primary key: with hash and merge joins off, a batch of 1,000 decisions no
-- longer joins against a sequential scan of the whole pending table (240 ms
-- for 200,000 pending jobs, on every batch).
-- +goose StatementBegin
CREATE FUNCTION prescient_apply(p_ids bigint[], p_outcomes text[], p_nexts timestamptz[], p_checked boolean[],
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

-- +goose Down
DROP INDEX prescient_history_trouble;
CREATE INDEX prescient_history_check ON prescient_history (check_name, finished_at);
CREATE INDEX prescient_history_outcome ON prescient_history (outcome, finished_at);
DROP FUNCTION prescient_apply(bigint[], text[], timestamptz[], boolean[], text[], bigint[], text[], bigint[], timestamptz, timestamptz, text);
DROP FUNCTION prescient_claim(bigint[], timestamptz);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION prescient_jobs_due(p_slot timestamptz, p_after bigint, p_limit int)
RETURNS TABLE (id bigint, check_name text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
    SELECT d.id, d.check_name FROM (
        SELECT j.id, j.check_name, j.next_check_at FROM prescient_jobs j
        WHERE (j.next_check_at, j.id) > (p_slot, p_after)
        ORDER BY j.next_check_at, j.id
        LIMIT p_limit
    ) d
    WHERE d.next_check_at = p_slot
$$;
-- +goose StatementEnd
