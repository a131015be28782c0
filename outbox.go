package prescient

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
const SeverityMax = 100

// outbox is the checks.Outbox of one call of a check: it records through
// the call's checks.Tx, for the jobs of that call, with one delivery per
// sink of the check.
type outbox struct {
	ct    *checkTx
	check *checks.Check
	sinks []string
	jobs  []*checks.Job
}

var _ checks.Outbox = (*outbox)(nil)

// newOutbox returns the outbox of a call of check on jobs, over ct.
func newOutbox(ct *checkTx, check *checks.Check, jobs []*checks.Job) *outbox {
	var sinks []string
	for _, s := range check.Opts.Sinks {
		if !slices.Contains(sinks, s) {
			sinks = append(sinks, s)
		}
	}
	return &outbox{ct: ct, check: check, sinks: sinks, jobs: jobs}
}

// errForeignJob is returned by Emit for a job the check was not handed.
var errForeignJob = errors.New("prescient: emit: the job is not one this check was handed")

// Emit records ev for job in the check's transaction (see checks.Outbox).
func (o *outbox) Emit(ctx context.Context, job *checks.Job, ev checks.Event) (bool, error) {
	if !slices.Contains(o.jobs, job) {
		return false, errForeignJob
	}
	if ev.Stage == "" {
		ev.Stage = ev.Name
	}
	if err := validateEvent(ev); err != nil {
		return false, err
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

// validateEvent checks what Job.Emit checks, for callers of Outbox.Emit
// that bypass it, and the severity.
func validateEvent(ev checks.Event) error {
	if err := checks.ValidateName("event", ev.Name); err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	if err := checks.ValidateName("stage", ev.Stage); err != nil {
		return fmt.Errorf("emit %s: %w", ev.Name, err)
	}
	if len(ev.Severity) > SeverityMax {
		return fmt.Errorf("emit %s: severity is %d bytes, more than %d", ev.Name, len(ev.Severity), SeverityMax)
	}
	if len(ev.Payload) > 0 {
		if err := checks.ValidatePayload(ev.Payload); err != nil {
			return fmt.Errorf("emit %s: %w", ev.Name, err)
		}
	}
	return nil
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

// DeliveriesParams selects deliveries for Deliveries: of one sink and in one
// state when set, newest event first, before the event BeforeEventID when
// positive (to page on), at most Limit (0 means 100).
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
	ds, err := c.drv.DeliveryList(ctx, &q)
	if err != nil {
		return nil, fmt.Errorf("prescient: deliveries: %w", err)
	}
	return ds, nil
}
