package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/prescient-dev/prescient/migrations"
)

// migrationsTable is goose's version table, kept in the store's schema.
const migrationsTable = "prescient_migrations"

// Migrate applies the pending migrations of migrations.Postgres, creating the
// store's schema first if it has one and it is missing. It is safe to run
// repeatedly and from several processes at once: concurrent runs serialise on
// an advisory lock keyed by the schema (polled every second for up to ten
// minutes), so stores in different schemas migrate independently. A
// database or connection not encoded in UTF-8 is refused (ErrEncoding).
func (s *Store) Migrate(ctx context.Context) error {
	if err := checkEncoding(ctx, s.pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := s.createSchema(ctx); err != nil {
		return fmt.Errorf("migrate: create schema %q: %w", s.schema, interpretError(ctx, err))
	}
	fsys, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(s.lockID()), lock.WithLockTimeout(1, 600))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	pool, err := s.migrationPool(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", interpretError(ctx, err))
	}
	if pool != s.pool {
		defer pool.Close()
	}
	// Closing the *sql.DB leaves the pool open.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithTableName(migrationsTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", interpretError(ctx, err))
	}
	return nil
}

// migrationPool returns the pool the migrations run on. The functions they
// create keep the search_path they were created with (SET search_path FROM
// CURRENT), and run with it whoever calls them. With a schema, every pool
// connection's search_path starts with it (Open), and the store's pool
// serves. Without one, the tables go where the search_path leads now
// (current_schema()), which may be through "$user" (a role owning a schema
// of its own name, as PostgreSQL recommends): kept as written, "$user"
// would lead an application's role calling prescient_schedule to its own
// schema, where no prescient tables are. So the migrations run on a pool of
// their own whose search_path starts with the schema current_schema() names.
func (s *Store) migrationPool(ctx context.Context) (*pgxpool.Pool, error) {
	if s.schema != "" {
		return s.pool, nil
	}
	var schema *string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, err
	}
	if schema == nil {
		return nil, errors.New("no schema of the search_path exists to create prescient's tables in: " +
			"create one, or name one with database.schema (postgres.Opts.Schema)")
	}
	cfg := s.pool.Config().Copy()
	cfg.MinConns, cfg.MaxConns = 0, 2 // goose's lock and its migrations
	after, pin := cfg.AfterConnect, pgx.Identifier{*schema}.Sanitize()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		_, err := c.Exec(ctx, `SELECT set_config('search_path', $1 || ', ' || current_setting('search_path'), false)`, pin)
		return err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// createSchema creates the store's schema if it has one. Two concurrent
// CREATE SCHEMA IF NOT EXISTS can still collide on the catalog's unique index,
// so it runs under the migration lock.
func (s *Store) createSchema(ctx context.Context) error {
	if s.schema == "" {
		return nil
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.lockID()); err != nil {
			return err
		}
		// PostgreSQL checks the right to create schemas in the database
		// before IF NOT EXISTS: a role given a schema of its own (CREATE
		// SCHEMA ... AUTHORIZATION app) but not that right must find it.
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil || exists {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize())
		return err
	})
}

// lockID is the advisory lock key migrations of this store's schema hold.
func (s *Store) lockID() int64 {
	h := fnv.New64a()
	h.Write([]byte("prescient migrations\x00" + s.schema))
	return int64(h.Sum64())
}

// OtherInstalls returns the store's own schema (the configured one, or
// current_schema()) and lists the other schemas of the database whose
// prescient tables (prescient_jobs) the connection's role may read: where
// `prescient copy --to-schema` copied a store, or another install.
func (s *Store) OtherInstalls(ctx context.Context) (own string, others []string, err error) {
	var o *string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(nullif($1, ''), current_schema())`, s.schema).Scan(&o); err != nil {
		return "", nil, fmt.Errorf("list prescient's schemas: %w", interpretError(ctx, err))
	}
	if o != nil {
		own = *o
	}
	// By oid: the privilege functions then never raise (by name, one may
	// be evaluated for a row the name test has not dropped yet).
	rows, err := s.pool.Query(ctx, `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = 'prescient_jobs' AND c.relkind IN ('r', 'p') AND n.nspname <> $1
			AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
		ORDER BY 1`, own)
	if err != nil {
		return "", nil, fmt.Errorf("list prescient's schemas: %w", interpretError(ctx, err))
	}
	others, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", nil, fmt.Errorf("list prescient's schemas: %w", interpretError(ctx, err))
	}
	return own, others, nil
}

// SchemaVersion returns the version the database's schema is at (0 before
// any migration) and the last version this binary's migrations bring it
// to. It reads goose's table and changes nothing.
func (s *Store) SchemaVersion(ctx context.Context) (current, latest int64, err error) {
	if latest, err = migrations.Latest(migrations.Postgres, "postgres"); err != nil {
		return 0, 0, err
	}
	// Goose keeps its table in the store's schema (current_schema() once
	// it exists), not wherever the search_path finds one: public may hold
	// another install's, and is current_schema() while the store's schema
	// is not created yet.
	var (
		schema = s.schema
		exists bool
	)
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(nullif($2, ''), current_schema()),
			EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = coalesce(nullif($2, ''), current_schema()) AND tablename = $1)`,
		migrationsTable, s.schema).Scan(&schema, &exists); err != nil {
		return 0, 0, fmt.Errorf("read the schema's version: %w", interpretError(ctx, err))
	}
	if !exists {
		return 0, latest, nil
	}
	var v *int64
	if err := s.pool.QueryRow(ctx, `SELECT max(version_id) FROM `+pgx.Identifier{schema, migrationsTable}.Sanitize()).Scan(&v); err != nil {
		return 0, 0, fmt.Errorf("read the schema's version: %w", interpretError(ctx, err))
	}
	if v != nil {
		current = *v
	}
	return current, latest, nil
}
