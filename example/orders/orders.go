// Package orders is prescient's worked example, written as an application
// would write it: an order that is still unshipped some time after it was
// placed raises an alert, and, if it stays unshipped, an escalation.
//
// The application schedules the check in the same transaction that inserts
// the order (Place), and resolves it in the transaction that ships the order
// (Ship). The check looks the one order up by primary key through the job's
// transaction and writes its alert through that same transaction, so an alert
// commits exactly once, together with the job's new state.
//
// The SQL is portable between PostgreSQL and SQLite: $1 placeholders, plain
// types, INSERT without RETURNING.
package orders

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// Names used by the example.
const (
	// Entity is the entity name of orders.
	Entity = "order"
	// Check is the name of the check that watches unshipped orders.
	Check = "order_unshipped"
	// EventShipped is the event that settles the check.
	EventShipped = "shipped"
)

// Alert stages written to the alerts table, and the stages of the events
// the check raises (checks.Event.Stage).
const (
	StageAlert      = "alert"
	StageEscalation = "escalation"
)

// Events the check raises (checks.Job.Emit), with the order's placed_at in
// their payload ({"placed_at": "2025-06-01T12:00:00Z"}): the same as its
// declarative twin, order_unshipped_sql in declarative-sqlite.yaml and
// declarative-postgres.yaml, raises.
const (
	// EventUnshipped is raised with the alert, severity SeverityAlert.
	EventUnshipped = "order.unshipped"
	// EventEscalated is raised with the escalation, severity
	// SeverityEscalation.
	EventEscalated     = "order.unshipped.escalated"
	SeverityAlert      = "warning"
	SeverityEscalation = "critical"
)

// Order statuses.
const (
	StatusUnshipped = "unshipped"
	StatusShipped   = "shipped"
	StatusCancelled = "cancelled"
)

// Schema is the DDL of the example's two tables. It runs on PostgreSQL and
// SQLite alike; create it in the schema prescient's store uses, so that the
// check sees the tables through the job's transaction.
const Schema = `
CREATE TABLE IF NOT EXISTS orders (
	id        text PRIMARY KEY,
	status    text NOT NULL,
	placed_at timestamp NOT NULL
);
CREATE TABLE IF NOT EXISTS alerts (
	order_id  text NOT NULL,
	stage     text NOT NULL,
	raised_at timestamp NOT NULL,
	PRIMARY KEY (order_id, stage)
);`

// Defaults for Options.
const (
	AlertAfterDefault    = 3 * time.Hour
	EscalateAfterDefault = 24 * time.Hour
)

// Options tune the check. Zero fields take their defaults.
type Options struct {
	// AlertAfter is how long after it was placed an unshipped order raises
	// an alert. Default AlertAfterDefault.
	AlertAfter time.Duration
	// EscalateAfter is how long after it was placed (orders.placed_at) an
	// order still unshipped raises an escalation, or in the slot after its
	// alert if the application moved the alert past that time. It must be
	// longer than AlertAfter. Default EscalateAfterDefault.
	EscalateAfter time.Duration
	// Logger, if set, is told of every alert the check writes (at Info, with
	// order, stage and slot). The log line is written before the transaction
	// commits; the alerts table is the record.
	Logger *slog.Logger
	// Sinks names the sinks the check's events are delivered to (see
	// checks.Opts.Sinks). None: the events are recorded in the outbox only.
	Sinks []string
}

func (o Options) withDefaults() Options {
	if o.AlertAfter == 0 {
		o.AlertAfter = AlertAfterDefault
	}
	if o.EscalateAfter == 0 {
		o.EscalateAfter = EscalateAfterDefault
	}
	return o
}

// Validate reports options that make no sense.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.AlertAfter < 0:
		return fmt.Errorf("orders: AlertAfter %s must be positive", o.AlertAfter)
	case o.EscalateAfter <= o.AlertAfter:
		return fmt.Errorf("orders: EscalateAfter %s must be longer than AlertAfter %s", o.EscalateAfter, o.AlertAfter)
	}
	return nil
}

// Register adds the order_unshipped check, awaiting "shipped", to reg.
func Register(reg *checks.Registry, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o = o.withDefaults()
	return reg.Register(Check, o.check, &checks.Opts{Awaits: []string{EventShipped}, Sinks: o.Sinks})
}

