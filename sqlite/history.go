package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// HistoryList validates f and returns the matching records, newest first (by
// finished_at, then id), at most f.EffectiveLimit().
func (s *Store) HistoryList(ctx context.Context, f history.Filter) ([]*history.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	query, args, err := historyListSQL(f)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list history: %w", interpretError(err))
	}
	defer rows.Close()
	out := []*history.Record{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("list history: %w", interpretError(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list history: %w", interpretError(err))
	}
	return out, nil
}

// historyListSQL is HistoryList's statement for f and its arguments.
func historyListSQL(f history.Filter) (string, []any, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	switch {
	case f.Entity != "" && f.Key == "":
		// Not by the (entity, entity_key, finished_at) index, which
		// hands an entity's records over by key: SQLite sorted all of
		// them (1.2-1.6 s for 900,000) rather than walking finished_at
		// newest first to the limit, as PostgreSQL does (found by a
		// trial of history at scale). "+" keeps the index off the term.
		add("+entity = $%d", f.Entity)
	case f.Entity != "":
		add("entity = $%d", f.Entity)
	}
	if f.Key != "" {
		add("entity_key = $%d", f.Key)
	}
	if f.Check != "" {
		add("check_name = $%d", f.Check)
	}
	if len(f.Outcomes) == 1 {
		// "=" lets the (outcome, finished_at) index hand the rows over
		// newest first.
		add("outcome = $%d", string(f.Outcomes[0]))
	} else if len(f.Outcomes) > 1 {
		b, err := json.Marshal(f.Outcomes)
		if err != nil {
			return "", nil, fmt.Errorf("list history: %w", err)
		}
		add("outcome IN (SELECT value FROM json_each($%d))", string(b))
	}
	if !f.Since.IsZero() {
		add("finished_at >= $%d", micros(f.Since))
	}
	if !f.Until.IsZero() {
		add("finished_at < $%d", micros(f.Until))
	}
	if f.AfterID != 0 {
		args = append(args, micros(f.AfterAt), f.AfterID)
		where = append(where, fmt.Sprintf("finished_at <= $%d AND (finished_at < $%d OR id < $%d)", len(args)-1, len(args)-1, len(args)))
	}
	payload := "payload"
	if f.NoPayload {
		payload = "NULL AS payload"
	}
	query := `SELECT id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
		check_count, failure_count, runtime_us, lateness_us, last_error, ` + payload + `, created_at,
		finished_at, finished_by
		FROM prescient_history`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.EffectiveLimit())
	query += fmt.Sprintf(" ORDER BY finished_at DESC, id DESC LIMIT $%d", len(args))

	return query, args, nil
}

// HistoryLatest returns the job's history record with the highest id.
func (s *Store) HistoryLatest(ctx context.Context, entity, key, check string) (*history.Record, error) {
	r, err := scanRecord(s.db.QueryRowContext(ctx, `SELECT id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
		check_count, failure_count, runtime_us, lateness_us, last_error, payload, created_at,
		finished_at, finished_by
		FROM prescient_history WHERE entity = $1 AND entity_key = $2 AND check_name = $3 ORDER BY id DESC LIMIT 1`,
		entity, key, check))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, driver.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("latest history of %s/%s/%s: %w", entity, key, check, interpretError(err))
	}
	return r, nil
}

// scanRecord reads one history row.
func scanRecord(row scanner) (*history.Record, error) {
	var (
		r                        history.Record
		first, created, finished int64
		last                     sql.NullInt64
		lastErr, payload         sql.NullString
		runtimeUS, latenessUS    int64
	)
	if err := row.Scan(&r.ID, &r.Entity, &r.Key, &r.Check, &r.Outcome, &first, &last,
		&r.CheckCount, &r.FailureCount, &runtimeUS, &latenessUS, &lastErr, &payload,
		&created, &finished, &r.FinishedBy); err != nil {
		return nil, err
	}
	r.FirstCheckAt = fromMicros(first)
	r.LastCheckAt = fromNullMicros(last)
	r.CreatedAt = fromMicros(created)
	r.FinishedAt = fromMicros(finished)
	r.Runtime = duration(runtimeUS)
	r.Lateness = duration(latenessUS)
	r.LastError = lastErr.String
	if payload.Valid {
		r.Payload = json.RawMessage(payload.String)
	}
	return &r, nil
}

