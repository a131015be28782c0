package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
)

// outboxRecordSQL records an event and its deliveries in one statement; it
// returns 0 rows' worth (count 0) when the idempotency key was recorded
// before, and then inserts no delivery.
const outboxRecordSQL = `
	WITH e AS (
		INSERT INTO prescient_outbox (created_at, job_id, entity, entity_key, check_name, stage, event, severity, payload, idempotency_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10)
		ON CONFLICT (idempotency_key) DO NOTHING
		RETURNING id
	), d AS (
		INSERT INTO prescient_deliveries (event_id, sink, state, attempts, next_attempt_at, updated_at)
		SELECT e.id, s.sink, 'pending', 0, $1, $1 FROM e, unnest($11::text[]) AS s(sink)
	)
	SELECT count(*) FROM e`

// OutboxRecord records an event and its deliveries in the check's
// savepoint, in one round trip.
func (t *procTx) OutboxRecord(ctx context.Context, p *driver.OutboxRecordParams) (bool, error) {
	var payload *string
	if len(p.Payload) > 0 {
		s := string(p.Payload)
		payload = &s
	}
	sinks := p.Sinks
	if sinks == nil {
		sinks = []string{}
	}
	var n int
	err := t.QueryRow(ctx, outboxRecordSQL, p.Now, p.JobID, p.Entity, p.Key, p.Check, p.Stage, p.Event, p.Severity,
		payload, p.IdempotencyKey, sinks).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", p.IdempotencyKey, err)
	}
	return n == 1, nil
}

// deliveryColumns are the columns scanDelivery reads, of the deliveries d
// joined with their events o.
const deliveryColumns = `d.sink, d.state, d.attempts, d.next_attempt_at, d.lease_owner, d.last_status, d.last_error,
	d.delivered_at, d.updated_at, o.id, o.idempotency_key, o.event, o.stage, o.severity, o.entity, o.entity_key,
	o.check_name, o.job_id, o.payload, o.created_at`

func scanDelivery(row pgx.CollectableRow) (*driver.Delivery, error) {
	d := &driver.Delivery{Event: &driver.Event{}}
	var (
		owner, lastErr *string
		status         *int32
		delivered      *time.Time
		payload        []byte
		state          string
	)
	e := d.Event
	err := row.Scan(&d.Sink, &state, &d.Attempts, &d.NextAttemptAt, &owner, &status, &lastErr, &delivered, &d.UpdatedAt,
		&e.ID, &e.IdempotencyKey, &e.Event, &e.Stage, &e.Severity, &e.Entity, &e.Key, &e.Check, &e.JobID, &payload, &e.CreatedAt)
	if err != nil {
		return nil, err
	}
	d.State = driver.DeliveryState(state)
	d.NextAttemptAt, d.UpdatedAt, e.CreatedAt = d.NextAttemptAt.UTC(), d.UpdatedAt.UTC(), e.CreatedAt.UTC()
	d.DeliveredAt = utcOrZero(delivered)
	if owner != nil {
		d.LeaseOwner = *owner
	}
	if status != nil {
		d.LastStatus = int(*status)
	}
	if lastErr != nil {
		d.LastError = *lastErr
	}
	if payload != nil {
		e.Payload = payload
	}
	return d, nil
}

