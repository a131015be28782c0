-- The slot ledger says when the firing of the slot under way started
-- (firing_since, microseconds since the Unix epoch), as in the PostgreSQL
-- migration 00014_slot_running.

-- +goose Up
ALTER TABLE prescient_slots ADD COLUMN firing_since INTEGER;

-- +goose Down
ALTER TABLE prescient_slots DROP COLUMN firing_since;
