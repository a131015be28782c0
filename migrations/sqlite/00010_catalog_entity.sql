-- The check catalog records the entity a check watches, when it watches
-- one only ('' for any), as in the PostgreSQL migration 00018_catalog_entity
-- (SQLite has no prescient_schedule to refuse another with).

-- +goose Up
ALTER TABLE prescient_catalog ADD COLUMN entity TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE prescient_catalog DROP COLUMN entity;
