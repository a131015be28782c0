-- Entity names, keys and check names compare byte by byte (COLLATE "C"),
-- whatever the database's default collation, in the two tables whose indexes
-- hold them: the pending table's identity (entity, entity_key, check_name),
-- and history's per-entity index.
--
-- Every job scheduled inserts into the identity index and every job finished
-- into history's entity index, each a descent of a B-tree comparing keys. A
-- database whose default collation is linguistic (en_US.UTF-8, ICU) compares
-- them through the locale; "C" compares bytes. Measured on this project's
-- 2-core machine (2026-11-26, the peer bench's 200,000 jobs, alternating):
-- ScheduleMany 152-159k against 175-181k jobs/s on an en_US.UTF-8 database
-- (+15%), about +10% on an ICU en-US one and +7% on C.UTF-8; batch checks +6%
-- on ICU en-US; prescient_apply of 1,000 decisions 3-5% less server time;
-- per-entity checks within the bench's spread.
--
-- The byte order is also the one Go sorts strings in and the SQLite store
-- keeps, so listing entities pages the same way on both stores, and the lock
-- order the store already took with COLLATE "C" (see lockOrder) is now the
-- identity index's own. Equality does not change: every collation a
-- database can default to is deterministic.
--
-- Only the indexes are rebuilt, not the tables (0.15 s for each table at
-- 200,000 rows here), under the ACCESS EXCLUSIVE locks ALTER TABLE takes,
-- held on both tables until the migration's transaction commits. Changing a
-- column's type drops its planner statistics, so the columns are analysed
-- again at once: without them, looking up a rare entity's jobs or history
-- walked the due or the finished index instead of the entity's.

-- +goose Up
ALTER TABLE prescient_jobs
    ALTER COLUMN entity TYPE text COLLATE "C",
    ALTER COLUMN entity_key TYPE text COLLATE "C",
    ALTER COLUMN check_name TYPE text COLLATE "C";
ALTER TABLE prescient_history
    ALTER COLUMN entity TYPE text COLLATE "C",
    ALTER COLUMN entity_key TYPE text COLLATE "C",
    ALTER COLUMN check_name TYPE text COLLATE "C";
ANALYZE prescient_jobs (entity, entity_key, check_name);
ANALYZE prescient_history (entity, entity_key, check_name);

-- +goose Down
ALTER TABLE prescient_jobs
    ALTER COLUMN entity TYPE text COLLATE "default",
    ALTER COLUMN entity_key TYPE text COLLATE "default",
    ALTER COLUMN check_name TYPE text COLLATE "default";
ALTER TABLE prescient_history
    ALTER COLUMN entity TYPE text COLLATE "default",
    ALTER COLUMN entity_key TYPE text COLLATE "default",
    ALTER COLUMN check_name TYPE text COLLATE "default";
ANALYZE prescient_jobs (entity, entity_key, check_name);
ANALYZE prescient_history (entity, entity_key, check_name);
