package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// errCheckTxClosed is returned by a checks.Tx used after its ProcessFunc
// returned.
var errCheckTxClosed = errors.New("sqlite: check transaction used after the checks returned")

// errTxRolledBack is returned by a checks.Tx whose transaction SQLite rolled
// back under it (an interrupted write, a full disk): running on would run the
// checks' statements outside any transaction.
var errTxRolledBack = errors.New("sqlite: the checks' transaction was rolled back")

// checkTx is the checks.Tx a ProcessFunc receives, over the savepoint taken
// before the checks run. The checks of a batch may run concurrently or
// outlive their call (a check that timed out), so every call holds mu, and
// close cancels the calls still in flight, closes the result sets left open
// and turns later calls into errCheckTxClosed.
//
// dead is set by the connection's rollback hook: once SQLite has rolled the
// transaction back, every call fails, since a statement run then would commit
// on its own.
type checkTx struct {
	tx   *sql.Tx
	dead *atomic.Bool
	// life is cancelled by close; every call's context follows it.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex
	closed bool
	// open are the result sets (of Query and unscanned QueryRow) not yet
	// closed: they keep the transaction from ending.
	open map[*sql.Rows]struct{}
}

var _ checks.Tx = (*checkTx)(nil)

func newCheckTx(tx *sql.Tx, dead *atomic.Bool) *checkTx {
	life, end := context.WithCancel(context.Background())
	return &checkTx{tx: tx, dead: dead, life: life, end: end, open: make(map[*sql.Rows]struct{})}
}

// acquire locks a for one call and returns the call's context, which close
// also cancels, and the function that lets that context go. The caller
// unlocks a.mu.
func (a *checkTx) acquire(ctx context.Context) (context.Context, context.CancelFunc, error) {
	a.mu.Lock()
	if err := a.usableLocked(); err != nil {
		a.mu.Unlock()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(a.life, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// usableLocked reports why a can no longer be used, if it cannot.
func (a *checkTx) usableLocked() error {
	if a.closed {
		return errCheckTxClosed
	}
	if a.dead.Load() {
		return errTxRolledBack
	}
	return nil
}

// close cancels the calls in flight, waits for them to return, closes the
// result sets left open, and makes every later call fail. A statement
// interrupted this way may make SQLite roll the transaction back: JobsProcess
// then applies the decisions in a fresh one.
func (a *checkTx) close() {
	a.end()
	a.mu.Lock()
	defer a.mu.Unlock()
	for r := range a.open {
		r.Close()
	}
	clear(a.open)
	a.closed = true
}

// Exec runs a statement in the checks' savepoint.
func (a *checkTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer a.mu.Unlock()
	defer release()
	res, err := a.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, a.interpret(err)
	}
	n, err := res.RowsAffected()
	return n, interpretError(err)
}

// QueryRow runs a query and steps to its first row before returning, so that
// a statement's effect (INSERT … RETURNING) does not wait for Scan; Scan
// reports prescient.ErrNotFound when there was no row, and fails once the
// checks have returned.
func (a *checkTx) QueryRow(ctx context.Context, query string, args ...any) checks.Row {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return &checkRow{err: err}
	}
	defer a.mu.Unlock()
	rows, err := a.tx.QueryContext(ctx, query, args...)
	if err != nil {
		release()
		return &checkRow{err: a.interpret(err)}
	}
	if !rows.Next() {
		rows.Close()
		release()
		if err := rows.Err(); err != nil {
			return &checkRow{err: a.interpret(err)}
		}
		return &checkRow{err: prescient.ErrNotFound}
	}
	a.open[rows] = struct{}{}
	return &checkRow{a: a, rows: rows, release: release}
}

// Query runs a query in the checks' savepoint. The rows must be closed (or
// read to the end) before the checks return; close closes them otherwise.
func (a *checkTx) Query(ctx context.Context, query string, args ...any) (checks.Rows, error) {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	rows, err := a.tx.QueryContext(ctx, query, args...)
	if err != nil {
		release()
		return nil, a.interpret(err)
	}
	a.open[rows] = struct{}{}
	return &checkRows{a: a, rows: rows, release: release}, nil
}

// Driver returns the *sql.Tx, positioned in the checks' savepoint. Using it
// directly bypasses the serialisation and the end-of-check guard of the other
// methods: a check that does so must not keep it after returning, and must
// neither commit nor roll it back.
func (a *checkTx) Driver() any { return a.tx }

// interpret translates err, reporting a transaction SQLite rolled back during
// the call as errTxRolledBack alongside the call's own error.
func (a *checkTx) interpret(err error) error {
	err = interpretError(err)
	if a.dead.Load() {
		return errors.Join(err, errTxRolledBack)
	}
	return err
}

// checkRow is QueryRow's result: an error, or a result set on its first row.
type checkRow struct {
	a       *checkTx
	rows    *sql.Rows
	release context.CancelFunc
	err     error
}

func (r *checkRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if _, open := r.a.open[r.rows]; !open {
		if r.a.closed {
			return errCheckTxClosed
		}
		return errors.New("sqlite: row scanned twice")
	}
	defer r.release()
	defer delete(r.a.open, r.rows)
	defer r.rows.Close()
	if err := r.a.usableLocked(); err != nil {
		return err
	}
	return interpretError(r.rows.Scan(dest...))
}

// checkRows is Query's result. Each method holds the adapter's lock, since
// stepping rows uses the connection.
type checkRows struct {
	a       *checkTx
	rows    *sql.Rows
	release context.CancelFunc
	done    bool
	err     error
}

func (r *checkRows) Next() bool {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if r.done {
		return false
	}
	if r.a.usableLocked() == nil && r.rows.Next() {
		return true
	}
	r.closeLocked()
	return false
}

func (r *checkRows) Scan(dest ...any) error {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if r.done {
		if r.err != nil {
			return r.err
		}
		return errors.New("sqlite: scan of closed rows")
	}
	return interpretError(r.rows.Scan(dest...))
}

func (r *checkRows) Err() error {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if r.done {
		return r.err
	}
	return interpretError(r.rows.Err())
}

func (r *checkRows) Close() {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	r.closeLocked()
}

// closeLocked closes the rows with the adapter's lock held, keeping their
// error; rows the adapter closed for returned checks report
// errCheckTxClosed, and rows of a rolled-back transaction errTxRolledBack.
func (r *checkRows) closeLocked() {
	if r.done {
		return
	}
	r.rows.Close()
	r.release()
	r.done = true
	r.err = interpretError(r.rows.Err())
	if err := r.a.usableLocked(); err != nil && (r.err == nil || errors.Is(r.err, context.Canceled)) {
		r.err = err
	}
	if r.a.life.Err() != nil && (r.err == nil || errors.Is(r.err, context.Canceled)) {
		r.err = errCheckTxClosed
	}
	delete(r.a.open, r.rows)
}