// HistoryCounts counts records per outcome finished at or after since;
// outcomes with no record are absent from the map.
func (s *Store) HistoryCounts(ctx context.Context, since time.Time) (map[history.Outcome]int, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT outcome, count(*) FROM prescient_history WHERE finished_at >= $1 GROUP BY outcome`, micros(since))
	if err != nil {
		return nil, fmt.Errorf("count history: %w", interpretError(err))
	}
	defer rows.Close()
	counts := make(map[history.Outcome]int)
	for rows.Next() {
		var o history.Outcome
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			return nil, fmt.Errorf("count history: %w", interpretError(err))
		}
		counts[o] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count history: %w", interpretError(err))
	}
	return counts, nil
}

// HistoryPrune deletes, in one transaction, the records finished before
// before and the ledger rows of slots before it.
func (s *Store) HistoryPrune(ctx context.Context, before time.Time) (int, error) {
	// Delete in batches, each its own transaction, so that a long backlog
	// never holds the database's one writer lock for long.
	n, err := s.deleteInBatches(ctx, `
		DELETE FROM prescient_history WHERE id IN (
			SELECT id FROM prescient_history WHERE finished_at < $1 ORDER BY finished_at LIMIT $2)`, before)
	if err != nil {
		return int(n), fmt.Errorf("prune history before %s (%d records deleted): %w", before.Format(time.RFC3339), n, err)
	}
	// Events go with the history of their time once no sink still has to
	// deliver them (their deliveries go with them) and their job is no
	// longer pending: a pending job's stages must stay raised, or its next
	// check would raise them again.
	if _, err := s.deleteInBatches(ctx, `
		DELETE FROM prescient_outbox WHERE id IN (
			SELECT o.id FROM prescient_outbox o WHERE o.created_at < $1
				AND NOT EXISTS (SELECT 1 FROM prescient_deliveries d WHERE d.event_id = o.id AND d.state = 'pending')
				AND NOT EXISTS (SELECT 1 FROM prescient_jobs j WHERE j.entity = o.entity AND j.entity_key = o.entity_key AND j.check_name = o.check_name)
			ORDER BY o.created_at LIMIT $2)`, before); err != nil {
		return int(n), fmt.Errorf("prune events before %s: %w", before.Format(time.RFC3339), err)
	}
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM prescient_slots WHERE slot < $1`, micros(before)); err != nil {
			return err
		}
		// Servers gone since before: a heartbeat revives a live one.
		if _, err := tx.ExecContext(ctx, `DELETE FROM prescient_servers WHERE heartbeat_at < $1`, micros(before)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, attemptsPruneSQL)
		return err
	})
	if err != nil {
		return int(n), fmt.Errorf("prune history before %s: %w", before.Format(time.RFC3339), interpretError(err))
	}
	return int(n), nil
}

// deleteInBatches runs del, a DELETE of at most $2 rows older than $1
// (before), each time in a transaction of its own, until it deletes fewer
// than a batch, and returns how many rows went. After each batch it pauses
// as long as the batch took: its transactions are writes of the store's
// own, which the processing transactions let go first (see lockWrite), so
// without a pause a slot fired during a long prune waited for all of it (a
// million records: 5.7 s, a slot of 5 s missed; found by a trial).
func (s *Store) deleteInBatches(ctx context.Context, del string, before time.Time) (int64, error) {
	var n int64
	for {
		var batch int64
		began := time.Now()
		err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, del, micros(before), s.pruneBatchSize())
			if err != nil {
				return err
			}
			batch, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return n, interpretError(err)
		}
		n += batch
		if batch < int64(s.pruneBatchSize()) {
			return n, nil
		}
		pause := time.NewTimer(min(time.Since(began), time.Second))
		select {
		case <-pause.C:
		case <-ctx.Done():
			pause.Stop()
			return n, ctx.Err()
		}
	}
}

// pruneBatchDefault is how many history records one transaction of
// HistoryPrune deletes: a few milliseconds of the one writer's time.
const pruneBatchDefault = 2_000

// pruneBatchSize is the store's prune batch (set by tests), or the default.
func (s *Store) pruneBatchSize() int {
	if s.pruneBatch > 0 {
		return s.pruneBatch
	}
	return pruneBatchDefault
}
