-- The slot ledger says when the firing of the slot under way started
-- (firing_since): SlotStart sets it and SlotFinish clears it, whether the
-- firing completed or was cut short. Status readers showed every unfinished
-- row of a slot before the one in progress as "incomplete" (its server died
-- or stopped in it), and prescient_slots_incomplete counted it, while a
-- live server was still firing it past the slot's end. A row an older
-- prescient started has none, and reads as before.

-- +goose Up
ALTER TABLE prescient_slots ADD COLUMN firing_since timestamptz;

-- +goose Down
ALTER TABLE prescient_slots DROP COLUMN firing_since;
