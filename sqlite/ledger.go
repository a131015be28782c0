package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// tookUS is the time a ledger row p records in microseconds: took_us, or
// for a row an older prescient wrote (NULL, see migration 00005) the span
// from its start to its finish, 0 while it is unfinished.
const tookUS = `coalesce(p.took_us, max(p.finished_at - p.started_at, 0), 0)`

// SlotStart upserts the ledger row of (r.Slot, r.Server) with r's kind, no
// finish and r's unknown jobs (none: this firing has not counted them
// yet) and no time; a row already there keeps its start, its counts and
// its time (see SlotFinish). A row an older prescient finished gets its span
// as its time; one it is still firing (no time, no finish) keeps no time, so
// that its finish still reads as a span.
func (s *Store) SlotStart(ctx context.Context, r *driver.SlotRecord) error {
	outcomes, err := outcomesJSON(r.Outcomes)
	if err != nil {
		return fmt.Errorf("start slot %s: %w", r.Slot.Format(time.RFC3339), err)
	}
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO prescient_slots AS p (slot, server, kind, started_at, finished_at,
				checked, rescheduled, failures, unknown, outcomes, max_lateness_us, took_us)
			VALUES ($1, $2, $3, $4, NULL, $5, $6, $7, $8, $9, $10, 0)
			ON CONFLICT (slot, server) DO UPDATE SET kind = excluded.kind, finished_at = NULL, unknown = excluded.unknown,
				took_us = CASE WHEN p.took_us IS NULL AND p.finished_at IS NULL THEN NULL ELSE `+tookUS+` END`,
			micros(r.Slot), r.Server, r.Kind, micros(r.StartedAt), r.Checked, r.Rescheduled, r.Failures,
			r.Unknown, outcomes, durMicros(r.MaxLateness))
		return err
	})
	if err != nil {
		return fmt.Errorf("start slot %s: %w", r.Slot.Format(time.RFC3339), interpretError(err))
	}
	return nil
}

// SlotFinish adds one firing's counts (r's) to the ledger row of (r.Slot,
// r.Server) in one statement, so that two firings finishing at once, even
// from two processes, both count (Took included); it sets r's kind and
// finish, the unknown jobs r counted and the larger lateness. If
// SlotStart's row is missing (pruned, say), it creates it with r.StartedAt.
func (s *Store) SlotFinish(ctx context.Context, r *driver.SlotRecord) error {
	outcomes, err := outcomesJSON(r.Outcomes)
	if err != nil {
		return fmt.Errorf("finish slot %s: %w", r.Slot.Format(time.RFC3339), err)
	}
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO prescient_slots AS p (slot, server, kind, started_at, finished_at,
				checked, rescheduled, failures, unknown, outcomes, max_lateness_us, took_us)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (slot, server) DO UPDATE SET
				kind = excluded.kind, finished_at = excluded.finished_at,
				checked = p.checked + excluded.checked, rescheduled = p.rescheduled + excluded.rescheduled,
				failures = p.failures + excluded.failures, unknown = excluded.unknown,
				outcomes = (SELECT json_group_object(key, n) FROM (
					SELECT key, sum(value) AS n
					FROM (SELECT key, value FROM json_each(p.outcomes) UNION ALL SELECT key, value FROM json_each(excluded.outcomes))
					GROUP BY key)),
				max_lateness_us = max(p.max_lateness_us, excluded.max_lateness_us),
				took_us = `+tookUS+` + excluded.took_us`,
			micros(r.Slot), r.Server, r.Kind, micros(r.StartedAt), nullMicros(r.FinishedAt), r.Checked,
			r.Rescheduled, r.Failures, r.Unknown, outcomes, durMicros(r.MaxLateness), durMicros(r.Took))
		return err
	})
	if err != nil {
		return fmt.Errorf("finish slot %s: %w", r.Slot.Format(time.RFC3339), interpretError(err))
	}
	return nil
}

// SlotList returns ledger rows with slots in [p.Since, p.Until), newest slot
// first and, within a slot, by server name.
func (s *Store) SlotList(ctx context.Context, p *driver.SlotListParams) ([]*driver.SlotRecord, error) {
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT slot, server, kind, started_at, finished_at, checked, rescheduled, failures,
			unknown, outcomes, max_lateness_us, `+tookUS+`
		FROM prescient_slots p
		WHERE ($1 IS NULL OR slot >= $1) AND ($2 IS NULL OR slot < $2)
		ORDER BY slot DESC, server
		LIMIT $3`, nullMicros(p.Since), nullMicros(p.Until), limit)
	if err != nil {
		return nil, fmt.Errorf("list slots: %w", interpretError(err))
	}
	defer rows.Close()
	out := []*driver.SlotRecord{}
	for rows.Next() {
		var (
			r                     driver.SlotRecord
			slot, started, lateUS int64
			took                  int64
			finished              sql.NullInt64
			outcomes              string
		)
		if err := rows.Scan(&slot, &r.Server, &r.Kind, &started, &finished, &r.Checked,
			&r.Rescheduled, &r.Failures, &r.Unknown, &outcomes, &lateUS, &took); err != nil {
			return nil, fmt.Errorf("list slots: %w", interpretError(err))
		}
		r.Slot = fromMicros(slot)
		r.StartedAt = fromMicros(started)
		r.FinishedAt = fromNullMicros(finished)
		r.MaxLateness = duration(lateUS)
		r.Took = duration(took)
		if err := json.Unmarshal([]byte(outcomes), &r.Outcomes); err != nil {
			return nil, fmt.Errorf("list slots: outcomes of slot %s: %w", r.Slot.Format(time.RFC3339), err)
		}
		if len(r.Outcomes) == 0 {
			r.Outcomes = nil
		}
		out = append(out, &r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list slots: %w", interpretError(err))
	}
	return out, nil
}

// outcomesJSON encodes a ledger row's outcome counts; nil is {}.
func outcomesJSON(m map[history.Outcome]int) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode outcomes: %w", err)
	}
	return string(b), nil
}
