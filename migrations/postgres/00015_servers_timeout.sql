-- Each server's heartbeat records its own server timeout (timeout_us), by
-- which status readers judge it live or gone: `prescient status` run with a
-- configuration other than the servers' judged them by its own
-- ownership.server_timeout. And it records with which heartbeat it wrote
-- the slots it fires (firing_at): an older prescient's heartbeat, after a
-- rollback, moves heartbeat_at and leaves firing as a newer one wrote it,
-- which would list a slot as fired for as long as that process lives. A
-- list, and a timeout, not written with the latest heartbeat read as
-- empty (an older prescient's upsert leaves both as they were). An older
-- prescient writes neither: its servers are judged by the reader's
-- timeout, and list nothing, as before 00014.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN timeout_us bigint, ADD COLUMN firing_at timestamptz;

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN timeout_us, DROP COLUMN firing_at;
