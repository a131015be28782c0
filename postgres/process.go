package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// JobsProcess claims with FOR UPDATE SKIP LOCKED, runs fn in a savepoint
// through a checks.Tx that fn's checks may share between goroutines, and
// applies the decisions with at most two statements whatever the number of
// jobs. A result that is nil, holds the wrong number of decisions or names an
// unknown outcome is an error, and nothing is applied: the jobs stay due in
// the slot.
//
// When settling the savepoint, applying or committing fails (the transaction
// died under fn, or the connection was lost), the checks' writes are gone.
// If fn had asked to keep them, recording its decisions would claim effects
// that never committed, so nothing is applied and the jobs stay due, to run
// again. If fn had discarded them (the checks failed), the decisions hold
// without them and are applied in a fresh transaction to the jobs still due
// in p.Slot (see reapply), so that a failure is always counted.
func (s *Store) JobsProcess(ctx context.Context, p *prescient.JobsProcessParams, fn prescient.ProcessFunc) (int, error) {
	if len(p.IDs) == 0 {
		return 0, nil
	}
	slot := p.Slot.Format(time.RFC3339)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("process slot %s: %w", slot, interpretError(err))
	}
	// After a commit this is a no-op; after a failure it ends the transaction.
	defer tx.Rollback(ctx)

	jobs, err := claimJobs(ctx, tx, p)
	if err != nil {
		return 0, fmt.Errorf("process slot %s: claim: %w", slot, interpretError(err))
	}
	if len(jobs) == 0 {
		return 0, nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("process slot %s: savepoint: %w", slot, interpretError(err))
	}
	res := runChecks(ctx, sp, jobs, fn)
	if err := res.Check(len(jobs)); err != nil {
		return 0, fmt.Errorf("process slot %s: %w", slot, err)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}

	if res.Discard {
		err = sp.Rollback(ctx)
	} else {
		err = sp.Commit(ctx)
	}
	if err == nil {
		err = applyDecisions(ctx, tx, p, ids, res.Decisions)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		if !res.Discard {
			return 0, fmt.Errorf("process slot %s: the transaction failed with the checks' writes, which are lost; the jobs stay due: %w", slot, interpretError(err))
		}
		if rerr := s.reapply(ctx, p, ids, res.Decisions); rerr != nil {
			return 0, fmt.Errorf("process slot %s: %v; then in a new transaction: %w",
				slot, interpretError(err), interpretError(rerr))
		}
	}
	return len(jobs), nil
}

// claimJobs locks the jobs among p.IDs still due in p.Slot that no other
// transaction holds, in id order.
func claimJobs(ctx context.Context, tx pgx.Tx, p *prescient.JobsProcessParams) ([]*checks.Job, error) {
	rows, err := tx.Query(ctx, `
		SELECT id, entity, entity_key, check_name, first_check_at, check_count, failure_count,
			last_error, payload, created_at
		FROM prescient_jobs
		WHERE id = ANY($1) AND next_check_at = $2
		ORDER BY id
		FOR UPDATE SKIP LOCKED`, p.IDs, p.Slot)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*checks.Job, error) {
		j := &checks.Job{Slot: p.Slot.UTC(), Now: p.Now.UTC()}
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
}

// runChecks hands the jobs to fn with a checks.Tx over the savepoint sp, and
// closes it when fn returns or panics, so that no check can use the
// transaction afterwards. Closing it cancels the checks' statements still
// running. On a Store from Open, which installs cancellation on the server
// (pgconn.CancelRequestContextWatcherHandler), that cancels the statement and
// the connection survives: the transaction is aborted, so kept writes fail to
// settle (the jobs stay due) and discarded ones roll back to the savepoint,
// which revives it. Only a pool passed to New with pgx's default handler
// closes the connection instead, and the transaction with it.
func runChecks(ctx context.Context, sp pgx.Tx, jobs []*checks.Job, fn prescient.ProcessFunc) *prescient.ProcessResult {
	ct := newCheckTx(sp)
	defer ct.close()
	for _, j := range jobs {
		j.Tx = ct
	}
	return fn(ctx, ct, jobs)
}

// finishSQL moves finished jobs to history. $1..$5 and $10 are parallel
// arrays (id, outcome, checked, error or ”, runtime µs, reason or ”); $6
// slot, $7 lateness µs, $8 now, $9 server.
const finishSQL = `
	WITH d AS (
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::bool[], $4::text[], $5::bigint[], $10::text[])
			AS d(id, outcome, checked, err, add_us, reason)
	), gone AS (
		DELETE FROM prescient_jobs j USING d WHERE j.id = d.id
		RETURNING j.*, d.outcome, d.checked, nullif(d.err, '') AS err, d.add_us, nullif(d.reason, '') AS reason
	)
	INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, finished_at, finished_by)
	SELECT id, entity, entity_key, check_name, outcome, first_check_at,
		CASE WHEN checked THEN $6::timestamptz ELSE last_check_at END,
		check_count + checked::int,
		CASE WHEN checked THEN 0 ELSE failure_count END + (err IS NOT NULL)::int,
		runtime_us + add_us,
		$7::bigint,
		CASE WHEN err IS NOT NULL THEN err WHEN reason IS NOT NULL THEN reason WHEN checked THEN NULL ELSE last_error END,
		payload, created_at, $8::timestamptz, $9::text
	FROM gone`

