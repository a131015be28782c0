package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/prescient-dev/prescient/driver"
)

// AttemptStart records an attempt in a transaction of its own.
func (s *Store) AttemptStart(ctx context.Context, p *driver.AttemptStartParams) (int64, error) {
	ids, err := json.Marshal(p.IDs)
	if err != nil {
		return 0, fmt.Errorf("record attempt: %w", err)
	}
	var id int64
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO prescient_attempts (server, slot, started_at, job_ids)
			VALUES ($1, $2, $3, $4) RETURNING id`, p.Server, micros(p.Slot), micros(p.StartedAt), string(ids)).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("record attempt: %w", interpretError(err))
	}
	return id, nil
}

// AttemptEnd deletes an attempt.
func (s *Store) AttemptEnd(ctx context.Context, id int64) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM prescient_attempts WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("end attempt %d: %w", id, interpretError(err))
	}
	return nil
}

// AttemptNarrow makes the attempt name only ids. The engine does not call
// it (see Features): it waits for the store's one writer, which a processing
// transaction holds.
func (s *Store) AttemptNarrow(ctx context.Context, id int64, ids []int64) error {
	b, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("narrow attempt %d: %w", id, err)
	}
	var n int64
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE prescient_attempts SET job_ids = $2 WHERE id = $1`, id, string(b))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("narrow attempt %d: %w", id, interpretError(err))
	}
	if n != 1 {
		return fmt.Errorf("narrow attempt %d: no such attempt", id)
	}
	return nil
}

// AttemptsLeft lists the attempts not yet ended.
func (s *Store) AttemptsLeft(ctx context.Context) ([]*driver.Attempt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, server, slot, started_at, job_ids FROM prescient_attempts ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", interpretError(err))
	}
	defer rows.Close()
	var out []*driver.Attempt
	for rows.Next() {
		var (
			a             driver.Attempt
			slot, started int64
			ids           string
		)
		if err := rows.Scan(&a.ID, &a.Server, &slot, &started, &ids); err != nil {
			return nil, fmt.Errorf("list attempts: %w", interpretError(err))
		}
		if err := json.Unmarshal([]byte(ids), &a.JobIDs); err != nil {
			return nil, fmt.Errorf("list attempts: attempt %d: %w", a.ID, err)
		}
		a.Slot, a.StartedAt = fromMicros(slot), fromMicros(started)
		out = append(out, &a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list attempts: %w", interpretError(err))
	}
	return out, nil
}

// attemptsSettleSQL takes the jobs of the JSON array $1 out of every attempt
// that names them; attemptsEmptySQL deletes the attempts left naming none.
const (
	attemptsSettleSQL = `UPDATE prescient_attempts
		SET job_ids = (SELECT json_group_array(a.value) FROM json_each(prescient_attempts.job_ids) a
			WHERE a.value NOT IN (SELECT value FROM json_each($1)))
		WHERE EXISTS (SELECT 1 FROM json_each(prescient_attempts.job_ids) a
			WHERE a.value IN (SELECT value FROM json_each($1)))`
	attemptsEmptySQL = `DELETE FROM prescient_attempts WHERE json_array_length(job_ids) = 0`
	// attemptsPruneSQL deletes the attempts that name no pending job.
	attemptsPruneSQL = `DELETE FROM prescient_attempts WHERE NOT EXISTS (
		SELECT 1 FROM json_each(prescient_attempts.job_ids) a JOIN prescient_jobs j ON j.id = a.value)`
)
