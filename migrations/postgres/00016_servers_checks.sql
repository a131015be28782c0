-- Each server's heartbeat lists the checks it runs (checks): `prescient
-- checks retire` refuses a check a live server still runs, which only the
-- retiring binary's own checks told before. The list counts only when the
-- latest heartbeat wrote it (checks_at, 00017); an older prescient's server
-- runs checks no one can list.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN checks text[];

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN checks;
