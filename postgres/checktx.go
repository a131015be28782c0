package postgres

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// errCheckTxClosed is returned by a checks.Tx used after its ProcessFunc
// returned.
var errCheckTxClosed = errors.New("postgres: check transaction used after the checks returned")

// checkTx is the checks.Tx a ProcessFunc receives, over the savepoint taken
// before the checks run. A pgx connection serves one caller at a time, and the
// checks of a batch may run concurrently or outlive their call (a check that
// timed out), so every call holds mu, and close cancels calls still in
// flight and turns later ones into errCheckTxClosed.
type checkTx struct {
	tx pgx.Tx
	// life is cancelled by close; every call's context follows it.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex
	closed bool
	// open is the result set a check is reading, if any.
	open *checkRows
}

var _ checks.Tx = (*checkTx)(nil)

func newCheckTx(tx pgx.Tx) *checkTx {
	life, end := context.WithCancel(context.Background())
	return &checkTx{tx: tx, life: life, end: end}
}

// acquire locks a for one call and returns the call's context, which close
// also cancels, and the function that lets that context go. The caller
// unlocks a.mu.
func (a *checkTx) acquire(ctx context.Context) (context.Context, context.CancelFunc, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, nil, errCheckTxClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(a.life, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// close cancels the calls in flight, waits for them to return, closes a
// result set left open, and makes every later call fail. A call cancelled
// this way has its statement cancelled on the server (Open installs
// pgconn.CancelRequestContextWatcherHandler): the connection survives but the
// transaction is aborted, so kept writes fail to settle and the jobs stay
// due, while discarded ones roll back to the savepoint. Only a pool passed to
// New with pgx's default closes the connection instead.
func (a *checkTx) close() {
	a.end()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open != nil {
		a.open.closeLocked()
	}
	a.closed = true
}

// Exec runs a statement in the checks' savepoint.
func (a *checkTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer a.mu.Unlock()
	defer release()
	tag, err := a.tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, interpretError(err)
	}
	return tag.RowsAffected(), nil
}

// QueryRow runs a query and keeps its first row; Scan reports
// prescient.ErrNotFound when there was none. The row is read before QueryRow
// returns, so the connection is free again, but Scan still needs the
// connection's type map and fails once the checks have returned.
func (a *checkTx) QueryRow(ctx context.Context, sql string, args ...any) checks.Row {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return &checkRow{err: err}
	}
	defer a.mu.Unlock()
	defer release()
	rows, err := a.tx.Query(ctx, sql, args...)
	if err != nil {
		return &checkRow{err: interpretError(err)}
	}
	defer rows.Close()
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return &checkRow{err: interpretError(err)}
		}
		return &checkRow{err: prescient.ErrNotFound}
	}
	r := &checkRow{a: a, fields: append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)}
	for _, v := range rows.RawValues() {
		if v != nil {
			v = append([]byte{}, v...)
		}
		r.values = append(r.values, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return &checkRow{err: interpretError(err)}
	}
	return r
}

// Query runs a query in the checks' savepoint. Until the rows are closed (or
// read to the end) the connection is busy and other calls fail.
func (a *checkTx) Query(ctx context.Context, sql string, args ...any) (checks.Rows, error) {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	rows, err := a.tx.Query(ctx, sql, args...)
	if err != nil {
		release()
		return nil, interpretError(err)
	}
	r := &checkRows{a: a, rows: rows, release: release}
	a.open = r
	return r, nil
}

// Aborted reports whether a statement failed in the checks' savepoint and
// left it aborted: PostgreSQL then refuses every later statement, so writes
// made through it can never commit. It asks the connection (no round trip).
// The engine calls it after a check returns without error, and counts such a
// check as failed.
func (a *checkTx) Aborted() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.tx.Conn().PgConn().TxStatus() != 'E' {
		return nil
	}
	return errors.New("a statement failed in the check's transaction and PostgreSQL aborted it, but the check went on and returned no error; " +
		"return the statement's error, or handle it in a savepoint of the check's own (job.Tx.Driver())")
}

// Driver returns the savepoint's pgx.Tx. Using it directly bypasses the
// serialisation and the end-of-check guard of the other methods: a check that
// does so must not share it between goroutines or keep it after returning.
func (a *checkTx) Driver() any { return a.tx }

// checkRow is QueryRow's result: an error, or one row's raw values.
type checkRow struct {
	a      *checkTx
	fields []pgconn.FieldDescription
	values [][]byte
	err    error
}

func (r *checkRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if r.a.closed {
		return errCheckTxClosed
	}
	return interpretError(pgx.ScanRow(r.a.tx.Conn().TypeMap(), r.fields, r.values, dest...))
}

// checkRows is Query's result. Each method holds the adapter's lock, since
// reading rows uses the connection.
type checkRows struct {
	a       *checkTx
	rows    pgx.Rows
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
	if r.rows.Next() {
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
		return errors.New("postgres: scan of closed rows")
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
// error; rows the adapter closes for a returned check report errCheckTxClosed.
func (r *checkRows) closeLocked() {
	if r.done {
		return
	}
	r.rows.Close()
	r.release()
	r.done = true
	r.err = interpretError(r.rows.Err())
	if r.a.life.Err() != nil && (r.err == nil || errors.Is(r.err, context.Canceled)) {
		r.err = errCheckTxClosed
	}
	if r.a.open == r {
		r.a.open = nil
	}
}
