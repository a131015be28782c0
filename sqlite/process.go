package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// savepoint is taken before the checks run, so that their writes can be
// rolled back on their own.
const savepoint = "prescient_checks"

// JobsProcess claims the jobs inside one IMMEDIATE transaction, which holds
// the database's write lock until it ends: a concurrent processor waits for
// it and then finds the jobs it took no longer due in the slot. In this
// process it waits for as long as its ctx lasts, not the busy timeout: the
// engine runs up to Workers calls at once, each holding the lock for its
// checks, and bounds them by the runtime guard and its shutdown. A processor
// in another process waits up to the busy timeout. fn runs in a savepoint
// through a checks.Tx that fn's checks may share between goroutines, and the
// decisions are applied with at most three statements whatever the number of
// jobs. A result that is nil, holds the wrong number of decisions or names an
// unknown outcome is an error, and nothing is applied: the jobs stay due in
// the slot.
//
// A rollback hook on the connection tells when SQLite itself rolled the
// transaction back under fn (an interrupted write, say); the checks' later
// statements then fail rather than run outside any transaction. When
// settling the savepoint, applying or committing fails, the checks' writes
// are lost with the transaction. If fn asked to keep them, nothing is
// applied and JobsProcess returns an error: recording the decisions would
// claim effects that never committed, so the jobs stay due and run again. If
// fn discarded them, the decisions hold without them and are applied in a
// fresh transaction to the jobs still due in p.Slot (see reapply).
func (s *Store) JobsProcess(ctx context.Context, p *prescient.JobsProcessParams, fn prescient.ProcessFunc) (int, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	slot := p.Slot.Format(time.RFC3339)
	unlock, err := s.lockWrite(ctx, 0)
	if err != nil {
		return 0, fmt.Errorf("process slot %s: %w", slot, err)
	}
	defer unlock()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("process slot %s: %w", slot, interpretError(err))
	}
	defer conn.Close()
	var dead atomic.Bool
	if err := setRollbackHook(conn, func() { dead.Store(true) }); err != nil {
		return 0, fmt.Errorf("process slot %s: %w", slot, err)
	}
	// The hook must not outlive this call on a pooled connection.
	defer setRollbackHook(conn, nil)

	ids, res, applyErr, err := s.processOnce(ctx, conn, &dead, p, fn)
	if err != nil {
		return 0, fmt.Errorf("process slot %s: %w", slot, err)
	}
	if applyErr != nil {
		if !res.Discard {
			// The checks' writes died with the transaction: recording their
			// results would claim effects that never committed. The jobs
			// stay due and run again.
			return 0, fmt.Errorf("process slot %s: the transaction failed with the checks' writes, which are lost; the jobs stay due: %w", slot, interpretError(applyErr))
		}
		if rerr := s.reapply(ctx, p, ids, res.Decisions); rerr != nil {
			return 0, fmt.Errorf("process slot %s: %v; then in a new transaction: %w",
				slot, interpretError(applyErr), interpretError(rerr))
		}
	}
	return len(ids), nil
}

// processOnce claims, runs fn and applies its decisions in one transaction
// on conn, returning the ids claimed and fn's result. err reports that
// nothing may be applied (a failed claim, a bad result); applyErr that the
// transaction failed after fn ran, so the decisions must be applied afresh.
func (s *Store) processOnce(ctx context.Context, conn *sql.Conn, dead *atomic.Bool, p *prescient.JobsProcessParams, fn prescient.ProcessFunc) (ids []int64, res *prescient.ProcessResult, applyErr, err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, nil, interpretError(err)
	}
	// After a commit this is a no-op; after a failure it ends the transaction.
	defer tx.Rollback()

	jobs, err := claimJobs(ctx, tx, p)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("claim: %w", interpretError(err))
	}
	if len(jobs) == 0 {
		return nil, nil, nil, nil
	}
	if _, err := tx.ExecContext(ctx, `SAVEPOINT `+savepoint); err != nil {
		return nil, nil, nil, fmt.Errorf("savepoint: %w", interpretError(err))
	}
	res = runChecks(ctx, tx, dead, jobs, fn)
	if err := res.Check(len(jobs)); err != nil {
		return nil, nil, nil, err
	}
	ids = make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}

	applyErr = func() error {
		if res.Discard {
			if err := execAlive(ctx, tx, dead, `ROLLBACK TO `+savepoint); err != nil {
				return err
			}
		}
		if err := execAlive(ctx, tx, dead, `RELEASE `+savepoint); err != nil {
			return err
		}
		if err := applyDecisions(ctx, tx, dead, p, ids, res.Decisions); err != nil {
			return err
		}
		if dead.Load() {
			return errTxRolledBack
		}
		return tx.Commit()
	}()
	if applyErr != nil {
		_ = tx.Rollback()
	}
	return ids, res, applyErr, nil
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

// execAlive runs one statement in tx unless SQLite has rolled tx back, in
// which case the statement would run (and commit) outside any transaction.
func execAlive(ctx context.Context, tx *sql.Tx, dead *atomic.Bool, query string, args ...any) error {
	if dead.Load() {
		return errTxRolledBack
	}
	_, err := tx.ExecContext(ctx, query, args...)
	return err
}

