package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	msqlite "modernc.org/sqlite"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// errTxRolledBack reports a transaction SQLite rolled back under the checks
// (an interrupted write, a full disk): running on would run their statements
// outside any transaction, each committing on its own.
var errTxRolledBack = errors.New("sqlite: the transaction was rolled back")

// Savepoint statements; one name serves every check (savepoints do not nest).
const (
	savepointSQL  = `SAVEPOINT prescient_check`
	releaseSQL    = `RELEASE prescient_check`
	rollbackToSQL = `ROLLBACK TO prescient_check`
)

// procTx is a processing transaction: an IMMEDIATE transaction on a
// connection of its own, holding the store's in-process write lock from Begin
// to its end, and SQLite's write lock with it.
type procTx struct {
	conn   *sql.Conn
	tx     *sql.Tx
	unlock func()
	// dead is set by the connection's rollback hook when SQLite rolls the
	// transaction back by itself.
	dead *atomic.Bool
	// open: a savepoint is open; sent: its SAVEPOINT ran (it runs with the
	// check's first statement).
	open, sent bool
	ended      bool
	err        error
}

var _ driver.Tx = (*procTx)(nil)

// Begin takes the store's write lock, waiting as long as ctx lasts (not the
// busy timeout: the engine runs up to Workers transactions at once, each
// holding the lock for its checks, and bounds them by the runtime guard and
// its shutdown; a processor in another process waits up to the busy
// timeout), and begins an IMMEDIATE transaction on a connection whose
// rollback hook tells when SQLite rolls it back.
func (s *Store) Begin(ctx context.Context, _ *driver.BeginParams) (driver.Tx, error) {
	unlock, err := s.lockWrite(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("begin: %w", interpretError(err))
	}
	t := &procTx{conn: conn, dead: new(atomic.Bool)}
	if err := setRollbackHook(conn, func() { t.dead.Store(true) }); err != nil {
		conn.Close()
		unlock()
		return nil, fmt.Errorf("begin: %w", err)
	}
	// The writes other processes wait with go first (see queue).
	if err := s.queue.yield(ctx, yieldMax); err != nil {
		_ = setRollbackHook(conn, nil)
		conn.Close()
		unlock()
		return nil, fmt.Errorf("begin: %w", err)
	}
	leave := s.queue.announce()
	// database/sql rolls a transaction back when its BeginTx context ends;
	// this one ends by Commit or Rollback alone, so that a group cut short by
	// shutdown still commits the checks that finished.
	t.tx, err = conn.BeginTx(context.WithoutCancel(ctx), nil)
	leave(err == nil)
	if err != nil {
		_ = setRollbackHook(conn, nil)
		conn.Close()
		unlock()
		return nil, fmt.Errorf("begin: %w", interpretError(err))
	}
	t.unlock = unlock
	return t, nil
}

// setRollbackHook registers fn as the rollback hook of conn's SQLite
// connection; nil removes it.
func setRollbackHook(conn *sql.Conn, fn func()) error {
	return conn.Raw(func(dc any) error {
		h, ok := dc.(interface {
			RegisterRollbackHook(msqlite.RollbackHookFn)
		})
		if !ok {
			return fmt.Errorf("sqlite: driver connection %T has no rollback hook", dc)
		}
		if fn == nil {
			h.RegisterRollbackHook(nil)
		} else {
			h.RegisterRollbackHook(fn)
		}
		return nil
	})
}

// usable reports why the transaction cannot run statements, if it cannot.
func (t *procTx) usable() error {
	if t.err != nil {
		return t.err
	}
	if t.dead.Load() {
		t.err = errTxRolledBack
		return t.err
	}
	if t.ended {
		return sql.ErrTxDone
	}
	return nil
}

// exec runs one of the store's own statements unless SQLite has rolled the
// transaction back, in which case it would run (and commit) on its own.
func (t *procTx) exec(ctx context.Context, query string, args ...any) error {
	if err := t.usable(); err != nil {
		return err
	}
	_, err := t.tx.ExecContext(ctx, query, args...)
	if err == nil && t.dead.Load() {
		err = errTxRolledBack
	}
	if err != nil {
		t.err = interpretError(err)
		return t.err
	}
	return nil
}

