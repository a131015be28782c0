-- Each server's heartbeat lists the checks it runs (checks, a JSON array of
-- names), as in the PostgreSQL migration 00016_servers_checks.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN checks TEXT CHECK (checks IS NULL OR json_valid(checks));

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN checks;
