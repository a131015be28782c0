package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
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
// pending and go with the check's next statement, in one pgx batch, when
// nothing in the batch can fail before the savepoint is in place (see send);
// a savepoint is opened only when its check runs a statement, and the
// RELEASE of the last one is left to COMMIT. A check that looks one row up
// and writes one therefore costs two round trips, savepoint included, once
// its statements have run on the connection.
type procTx struct {
	tx   pgx.Tx
	mode pgx.QueryExecMode // the connection's
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
//
// p.IdleTimeout is set for the transaction alone (SET LOCAL, sent with the
// BEGIN in one round trip): PostgreSQL then ends the session of a process
// that stopped between two statements, and the jobs it claimed can be
// taken once the server has been found gone (a frozen server held 1,000
// claimed jobs for as long as it stayed frozen; found by a trial).
func (s *Store) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	var opts pgx.TxOptions
	if p != nil && p.IdleTimeout > 0 {
		// pgx sends a statement without arguments by the simple protocol,
		// which takes both at once. The setting takes at most MaxInt32 ms
		// (24 days): a runtime guard of a year asks for no bound, in effect.
		opts.BeginQuery = fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d", min(max(p.IdleTimeout.Milliseconds(), 1), math.MaxInt32))
	}
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", interpretError(ctx, err))
	}
	return &procTx{tx: tx, mode: s.mode}, nil
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

// describedKey is the key, in a connection's pgconn.PgConn.CustomData, of
// the statements of checks that ran on it (their descriptions: see send);
// describedMax bounds how many it keeps (pgx's statement cache holds 512 by
// default), so that checks whose SQL text varies cannot grow it without end:
// it starts again empty.
const (
	describedKey = "prescient.check_statements"
	describedMax = 512
)

// described returns the description of sql recorded on the transaction's
// connection, and whether sql ran there: then it parses there. The
// description is nil where pgx runs statements without one.
func (t *procTx) described(sql string) (*pgconn.StatementDescription, bool) {
	m, _ := t.tx.Conn().PgConn().CustomData()[describedKey].(map[string]*pgconn.StatementDescription)
	sd, ok := m[sql]
	return sd, ok
}

// describe records sql, and its description sd, on the transaction's
// connection.
func (t *procTx) describe(sql string, sd *pgconn.StatementDescription) {
	data := t.tx.Conn().PgConn().CustomData()
	m, _ := data[describedKey].(map[string]*pgconn.StatementDescription)
	if m == nil || len(m) >= describedMax {
		m = make(map[string]*pgconn.StatementDescription)
		data[describedKey] = m
	}
	m[sql] = sd
}

// forget drops what describe recorded of sql, after a statement of it
// failed: pgx then forgets its own description too (the table may have
// changed), and send describes it again before batching it.
func (t *procTx) forget(sql string) {
	m, _ := t.tx.Conn().PgConn().CustomData()[describedKey].(map[string]*pgconn.StatementDescription)
	delete(m, sql)
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
// next to read. A savepoint statement that fails breaks the transaction, the
// writes of the checks before included; so the batch is sent only when
// nothing in it can fail before the check's savepoint is in place:
//
//   - A ROLLBACK TO goes first, on its own: until it has run, the
//     transaction is aborted, and the server refuses to even parse the
//     batch's other statements.
//   - A statement that has not run on this connection before goes on its
//     own after the savepoint statements: pgx prepares a batch's new
//     statements before it runs any of them (and the simple protocol parses
//     the whole batch first), so one the server cannot parse (a misspelt
//     column) would abort the transaction with no savepoint to return to.
//     Where pgx prepares statements it is also described then, for the next
//     point.
//   - The statement's arguments are encoded first, as the batch will
//     encode them: pgx closes the connection when an argument fails to
//     encode after a batch's SAVEPOINT was queued ahead of it (a value out
//     of its column's range, a Go type it cannot encode); the check gets the
//     error, with nothing sent.
//   - With the simple protocol, the statement always goes on its own: pgx
//     writes a batch's arguments into its text, and one that does not
//     convert fails the whole batch, savepoint statements included.
//   - A check whose context has ended gets its context's error, and its
//     savepoint statements wait; those sent on their own run whatever
//     becomes of the check's context, within controlTimeout.
func (t *procTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if slices.Contains(t.pending, rollbackToSQL) {
		if err := t.flushOwn(ctx, t.pending); err != nil {
			return nil, err
		}
		t.pending = nil
	}
	sd, known := t.described(sql)
	if !known || t.mode == pgx.QueryExecModeSimpleProtocol {
		if err := t.flushOwn(ctx, t.control()); err != nil {
			return nil, err
		}
		if t.pipelined() {
			var err error
			if sd, err = t.tx.Conn().Prepare(ctx, "", sql); err != nil {
				return nil, interpretError(ctx, err) // the check's: its savepoint is in place
			}
		}
		t.describe(sql, sd)
	} else if t.pipelined() || t.mode == pgx.QueryExecModeExec {
		var eqb pgx.ExtendedQueryBuilder
		if err := eqb.Build(t.tx.Conn().TypeMap(), sd, args); err != nil {
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

// pipelined reports whether pgx sends a batch in a pipeline that prepares
// or describes its statements (every mode but the simple protocol and
// QueryExecModeExec).
func (t *procTx) pipelined() bool {
	return t.mode != pgx.QueryExecModeSimpleProtocol && t.mode != pgx.QueryExecModeExec
}

// flushOwn sends ctl on its own under a context that the check's ending
// does not cancel, bounded by controlTimeout.
func (t *procTx) flushOwn(ctx context.Context, ctl []string) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlTimeout)
	defer cancel()
	return t.flush(fctx, ctl)
}

// Exec runs a check's statement.
func (t *procTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if err := t.usable(); err != nil {
		return 0, err
	}
	if len(t.pending) == 0 && (!t.open || t.sent) {
		tag, err := t.tx.Exec(ctx, sql, args...)
		if err != nil {
			t.forget(sql)
		}
		return tag.RowsAffected(), interpretError(ctx, err)
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		t.forget(sql)
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.forget(sql)
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
			t.forget(sql)
			return nil, interpretError(ctx, err)
		}
		return &pgRows{ctx: ctx, t: t, sql: sql, rows: rows}, nil
	}
	br, err := t.send(ctx, sql, args)
	if err != nil {
		t.forget(sql)
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		t.forget(sql)
		return nil, interpretError(ctx, err)
	}
	return &pgRows{ctx: ctx, t: t, sql: sql, rows: rows, batch: br}, nil
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
	// Bounded as the savepoint statements sent on their own are: a server
	// that stops answering must not hold the check's transaction, and the
	// engine closing it past the check's guard, forever. A failure breaks
	// t; Err reports it.
	_ = t.flushOwn(context.Background(), t.control())
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
	t     *procTx
	sql   string
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

// ColumnOIDs returns the type OID of each result column, for a caller
// that reads the columns as it found them before (sqlcheck).
func (r *pgRows) ColumnOIDs() []uint32 {
	fds := r.rows.FieldDescriptions()
	oids := make([]uint32, len(fds))
	for i, f := range fds {
		oids[i] = f.DataTypeOID
	}
	return oids
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
	if r.err != nil {
		r.t.forget(r.sql)
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
