package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// Opts are the store's optional settings. A nil *Opts means the zero Opts.
type Opts struct {
	// Schema is the schema holding prescient's tables, functions and goose
	// version table. Empty means the server's default search_path (usually
	// public). Otherwise Migrate creates the schema if it is missing; Open
	// puts it first in the search_path of every pool connection, ahead of
	// the connection's default (so that checks, through job.Tx, still see
	// the application's tables); and statements run in an application's own
	// transaction (ScheduleTx and the other …Tx methods) name prescient's
	// tables with the schema, whatever that connection's search_path.
	Schema string
	// MaxConns caps the pool Open creates. 0 takes the pool_max_conns of
	// the connection string (or of the service file it names) if it sets
	// one, and otherwise sizes the pool for Workers: Workers + PoolSpare
	// connections up to PoolAutoMax, or pgxpool's default (the larger of 4
	// and the number of CPUs) if that is more. Set it for Workers of
	// PoolAutoMax - PoolSpare or more.
	MaxConns int32
	// Workers is the Workers of the client that will run checks through the
	// store (prescient.Config.Workers; their sum, for several clients on one
	// store); 0 means prescient.WorkersDefault. Each running group of checks
	// holds a connection for its transaction: a pool of fewer connections
	// than Workers runs fewer groups at once than asked, and one of no more
	// than Workers leaves none to narrow an attempt beside a group (the
	// client warns at Start in both cases). Only Open reads it, and only
	// when MaxConns is 0.
	Workers int
}

// PoolSpare is how many connections beyond Workers Open gives a pool it
// sizes: one lets a group whose claim skipped jobs narrow its attempt beside
// its open transaction (Driver.AttemptNarrow), the others serve the server's
// own statements (the tick's due list, a sweep, the heartbeat, status and
// metrics) without waiting for a group to end.
const PoolSpare = 4

// PoolAutoMax caps the pool Open sizes for Workers: PostgreSQL refuses
// connections past its max_connections (100 by default), which every server
// and application shares, so a pool larger than this is the caller's
// decision (Opts.MaxConns). Two servers at the cap already come close to
// that default: count their pools (and their delivery workers') against it.
const PoolAutoMax = 50

// Store is prescient's PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	// ownsPool says Close closes the pool: Open's, not New's.
	ownsPool bool
	// qualified caches statements rewritten by qualify.
	qualified sync.Map
	// pruneBatch overrides pruneBatchDefault (tests).
	pruneBatch int
	// copyPaused counts the calls to JobSchedule that upsert rather than
	// try COPY after one met an existing job (scheduleCopy).
	copyPaused atomic.Int32
	// maxConns is the pool's cap, for Features (pool.Config copies the
	// whole configuration).
	maxConns int
	// mode is how the pool's connections run statements
	// (pgx.ConnConfig.DefaultQueryExecMode), for procTx.send.
	mode pgx.QueryExecMode
}

var _ driver.Driver = (*Store)(nil)

// cancelGrace is how long a query whose context is cancelled may take to
// acknowledge the server-side cancel before its connection is closed.
const cancelGrace = 5 * time.Second

// Open connects to the database at url (a PostgreSQL URL or key=value
// string), checks that it answers, and returns a store that owns the pool:
// Close closes it. It does not migrate; call Migrate. Its connections use
// client_encoding UTF8 unless url sets one, and it refuses a database or
// connection not encoded in UTF-8 (ErrEncoding).
//
// A cancelled context cancels the running statement on the server
// (pgconn.CancelRequestContextWatcherHandler; pgx's default is to close the
// connection), and the connection survives, so that a check stopped by its
// runtime guard leaves its transaction usable and its rows unlocked at once
// rather than when the server notices the lost connection. Pools handed to
// New should do the same; one with pgx's default loses the connection, and
// the batch's transaction, to a cancelled statement.
//
// A commit whose wait for a synchronous standby that cancel request ends is
// reported as an error, not as done (closeOnUnreplicatedCommit). Behind a
// connection pooler (PgBouncer), Open refuses, with ErrPooler saying what to
// change, unless the URL sets a default_query_exec_mode that prepares no
// named statements and opts.Schema is empty (refusePooler).
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
		schema := pgx.Identifier{o.Schema}.Sanitize()
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, `SELECT set_config('search_path', $1 || ', ' || current_setting('search_path'), false)`, schema)
			return err
		}
	}
	switch {
	case o.MaxConns > 0:
		cfg.MaxConns = o.MaxConns
	case !setsPoolSize(url):
		workers := o.Workers
		if workers <= 0 {
			workers = prescient.WorkersDefault
		}
		cfg.MaxConns = max(cfg.MaxConns, int32(min(workers, PoolAutoMax-PoolSpare)+PoolSpare))
	}
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelGrace}
	}
	cfg.ConnConfig.OnNotice = closeOnUnreplicatedCommit(cfg.ConnConfig.OnNotice)
	if _, set := cfg.ConnConfig.RuntimeParams["client_encoding"]; !set {
		// pgx sends and reads text as UTF-8 whatever the connection's
		// encoding says; a role or database default must not change it.
		cfg.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	}
	if err := refusePooler(ctx, cfg.ConnConfig, o.Schema); err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", interpretError(ctx, err))
	}
	if err := checkEncoding(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := New(pool, &o)
	s.ownsPool = true
	return s, nil
}

