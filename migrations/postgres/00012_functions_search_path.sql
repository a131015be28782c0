-- Every prescient function keeps the search_path it was created with (SET
-- search_path FROM CURRENT). Installed with no schema named, that was the
-- session's as written, such as "$user", public: when an application's role
-- called prescient_schedule, "$user" led to that role's own schema, and the
-- function found neither prescient's tables nor its other functions. The
-- store now migrates with the search_path starting with the schema the
-- tables are in (postgres.Store.migrationPool); this records that
-- search_path again on the functions installed before.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        -- By name: a cast to regnamespace would read it as SQL, folding
        -- "Shop" to shop.
        WHERE p.pronamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = current_schema())
            AND p.proname LIKE 'prescient\_%'
            AND EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c(setting) WHERE c.setting LIKE 'search\_path=%')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path FROM CURRENT', f);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Nothing to undo: the search_path recorded still leads to the tables.
SELECT 1;