// nextSQL keeps jobs pending with a new next check. $1..$5 are parallel
// arrays (id, next, checked, error or ”, runtime µs); $6 slot, $7 lateness
// µs, $8 now.
const nextSQL = `
	UPDATE prescient_jobs j SET
		next_check_at = d.next,
		last_check_at = CASE WHEN d.checked THEN $6::timestamptz ELSE j.last_check_at END,
		check_count = j.check_count + d.checked::int,
		failure_count = CASE WHEN d.checked THEN 0 ELSE j.failure_count END + (d.err <> '')::int,
		last_error = CASE WHEN d.err <> '' THEN d.err WHEN d.checked THEN NULL ELSE j.last_error END,
		runtime_us = j.runtime_us + d.add_us,
		lateness_us = $7::bigint,
		updated_at = $8::timestamptz
	FROM unnest($1::bigint[], $2::timestamptz[], $3::bool[], $4::text[], $5::bigint[])
		AS d(id, next, checked, err, add_us)
	WHERE j.id = d.id`

// decisionArrays are the parallel arrays of one kind of decision.
type decisionArrays struct {
	ids      []int64
	outcomes []string
	nexts    []time.Time
	checked  []bool
	errs     []string
	runtimes []int64
	reasons  []string
}

func (a *decisionArrays) add(id int64, d prescient.Decision) {
	a.ids = append(a.ids, id)
	a.outcomes = append(a.outcomes, string(d.Outcome))
	a.nexts = append(a.nexts, d.Next)
	a.checked = append(a.checked, d.Checked)
	a.errs = append(a.errs, d.Err)
	a.runtimes = append(a.runtimes, micros(d.Runtime))
	a.reasons = append(a.reasons, d.Reason)
}

// applyDecisions applies ds[i] to the job ids[i] in tx, which holds the rows,
// in one round trip.
func applyDecisions(ctx context.Context, tx pgx.Tx, p *prescient.JobsProcessParams, ids []int64, ds []prescient.Decision) error {
	var fin, next decisionArrays
	for i, d := range ds {
		switch {
		case d.Outcome != "":
			fin.add(ids[i], d)
		case !d.Next.IsZero():
			next.add(ids[i], d)
		}
	}
	lateness := micros(p.Now.Sub(p.Slot))
	b := &pgx.Batch{}
	if len(fin.ids) > 0 {
		b.Queue(finishSQL, fin.ids, fin.outcomes, fin.checked, fin.errs, fin.runtimes,
			p.Slot, lateness, p.Now, p.Server, fin.reasons)
	}
	if len(next.ids) > 0 {
		b.Queue(nextSQL, next.ids, next.nexts, next.checked, next.errs, next.runtimes,
			p.Slot, lateness, p.Now)
	}
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// reclaimWait bounds how long reapply waits for rows still locked, most
// likely by the transaction that just died while its server session ends.
const reclaimWait = 5 * time.Second

// reapply applies the decisions in a transaction of its own, to the jobs
// among ids that are still due in p.Slot. It first waits up to reclaimWait for
// their locks, since the dead transaction may hold them a little longer; if
// some stay held (another server is processing them), it applies the
// decisions to the others only.
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
	err := s.reclaimAndApply(ctx, p, want, byID, true)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" /* lock_not_available */ {
		err = s.reclaimAndApply(ctx, p, want, byID, false)
	}
	return err
}

// reclaimAndApply claims the jobs among ids still due in p.Slot, waiting for
// their locks up to reclaimWait or skipping the locked ones, and applies
// their decisions.
func (s *Store) reclaimAndApply(ctx context.Context, p *prescient.JobsProcessParams, ids []int64, byID map[int64]prescient.Decision, wait bool) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		lock := "FOR UPDATE SKIP LOCKED"
		if wait {
			lock = "FOR UPDATE"
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`,
				fmt.Sprint(reclaimWait.Milliseconds())); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, `
			SELECT id FROM prescient_jobs
			WHERE id = ANY($1) AND next_check_at = $2
			ORDER BY id `+lock, ids, p.Slot)
		if err != nil {
			return err
		}
		held, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		heldDs := make([]prescient.Decision, len(held))
		for i, id := range held {
			heldDs[i] = byID[id]
		}
		return applyDecisions(ctx, tx, p, held, heldDs)
	})
}
