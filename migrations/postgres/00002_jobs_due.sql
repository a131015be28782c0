-- prescient_jobs_due: the engine's paged list of the jobs due in one slot,
-- with its plan pinned.

-- +goose Up

-- The due index also holds check_name, so that the listing below reads
-- nothing but this index (and the heap only for rows not yet all-visible).
CREATE INDEX prescient_jobs_due_covering ON prescient_jobs (next_check_at, id) INCLUDE (check_name);
DROP INDEX prescient_jobs_due;
ALTER INDEX prescient_jobs_due_covering RENAME TO prescient_jobs_due;

-- prescient_jobs_due returns the jobs due in slot p_slot with an id above
-- p_after, in id order, at most p_limit: a walk of the due index from
-- (p_slot, p_after) that stops after p_limit entries, so that listing a slot
-- page by page costs what the slot holds, whatever else the table holds.
--
-- The shape and the planner settings (a SET clause applies only while the
-- function runs) leave that walk the one plan: the row comparison positions
-- the scan on the due index alone, and only that index gives the order
-- without a sort. With statistics taken while the table was empty, or before
-- a burst of scheduling filled one slot, PostgreSQL otherwise picks a bitmap
-- scan of the whole remaining slot plus a sort on every page (which made
-- listing a slot of 200,000 jobs quadratic), or a walk of the primary key
-- that filters through every other slot's jobs. The page may end early when
-- the walk reaches the next slot: only an empty page means the slot is done.
-- +goose StatementBegin
CREATE FUNCTION prescient_jobs_due(p_slot timestamptz, p_after bigint, p_limit int)
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

-- +goose Down
DROP FUNCTION prescient_jobs_due(timestamptz, bigint, int);
CREATE INDEX prescient_jobs_due_plain ON prescient_jobs (next_check_at, id);
DROP INDEX prescient_jobs_due;
ALTER INDEX prescient_jobs_due_plain RENAME TO prescient_jobs_due;
