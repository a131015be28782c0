-- The slot ledger keeps how long its server spent firing the slot, every
-- firing's own duration added up, as in the PostgreSQL migration
-- 00013_slot_took: NULL is a row an older prescient wrote, whose readers
-- take the span from its start to its finish.

-- +goose Up
ALTER TABLE prescient_slots ADD COLUMN took_us INTEGER;

-- +goose Down
ALTER TABLE prescient_slots DROP COLUMN took_us;