// check is the order_unshipped check. It returns the zero time (done) when
// the order is gone or no longer unshipped. Otherwise its first run raises
// the alert and asks to run again when the escalation is due; its second run
// raises the escalation and is done. Each writes its row in the alerts table
// and raises its event (EventUnshipped, EventEscalated) in the outbox, both
// through the job's transaction.
func (o Options) check(ctx context.Context, job *checks.Job) (time.Time, error) {
	var (
		status   string
		placedAt time.Time
	)
	err := job.Tx.QueryRow(ctx, `SELECT status, placed_at FROM orders WHERE id = $1`, job.Key).Scan(&status, &placedAt)
	switch {
	case errors.Is(err, prescient.ErrNotFound) || errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, nil // deleted: nothing to watch
	case err != nil:
		return time.Time{}, fmt.Errorf("look up order %s: %w", job.Key, err)
	case status != StatusUnshipped:
		return time.Time{}, nil
	}
	stage := StageAlert
	if job.CheckCount > 0 {
		stage = StageEscalation
	}
	if _, err := job.Tx.Exec(ctx, `INSERT INTO alerts (order_id, stage, raised_at) VALUES ($1, $2, $3)`,
		job.Key, stage, job.Now.UTC()); err != nil {
		return time.Time{}, fmt.Errorf("raise %s for order %s: %w", stage, job.Key, err)
	}
	ev := checks.Event{Name: EventUnshipped, Stage: stage, Severity: SeverityAlert, Payload: placedPayload(placedAt)}
	if stage == StageEscalation {
		ev.Name, ev.Severity = EventEscalated, SeverityEscalation
	}
	if _, err := job.Emit(ctx, ev); err != nil {
		return time.Time{}, fmt.Errorf("raise %s for order %s: %w", stage, job.Key, err)
	}
	if o.Logger != nil {
		o.Logger.InfoContext(ctx, "order unshipped: "+stage+" raised", "order", job.Key, "stage", stage,
			"slot", job.Slot, "check", job.CheckCount+1)
	}
	if stage == StageEscalation {
		return time.Time{}, nil
	}
	return o.escalateAt(placedAt, job.Slot), nil
}

// placedPayload is the events' payload: the time the order was placed, as
// RFC 3339 text in UTC.
func placedPayload(placedAt time.Time) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"placed_at": placedAt.UTC().Format(time.RFC3339Nano)})
	return b
}

// escalateAt is when the escalation of an order placed at placedAt is due,
// asked by its alert, which ran in slot. It counts from the order, not from
// the job's first check or from now: the application may have moved the
// alert (rescheduled it, or scheduled it again), and a check may run late,
// neither of which moves when the order was placed. An alert that ran after
// the escalation was due (moved past it) asks for the escalation at once: a
// time just after its slot, which the engine rounds up to the next slot.
func (o Options) escalateAt(placedAt, slot time.Time) time.Time {
	at := placedAt.UTC().Add(o.EscalateAfter)
	if !at.After(slot) {
		at = slot.Add(time.Nanosecond)
	}
	return at
}

// Place inserts an unshipped order placed at placedAt and schedules its
// check AlertAfter later, both in tx: the order and its check commit
// together or not at all. tx is the application's transaction, a pgx.Tx (for
// the PostgreSQL store) or a *sql.Tx (SQLite); client must use the same
// store. o should be the Options the check was registered with.
func Place(ctx context.Context, client *prescient.Client, tx any, id string, placedAt time.Time, o Options) (*prescient.Job, error) {
	o = o.withDefaults()
	if err := exec(ctx, tx, `INSERT INTO orders (id, status, placed_at) VALUES ($1, $2, $3)`,
		id, StatusUnshipped, placedAt.UTC()); err != nil {
		return nil, fmt.Errorf("place order %s: %w", id, err)
	}
	job, err := client.ScheduleTx(ctx, tx, prescient.ScheduleParams{
		Entity: Entity, Key: id, Check: Check, At: placedAt.Add(o.AlertAfter),
	})
	if err != nil {
		return nil, fmt.Errorf("place order %s: %w", id, err)
	}
	return job, nil
}

// Ship marks the order shipped and resolves its pending check, in tx. It
// returns how many pending checks the shipment settled.
func Ship(ctx context.Context, client *prescient.Client, tx any, id string) (int, error) {
	if err := exec(ctx, tx, `UPDATE orders SET status = $1 WHERE id = $2`, StatusShipped, id); err != nil {
		return 0, fmt.Errorf("ship order %s: %w", id, err)
	}
	n, err := client.ResolveTx(ctx, tx, Entity, id, EventShipped)
	if err != nil {
		return 0, fmt.Errorf("ship order %s: %w", id, err)
	}
	return n, nil
}

// Cancel marks the order cancelled and cancels its pending checks, in tx. It
// returns how many pending checks it cancelled.
func Cancel(ctx context.Context, client *prescient.Client, tx any, id string) (int, error) {
	if err := exec(ctx, tx, `UPDATE orders SET status = $1 WHERE id = $2`, StatusCancelled, id); err != nil {
		return 0, fmt.Errorf("cancel order %s: %w", id, err)
	}
	n, err := client.CancelTx(ctx, tx, Entity, id, "")
	if err != nil {
		return 0, fmt.Errorf("cancel order %s: %w", id, err)
	}
	return n, nil
}

// exec runs a statement in the application's transaction.
func exec(ctx context.Context, tx any, query string, args ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, query, args...)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	case nil:
		return errors.New("a transaction is required (a pgx.Tx or a *sql.Tx)")
	}
	return fmt.Errorf("%w: got %T, want a pgx.Tx or a *sql.Tx", prescient.ErrTxType, tx)
}
