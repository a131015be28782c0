package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// Opts are the store's optional settings. A nil *Opts means the zero Opts.
type Opts struct {
	// Schema is the schema holding prescient's tables, functions and goose
	// version table. Empty means the server's default search_path (usually
	// public). Otherwise Migrate creates the schema if it is missing, and Open
	// makes every pool connection use it as its only search_path.
	Schema string
	// MaxConns caps the pool Open creates; 0 keeps pgxpool's default (the
	// larger of 4 and the number of CPUs) or the pool_max_conns of the URL.
	MaxConns int32
}

// Store is prescient's PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
}

var _ driver.Driver = (*Store)(nil)

// cancelGrace is how long a query whose context is cancelled may take to
// acknowledge the server-side cancel before its connection is closed.
const cancelGrace = 5 * time.Second

// Open connects to the database at url (a PostgreSQL URL or key=value
// string), checks that it answers, and returns a store that owns the pool:
// Close closes it. It does not migrate; call Migrate.
//
// A cancelled context cancels the running statement on the server
// (pgconn.CancelRequestContextWatcherHandler; pgx's default is to close the
// connection), and the connection survives, so that a check stopped by its
// runtime guard leaves its transaction usable and its rows unlocked at once
// rather than when the server notices the lost connection. Pools handed to
// New should do the same; one with pgx's default loses the connection, and
// the batch's transaction, to a cancelled statement.
func Open(ctx context.Context, url string, opts *Opts) (*Store, error) {
	var o Opts
	if opts != nil {
		o = *opts
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if o.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{o.Schema}.Sanitize()
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", interpretError(err))
	}
	return New(pool, &o), nil
}

// New returns a store over an existing pool; Close closes the pool. opts.Schema
// only tells Migrate which schema to create and lock: the pool's connections
// must already have it as their search_path (Open arranges that), since New
// cannot change a running pool. opts.MaxConns is ignored. opts may be nil.
func New(pool *pgxpool.Pool, opts *Opts) *Store {
	s := &Store{pool: pool}
	if opts != nil {
		s.schema = opts.Schema
	}
	return s
}

// Driver returns the store itself: it is its own driver.
func (s *Store) Driver() driver.Driver { return s }

// Features reports that several hosts may share the store, and caps a
// processing transaction at 64 checks, the subtransactions a PostgreSQL
// backend caches (PGPROC_MAX_CACHED_SUBXIDS): past that, while the
// transaction lasts, every snapshot on the server must consult pg_subtrans.
func (s *Store) Features() driver.Features {
	return driver.Features{MultiHost: true, MaxGroupSize: MaxGroupSize}
}

// MaxGroupSize is the largest group of checks one processing transaction
// runs on PostgreSQL: see Features.
const MaxGroupSize = 64

// UnwrapTx returns tx as the store's methods take it; it ties the store to
// pgx.Tx for prescient.TypedClient.
func (s *Store) UnwrapTx(tx pgx.Tx) any { return tx }

// Pool returns the store's pool, for applications that want to begin a
// pgx.Tx to pass to the methods that take one.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool, waiting for connections in use to be released.
func (s *Store) Close() { s.pool.Close() }

// querier is what pgxpool.Pool and pgx.Tx have in common: a method that runs
// one statement can run on either.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// callerTx returns the caller's transaction, nil when tx is nil, or an error
// wrapping driver.ErrTxType naming the type received.
func callerTx(tx any) (pgx.Tx, error) {
	switch t := tx.(type) {
	case nil:
		return nil, nil
	case pgx.Tx:
		return t, nil
	default:
		return nil, fmt.Errorf("%w: the PostgreSQL store takes a pgx.Tx, got %T", driver.ErrTxType, tx)
	}
}

// on returns where a single statement of a method taking tx runs: the
// caller's transaction, or the pool (the statement is its own transaction).
func (s *Store) on(tx any) (querier, error) {
	t, err := callerTx(tx)
	if err != nil || t == nil {
		return s.pool, err
	}
	return t, nil
}

// inTx runs fn in the caller's transaction, or in one of the store's own that
// commits when fn succeeds.
func (s *Store) inTx(ctx context.Context, tx any, fn func(pgx.Tx) error) error {
	t, err := callerTx(tx)
	if err != nil {
		return err
	}
	if t != nil {
		return fn(t)
	}
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// GridSave records the slot grid in prescient_settings, replacing any grid
// saved before, so that prescient_schedule rounds as the engine does. The grid
// must be valid.
func (s *Store) GridSave(ctx context.Context, g slots.Grid) error {
	if err := g.Validate(); err != nil {
		return fmt.Errorf("save grid: %w", err)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO prescient_settings (id, resolution_us, offset_us) VALUES (true, $1, $2)
		ON CONFLICT (id) DO UPDATE SET resolution_us = excluded.resolution_us, offset_us = excluded.offset_us`,
		g.Resolution.Microseconds(), g.Offset.Microseconds())
	if err != nil {
		return fmt.Errorf("save grid: %w", interpretError(err))
	}
	return nil
}

// CatalogSave upserts the catalog entries in one transaction; of two entries
// with the same check, the later wins.
func (s *Store) CatalogSave(ctx context.Context, entries []driver.CatalogEntry) error {
	if len(entries) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, e := range entries {
		awaits := e.Awaits
		if awaits == nil {
			awaits = []string{}
		}
		b.Queue(`
			INSERT INTO prescient_catalog (check_name, awaits, updated_at) VALUES ($1, $2, now())
			ON CONFLICT (check_name) DO UPDATE SET awaits = excluded.awaits, updated_at = excluded.updated_at`,
			e.Check, awaits)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("save catalog: %w", interpretError(err))
	}
	return nil
}

// micros converts a duration to the microseconds stored in _us columns.
func micros(d time.Duration) int64 { return d.Microseconds() }

// duration converts microseconds from a _us column to a duration.
func duration(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// utcOrZero returns t in UTC, or the zero time when t is nil (a NULL column).
func utcOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// nullTime returns nil for the zero time, so that it is stored as NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