// setsPoolSize reports whether the connection string (or the service file
// it names) sets pool_max_conns, which pgxpool reads and pgconn, not knowing
// it, keeps as a run-time parameter; pgxpool has no other way to tell.
func setsPoolSize(url string) bool {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return true // not expected, pgxpool.ParseConfig read it: keep what it made of it
	}
	_, set := cfg.RuntimeParams["pool_max_conns"]
	return set
}

// ErrEncoding is the error Open and Migrate return when the database or the
// connection does not hold text as UTF-8.
var ErrEncoding = errors.New("not a UTF-8 database connection")

// checkEncoding refuses a database whose encoding is not UTF8, and a
// connection whose client encoding is not UTF8. pgx writes Go's strings as
// UTF-8 bytes whatever the connection declares: over a LATIN1 connection
// "café" would be stored as "cafÃ©", a key no SQL caller writes, and the
// rules that assume UTF-8 (which keys are refused, the order jobs are
// locked in, which is Go's byte order) would not hold.
func checkEncoding(ctx context.Context, pool *pgxpool.Pool) error {
	var db, client string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_encoding'), current_setting('client_encoding')`).Scan(&db, &client); err != nil {
		return interpretError(ctx, err)
	}
	switch {
	case db != "UTF8":
		return fmt.Errorf("%w: the database %q is encoded in %s; prescient keeps keys, names and payloads as UTF-8 text: "+
			"create its database with ENCODING 'UTF8' (createdb -E UTF8 -T template0 --locale C.UTF-8 …)", ErrEncoding, pool.Config().ConnConfig.Database, db)
	case client != "UTF8":
		return fmt.Errorf("%w: the connection's client_encoding is %s (set in the database URL, or by ALTER ROLE or ALTER DATABASE … SET); "+
			"pgx sends and reads UTF-8 only: leave client_encoding out of the URL or set it to UTF8", ErrEncoding, client)
	}
	return nil
}

// syncRepCancelled begins the warning PostgreSQL sends when a cancel
// request stops a commit's wait for a synchronous standby: the transaction
// has committed on the primary, but may not have reached the standby.
const syncRepCancelled = "canceling wait for synchronous replication"

// closeOnUnreplicatedCommit wraps a notice handler. A statement whose
// context ends sends the server a cancel request (see Open); if it was a
// commit waiting for a synchronous standby, PostgreSQL stops the wait, warns,
// and reports the commit as done, although a failover may take it back. On
// that warning the handler closes the connection, so that the caller gets an
// error (the commit is in doubt, as when a connection is lost) instead of an
// acknowledgement that the standby never saw.
func closeOnUnreplicatedCommit(next pgconn.NoticeHandler) pgconn.NoticeHandler {
	return func(c *pgconn.PgConn, n *pgconn.Notice) {
		if strings.HasPrefix(n.Message, syncRepCancelled) {
			_ = c.Close(context.Background())
		}
		if next != nil {
			next(c, n)
		}
	}
}

// ErrPooler is the error Open returns when it finds itself behind a
// connection pooler (PgBouncer, or any other that answers with server
// connections of its own choosing) with settings that a pooler in
// transaction mode breaks.
var ErrPooler = errors.New("connected through a connection pooler")

// refusePooler opens one connection and asks the server its backend pid.
// Directly connected, it is the pid the connection was opened with; behind
// a pooler it is not (the pooler makes up the key it gives its clients).
// Behind a pooler, whose transaction mode may hand each transaction to
// another server connection, prescient keeps no session state only if pgx
// prepares no named statements (default_query_exec_mode exec,
// cache_describe or simple_protocol in the URL) and no schema is put in the
// search_path per connection (Opts.Schema empty); otherwise refusePooler
// says so. It cannot tell session pooling from transaction pooling, so it
// asks the same of both. A connection that fails is not its business: the
// pool reports it.
func refusePooler(ctx context.Context, cfg *pgx.ConnConfig, schema string) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var pid uint32
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil || pid == conn.PgConn().PID() {
		return nil
	}
	var fix []string
	switch cfg.DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeSimpleProtocol:
	default:
		fix = append(fix, "add default_query_exec_mode=exec to the database URL (pgx otherwise prepares named statements on a "+
			"server connection, which the pooler does not keep for the next transaction)")
	}
	if schema != "" {
		fix = append(fix, fmt.Sprintf("leave the schema setting empty and give the role the search_path instead "+
			"(ALTER ROLE … SET search_path = %s, public): a search_path set per connection stays on one server connection of the pooler's",
			pgx.Identifier{schema}.Sanitize()))
	}
	if len(fix) == 0 {
		return nil
	}
	return fmt.Errorf("%w (the server answers as backend pid %d, not the %d this connection was opened with): "+
		"a pooler in transaction mode hands each transaction to any of its server connections, so prescient must keep no state "+
		"between transactions: %s; and run migrations against PostgreSQL directly", ErrPooler, pid, conn.PgConn().PID(), strings.Join(fix, "; "))
}

