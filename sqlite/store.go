package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	// The driver registers itself as "sqlite".
	_ "modernc.org/sqlite"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/slots"
)

// BusyTimeoutDefault is how long a write waits for the database's write lock
// when Opts.BusyTimeout is 0: twice guards.RuntimeDefault, so that a write
// outlasts a check that runs as long as the default runtime guard lets it
// (the check holds the lock meanwhile), with room for the rest of its group.
const BusyTimeoutDefault = 2 * guards.RuntimeDefault

// Opts are the store's optional settings. A nil *Opts means the zero Opts.
type Opts struct {
	// BusyTimeout is how long a statement or transaction waits for the write
	// lock held by another connection or process before it fails with
	// "database is locked". 0 means BusyTimeoutDefault; it is rounded down to
	// milliseconds and must not be negative. Keep it above guards.runtime
	// plus the engine's GroupDuration, which bound how long a group of checks
	// holds the lock (see the package documentation).
	//
	// A processing transaction (Begin) is the exception: it waits for the
	// other writes of this Store for as long as its context lasts. Those
	// writes go first: a heartbeat, the record of a group about to run or an
	// application's Schedule waits for the group that holds the lock now,
	// never for the groups queued behind it, so that on a slot of many slow
	// checks it does not time out (and the server does not report itself
	// not ready).
	BusyTimeout time.Duration
}

// Store is prescient's SQLite store. It is safe for concurrent use, and
// several Stores, in one process or in several processes of one host, may
// share a file.
type Store struct {
	db   *sql.DB
	path string
	busy time.Duration
	// pruneBatch overrides pruneBatchDefault (tests).
	pruneBatch int
	// wlock serialises the write transactions this Store begins itself, so
	// that they queue in Go rather than poll SQLite's busy handler against
	// each other; other processes still meet SQLite's lock. A buffered
	// channel, so that waiting can give up with the context or the busy
	// timeout (a processing transaction waits for as long as its context
	// lasts).
	wlock chan struct{}
	// writers counts the writes other than processing transactions that are
	// waiting for wlock: processing transactions let them go first.
	writers atomic.Int32
	// queue lets the writes of other processes go before this Store's
	// processing transactions (see queue).
	queue *queue
}

var _ driver.Driver = (*Store)(nil)

// Open opens the SQLite database file at path, creating it and its parent
// directory when missing, and returns a store that owns its connections:
// Close closes them. Every connection runs in WAL mode with
// synchronous=NORMAL, foreign keys on and the busy timeout of opts, and begins
// transactions with BEGIN IMMEDIATE. It does not migrate; call Migrate.
//
// path is a file name, not a URI: it must not be empty, ":memory:" (an
// in-memory database is private to one connection) or contain '?'.
func Open(ctx context.Context, path string, opts *Opts) (*Store, error) {
	var o Opts
	if opts != nil {
		o = *opts
	}
	switch {
	case path == "":
		return nil, errors.New("open sqlite: the database path is empty")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("open sqlite: %q: want the path of a database file, not a memory database or URI", path)
	case strings.Contains(path, "?"):
		return nil, fmt.Errorf("open sqlite: %q: the path must not contain '?'", path)
	case o.BusyTimeout < 0:
		return nil, fmt.Errorf("open sqlite: busy timeout %s must not be negative", o.BusyTimeout)
	}
	busy := o.BusyTimeout
	if busy == 0 {
		busy = BusyTimeoutDefault
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("open sqlite %s: is a directory, %w: name a file (such as %s)", path, ErrNotAFile, filepath.Join(path, "prescient.db"))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, ErrNotWritable, err)
	}
	// A new file is its owner's alone: it holds the applications' keys,
	// payloads and errors. SQLite gives its -wal and -shm files the
	// database file's mode, as the queue file does; a file that exists
	// keeps the mode it has.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	// The driver runs busy_timeout first and the others in this order, on
	// every new connection.
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, interpretError(err))
	}
	// Readers run beside the writer in WAL mode; keep a few connections warm.
	db.SetMaxIdleConns(8)
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		db.Close()
		if werr := writable(path); werr != nil { // "unable to open database file" says neither what nor why
			return nil, fmt.Errorf("open sqlite %s: %w", path, werr)
		}
		return nil, fmt.Errorf("open sqlite %s: %w", path, interpretError(err))
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: journal mode is %q, want wal (is the file system local?)", path, mode)
	}
	return &Store{db: db, path: path, busy: busy, wlock: make(chan struct{}, 1), queue: newQueue(path)}, nil
}

