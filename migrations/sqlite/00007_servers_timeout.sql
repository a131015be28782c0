-- Each server's heartbeat records its own server timeout (timeout_us) and
-- with which heartbeat it wrote the slots it fires (firing_at, microseconds
-- since the Unix epoch), as in the PostgreSQL migration
-- 00015_servers_timeout.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN timeout_us INTEGER;
ALTER TABLE prescient_servers ADD COLUMN firing_at INTEGER;

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN timeout_us;
ALTER TABLE prescient_servers DROP COLUMN firing_at;
