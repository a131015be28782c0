package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// The engine's own statements on the hot path (the due list, the claim, the
// decisions) are SQL functions installed by the migrations, each with its
// plan pinned by its shape and its planner settings: planned from the
// statistics, which describe the empty table until autovacuum comes by after
// a burst of scheduling, they walked or scanned the whole slot for every
// page, group and batch. The checks' own statements keep pgx's defaults.

// Savepoint statements. One name serves every check: savepoints do not nest,
// each ends before the next begins.
const (
	savepointSQL  = `SAVEPOINT prescient_check`
	releaseSQL    = `RELEASE SAVEPOINT prescient_check`
	rollbackToSQL = `ROLLBACK TO SAVEPOINT prescient_check`
)

// procTx is a processing transaction on one pool connection.
//
// The savepoint statements around each check cost a round trip each when sent
// on their own, as many as the check's own statements. So they wait in
// pending and go with the check's next statement, in one pgx batch; a
// savepoint is opened only when its check runs a statement, and the RELEASE
// of the last one is left to COMMIT. A check that looks one row up and writes
// one therefore costs two round trips, savepoint included.
type procTx struct {
	tx pgx.Tx
	// pending are savepoint statements not sent yet, in order.
	pending []string
	// open: a savepoint is open (Savepoint was called and not yet ended);
	// sent: its SAVEPOINT has gone to the server.
	open, sent bool
	// err is why the transaction can no longer commit, once it cannot.
	err error
}

var _ driver.Tx = (*procTx)(nil)

// Begin starts a processing transaction on a pool connection, waiting for
// one as long as ctx lasts.
func (s *Store) Begin(ctx context.Context) (driver.Tx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", interpretError(ctx, err))
	}
	return &procTx{tx: tx}, nil
}

// claimSQL locks the jobs among $1 still due in $2 with FOR UPDATE, for the
// claim that waits (LockWait); the claim that skips runs prescient_claim,
// whose plan is pinned (see its migration). Both reach the rows by primary
// key only: the slot test is written so that no index can serve it. The
// claim that waits locks in the order of every other statement that waits
// for several jobs' locks (see lockOrder), so that it cannot deadlock with
// an application's schedule or cancel; Claim then returns the jobs by id.
var claimSQL = `
	SELECT id, entity, entity_key, check_name, first_check_at, check_count, failure_count,
		last_error, payload, created_at
	FROM prescient_jobs j
	WHERE id = ANY($1) AND (next_check_at = $2) IS TRUE
	ORDER BY ` + lockOrder("j") + `
	FOR UPDATE`