// Claim reads the jobs among p.IDs still due in p.Slot, in id order. The
// transaction holds the write lock, so no other processor holds them, and
// LockWait has nothing to wait for.
func (t *procTx) Claim(ctx context.Context, p *driver.ClaimParams) ([]*checks.Job, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(p.IDs) == 0 {
		return nil, nil
	}
	rows, err := t.tx.QueryContext(ctx, `
		SELECT id, entity, entity_key, check_name, first_check_at, check_count, failure_count,
			last_error, payload, created_at
		FROM prescient_jobs
		WHERE id IN (SELECT value FROM json_each($1)) AND next_check_at = $2
		ORDER BY id`, idsJSON(p.IDs), micros(p.Slot))
	if err != nil {
		return nil, fmt.Errorf("claim: %w", interpretError(err))
	}
	defer rows.Close()
	var jobs []*checks.Job
	slot := p.Slot.UTC()
	for rows.Next() {
		j := &checks.Job{Slot: slot}
		var first, created int64
		var lastErr, payload sql.NullString
		if err := rows.Scan(&j.ID, &j.Entity, &j.Key, &j.Check, &first, &j.CheckCount,
			&j.FailureCount, &lastErr, &payload, &created); err != nil {
			return nil, fmt.Errorf("claim: %w", interpretError(err))
		}
		j.FirstCheckAt = fromMicros(first)
		j.CreatedAt = fromMicros(created)
		j.LastError = lastErr.String
		if payload.Valid {
			j.Payload = json.RawMessage(payload.String)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim: %w", interpretError(err))
	}
	return jobs, nil
}

// Savepoint opens the check's savepoint; it runs before the check's first
// statement, if the check runs one.
func (t *procTx) Savepoint(context.Context) error {
	if t.open {
		return errors.New("sqlite: savepoint already open")
	}
	t.open, t.sent = true, false
	return nil
}

// Release keeps the check's writes.
func (t *procTx) Release(ctx context.Context) error {
	if !t.open {
		return errors.New("sqlite: release without a savepoint")
	}
	sent := t.sent
	t.open, t.sent = false, false
	if !sent {
		return nil
	}
	return t.exec(ctx, releaseSQL)
}

// RollbackTo undoes the check's writes.
func (t *procTx) RollbackTo(ctx context.Context) error {
	if !t.open {
		return errors.New("sqlite: rollback without a savepoint")
	}
	sent := t.sent
	t.open, t.sent = false, false
	if !sent {
		return nil
	}
	if err := t.exec(ctx, rollbackToSQL); err != nil {
		return err
	}
	return t.exec(ctx, releaseSQL)
}

// before opens the check's savepoint ahead of its first statement. A check
// whose context has ended gets its context's error and opens nothing; and
// the savepoint is opened whatever becomes of the check's context meanwhile:
// a savepoint statement that fails breaks the whole transaction, the
// writes of the checks before it included, for what is the check's own
// failure.
func (t *procTx) before(ctx context.Context) error {
	if err := t.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.open && !t.sent {
		t.sent = true
		return t.exec(context.WithoutCancel(ctx), savepointSQL)
	}
	return nil
}

// interpret translates a check statement's error, reporting a transaction
// SQLite rolled back during the call alongside the call's own error.
func (t *procTx) interpret(err error) error {
	err = interpretError(err)
	if t.dead.Load() {
		return errors.Join(err, errTxRolledBack)
	}
	return err
}

// Exec runs a check's statement.
func (t *procTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := t.before(ctx); err != nil {
		return 0, err
	}
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, t.interpret(err)
	}
	if t.dead.Load() {
		return 0, errTxRolledBack
	}
	n, err := res.RowsAffected()
	return n, interpretError(err)
}

// Query runs a check's query.
func (t *procTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	if err := t.before(ctx); err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, t.interpret(err)
	}
	return &liteRows{t: t, rows: rows}, nil
}

