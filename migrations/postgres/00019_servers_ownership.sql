-- Each server's heartbeat says how it owns positions (ownership: auto,
-- static or every), counting only when the latest heartbeat wrote it
-- (ownership_at = heartbeat_at; an older prescient's server says nothing,
-- and is taken for automatic, as before). Servers with automatic ownership
-- share the positions that no live server of static ownership (or of every
-- position) fires: counted among them, a static server was given positions
-- it never fired, and one of its own went unfired until the sweep.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN ownership text;
ALTER TABLE prescient_servers ADD COLUMN ownership_at timestamptz;

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN ownership_at;
ALTER TABLE prescient_servers DROP COLUMN ownership;
