package prescient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// Events a check raises (checks.Job.Emit) are recorded in the outbox
// through the check's own checks.Tx, so they follow the exactly-once rule of
// execute.go like any other write of the check: they commit with its job's
// new state, or not at all. A failed check's events are undone with its
// savepoint, or with the transaction of an optimistic group, which then runs
// again and records those of the checks before it once more, once; an
// abandoned check (past its runtime guard) can no longer record any. The
// servers deliver the recorded events to the sinks (package delivery).

// SeverityMax is the longest severity an event may carry, in bytes.
const SeverityMax = checks.SeverityMax

// outbox is the checks.Outbox of one call of a check: it records through
// the call's checks.Tx, for the jobs of that call (the engine sets their
// Outbox to it), with one delivery per sink of the check.
type outbox struct {
	ct    *checkTx
	sinks []string
}

var _ checks.Outbox = (*outbox)(nil)

// newOutbox returns the outbox of a call of check, over ct. The registry
// has removed repeated sinks from the check's options.
func newOutbox(ct *checkTx, check *checks.Check) *outbox {
	return &outbox{ct: ct, sinks: check.Opts.Sinks}
}

// errForeignJob is returned by Emit for a job the check was not handed.
var errForeignJob = errors.New("prescient: emit: the job is not one this check was handed")

// Emit records ev for job in the check's transaction (see checks.Outbox).
func (o *outbox) Emit(ctx context.Context, job *checks.Job, ev checks.Event) (bool, error) {
	// The engine hands every job of the call this outbox: a job with
	// another is not the call's (a constant-time test; a batch of 10,000
	// jobs each emitting must not search the batch each time).
	if job.Outbox != checks.Outbox(o) {
		return false, errForeignJob
	}
	if err := ev.Validate(); err != nil {
		return false, err
	}
	if ev.Stage == "" {
		ev.Stage = ev.Name
	}
	ctx, release, err := o.ct.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer o.ct.mu.Unlock()
	defer release()
	return o.ct.tx.OutboxRecord(ctx, &driver.OutboxRecordParams{
		JobID:          job.ID,
		Entity:         job.Entity,
		Key:            job.Key,
		Check:          job.Check,
		Stage:          ev.Stage,
		Event:          ev.Name,
		Severity:       ev.Severity,
		Payload:        ev.Payload,
		IdempotencyKey: job.IdempotencyKeyFor(ev),
		Sinks:          o.sinks,
		Now:            job.Now,
	})
}

// Event is an event a check raised, as the outbox holds it.
type Event = driver.Event

// Delivery is one event's delivery to one sink.
type Delivery = driver.Delivery

// DeliveryState is where a delivery stands: DeliveryPending,
// DeliveryDelivered or DeliveryDead.
type DeliveryState = driver.DeliveryState

// The states of a delivery.
const (
	DeliveryPending   = driver.DeliveryPending
	DeliveryDelivered = driver.DeliveryDelivered
	DeliveryDead      = driver.DeliveryDead
)

// DeliveryCount counts one sink's deliveries per state (Status.Deliveries).
type DeliveryCount = driver.DeliveryCount

// DeliveryCounts counts, per sink, the pending and dead deliveries of events
// and those delivered since the time given (as Status.Deliveries does for
// the last day). A sink with none of them is left out.
func (c *Client) DeliveryCounts(ctx context.Context, since time.Time) (map[string]*DeliveryCount, error) {
	n, err := c.drv.DeliveryCounts(ctx, since)
	if err != nil {
		return nil, fmt.Errorf("prescient: delivery counts: %w", err)
	}
	return n, nil
}

// RetryDeliveries queues dead deliveries again, once their receiver is
// fixed: those of sink (every sink when empty), of the event eventID only
// when positive. Each is pending again with no attempts, due at once, so the
// servers deliver it with a full max_attempts; its last status and error
// stay until the next attempt. It returns how many.
func (c *Client) RetryDeliveries(ctx context.Context, sink string, eventID int64) (int, error) {
	if sink != "" {
		if err := checks.ValidateName("sink", sink); err != nil {
			return 0, fmt.Errorf("prescient: retry deliveries: %w", err)
		}
	}
	n, err := c.drv.DeliveriesRetry(ctx, &driver.DeliveriesRetryParams{Sink: sink, EventID: eventID, Now: c.now()})
	if err != nil {
		return 0, fmt.Errorf("prescient: %w", err)
	}
	return n, nil
}

// DeliveriesParams selects deliveries for Deliveries: of one sink and in one
// state when set, newest event first (and one event's by sink name), at most
// Limit (0 means 100). To page on, set BeforeEventID and AfterSink to the
// event id and sink of the last delivery listed.
type DeliveriesParams = driver.DeliveryListParams

// Deliveries lists deliveries of events to sinks with their events, newest
// event first. p may be nil for the latest 100.
func (c *Client) Deliveries(ctx context.Context, p *DeliveriesParams) ([]*Delivery, error) {
	var q DeliveriesParams
	if p != nil {
		q = *p
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.Limit < 0 {
		return nil, fmt.Errorf("prescient: deliveries: limit %d must not be negative", q.Limit)
	}
	if q.State != "" && !q.State.Valid() {
		return nil, fmt.Errorf("prescient: deliveries: unknown state %q (want pending, delivered or dead)", q.State)
	}
	if q.Sink != "" {
		if err := checks.ValidateName("sink", q.Sink); err != nil {
			return nil, fmt.Errorf("prescient: deliveries: %w", err)
		}
	}
	if q.AfterSink != "" && q.BeforeEventID <= 0 {
		return nil, fmt.Errorf("prescient: deliveries: AfterSink %q needs BeforeEventID, the event of the last delivery listed", q.AfterSink)
	}
	ds, err := c.drv.DeliveryList(ctx, &q)
	if err != nil {
		return nil, fmt.Errorf("prescient: deliveries: %w", err)
	}
	return ds, nil
}