// QueryRow runs a query and steps to its first row before returning, so that
// a statement's effect (INSERT … RETURNING) does not wait for Scan; Scan
// reports driver.ErrNotFound when there was no row. Until it is scanned or
// closed, the row keeps the transaction busy.
func (t *procTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	if err := t.before(ctx); err != nil {
		return &liteRow{err: err}
	}
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return &liteRow{err: t.interpret(err)}
	}
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return &liteRow{err: t.interpret(err)}
		}
		return &liteRow{err: driver.ErrNotFound}
	}
	return &liteRow{t: t, rows: rows}
}

// Raw opens a savepoint still pending and returns the *sql.Tx.
func (t *procTx) Raw() any {
	_ = t.before(context.Background()) // a failure breaks t; Err reports it
	return t.tx
}

// Aborted is always false: a failed statement does not abort an SQLite
// transaction (one SQLite rolls back entirely shows in Err).
func (t *procTx) Aborted() bool { return false }

// Err reports that the transaction can no longer commit.
func (t *procTx) Err() error {
	if t.ended && t.err == nil {
		return nil
	}
	return t.usable()
}

// decisionRow is one decision as the apply statements read it from JSON.
type decisionRow struct {
	ID      int64  `json:"id"`
	Outcome string `json:"outcome,omitempty"`
	Next    int64  `json:"next"`
	Checked bool   `json:"checked"`
	Err     string `json:"err"`
	AddUS   int64  `json:"add_us"`
	Reason  string `json:"reason,omitempty"`
	LateUS  int64  `json:"late_us"`
}

// decisionsCTE reads $1, a JSON array of decisionRow, as the table d; $2 is
// the slot, $3 now.
const decisionsCTE = `
	WITH d AS (
		SELECT json_extract(value, '$.id') AS id,
			json_extract(value, '$.outcome') AS outcome,
			json_extract(value, '$.next') AS next,
			json_extract(value, '$.checked') AS checked,
			nullif(json_extract(value, '$.err'), '') AS err,
			json_extract(value, '$.add_us') AS add_us,
			nullif(json_extract(value, '$.reason'), '') AS reason,
			json_extract(value, '$.late_us') AS late_us
		FROM json_each($1)
	)`

// finishSQL copies finished jobs to history; deleteSQL then removes them.
// $4 is the server.
const finishSQL = decisionsCTE + `
	INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, finished_at, finished_by)
	SELECT j.id, j.entity, j.entity_key, j.check_name, d.outcome, j.first_check_at,
		CASE WHEN d.checked THEN $2 ELSE j.last_check_at END,
		j.check_count + d.checked,
		CASE WHEN d.checked THEN 0 ELSE j.failure_count END + (d.err IS NOT NULL),
		j.runtime_us + d.add_us,
		d.late_us,
		CASE WHEN d.err IS NOT NULL THEN d.err WHEN d.reason IS NOT NULL THEN d.reason WHEN d.checked THEN NULL ELSE j.last_error END,
		j.payload, j.created_at, $3, $4
	FROM prescient_jobs j JOIN d ON j.id = d.id`

const deleteSQL = `DELETE FROM prescient_jobs WHERE id IN (SELECT json_extract(value, '$.id') FROM json_each($1))`

// nextSQL keeps jobs pending with a new next check.
const nextSQL = decisionsCTE + `
	UPDATE prescient_jobs AS j SET
		next_check_at = d.next,
		last_check_at = CASE WHEN d.checked THEN $2 ELSE j.last_check_at END,
		check_count = j.check_count + d.checked,
		failure_count = CASE WHEN d.checked THEN 0 ELSE j.failure_count END + (d.err IS NOT NULL),
		last_error = CASE WHEN d.err IS NOT NULL THEN d.err WHEN d.checked THEN NULL ELSE j.last_error END,
		runtime_us = j.runtime_us + d.add_us,
		lateness_us = d.late_us,
		updated_at = $3
	FROM d
	WHERE j.id = d.id`

