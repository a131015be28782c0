package prescient

import (
	"context"
	"errors"
	"sync"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// errCheckTxClosed is returned by a checks.Tx used after its check returned.
var errCheckTxClosed = errors.New("prescient: check transaction used after the check returned")

// checkTx is the checks.Tx one check (or one call of a batch check) gets,
// over its group's transaction. The transaction runs one statement at a time
// while a batch check may share checks.Tx between goroutines, so every call
// holds mu. And a check may outlive its call (the runtime guard abandons a
// check that overruns), so close cancels the calls still running, closes the
// results left open and turns later calls into errCheckTxClosed: nothing an
// abandoned check does can reach the next check's savepoint.
type checkTx struct {
	tx driver.Tx
	// own is the check's own context, which ends when the check does: calls
	// made with it need nothing more.
	own context.Context
	// life is cancelled by close; the context of every other call follows it.
	life context.Context
	end  context.CancelFunc

	mu     sync.Mutex
	closed bool
	// open are the results not yet closed, with the release of their call's
	// context (a result set needs its context until it is closed).
	open map[interface{ Close() }]context.CancelFunc
}

var _ checks.Tx = (*checkTx)(nil)

// newCheckTx returns the checks.Tx of a check whose own context is own: the
// engine cancels own when the check ends, before close.
func newCheckTx(tx driver.Tx, own context.Context) *checkTx {
	life, end := context.WithCancel(context.Background())
	return &checkTx{tx: tx, own: own, life: life, end: end}
}

func noRelease() {}

// acquire locks a for one call and returns the call's context, which ends by
// close at the latest, and the function that lets it go. The caller unlocks
// a.mu. The check's own context already ends with the check; any other (a
// goroutine's context.Background(), say) is tied to close, at the price of a
// context per call.
func (a *checkTx) acquire(ctx context.Context) (context.Context, context.CancelFunc, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, nil, errCheckTxClosed
	}
	if ctx == a.own {
		return ctx, noRelease, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(a.life, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// keep records an open result and the release of its call's context.
func (a *checkTx) keep(r interface{ Close() }, release context.CancelFunc) {
	if a.open == nil {
		a.open = make(map[interface{ Close() }]context.CancelFunc)
	}
	a.open[r] = release
}

// drop closes an open result, if it is still open. a.mu is held.
func (a *checkTx) drop(r interface{ Close() }) {
	if release, ok := a.open[r]; ok {
		delete(a.open, r)
		r.Close()
		release()
	}
}

// close cancels the calls in flight, waits for them to return, closes the
// results left open, and makes every later call fail. A statement cancelled
// this way fails (PostgreSQL cancels it on the server; the savepoint is then
// aborted and rolled back); on SQLite it may take the whole transaction with
// it, which the transaction's Err reports.
func (a *checkTx) close() {
	a.end()
	a.mu.Lock()
	defer a.mu.Unlock()
	for r := range a.open {
		a.drop(r)
	}
	a.closed = true
}

// Exec runs a statement in the check's savepoint.
func (a *checkTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer a.mu.Unlock()
	defer release()
	return a.tx.Exec(ctx, sql, args...)
}

// QueryRow runs a query expected to return at most one row; Scan reports
// ErrNotFound when there was none.
func (a *checkTx) QueryRow(ctx context.Context, sql string, args ...any) checks.Row {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	defer a.mu.Unlock()
	r := a.tx.QueryRow(ctx, sql, args...)
	a.keep(r, release)
	return &checkRow{a: a, r: r}
}

// Query runs a query. Until the rows are closed (or read to the end) the
// transaction is busy and other calls wait.
func (a *checkTx) Query(ctx context.Context, sql string, args ...any) (checks.Rows, error) {
	ctx, release, err := a.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	rows, err := a.tx.Query(ctx, sql, args...)
	if err != nil {
		release()
		return nil, err
	}
	a.keep(rows, release)
	return &checkRows{a: a, rows: rows}, nil
}

// Driver returns the store's own transaction (a pgx.Tx, a *sql.Tx). Using it
// bypasses the serialisation and the end-of-check guard of the other
// methods: a check that does so must not share it between goroutines, keep it
// after returning, or commit or roll it back.
func (a *checkTx) Driver() any {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	return a.tx.Raw()
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// checkRow is QueryRow's result; scanning it closes it.
type checkRow struct {
	a *checkTx
	r driver.Row
}

func (r *checkRow) Scan(dest ...any) error {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if _, open := r.a.open[r.r]; !open {
		if r.a.closed {
			return errCheckTxClosed
		}
		return errors.New("prescient: row scanned twice")
	}
	defer r.a.drop(r.r)
	return r.r.Scan(dest...)
}

// checkRows is Query's result; each method holds the lock, since reading
// rows uses the transaction's connection.
type checkRows struct {
	a    *checkTx
	rows driver.Rows
}

func (r *checkRows) Next() bool {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if _, open := r.a.open[r.rows]; !open {
		return false
	}
	if r.rows.Next() {
		return true
	}
	r.a.drop(r.rows)
	return false
}

// ColumnOIDs passes on the store's rows' column types (PostgreSQL), nil
// where the store does not say them.
func (r *checkRows) ColumnOIDs() []uint32 {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if typed, ok := r.rows.(interface{ ColumnOIDs() []uint32 }); ok {
		return typed.ColumnOIDs()
	}
	return nil
}

func (r *checkRows) Scan(dest ...any) error {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if _, open := r.a.open[r.rows]; !open && r.a.closed {
		return errCheckTxClosed
	}
	return r.rows.Scan(dest...)
}

func (r *checkRows) Err() error {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	err := r.rows.Err()
	if r.a.closed && (err == nil || errors.Is(err, context.Canceled)) {
		return errCheckTxClosed
	}
	return err
}

func (r *checkRows) Close() {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	r.a.drop(r.rows)
}
