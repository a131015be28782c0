-- Each server's heartbeat says how it owns positions (ownership: auto,
-- static or every; ownership_at, microseconds since the Unix epoch, =
-- heartbeat_at when the latest heartbeat wrote it), as in the PostgreSQL
-- migration 00019_servers_ownership. SQLite runs no automatic ownership;
-- the column keeps the stores alike for status and copy.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN ownership TEXT;
ALTER TABLE prescient_servers ADD COLUMN ownership_at INTEGER;

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN ownership_at;
ALTER TABLE prescient_servers DROP COLUMN ownership;
