-- The engine's functions plan their statements once per session.
--
-- A PL/pgSQL statement with parameters goes through PostgreSQL's plan cache,
-- which may plan it afresh on every call (a custom plan) for as long as it
-- estimates that cheaper than its generic plan. For the engine's statements,
-- whose parameters are arrays of up to 10,000 ids, it did: measured on
-- PostgreSQL 15, prescient_apply of 1,000 decisions took 17–23 ms a call with
-- custom plans and 3–4.5 ms with the generic plan; in a slot of batch checks
-- (1,000 jobs a transaction) prescient_claim went from 3.1 to 2.4 ms and
-- prescient_jobs_due from 2.0 to 1.4 ms a call. The SET clauses of these
-- functions already fix the shape of their plans (index scans by primary
-- key or along the due index, nested loops), so the generic plan is the plan
-- wanted, whatever the statistics said when the session first called them
-- (a server started before any job exists included).

-- +goose Up
ALTER FUNCTION prescient_apply(bigint[], text[], timestamptz[], boolean[], text[], bigint[], text[], bigint[], timestamptz, timestamptz, text)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION prescient_claim(bigint[], timestamptz) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION prescient_jobs_due(timestamptz, bigint, int) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION prescient_attempt_start(text, timestamptz, timestamptz, bigint[]) SET plan_cache_mode = force_generic_plan;

-- +goose Down
ALTER FUNCTION prescient_attempt_start(text, timestamptz, timestamptz, bigint[]) RESET plan_cache_mode;
ALTER FUNCTION prescient_jobs_due(timestamptz, bigint, int) RESET plan_cache_mode;
ALTER FUNCTION prescient_claim(bigint[], timestamptz) RESET plan_cache_mode;
ALTER FUNCTION prescient_apply(bigint[], text[], timestamptz[], boolean[], text[], bigint[], text[], bigint[], timestamptz, timestamptz, text)
    RESET plan_cache_mode;
