-- Each server's heartbeat lists the slots it is firing (firing, a JSON array
-- of microseconds since the Unix epoch), as in the PostgreSQL migration
-- 00014_servers_firing.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN firing TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(firing));

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN firing;
