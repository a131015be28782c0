-- Rescheduling moves a job's first check while it has never run (issue 9),
-- as in the PostgreSQL migration 00006: pending jobs that the old rule left
-- with a first check after their last (rescheduled before they ever ran,
-- then run) get their last check as their first, the earliest slot known to
-- have checked them, so that their history records keep first <= last.

-- +goose Up
UPDATE prescient_jobs SET first_check_at = last_check_at WHERE last_check_at < first_check_at;

-- +goose Down
-- The repair is not undone: the old first checks are not kept.
