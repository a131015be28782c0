-- The slot ledger keeps how long its server spent firing the slot, every
-- firing's own duration added up (took_us). Read from started_at to
-- finished_at instead, a slot fired at its boundary and again by a sweep
-- hours later read as one firing of hours: started_at stays the first
-- firing's start (right for the lag) and finished_at is the last one's
-- finish.
--
-- NULL is a row an older prescient wrote (before this migration, or during
-- a rolling upgrade): readers take the span from its start to its finish,
-- which was its duration unless the slot was fired more than once, and the
-- next firing adds its own time to that span.

-- +goose Up
ALTER TABLE prescient_slots ADD COLUMN took_us bigint;

-- +goose Down
ALTER TABLE prescient_slots DROP COLUMN took_us;
