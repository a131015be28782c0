package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// OutboxRecord records an event in the check's savepoint, then its
// deliveries: an event whose idempotency key was recorded before returns
// no id from the first statement, and the second is not run.
func (t *procTx) OutboxRecord(ctx context.Context, p *driver.OutboxRecordParams) (bool, error) {
	var id int64
	err := t.QueryRow(ctx, `
		INSERT INTO prescient_outbox (created_at, job_id, entity, entity_key, check_name, stage, event, severity, payload, idempotency_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING id`,
		micros(p.Now), p.JobID, p.Entity, p.Key, p.Check, p.Stage, p.Event, p.Severity, nullText(p.Payload), p.IdempotencyKey).Scan(&id)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("record event %s: %w", p.IdempotencyKey, err)
	case len(p.Sinks) == 0:
		return true, nil
	}
	sinks, err := json.Marshal(p.Sinks)
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", p.IdempotencyKey, err)
	}
	if _, err := t.Exec(ctx, `
		INSERT INTO prescient_deliveries (event_id, sink, state, attempts, next_attempt_at, updated_at)
		SELECT $1, value, 'pending', 0, $2, $2 FROM json_each($3)`, id, micros(p.Now), string(sinks)); err != nil {
		return false, fmt.Errorf("record event %s: %w", p.IdempotencyKey, err)
	}
	return true, nil
}

// deliveryColumns are the columns scanDelivery reads, of the deliveries d
// joined with their events o.
const deliveryColumns = `d.sink, d.state, d.attempts, d.next_attempt_at, d.lease_owner, d.last_status, d.last_error,
	d.delivered_at, d.updated_at, o.id, o.idempotency_key, o.event, o.stage, o.severity, o.entity, o.entity_key,
	o.check_name, o.job_id, o.payload, o.created_at`

func scanDelivery(row scanner) (*driver.Delivery, error) {
	d := &driver.Delivery{Event: &driver.Event{}}
	var (
		owner, lastErr, payload sql.NullString
		status, delivered       sql.NullInt64
		next, updated, created  int64
		state                   string
	)
	e := d.Event
	err := row.Scan(&d.Sink, &state, &d.Attempts, &next, &owner, &status, &lastErr, &delivered, &updated,
		&e.ID, &e.IdempotencyKey, &e.Event, &e.Stage, &e.Severity, &e.Entity, &e.Key, &e.Check, &e.JobID, &payload, &created)
	if err != nil {
		return nil, err
	}
	d.State = driver.DeliveryState(state)
	d.NextAttemptAt, d.UpdatedAt, e.CreatedAt = fromMicros(next), fromMicros(updated), fromMicros(created)
	d.DeliveredAt = fromNullMicros(delivered)
	d.LeaseOwner, d.LastError = owner.String, lastErr.String
	d.LastStatus = int(status.Int64)
	if payload.Valid {
		e.Payload = json.RawMessage(payload.String)
	}
	return d, nil
}

// DeliveriesClaim claims due deliveries in one write transaction: SQLite
// has one writer at a time, so no two claims take the same delivery, and
// the lease keeps a claimed one from being due again until it ends.
func (s *Store) DeliveriesClaim(ctx context.Context, p *driver.DeliveriesClaimParams) ([]*driver.Delivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []*driver.Delivery
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
			SELECT event_id FROM prescient_deliveries
			WHERE sink = $1 AND state = 'pending' AND next_attempt_at <= $2
			ORDER BY next_attempt_at, event_id
			LIMIT $3`, p.Sink, micros(p.Now), p.Limit)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
			UPDATE prescient_deliveries SET attempts = attempts + 1, next_attempt_at = $3, lease_owner = $4, updated_at = $5
			WHERE sink = $1 AND event_id IN (SELECT value FROM json_each($2))`,
			p.Sink, idsJSON(ids), micros(p.LeaseUntil), p.Server, micros(p.Now)); err != nil {
			return err
		}
		out, err = s.deliveries(ctx, tx, `WHERE d.sink = $1 AND d.event_id IN (SELECT value FROM json_each($2)) ORDER BY d.event_id`,
			p.Sink, idsJSON(ids))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries of sink %s: %w", p.Sink, interpretError(err))
	}
	return out, nil
}

