-- Each server's heartbeat lists the slots it is firing (firing). Status
-- readers showed every unfinished ledger row of a slot before the one in
-- progress as "incomplete" (its server died or stopped in it), and
-- prescient_slots_incomplete counted it, while a live server was still
-- firing it past the slot's end. The list comes from the firing process's
-- own memory at each heartbeat, so a firing that died, or whose ledger
-- finish was lost, leaves it at the next heartbeat. An older prescient
-- heartbeats none: its rows read as before.

-- +goose Up
ALTER TABLE prescient_servers ADD COLUMN firing timestamptz[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE prescient_servers DROP COLUMN firing;
