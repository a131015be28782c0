-- prescient_attempts: the starts of checks not yet finished, so that a check
-- that kills its server (os.Exit, an out-of-memory kill, a fatal runtime
-- error) cannot crash-loop it forever.
--
-- Before a processing transaction runs its checks, the engine records the
-- attempt (one row for the whole group, committed at once); the transaction
-- deletes the row with its decisions, so the row is gone once they commit.
-- A row left behind names jobs whose checks started and never finished. The
-- engine runs such jobs alone, one at a time, each recording an attempt of
-- its own, and ends a job `failed` once retry.max_unfinished attempts name it.

-- +goose Up
CREATE TABLE prescient_attempts (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    server     text        NOT NULL,
    slot       timestamptz NOT NULL,
    started_at timestamptz NOT NULL,
    job_ids    bigint[]    NOT NULL
);

-- prescient_attempt_start records an attempt and returns its id. Its commit
-- does not wait for the disk: an attempt guards against a crash of the
-- engine's process, which loses nothing PostgreSQL has committed; a crash of
-- PostgreSQL itself may lose the last few attempts, but never one whose
-- processing transaction committed after it (the log is flushed in order).
-- +goose StatementBegin
CREATE FUNCTION prescient_attempt_start(p_server text, p_slot timestamptz, p_started_at timestamptz, p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO prescient_attempts (server, slot, started_at, job_ids)
    VALUES (p_server, p_slot, p_started_at, p_ids)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;
-- +goose StatementEnd

-- prescient_attempts_settle takes the jobs p_ids out of every attempt that
-- names them, and deletes the attempts left naming none.
-- +goose StatementBegin
CREATE FUNCTION prescient_attempts_settle(p_ids bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE prescient_attempts a
    SET job_ids = ARRAY(SELECT x FROM unnest(a.job_ids) x WHERE x <> ALL (p_ids))
    WHERE a.job_ids && p_ids;
    DELETE FROM prescient_attempts WHERE cardinality(job_ids) = 0;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION prescient_attempts_settle(bigint[]);
DROP FUNCTION prescient_attempt_start(text, timestamptz, timestamptz, bigint[]);
DROP TABLE prescient_attempts;