// reader is what *sql.DB and *sql.Tx have in common for reads.
type reader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// deliveries reads deliveries joined with their events; where follows the
// FROM clause.
func (s *Store) deliveries(ctx context.Context, q reader, where string, args ...any) ([]*driver.Delivery, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+deliveryColumns+`
		FROM prescient_deliveries d JOIN prescient_outbox o ON o.id = d.event_id `+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*driver.Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// DeliveryFinish records an attempt's result.
func (s *Store) DeliveryFinish(ctx context.Context, p *driver.DeliveryFinishParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	next := p.NextAttemptAt
	if p.State != driver.DeliveryPending {
		next = p.Now
	}
	var status, lastErr, delivered any
	if p.Status != 0 {
		status = p.Status
	}
	if p.Err != "" {
		lastErr = p.Err
	}
	if p.State == driver.DeliveryDelivered {
		delivered = micros(p.Now)
	}
	var lease any
	if !p.Lease.IsZero() {
		lease = micros(p.Lease)
	}
	var n int64
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE prescient_deliveries SET
				state = $4, attempts = $5, next_attempt_at = $6, lease_owner = NULL,
				last_status = $7, last_error = $8, delivered_at = $9, updated_at = $10
			WHERE event_id = $1 AND sink = $2 AND attempts = $3 AND state = 'pending'
				AND ($11 IS NULL OR next_attempt_at = $11)`,
			p.EventID, p.Sink, p.Attempt, string(p.State), p.Attempts, micros(next), status, lastErr, delivered, micros(p.Now), lease)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("finish delivery of event %d to sink %s: %w", p.EventID, p.Sink, interpretError(err))
	}
	return n == 1, nil
}

// DeliveryList lists deliveries, newest event first.
func (s *Store) DeliveryList(ctx context.Context, p *driver.DeliveryListParams) ([]*driver.Delivery, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("list deliveries: limit %d must be positive", p.Limit)
	}
	before := p.BeforeEventID
	if before <= 0 {
		before = 1<<63 - 1
	}
	out, err := s.deliveries(ctx, s.db, `
		WHERE ($1 = '' OR d.sink = $1) AND ($2 = '' OR d.state = $2) AND (d.event_id < $3 OR (d.event_id = $3 AND $5 <> '' AND d.sink > $5))
		ORDER BY d.event_id DESC, d.sink
		LIMIT $4`, p.Sink, string(p.State), before, p.Limit, p.AfterSink)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", interpretError(err))
	}
	return out, nil
}

// DeliveriesRetry queues dead deliveries again.
func (s *Store) DeliveriesRetry(ctx context.Context, p *driver.DeliveriesRetryParams) (int, error) {
	var n int64
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
			UPDATE prescient_deliveries SET state = 'pending', attempts = 0, next_attempt_at = $3, lease_owner = NULL, updated_at = $3
			WHERE state = 'dead' AND ($1 = '' OR sink = $1) AND ($2 <= 0 OR event_id = $2)`,
			p.Sink, p.EventID, micros(p.Now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("queue dead deliveries again: %w", interpretError(err))
	}
	return int(n), nil
}

// DeliveryCounts counts deliveries per sink, reading the partial indexes.
func (s *Store) DeliveryCounts(ctx context.Context, since time.Time) (map[string]*driver.DeliveryCount, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT sink, 'pending', count(*) FROM prescient_deliveries WHERE state = 'pending' GROUP BY sink
		UNION ALL
		SELECT sink, 'dead', count(*) FROM prescient_deliveries WHERE state = 'dead' GROUP BY sink
		UNION ALL
		SELECT sink, 'delivered', count(*) FROM prescient_deliveries WHERE state = 'delivered' AND delivered_at >= $1 GROUP BY sink`,
		micros(since))
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", interpretError(err))
	}
	defer rows.Close()
	out := make(map[string]*driver.DeliveryCount)
	for rows.Next() {
		var (
			sink, state string
			n           int
		)
		if err := rows.Scan(&sink, &state, &n); err != nil {
			return nil, fmt.Errorf("count deliveries: %w", interpretError(err))
		}
		c := out[sink]
		if c == nil {
			c = &driver.DeliveryCount{}
			out[sink] = c
		}
		switch driver.DeliveryState(state) {
		case driver.DeliveryPending:
			c.Pending = n
		case driver.DeliveryDead:
			c.Dead = n
		case driver.DeliveryDelivered:
			c.Delivered = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count deliveries: %w", interpretError(err))
	}
	return out, nil
}
