-- A file `prescient copy` has copied to PostgreSQL records where and when:
-- its jobs now live there, and a server started on the file again (a unit
-- left enabled) would fire them a second time (found by a trial of a move
-- to PostgreSQL). The command line refuses to write to such a file.

-- +goose Up
CREATE TABLE prescient_copied (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    target    TEXT    NOT NULL,
    copied_at INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE prescient_copied;
