-- The engine's functions plan their statements once per session, or, for
-- prescient_apply, on every call.
--
-- A PL/pgSQL statement with parameters goes through PostgreSQL's plan cache,
-- which may plan it afresh on every call (a custom plan) for as long as it
-- estimates that cheaper than its generic plan. For the engine's statements
-- over arrays of up to 10,000 ids it did: in a slot of batch checks (1,000
-- jobs a transaction, one at a time) prescient_claim went from 3.1 to 2.4 ms
-- and prescient_jobs_due from 2.0 to 1.4 ms a call with the generic plan.
-- Each reads one table, by primary key or along the due index, which their
-- SET clauses leave as the only way: the generic plan is the plan wanted,
-- whatever the statistics said when the session first called them (a server
-- started before any job exists included, checked with 50,000 jobs arriving
-- after the first call).
--
-- prescient_apply is the other way round: it joins its decisions to the
-- pending table, and must be planned on every call (force_custom_plan). A
-- generic plan estimates the decisions at 10 rows; made while the table was
-- empty and vacuumed, it walks the whole primary key and reads every decision
-- for each entry (40 s for 2,000 decisions among 50,000 jobs, against 15 ms
-- planned for the call). The plan cache chose that generic plan by itself
-- once a session had applied decisions five times on a near-empty table (a
-- server idle between bursts), and kept it.

-- +goose Up
ALTER FUNCTION prescient_apply(bigint[], text[], timestamptz[], boolean[], text[], bigint[], text[], bigint[], timestamptz, timestamptz, text)
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION prescient_claim(bigint[], timestamptz) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION prescient_jobs_due(timestamptz, bigint, int) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION prescient_attempt_start(text, timestamptz, timestamptz, bigint[]) SET plan_cache_mode = force_generic_plan;

-- +goose Down
ALTER FUNCTION prescient_attempt_start(text, timestamptz, timestamptz, bigint[]) RESET plan_cache_mode;
ALTER FUNCTION prescient_jobs_due(timestamptz, bigint, int) RESET plan_cache_mode;
ALTER FUNCTION prescient_claim(bigint[], timestamptz) RESET plan_cache_mode;
ALTER FUNCTION prescient_apply(bigint[], text[], timestamptz[], boolean[], text[], bigint[], text[], bigint[], timestamptz, timestamptz, text)
    RESET plan_cache_mode;