// Apply applies the decisions with at most three statements (history, delete,
// update), whatever their number.
func (t *procTx) Apply(ctx context.Context, p *driver.ApplyParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if err := t.usable(); err != nil {
		return err
	}
	var fin, next []decisionRow
	for _, d := range p.Decisions {
		r := decisionRow{ID: d.ID, Outcome: string(d.Outcome), Checked: d.Checked, Err: d.Err,
			AddUS: durMicros(d.Runtime), Reason: d.Reason, LateUS: durMicros(d.Lateness)}
		if d.Outcome != "" {
			fin = append(fin, r)
		} else {
			r.Next = micros(d.Next)
			next = append(next, r)
		}
	}
	if len(fin) > 0 {
		b, err := json.Marshal(fin)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, finishSQL, string(b), micros(p.Slot), micros(p.Now), p.Server); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		if err := t.exec(ctx, deleteSQL, string(b)); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
	}
	if len(next) > 0 {
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, nextSQL, string(b), micros(p.Slot), micros(p.Now)); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
	}
	if p.Attempt != 0 {
		if err := t.exec(ctx, `DELETE FROM prescient_attempts WHERE id = $1`, p.Attempt); err != nil {
			return fmt.Errorf("apply: end attempt: %w", err)
		}
	}
	if len(p.Settled) > 0 {
		b, err := json.Marshal(p.Settled)
		if err != nil {
			return err
		}
		if err := t.exec(ctx, attemptsSettleSQL, string(b)); err != nil {
			return fmt.Errorf("apply: settle attempts: %w", err)
		}
		if err := t.exec(ctx, attemptsEmptySQL); err != nil {
			return fmt.Errorf("apply: settle attempts: %w", err)
		}
	}
	return nil
}

// Commit commits and releases the connection and the write lock.
func (t *procTx) Commit(ctx context.Context) error {
	if err := t.usable(); err != nil {
		t.end()
		return err
	}
	err := t.tx.Commit()
	if err == nil && t.dead.Load() {
		err = errTxRolledBack
	}
	if err != nil {
		t.err = fmt.Errorf("commit: %w", interpretError(err))
	}
	t.end()
	return t.err
}

// Rollback rolls back (a no-op once ended) and releases the connection and
// the write lock.
func (t *procTx) Rollback(context.Context) error {
	if t.ended {
		return nil
	}
	err := t.tx.Rollback()
	t.end()
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		return interpretError(err)
	}
	return nil
}

// end releases what Begin took; the hook must not outlive the transaction on
// a pooled connection.
func (t *procTx) end() {
	if t.ended {
		return
	}
	t.ended = true
	_ = t.tx.Rollback() // after a commit, ErrTxDone
	_ = setRollbackHook(t.conn, nil)
	t.conn.Close()
	t.unlock()
}

// liteRows is a check's query result.
type liteRows struct {
	t    *procTx
	rows *sql.Rows
	done bool
	err  error
}

func (r *liteRows) Next() bool {
	if r.done {
		return false
	}
	if r.t.usable() == nil && r.rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *liteRows) Scan(dest ...any) error {
	if r.done {
		if r.err != nil {
			return r.err
		}
		return errors.New("sqlite: scan of closed rows")
	}
	return interpretError(r.rows.Scan(dest...))
}

func (r *liteRows) Err() error {
	if r.done {
		return r.err
	}
	return interpretError(r.rows.Err())
}

func (r *liteRows) Close() {
	if r.done {
		return
	}
	r.done = true
	r.rows.Close()
	r.err = interpretError(r.rows.Err())
	if err := r.t.usable(); err != nil && (r.err == nil || errors.Is(r.err, context.Canceled)) {
		r.err = err
	}
}

// liteRow is QueryRow's result: an error, or a result set on its first row.
type liteRow struct {
	t    *procTx
	rows *sql.Rows
	err  error
}

func (r *liteRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if r.rows == nil {
		return errors.New("sqlite: row scanned twice")
	}
	defer r.Close()
	if err := r.t.usable(); err != nil {
		return err
	}
	return interpretError(r.rows.Scan(dest...))
}

func (r *liteRow) Close() {
	if r.rows != nil {
		r.rows.Close()
		r.rows = nil
	}
}