// ErrNotAFile is the error Open returns (wrapped, with the path) for a path
// that names a directory, or a file that is not a SQLite database.
var ErrNotAFile = errors.New("not a SQLite database file")

// ErrNotWritable is the error Open and Migrate return (wrapped, with the
// path and the operating system's reason) when SQLite fails and this
// process cannot write the database file or create files beside it, as
// SQLite must for the write-ahead log (path-wal) and its index (path-shm).
// A file that is only read may be read-only: that is checked only once
// SQLite has failed.
var ErrNotWritable = errors.New("not writable by this process")

// writable checks that the database file, if it exists, opens for writing,
// and that its directory takes new files. Open and Migrate ask once SQLite
// has failed, whose answer ("unable to open database file", "attempt to
// write a readonly database") names neither the file nor the reason.
func writable(path string) error {
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNotWritable, err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".prescient-probe-*")
	if err != nil {
		return fmt.Errorf("the directory %s is %w (SQLite creates the database, %s-wal and %s-shm there): %w",
			dir, ErrNotWritable, filepath.Base(path), filepath.Base(path), err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// Driver returns the store itself: it is its own driver.
func (s *Store) Driver() driver.Driver { return s }

// Features reports a store for one host, with no cap on the checks of one
// processing transaction (SQLite's savepoints cost nothing of the kind
// PostgreSQL's subtransactions do).
func (s *Store) Features() driver.Features { return driver.Features{} }

// UnwrapTx returns tx as the store's methods take it; it ties the store to
// *sql.Tx for prescient.TypedClient.
func (s *Store) UnwrapTx(tx *sql.Tx) any { return tx }

// DB returns the store's database handle, for applications that want to
// begin a *sql.Tx to pass to the methods that take one. Its transactions begin
// with BEGIN IMMEDIATE: they hold the write lock from the start, so keep them
// short.
func (s *Store) DB() *sql.DB { return s.db }

// Path returns the database file's path as given to Open.
func (s *Store) Path() string { return s.path }

// Close closes the store's connections.
func (s *Store) Close() {
	s.db.Close()
	s.queue.close()
}

// lockWrite takes the in-process write lock, waiting at most limit (the busy
// timeout: SQLite's own wait would give up then too), or as long as ctx
// lasts when limit is 0 (a processing transaction), and returns its release.
// A processing transaction lets the other writes waiting for the lock go
// first (see Opts.BusyTimeout).
func (s *Store) lockWrite(ctx context.Context, limit time.Duration) (func(), error) {
	release := func() { <-s.wlock }
	if limit == 0 {
		for {
			select {
			case s.wlock <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if s.writers.Load() == 0 {
				return release, nil
			}
			// Hand the lock on: to the next in line, which is a write or a
			// processing transaction that hands it on in turn, until a write
			// has it. Then queue again.
			release()
			runtime.Gosched()
		}
	}
	select {
	case s.wlock <- struct{}{}:
		return release, nil
	default:
	}
	s.writers.Add(1)
	defer s.writers.Add(-1)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case s.wlock <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("sqlite: database is locked: waited %s for another write of this process", limit)
	}
}

// begin takes the in-process write lock and begins an IMMEDIATE
// transaction, announcing in the write queue that it waits (see queue). The returned function rolls back (a no-op after a
// commit) and releases the lock.
func (s *Store) begin(ctx context.Context) (*sql.Tx, func(), error) {
	unlock, err := s.lockWrite(ctx, s.busy)
	if err != nil {
		return nil, nil, err
	}
	leave := s.queue.announce()
	tx, err := s.db.BeginTx(ctx, nil)
	leave(err == nil)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return tx, func() { _ = tx.Rollback(); unlock() }, nil
}

// callerTx returns the caller's transaction, nil when tx is nil, or an error
// wrapping driver.ErrTxType naming the type received.
func callerTx(tx any) (*sql.Tx, error) {
	switch t := tx.(type) {
	case nil:
		return nil, nil
	case *sql.Tx:
		if t == nil {
			return nil, fmt.Errorf("%w: the SQLite store got a nil *sql.Tx", driver.ErrTxType)
		}
		return t, nil
	default:
		return nil, fmt.Errorf("%w: the SQLite store takes a *sql.Tx, got %T", driver.ErrTxType, tx)
	}
}

// inTx runs fn in the caller's transaction, or in an IMMEDIATE one of the
// store's own that commits when fn succeeds.
func (s *Store) inTx(ctx context.Context, tx any, fn func(*sql.Tx) error) error {
	t, err := callerTx(tx)
	if err != nil {
		return err
	}
	if t != nil {
		return fn(t)
	}
	t, end, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	if err := fn(t); err != nil {
		return err
	}
	return t.Commit()
}

// WriteTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it
// when fn returns nil; otherwise it rolls back and returns fn's error. The
// transaction waits its turn with this Store's own writes, and a server's
// groups of checks in other processes that open the file let it go first,
// as they do the Store's own writes (each wait at most the busy timeout). Begin an application's transaction here
// rather than on DB() when it writes beside a running server, for example to
// schedule a check (Client.ScheduleTx) in the transaction that places the
// order: one begun on DB() waits in SQLite's busy handler alone, which
// polls, and may wait for the server's whole run of groups of checks
// instead of the group running now. fn must not write through the Store
// outside tx: that write would wait for tx's own turn.
func (s *Store) WriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, end, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: begin a write transaction: %w", interpretError(err))
	}
	defer end()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit a write transaction: %w", interpretError(err))
	}
	return nil
}