// Claim locks the jobs with FOR UPDATE SKIP LOCKED, or FOR UPDATE under a
// lock_timeout of p.LockWait (lock_not_available becomes ErrLockTimeout;
// the transaction is then aborted and must be rolled back).
func (t *procTx) Claim(ctx context.Context, p *driver.ClaimParams) ([]*checks.Job, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(p.IDs) == 0 {
		return nil, nil
	}
	q := `SELECT * FROM prescient_claim($1, $2)`
	if p.LockWait > 0 {
		q = claimSQL
		if _, err := t.tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprint(max(p.LockWait.Milliseconds(), 1))); err != nil {
			return nil, t.fail(fmt.Errorf("claim: %w", interpretError(ctx, err)))
		}
	}
	rows, err := t.tx.Query(ctx, q, p.IDs, p.Slot)
	if err != nil {
		return nil, t.claimErr(ctx, err)
	}
	slot := p.Slot.UTC()
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*checks.Job, error) {
		j := &checks.Job{Slot: slot}
		var lastErr *string
		var payload []byte
		err := row.Scan(&j.ID, &j.Entity, &j.Key, &j.Check, &j.FirstCheckAt, &j.CheckCount,
			&j.FailureCount, &lastErr, &payload, &j.CreatedAt)
		j.FirstCheckAt = j.FirstCheckAt.UTC()
		j.CreatedAt = j.CreatedAt.UTC()
		if lastErr != nil {
			j.LastError = *lastErr
		}
		if payload != nil {
			j.Payload = payload
		}
		return j, err
	})
	if err != nil {
		return nil, t.claimErr(ctx, err)
	}
	slices.SortFunc(jobs, func(a, b *checks.Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

func (t *procTx) claimErr(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" /* lock_not_available */ {
		t.err = driver.ErrLockTimeout
		return fmt.Errorf("claim: %w", driver.ErrLockTimeout)
	}
	return t.fail(fmt.Errorf("claim: %w", interpretError(ctx, err)))
}

// Savepoint opens the check's savepoint; it is sent with the check's first
// statement, if the check runs one.
func (t *procTx) Savepoint(context.Context) error {
	if t.open {
		return errors.New("postgres: savepoint already open")
	}
	t.open, t.sent = true, false
	return nil
}

// Release keeps the check's writes.
func (t *procTx) Release(context.Context) error {
	if !t.open {
		return errors.New("postgres: release without a savepoint")
	}
	if t.sent {
		t.pending = append(t.pending, releaseSQL)
	}
	t.open, t.sent = false, false
	return nil
}

// RollbackTo undoes the check's writes, and revives a savepoint a failed or
// cancelled statement aborted.
func (t *procTx) RollbackTo(context.Context) error {
	if !t.open {
		return errors.New("postgres: rollback without a savepoint")
	}
	if t.sent {
		t.pending = append(t.pending, rollbackToSQL, releaseSQL)
	}
	t.open, t.sent = false, false
	return nil
}

// control returns the savepoint statements the next statement must follow,
// and counts the check's savepoint as sent.
func (t *procTx) control() []string {
	ctl := t.pending
	t.pending = nil
	if t.open && !t.sent {
		ctl = append(ctl, savepointSQL)
		t.sent = true
	}
	return ctl
}

// controlTimeout bounds the savepoint statements sent on their own: they run
// whatever becomes of the check's context, but not forever.
const controlTimeout = 10 * time.Second

// knownKey is the key, in a connection's pgconn.PgConn.CustomData, of the
// statements of checks that ran on it without an error; knownMax bounds how
// many it keeps (pgx's statement cache holds 512 by default), so that checks
// whose SQL text varies cannot grow it without end: it starts again empty.
const (
	knownKey = "prescient.check_statements"
	knownMax = 512
)

// known reports whether sql ran on the transaction's connection before, so
// that it parses there and pgx has prepared it.
func (t *procTx) known(sql string) bool {
	m, _ := t.tx.Conn().PgConn().CustomData()[knownKey].(map[string]struct{})
	_, ok := m[sql]
	return ok
}

// learn records that sql ran on the transaction's connection.
func (t *procTx) learn(sql string) {
	data := t.tx.Conn().PgConn().CustomData()
	m, _ := data[knownKey].(map[string]struct{})
	if m == nil || len(m) >= knownMax {
		m = make(map[string]struct{})
		data[knownKey] = m
	}
	m[sql] = struct{}{}
}

// flush sends what control returns, on its own, in one round trip.
func (t *procTx) flush(ctx context.Context, ctl []string) error {
	if len(ctl) == 0 {
		return nil
	}
	if _, err := t.tx.Exec(ctx, strings.Join(ctl, "; "), pgx.QueryExecModeSimpleProtocol); err != nil {
		return t.fail(fmt.Errorf("savepoint: %w", interpretError(ctx, err)))
	}
	return nil
}

// usable reports why the transaction cannot run statements, if it cannot.
func (t *procTx) usable() error {
	if t.err != nil {
		return t.err
	}
	if t.tx.Conn().IsClosed() {
		t.err = errConnLost
		return t.err
	}
	return nil
}

var errConnLost = errors.New("postgres: the transaction's connection was lost")

// fail records that the transaction can no longer commit, and returns err.
func (t *procTx) fail(err error) error {
	if t.err == nil {
		t.err = err
	}
	return err
}

// send runs one statement of a check after the pending savepoint
// statements, in one batch, and returns the batch with the statement's result
// next to read. A savepoint statement that fails breaks the transaction.
//
// The savepoint statements go first, on their own, when the statement has
// not run on this connection before (see learn): pgx prepares a batch's new
// statements before it runs any of them, so a statement the server cannot
// parse (a missing column, a typo) would fail before the SAVEPOINT ran,
// aborting the transaction with no savepoint to return to: every check of the
// group would lose its writes for one check's mistake. So does a ROLLBACK TO:
// until it has run, the transaction is aborted, and the server refuses to
// even parse the batch's other statements. A check whose context has ended
// gets its context's error, and its savepoint statements wait: they must not
// fail for it.
func (t *procTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if slices.Contains(t.pending, rollbackToSQL) || !t.known(sql) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlTimeout)
		err := t.flush(fctx, t.control())
		cancel()
		if err != nil {
			return nil, err
		}
	}
	b := &pgx.Batch{}
	ctl := t.control()
	for _, c := range ctl {
		b.Queue(c)
	}
	b.Queue(sql, args...)
	br := t.tx.SendBatch(ctx, b)
	for range ctl {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, t.fail(fmt.Errorf("savepoint: %w", interpretError(ctx, err)))
		}
	}
	return br, nil
}