// claimJobs reads the jobs among p.IDs still due in p.Slot, in id order. The
// transaction holds the write lock, so no other processor can hold them.
func claimJobs(ctx context.Context, tx *sql.Tx, p *prescient.JobsProcessParams) ([]*checks.Job, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT id, entity, entity_key, check_name, first_check_at, check_count, failure_count,
			last_error, payload, created_at
		FROM prescient_jobs
		WHERE id IN (SELECT value FROM json_each($1)) AND next_check_at = $2
		ORDER BY id`, idsJSON(p.IDs), micros(p.Slot))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []*checks.Job
	for rows.Next() {
		j := &checks.Job{Slot: p.Slot.UTC(), Now: p.Now.UTC()}
		var first, created int64
		var lastErr, payload sql.NullString
		if err := rows.Scan(&j.ID, &j.Entity, &j.Key, &j.Check, &first, &j.CheckCount,
			&j.FailureCount, &lastErr, &payload, &created); err != nil {
			return nil, err
		}
		j.FirstCheckAt = fromMicros(first)
		j.CreatedAt = fromMicros(created)
		j.LastError = lastErr.String
		if payload.Valid {
			j.Payload = json.RawMessage(payload.String)
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// runChecks hands the jobs to fn with a checks.Tx over tx, and closes it when
// fn returns or panics, so that no check can use the transaction afterwards.
func runChecks(ctx context.Context, tx *sql.Tx, dead *atomic.Bool, jobs []*checks.Job, fn prescient.ProcessFunc) *prescient.ProcessResult {
	ct := newCheckTx(tx, dead)
	defer ct.close()
	for _, j := range jobs {
		j.Tx = ct
	}
	return fn(ctx, ct, jobs)
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
}

// decisionsCTE reads $1, a JSON array of decisionRow, as the table d; $2 is
// the slot, $3 the lateness µs, $4 now.
const decisionsCTE = `
	WITH d AS (
		SELECT json_extract(value, '$.id') AS id,
			json_extract(value, '$.outcome') AS outcome,
			json_extract(value, '$.next') AS next,
			json_extract(value, '$.checked') AS checked,
			nullif(json_extract(value, '$.err'), '') AS err,
			json_extract(value, '$.add_us') AS add_us,
			nullif(json_extract(value, '$.reason'), '') AS reason
		FROM json_each($1)
	)`

// finishSQL copies finished jobs to history; deleteSQL then removes them.
// $5 is the server.
const finishSQL = decisionsCTE + `
	INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, finished_at, finished_by)
	SELECT j.id, j.entity, j.entity_key, j.check_name, d.outcome, j.first_check_at,
		CASE WHEN d.checked THEN $2 ELSE j.last_check_at END,
		j.check_count + d.checked,
		CASE WHEN d.checked THEN 0 ELSE j.failure_count END + (d.err IS NOT NULL),
		j.runtime_us + d.add_us,
		$3,
		CASE WHEN d.err IS NOT NULL THEN d.err WHEN d.reason IS NOT NULL THEN d.reason WHEN d.checked THEN NULL ELSE j.last_error END,
		j.payload, j.created_at, $4, $5
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
		lateness_us = $3,
		updated_at = $4
	FROM d
	WHERE j.id = d.id`

// applyDecisions applies ds[i] to the job ids[i] in tx, which holds the write
// lock.
func applyDecisions(ctx context.Context, tx *sql.Tx, dead *atomic.Bool, p *prescient.JobsProcessParams, ids []int64, ds []prescient.Decision) error {
	var fin, next []decisionRow
	for i, d := range ds {
		r := decisionRow{ID: ids[i], Outcome: string(d.Outcome), Checked: d.Checked, Err: d.Err, AddUS: durMicros(d.Runtime), Reason: d.Reason}
		switch {
		case d.Outcome != "":
			fin = append(fin, r)
		case !d.Next.IsZero():
			r.Next = micros(d.Next)
			next = append(next, r)
		}
	}
	lateness := durMicros(p.Now.Sub(p.Slot))
	if len(fin) > 0 {
		b, err := json.Marshal(fin)
		if err != nil {
			return err
		}
		if err := execAlive(ctx, tx, dead, finishSQL, string(b), micros(p.Slot), lateness, micros(p.Now), p.Server); err != nil {
			return err
		}
		if err := execAlive(ctx, tx, dead, deleteSQL, string(b)); err != nil {
			return err
		}
	}
	if len(next) > 0 {
		b, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if err := execAlive(ctx, tx, dead, nextSQL, string(b), micros(p.Slot), lateness, micros(p.Now)); err != nil {
			return err
		}
	}
	return nil
}

// reapply applies the decisions in a transaction of its own, on a fresh
// connection (the first one may be broken), to the jobs among ids that are
// still due in p.Slot. The caller holds the in-process write lock.
func (s *Store) reapply(ctx context.Context, p *prescient.JobsProcessParams, ids []int64, ds []prescient.Decision) error {
	byID := make(map[int64]prescient.Decision, len(ids))
	var want []int64
	for i, d := range ds {
		if !d.Released() {
			byID[ids[i]] = d
			want = append(want, ids[i])
		}
	}
	if len(want) == 0 {
		return nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var dead atomic.Bool
	if err := setRollbackHook(conn, func() { dead.Store(true) }); err != nil {
		return err
	}
	defer setRollbackHook(conn, nil)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `
		SELECT id FROM prescient_jobs
		WHERE id IN (SELECT value FROM json_each($1)) AND next_check_at = $2
		ORDER BY id`, idsJSON(want), micros(p.Slot))
	if err != nil {
		return err
	}
	var held []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		held = append(held, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	heldDs := make([]prescient.Decision, len(held))
	for i, id := range held {
		heldDs[i] = byID[id]
	}
	if err := applyDecisions(ctx, tx, &dead, p, held, heldDs); err != nil {
		return err
	}
	if dead.Load() {
		return errTxRolledBack
	}
	return tx.Commit()
}
