package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// HistoryList validates f and returns the matching records, newest first (by
// finished_at, then id), at most f.EffectiveLimit().
func (s *Store) HistoryList(ctx context.Context, f history.Filter) ([]*history.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Entity != "" {
		add("entity = $%d", f.Entity)
	}
	if f.Key != "" {
		add("entity_key = $%d", f.Key)
	}
	if f.Check != "" {
		add("check_name = $%d", f.Check)
	}
	if len(f.Outcomes) > 0 {
		names := make([]string, len(f.Outcomes))
		for i, o := range f.Outcomes {
			names[i] = string(o)
		}
		if len(names) == 1 {
			// "=" lets the (outcome, finished_at) index hand the rows over
			// newest first; with ANY the plan reads every matching row and
			// sorts them (over a second at a million failed records).
			add("outcome = $%d", names[0])
		} else {
			add("outcome = ANY($%d)", names)
		}
		if troubled(f.Outcomes) {
			// Lets the partial index prescient_history_trouble serve the
			// filter, whatever plan the statement cache keeps.
			where = append(where, troubleSQL)
		}
	}
	if !f.Since.IsZero() {
		add("finished_at >= $%d", f.Since)
	}
	if !f.Until.IsZero() {
		add("finished_at < $%d", f.Until)
	}
	if f.AfterID != 0 {
		// Spelled out rather than as (finished_at, id) < (…), so that the
		// bound on finished_at reaches every index on it.
		args = append(args, f.AfterAt, f.AfterID)
		where = append(where, fmt.Sprintf("finished_at <= $%d AND (finished_at < $%d OR id < $%d)", len(args)-1, len(args)-1, len(args)))
	}
	payload := "payload"
	if f.NoPayload {
		payload = "NULL::jsonb AS payload"
	}
	sql := `SELECT id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
		check_count, failure_count, runtime_us, lateness_us, last_error, ` + payload + `, created_at,
		finished_at, finished_by
		FROM prescient_history`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.EffectiveLimit())
	sql += fmt.Sprintf(" ORDER BY finished_at DESC, id DESC LIMIT $%d", len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list history: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("list history: %w", interpretError(ctx, err))
	}
	return out, nil
}

// HistoryLatest returns the job's history record with the highest id.
func (s *Store) HistoryLatest(ctx context.Context, entity, key, check string) (*history.Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
		check_count, failure_count, runtime_us, lateness_us, last_error, payload, created_at,
		finished_at, finished_by
		FROM prescient_history WHERE entity = $1 AND entity_key = $2 AND check_name = $3 ORDER BY id DESC LIMIT 1`,
		entity, key, check)
	if err != nil {
		return nil, fmt.Errorf("latest history of %s/%s/%s: %w", entity, key, check, interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("latest history of %s/%s/%s: %w", entity, key, check, interpretError(ctx, err))
	}
	if len(out) == 0 {
		return nil, driver.ErrNotFound
	}
	return out[0], nil
}

// troubleSQL is the predicate of the partial index prescient_history_trouble:
// the outcomes of jobs that went wrong.
const troubleSQL = `outcome IN ('failed', 'guard_max_checks', 'guard_horizon', 'guard_past')`

// troubled reports whether every outcome in os is one troubleSQL names.
func troubled(os []history.Outcome) bool {
	for _, o := range os {
		switch o {
		case history.Failed, history.GuardMaxChecks, history.GuardHorizon, history.GuardPast:
		default:
			return false
		}
	}
	return true
}

// scanRecord reads one history row.
func scanRecord(row pgx.CollectableRow) (*history.Record, error) {
	var (
		r                     history.Record
		last                  *time.Time
		lastErr               *string
		runtimeUS, latenessUS int64
		payload               []byte
	)
	if err := row.Scan(&r.ID, &r.Entity, &r.Key, &r.Check, &r.Outcome, &r.FirstCheckAt, &last,
		&r.CheckCount, &r.FailureCount, &runtimeUS, &latenessUS, &lastErr, &payload,
		&r.CreatedAt, &r.FinishedAt, &r.FinishedBy); err != nil {
		return nil, err
	}
	r.FirstCheckAt = r.FirstCheckAt.UTC()
	r.LastCheckAt = utcOrZero(last)
	r.CreatedAt = r.CreatedAt.UTC()
	r.FinishedAt = r.FinishedAt.UTC()
	r.Runtime = duration(runtimeUS)
	r.Lateness = duration(latenessUS)
	if lastErr != nil {
		r.LastError = *lastErr
	}
	if payload != nil {
		r.Payload = payload
	}
	return &r, nil
}

// HistoryCounts counts records per outcome finished at or after since;
// outcomes with no record are absent from the map.
func (s *Store) HistoryCounts(ctx context.Context, since time.Time) (map[history.Outcome]int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT outcome, count(*) FROM prescient_history WHERE finished_at >= $1 GROUP BY outcome`, since)
	if err != nil {
		return nil, fmt.Errorf("count history: %w", interpretError(ctx, err))
	}
	counts := make(map[history.Outcome]int)
	var (
		o history.Outcome
		n int
	)
	if _, err := pgx.ForEachRow(rows, []any{&o, &n}, func() error {
		counts[o] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count history: %w", interpretError(ctx, err))
	}
	return counts, nil
}

// HistoryPrune deletes, in one transaction, the records finished before
// before and the ledger rows of slots before it.
func (s *Store) HistoryPrune(ctx context.Context, before time.Time) (int, error) {
	// Delete in batches, each its own transaction, so that a long backlog
	// (retention shortened from 30 days to 7, say) never holds one huge
	// transaction, its locks and its WAL at once.
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
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM prescient_slots WHERE slot < $1`, before); err != nil {
			return err
		}
		// Servers gone since before: a heartbeat revives a live one.
		if _, err := tx.Exec(ctx, `DELETE FROM prescient_servers WHERE heartbeat_at < $1`, before); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, attemptsPruneSQL)
		return err
	})
	if err != nil {
		return int(n), fmt.Errorf("prune history before %s: %w", before.Format(time.RFC3339), interpretError(ctx, err))
	}
	return int(n), nil
}

// deleteInBatches runs del, a DELETE of at most $2 rows older than $1
// (before), each time in a transaction of its own, until it deletes fewer
// than a batch, and returns how many rows went.
func (s *Store) deleteInBatches(ctx context.Context, del string, before time.Time) (int64, error) {
	var n int64
	for {
		tag, err := s.pool.Exec(ctx, del, before, s.pruneBatchSize())
		if err != nil {
			return n, interpretError(ctx, err)
		}
		n += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.pruneBatchSize()) {
			return n, nil
		}
	}
}

// pruneBatchDefault is how many history records one transaction of
// HistoryPrune deletes.
const pruneBatchDefault = 10_000

// pruneBatchSize is the store's prune batch (set by tests), or the default.
func (s *Store) pruneBatchSize() int {
	if s.pruneBatch > 0 {
		return s.pruneBatch
	}
	return pruneBatchDefault
}
