package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// tookUS is the time a ledger row p records in microseconds: took_us, or
// for a row an older prescient wrote (NULL, see migration 00013) the span
// from its start to its finish, 0 while it is unfinished.
const tookUS = `coalesce(p.took_us, greatest((extract(epoch FROM p.finished_at - p.started_at) * 1000000)::bigint, 0))`

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
	_, err = s.pool.Exec(ctx, `
		INSERT INTO prescient_slots AS p (slot, server, kind, started_at, finished_at,
			checked, rescheduled, failures, unknown, outcomes, max_lateness_us, took_us)
		VALUES ($1, $2, $3, $4, NULL, $5, $6, $7, $8, $9::text::jsonb, $10, 0)
		ON CONFLICT (slot, server) DO UPDATE SET kind = excluded.kind, finished_at = NULL, unknown = excluded.unknown,
			took_us = CASE WHEN p.took_us IS NULL AND p.finished_at IS NULL THEN NULL ELSE `+tookUS+` END`,
		r.Slot, r.Server, r.Kind, r.StartedAt, r.Checked, r.Rescheduled, r.Failures, r.Unknown,
		outcomes, micros(r.MaxLateness))
	if err != nil {
		return fmt.Errorf("start slot %s: %w", r.Slot.Format(time.RFC3339), interpretError(ctx, err))
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
	_, err = s.pool.Exec(ctx, `
		INSERT INTO prescient_slots AS p (slot, server, kind, started_at, finished_at,
			checked, rescheduled, failures, unknown, outcomes, max_lateness_us, took_us)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text::jsonb, $11, $12)
		ON CONFLICT (slot, server) DO UPDATE SET
			kind = excluded.kind, finished_at = excluded.finished_at,
			checked = p.checked + excluded.checked, rescheduled = p.rescheduled + excluded.rescheduled,
			failures = p.failures + excluded.failures, unknown = excluded.unknown,
			outcomes = (SELECT coalesce(jsonb_object_agg(o.key, o.n), '{}') FROM (
				SELECT key, sum(value::bigint) AS n
				FROM (SELECT * FROM jsonb_each_text(p.outcomes) UNION ALL SELECT * FROM jsonb_each_text(excluded.outcomes)) e
				GROUP BY key) o),
			max_lateness_us = greatest(p.max_lateness_us, excluded.max_lateness_us),
			took_us = `+tookUS+` + excluded.took_us`,
		r.Slot, r.Server, r.Kind, r.StartedAt, nullTime(r.FinishedAt), r.Checked, r.Rescheduled,
		r.Failures, r.Unknown, outcomes, micros(r.MaxLateness), micros(r.Took))
	if err != nil {
		return fmt.Errorf("finish slot %s: %w", r.Slot.Format(time.RFC3339), interpretError(ctx, err))
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
	rows, err := s.pool.Query(ctx, `
		SELECT slot, server, kind, started_at, finished_at, checked, rescheduled, failures,
			unknown, outcomes, max_lateness_us, `+tookUS+`
		FROM prescient_slots p
		WHERE ($1::timestamptz IS NULL OR slot >= $1) AND ($2::timestamptz IS NULL OR slot < $2)
		ORDER BY slot DESC, server
		LIMIT $3`, nullTime(p.Since), nullTime(p.Until), limit)
	if err != nil {
		return nil, fmt.Errorf("list slots: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.SlotRecord, error) {
		var (
			r        driver.SlotRecord
			finished *time.Time
			outcomes []byte
			lateness int64
			took     int64
		)
		if err := row.Scan(&r.Slot, &r.Server, &r.Kind, &r.StartedAt, &finished, &r.Checked,
			&r.Rescheduled, &r.Failures, &r.Unknown, &outcomes, &lateness, &took); err != nil {
			return nil, err
		}
		r.Slot = r.Slot.UTC()
		r.StartedAt = r.StartedAt.UTC()
		r.FinishedAt = utcOrZero(finished)
		r.MaxLateness = duration(lateness)
		r.Took = duration(took)
		if err := json.Unmarshal(outcomes, &r.Outcomes); err != nil {
			return nil, fmt.Errorf("outcomes of slot %s: %w", r.Slot.Format(time.RFC3339), err)
		}
		if len(r.Outcomes) == 0 {
			r.Outcomes = nil
		}
		return &r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list slots: %w", interpretError(ctx, err))
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
