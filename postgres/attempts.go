package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
)

// AttemptStart records an attempt with prescient_attempt_start, whose commit
// does not wait for the disk (see its migration).
func (s *Store) AttemptStart(ctx context.Context, p *driver.AttemptStartParams) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT prescient_attempt_start($1, $2, $3, $4)`,
		p.Server, p.Slot, p.StartedAt, p.IDs).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record attempt: %w", interpretError(ctx, err))
	}
	return id, nil
}

// AttemptEnd deletes an attempt.
func (s *Store) AttemptEnd(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM prescient_attempts WHERE id = $1`, id); err != nil {
		return fmt.Errorf("end attempt %d: %w", id, interpretError(ctx, err))
	}
	return nil
}

// AttemptNarrow makes the attempt name only ids. Its commit is synchronous
// unless the connection's settings say otherwise (unlike AttemptStart's), so
// that a crash of PostgreSQL does not keep the attempt naming jobs another
// server was running. It fails at once when the pool has no connection to
// spare, after narrowWait without one, after narrowExecWait without an
// answer, and when the attempt is gone.
func (s *Store) AttemptNarrow(ctx context.Context, id int64, ids []int64) error {
	if st := s.pool.Stat(); st.IdleConns() == 0 && st.TotalConns() >= st.MaxConns() {
		return fmt.Errorf("narrow attempt %d: %w", id, errPoolBusy)
	}
	actx, cancel := context.WithTimeout(ctx, narrowWait)
	conn, err := s.pool.Acquire(actx)
	cancel()
	if err != nil {
		return fmt.Errorf("narrow attempt %d: %w (%w)", id, errPoolBusy, interpretError(ctx, err))
	}
	defer conn.Release()
	// The statement is bounded too: behind a pooler in transaction mode
	// the pool's connection to spare is the pooler's, which may queue the
	// statement for a server connection while the caller's transaction
	// holds one of them.
	ectx, cancel := context.WithTimeout(ctx, narrowExecWait)
	defer cancel()
	tag, err := conn.Exec(ectx, `UPDATE prescient_attempts SET job_ids = $2 WHERE id = $1`, id, ids)
	if err != nil {
		return fmt.Errorf("narrow attempt %d: %w", id, interpretError(ectx, err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("narrow attempt %d: no such attempt", id)
	}
	return nil
}

// narrowWait bounds how long AttemptNarrow waits for a connection. Its
// caller holds one of the pool's for the transaction it narrows the attempt
// of: groups that all did so at once with the pool exhausted would wait for
// each other for ever. They roll back instead (the engine's way when a store
// cannot narrow), which gives their connections back.
const narrowWait = 250 * time.Millisecond

// narrowExecWait bounds AttemptNarrow's statement (see there).
const narrowExecWait = time.Second

// errPoolBusy: no connection to spare.
var errPoolBusy = errors.New("no connection of the pool to spare")

// AttemptsLeft lists the attempts not yet ended.
func (s *Store) AttemptsLeft(ctx context.Context) ([]*driver.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, server, slot, started_at, job_ids FROM prescient_attempts ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.Attempt, error) {
		var a driver.Attempt
		err := row.Scan(&a.ID, &a.Server, &a.Slot, &a.StartedAt, &a.JobIDs)
		a.Slot, a.StartedAt = a.Slot.UTC(), a.StartedAt.UTC()
		return &a, err
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", interpretError(ctx, err))
	}
	return out, nil
}

// attemptsPrune deletes the attempts that name no pending job: their jobs
// were cancelled, resolved or finished elsewhere.
const attemptsPruneSQL = `DELETE FROM prescient_attempts a
	WHERE NOT EXISTS (SELECT 1 FROM prescient_jobs j WHERE j.id = ANY (a.job_ids))`