// Exec runs a check's statement.
func (t *procTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if err := t.usable(); err != nil {
		return 0, err
	}
	if len(t.pending) == 0 && (!t.open || t.sent) {
		tag, err := t.tx.Exec(ctx, sql, args...)
		if err == nil {
			t.learn(sql)
		}
		return tag.RowsAffected(), interpretError(ctx, err)
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		t.learn(sql)
	}
	return tag.RowsAffected(), interpretError(ctx, err)
}

// Query runs a check's query; until its rows are closed (or read to the
// end) the connection is busy.
func (t *procTx) Query(ctx context.Context, sql string, args ...any) (driver.Rows, error) {
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(t.pending) == 0 && (!t.open || t.sent) {
		rows, err := t.tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, interpretError(ctx, err)
		}
		t.learn(sql) // it parsed: pgx prepares a statement before it runs it
		return &pgRows{ctx: ctx, rows: rows}, nil
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, interpretError(ctx, err)
	}
	t.learn(sql)
	return &pgRows{ctx: ctx, rows: rows, batch: br}, nil
}

// QueryRow runs a query and keeps its first row's raw values, so that the
// connection is free again when it returns; Scan decodes them with the
// connection's type map, and reports driver.ErrNotFound when there was no
// row.
func (t *procTx) QueryRow(ctx context.Context, sql string, args ...any) driver.Row {
	rs, err := t.Query(ctx, sql, args...)
	if err != nil {
		return &pgRow{err: err}
	}
	r := rs.(*pgRows)
	defer r.Close()
	if !r.rows.Next() {
		r.Close()
		if err := r.Err(); err != nil {
			return &pgRow{err: err}
		}
		return &pgRow{err: driver.ErrNotFound}
	}
	row := &pgRow{conn: t.tx.Conn(), fields: append([]pgconn.FieldDescription(nil), r.rows.FieldDescriptions()...)}
	for _, v := range r.rows.RawValues() {
		if v != nil {
			v = append([]byte{}, v...)
		}
		row.values = append(row.values, v)
	}
	r.Close()
	if err := r.Err(); err != nil {
		return &pgRow{err: err}
	}
	return row
}

// Raw sends a savepoint still pending, then returns the transaction, which
// refuses Commit and Rollback: the engine ends it.
func (t *procTx) Raw() any {
	_ = t.flush(context.Background(), t.control()) // a failure breaks t; Err reports it
	return rawTx{t.tx}
}

// Aborted reports that a statement failed in the transaction and left it
// aborted. It asks the connection (no round trip).
func (t *procTx) Aborted() bool {
	// A ROLLBACK TO still pending ends the check before: the check now
	// running has sent no statement (send sends it first), so the aborted
	// state is the check before's, which its ROLLBACK TO will lift.
	return t.tx.Conn().PgConn().TxStatus() == 'E' && !slices.Contains(t.pending, rollbackToSQL)
}

// Err reports that the transaction can no longer commit.
func (t *procTx) Err() error { return t.usable() }