// New returns a store over an existing pool, which stays the caller's: Close
// leaves it open. opts.Schema tells Migrate which schema to create and lock,
// and names prescient's tables in statements run in an application's
// transaction; the pool's connections must already have the schema first
// in their search_path (Open arranges that), since New cannot change a
// running pool; so must their client_encoding be UTF8 (pgx sends UTF-8
// whatever it is; Migrate refuses a pool whose encoding is another).
// opts.MaxConns is ignored. opts may be nil.
func New(pool *pgxpool.Pool, opts *Opts) *Store {
	cfg := pool.Config()
	s := &Store{pool: pool, maxConns: int(cfg.MaxConns), mode: cfg.ConnConfig.DefaultQueryExecMode}
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
// Conns is the pool's cap.
func (s *Store) Features() driver.Features {
	return driver.Features{MultiHost: true, MaxGroupSize: MaxGroupSize, NarrowAttempts: true, Conns: s.maxConns}
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

// Close closes the pool Open created, waiting for connections in use to be
// released; a pool handed to New is left open.
func (s *Store) Close() {
	if s.ownsPool {
		s.pool.Close()
	}
}

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
		if v := reflect.ValueOf(t); v.Kind() == reflect.Pointer && v.IsNil() {
			// A nil *pgxpool.Tx, say: a transaction never begun.
			return nil, fmt.Errorf("%w: the PostgreSQL store got a nil %T", driver.ErrTxType, tx)
		}
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
	return s.callers(t), nil
}

// inTx runs fn in the caller's transaction, or in one of the store's own that
// commits when fn succeeds.
func (s *Store) inTx(ctx context.Context, tx any, fn func(pgx.Tx) error) error {
	t, err := callerTx(tx)
	if err != nil {
		return err
	}
	if t != nil {
		return fn(s.callers(t))
	}
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// callers returns the caller's transaction t as the store's statements use
// it: with prescient's tables and functions named with the store's schema,
// since the application's connection has its own search_path.
func (s *Store) callers(t pgx.Tx) pgx.Tx {
	if s.schema == "" {
		return t
	}
	return schemaTx{Tx: t, s: s}
}

// ownObjects matches the names of prescient's tables and functions not
// already qualified.
var ownObjects = regexp.MustCompile(`(^|[^."\w])(prescient_(?:jobs|history|catalog|settings|slots|servers|attempts|` +
	`claim|apply|jobs_due|attempt_start|attempts_settle|schedule|cancel|resolve|finish))\b`)

// qualify returns sql with prescient's own tables and functions named with
// the store's schema.
func (s *Store) qualify(sql string) string {
	if q, ok := s.qualified.Load(sql); ok {
		return q.(string)
	}
	// In a replacement template '$' starts a group reference: a schema
	// named "app$v2" must be written as "app$$v2".
	schema := strings.ReplaceAll(pgx.Identifier{s.schema}.Sanitize(), "$", "$$")
	q := ownObjects.ReplaceAllString(sql, "${1}"+schema+".${2}")
	s.qualified.Store(sql, q)
	return q
}

// schemaTx is a caller's transaction whose statements qualify prescient's
// names with the store's schema.
type schemaTx struct {
	pgx.Tx
	s *Store
}

func (t schemaTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, t.s.qualify(sql), args...)
}

func (t schemaTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.Tx.Query(ctx, t.s.qualify(sql), args...)
}

func (t schemaTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.Tx.QueryRow(ctx, t.s.qualify(sql), args...)
}

func (t schemaTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		q.SQL = t.s.qualify(q.SQL)
	}
	return t.Tx.SendBatch(ctx, b)
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
		return fmt.Errorf("save grid: %w", interpretError(ctx, err))
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
			INSERT INTO prescient_catalog (check_name, awaits, entity, updated_at) VALUES ($1, $2, $3, now())
			ON CONFLICT (check_name) DO UPDATE SET awaits = excluded.awaits, entity = excluded.entity, updated_at = excluded.updated_at`,
			e.Check, awaits, e.Entity)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("save catalog: %w", interpretError(ctx, err))
	}
	return nil
}

// CatalogDelete removes the check's catalog entry.
func (s *Store) CatalogDelete(ctx context.Context, check string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM prescient_catalog WHERE check_name = $1`, check)
	if err != nil {
		return false, fmt.Errorf("remove check %s from the catalog: %w", check, interpretError(ctx, err))
	}
	return tag.RowsAffected() > 0, nil
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