// GridSave records the slot grid in prescient_settings, replacing any grid
// saved before. The grid must be valid. The SQLite store has no SQL functions
// that round; the row is kept for parity with PostgreSQL and for tools.
func (s *Store) GridSave(ctx context.Context, g slots.Grid) error {
	if err := g.Validate(); err != nil {
		return fmt.Errorf("save grid: %w", err)
	}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO prescient_settings (id, resolution_us, offset_us) VALUES (1, $1, $2)
			ON CONFLICT (id) DO UPDATE SET resolution_us = excluded.resolution_us, offset_us = excluded.offset_us`,
			g.Resolution.Microseconds(), g.Offset.Microseconds())
		return err
	})
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
	// The catalog's updated_at is informational, not an engine decision, so
	// the wall clock will do.
	now := micros(time.Now())
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		for _, e := range entries {
			awaits := e.Awaits
			if awaits == nil {
				awaits = []string{}
			}
			b, err := json.Marshal(awaits)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO prescient_catalog (check_name, awaits, entity, updated_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (check_name) DO UPDATE SET awaits = excluded.awaits, entity = excluded.entity, updated_at = excluded.updated_at`,
				e.Check, string(b), e.Entity, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save catalog: %w", interpretError(err))
	}
	return nil
}

// CatalogDelete removes the check's catalog entry.
func (s *Store) CatalogDelete(ctx context.Context, check string) (bool, error) {
	var n int64
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM prescient_catalog WHERE check_name = $1`, check)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("remove check %s from the catalog: %w", check, interpretError(err))
	}
	return n > 0, nil
}

// micros converts a time to the microseconds since the Unix epoch stored in
// time columns, truncating (towards the past) as PostgreSQL's timestamptz
// does through pgx.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros converts a time column to a UTC time.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// nullMicros returns nil for the zero time, so that it is stored as NULL.
func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

// fromNullMicros converts a nullable time column; NULL is the zero time.
func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// durMicros converts a duration to the microseconds stored in _us columns.
func durMicros(d time.Duration) int64 { return d.Microseconds() }

// duration converts microseconds from a _us column to a duration.
func duration(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// nullText returns nil for an empty payload, so that it is stored as NULL.
func nullText(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// idsJSON encodes ids as a JSON array for json_each.
func idsJSON(ids []int64) string {
	b, _ := json.Marshal(ids)
	return string(b)
}