// Apply applies p's decisions in one statement, prescient_apply. A savepoint
// statement still pending goes first, unless it is a RELEASE, which COMMIT
// makes needless.
func (t *procTx) Apply(ctx context.Context, p *driver.ApplyParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	if err := t.usable(); err != nil {
		return err
	}
	if err := t.flush(ctx, t.endControl()); err != nil {
		return err
	}
	if len(p.Decisions) == 0 && p.Attempt == 0 && len(p.Settled) == 0 {
		return nil
	}
	n := len(p.Decisions)
	var (
		ids      = make([]int64, n)
		outcomes = make([]string, n)
		nexts    = make([]time.Time, n)
		checked  = make([]bool, n)
		errs     = make([]string, n)
		runtimes = make([]int64, n)
		reasons  = make([]string, n)
		lateness = make([]int64, n)
	)
	for i, d := range p.Decisions {
		ids[i], outcomes[i], nexts[i], checked[i] = d.ID, string(d.Outcome), d.Next, d.Checked
		errs[i], runtimes[i], reasons[i], lateness[i] = d.Err, micros(d.Runtime), d.Reason, micros(d.Lateness)
	}
	// One round trip: the decisions, the end of the attempt, and the
	// settling of attempts left behind.
	b := &pgx.Batch{}
	if n > 0 {
		b.Queue(`SELECT prescient_apply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			ids, outcomes, nexts, checked, errs, runtimes, reasons, lateness, p.Slot, p.Now, p.Server)
	}
	if p.Attempt != 0 {
		b.Queue(`DELETE FROM prescient_attempts WHERE id = $1`, p.Attempt)
	}
	if len(p.Settled) > 0 {
		b.Queue(`SELECT prescient_attempts_settle($1)`, p.Settled)
	}
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		return t.fail(fmt.Errorf("apply: %w", interpretError(ctx, err)))
	}
	return nil
}

// endControl is control at the end of the transaction: a savepoint still
// open is left to COMMIT, as are RELEASEs; a ROLLBACK TO must run.
func (t *procTx) endControl() []string {
	var ctl []string
	for _, c := range t.pending {
		if c != releaseSQL {
			ctl = append(ctl, c)
		}
	}
	t.pending = nil
	return ctl
}

// Commit commits the transaction.
func (t *procTx) Commit(ctx context.Context) error {
	if err := t.usable(); err != nil {
		return err
	}
	if err := t.flush(ctx, t.endControl()); err != nil {
		return err
	}
	if err := t.tx.Commit(ctx); err != nil {
		return t.fail(fmt.Errorf("commit: %w", interpretError(ctx, err)))
	}
	return nil
}

// Rollback rolls back; after Commit it does nothing.
func (t *procTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return interpretError(ctx, err)
	}
	return nil
}

// rawTx is the transaction a check gets from checks.Tx.Driver: everything of
// pgx.Tx but ending it, which is the engine's. Begin still makes a savepoint
// of the check's own.
type rawTx struct{ pgx.Tx }

var errRawEnd = errors.New("postgres: a check must not end the engine's transaction; return an error to roll its writes back")

func (rawTx) Commit(context.Context) error   { return errRawEnd }
func (rawTx) Rollback(context.Context) error { return errRawEnd }

// pgRows is a check's query result, closing its batch with it.
type pgRows struct {
	ctx   context.Context // the query's
	rows  pgx.Rows
	batch pgx.BatchResults
	err   error
	done  bool
}

func (r *pgRows) Next() bool {
	if r.done {
		return false
	}
	if r.rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *pgRows) Scan(dest ...any) error {
	if r.done {
		if r.err != nil {
			return r.err
		}
		return errors.New("postgres: scan of closed rows")
	}
	return interpretError(r.ctx, r.rows.Scan(dest...))
}

func (r *pgRows) Err() error {
	if r.done {
		return r.err
	}
	return interpretError(r.ctx, r.rows.Err())
}

func (r *pgRows) Close() {
	if r.done {
		return
	}
	r.done = true
	r.rows.Close()
	r.err = r.rows.Err()
	if r.batch != nil {
		if err := r.batch.Close(); r.err == nil {
			r.err = err
		}
	}
	r.err = interpretError(r.ctx, r.err)
}

// pgRow is QueryRow's result: an error, or one row's raw values.
type pgRow struct {
	conn   *pgx.Conn
	fields []pgconn.FieldDescription
	values [][]byte
	err    error
}

func (r *pgRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return interpretError(context.Background(), pgx.ScanRow(r.conn.TypeMap(), r.fields, r.values, dest...)) // decoding: no statement to cancel
}

func (r *pgRow) Close() {}
