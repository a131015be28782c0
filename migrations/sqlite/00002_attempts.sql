-- prescient_attempts: the starts of checks not yet finished, as in the
-- PostgreSQL migration of the same name. job_ids is a JSON array of job ids.

-- +goose Up
CREATE TABLE prescient_attempts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    server     TEXT    NOT NULL,
    slot       INTEGER NOT NULL,
    started_at INTEGER NOT NULL,
    job_ids    TEXT    NOT NULL CHECK (json_valid(job_ids))
) STRICT;

-- +goose Down
DROP TABLE prescient_attempts;