// DeliveriesClaim claims due deliveries with FOR UPDATE SKIP LOCKED: two
// servers claiming at once take different deliveries, and the lease keeps
// a claimed one from being due again until it ends.
func (s *Store) DeliveriesClaim(ctx context.Context, p *driver.DeliveriesClaimParams) ([]*driver.Delivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		WITH c AS (
			SELECT event_id, sink FROM prescient_deliveries
			WHERE sink = $1 AND state = 'pending' AND next_attempt_at <= $2
			ORDER BY next_attempt_at, event_id
			LIMIT $5
			FOR UPDATE SKIP LOCKED
		), d AS (
			UPDATE prescient_deliveries d
			SET attempts = d.attempts + 1, next_attempt_at = $3, lease_owner = $4, updated_at = $2
			FROM c WHERE d.event_id = c.event_id AND d.sink = c.sink
			RETURNING d.*
		)
		SELECT `+deliveryColumns+`
		FROM d JOIN prescient_outbox o ON o.id = d.event_id
		ORDER BY d.event_id`, p.Sink, p.Now, p.LeaseUntil, p.Server, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries of sink %s: %w", p.Sink, interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries of sink %s: %w", p.Sink, interpretError(ctx, err))
	}
	return out, nil
}

// DeliveryFinish records an attempt's result.
func (s *Store) DeliveryFinish(ctx context.Context, p *driver.DeliveryFinishParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	var lastErr *string
	if p.Err != "" {
		lastErr = &p.Err
	}
	var status *int
	if p.Status != 0 {
		status = &p.Status
	}
	next := p.NextAttemptAt
	if p.State != driver.DeliveryPending {
		next = p.Now
	}
	var lease *time.Time
	if !p.Lease.IsZero() {
		l := p.Lease.Truncate(time.Microsecond) // as stored
		lease = &l
	}
	tag, err := s.pool.Exec(ctx, `
		UPDATE prescient_deliveries SET
			state = $4, attempts = $5, next_attempt_at = $6, lease_owner = NULL,
			last_status = $7, last_error = $8,
			delivered_at = CASE WHEN $4 = 'delivered' THEN $9::timestamptz END, updated_at = $9
		WHERE event_id = $1 AND sink = $2 AND attempts = $3 AND state = 'pending'
			AND ($10::timestamptz IS NULL OR next_attempt_at = $10)`,
		p.EventID, p.Sink, p.Attempt, string(p.State), p.Attempts, next, status, lastErr, p.Now, lease)
	if err != nil {
		return false, fmt.Errorf("finish delivery of event %d to sink %s: %w", p.EventID, p.Sink, interpretError(ctx, err))
	}
	return tag.RowsAffected() == 1, nil
}

// DeliveriesRetry queues dead deliveries again.
func (s *Store) DeliveriesRetry(ctx context.Context, p *driver.DeliveriesRetryParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE prescient_deliveries SET state = 'pending', attempts = 0, next_attempt_at = $3, lease_owner = NULL, updated_at = $3
		WHERE state = 'dead' AND ($1 = '' OR sink = $1) AND ($2 <= 0 OR event_id = $2)`,
		p.Sink, p.EventID, p.Now)
	if err != nil {
		return 0, fmt.Errorf("queue dead deliveries again: %w", interpretError(ctx, err))
	}
	return int(tag.RowsAffected()), nil
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
	rows, err := s.pool.Query(ctx, `
		SELECT `+deliveryColumns+`
		FROM prescient_deliveries d JOIN prescient_outbox o ON o.id = d.event_id
		WHERE ($1 = '' OR d.sink = $1) AND ($2 = '' OR d.state = $2) AND (d.event_id < $3 OR (d.event_id = $3 AND $5 <> '' AND d.sink COLLATE "C" > $5))
		ORDER BY d.event_id DESC, d.sink COLLATE "C"
		LIMIT $4`, p.Sink, string(p.State), before, p.Limit, p.AfterSink)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, scanDelivery)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", interpretError(ctx, err))
	}
	return out, nil
}

// DeliveryCounts counts deliveries per sink, reading the partial indexes:
// its cost follows the pending and dead deliveries and those delivered
// since, never every delivery ever made.
func (s *Store) DeliveryCounts(ctx context.Context, since time.Time) (map[string]*driver.DeliveryCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT sink, 'pending', count(*) FROM prescient_deliveries WHERE state = 'pending' GROUP BY sink
		UNION ALL
		SELECT sink, 'dead', count(*) FROM prescient_deliveries WHERE state = 'dead' GROUP BY sink
		UNION ALL
		SELECT sink, 'delivered', count(*) FROM prescient_deliveries WHERE state = 'delivered' AND delivered_at >= $1 GROUP BY sink`,
		since)
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", interpretError(ctx, err))
	}
	out := make(map[string]*driver.DeliveryCount)
	var (
		sink, state string
		n           int
	)
	_, err = pgx.ForEachRow(rows, []any{&sink, &state, &n}, func() error {
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
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count deliveries: %w", interpretError(ctx, err))
	}
	return out, nil
}

// Notify sends payload on channel with pg_notify, for the postgres sink:
// every session that LISTENs on the channel receives it once this
// statement commits (at once: it runs on its own).
func (s *Store) Notify(ctx context.Context, channel, payload string) error {
	if channel == "" {
		return errors.New("notify: no channel")
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return fmt.Errorf("notify %s: %w", channel, interpretError(ctx, err))
	}
	return nil
}
