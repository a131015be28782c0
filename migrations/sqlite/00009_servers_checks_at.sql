-- The checks a server runs count only when the latest heartbeat wrote them
-- (checks_at, microseconds since the Unix epoch, = heartbeat_at), as in the
-- PostgreSQL migration 00017_servers_checks_at.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN checks_at INTEGER;

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN checks_at;
