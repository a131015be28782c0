-- The checks a server runs (00016) count only when the latest heartbeat
-- wrote them (checks_at = heartbeat_at). firing_at could not say it: the
-- prescient of 00015, which writes firing_at and not checks, left a list a
-- newer one wrote looking current after a rollback, and `checks retire`
-- would then let through a check that server runs.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN checks_at timestamptz;

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN checks_at;
