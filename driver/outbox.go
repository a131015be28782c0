package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// DeliveryState is where one event's delivery to one sink stands.
type DeliveryState string

const (
	// DeliveryPending: not delivered yet; due at NextAttemptAt (a first
	// attempt, a retry, or the end of the lease of an attempt under way).
	DeliveryPending DeliveryState = "pending"
	// DeliveryDelivered: the sink accepted the event.
	DeliveryDelivered DeliveryState = "delivered"
	// DeliveryDead: the sink refused or failed it on every attempt allowed;
	// LastStatus and LastError say how the last one ended. Never retried by
	// the servers.
	DeliveryDead DeliveryState = "dead"
)

// DeliveryStates lists the states in the order people read them.
var DeliveryStates = []DeliveryState{DeliveryPending, DeliveryDelivered, DeliveryDead}

// Valid reports whether s is one of DeliveryStates.
func (s DeliveryState) Valid() bool {
	return s == DeliveryPending || s == DeliveryDelivered || s == DeliveryDead
}

// OutboxRecordParams is one event to record in a processing transaction,
// with one pending delivery per sink, due at Now.
type OutboxRecordParams struct {
	// JobID is the pending job whose check raised the event.
	JobID int64
	// Entity, Key and Check name the job; Stage and Event the event.
	Entity, Key, Check, Stage, Event string
	Severity                         string
	// Payload is JSON, or nil.
	Payload json.RawMessage
	// IdempotencyKey is entity/key/check/stage: an event whose key was
	// recorded before is not recorded again.
	IdempotencyKey string
	// Sinks are the distinct sink names to deliver to; none records the
	// event only.
	Sinks []string
	Now   time.Time
}

// Event is a recorded event, as the outbox table holds it.
type Event struct {
	ID             int64           `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Event          string          `json:"event"`
	Stage          string          `json:"stage"`
	Severity       string          `json:"severity,omitempty"`
	Entity         string          `json:"entity"`
	Key            string          `json:"key"`
	Check          string          `json:"check"`
	JobID          int64           `json:"job_id"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
}

// OutboxEntry is one recorded event with its deliveries, as
// Driver.OutboxExport returns them and Driver.OutboxImport takes them. The
// deliveries' Event is nil: it is Event.
type OutboxEntry struct {
	Event      Event       `json:"event"`
	Deliveries []*Delivery `json:"deliveries"`
}

// CheckOutboxImport reports what makes entries unfit for
// Driver.OutboxImport before any database is asked: an id that is not
// positive, an id or idempotency key that appears twice, a delivery of an
// unknown state, or two deliveries to one sink. Every driver calls it
// first.
func CheckOutboxImport(entries []*OutboxEntry) error {
	seenID := make(map[int64]bool, len(entries))
	seenKey := make(map[string]bool, len(entries))
	for _, en := range entries {
		e := &en.Event
		switch {
		case e.ID < 1:
			return fmt.Errorf("import %d event(s): event %s has id %d, want a positive id", len(entries), e.IdempotencyKey, e.ID)
		case seenID[e.ID]:
			return fmt.Errorf("import %d event(s): id %d appears twice (event %s)", len(entries), e.ID, e.IdempotencyKey)
		case seenKey[e.IdempotencyKey]:
			return fmt.Errorf("import %d event(s): event %s appears twice", len(entries), e.IdempotencyKey)
		}
		seenID[e.ID], seenKey[e.IdempotencyKey] = true, true
		sinks := make(map[string]bool, len(en.Deliveries))
		for _, d := range en.Deliveries {
			switch d.State {
			case DeliveryPending, DeliveryDelivered, DeliveryDead:
			default:
				return fmt.Errorf("import %d event(s): event %s: delivery to sink %s has state %q, want pending, delivered or dead",
					len(entries), e.IdempotencyKey, d.Sink, d.State)
			}
			if sinks[d.Sink] {
				return fmt.Errorf("import %d event(s): event %s: two deliveries to sink %s", len(entries), e.IdempotencyKey, d.Sink)
			}
			sinks[d.Sink] = true
		}
	}
	return nil
}

// Delivery is one event's delivery to one sink.
type Delivery struct {
	Event *Event        `json:"event"`
	Sink  string        `json:"sink"`
	State DeliveryState `json:"state"`
	// Attempts counts the sends started, the one under way included.
	Attempts int `json:"attempts"`
	// NextAttemptAt is when a pending delivery is due: its next attempt,
	// or the end of the lease of the attempt under way.
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// LeaseOwner is the server whose attempt is under way, if any.
	LeaseOwner string `json:"lease_owner,omitempty"`
	// LastStatus is the status the sink answered the last finished attempt
	// with (an HTTP status), 0 when it gave none (a timeout, a refused
	// connection) or none finished yet.
	LastStatus int `json:"last_status,omitempty"`
	// LastError says why the last finished attempt failed.
	LastError   string    `json:"last_error,omitempty"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// DeliveriesClaimParams claims the due deliveries of one sink.
type DeliveriesClaimParams struct {
	Sink string
	// Now decides what is due (NextAttemptAt <= Now).
	Now time.Time
	// LeaseUntil becomes the claimed deliveries' NextAttemptAt: if their
	// results are not recorded by then (their server died), they are due
	// again. It must be after Now.
	LeaseUntil time.Time
	// Server is recorded as the lease's owner.
	Server string
	// Limit caps the deliveries claimed; it must be positive.
	Limit int
}

// Validate reports params a claim cannot use.
func (p *DeliveriesClaimParams) Validate() error {
	switch {
	case p.Sink == "":
		return errors.New("claim deliveries: no sink")
	case p.Limit <= 0:
		return fmt.Errorf("claim deliveries: limit %d must be positive", p.Limit)
	case !p.LeaseUntil.After(p.Now):
		return fmt.Errorf("claim deliveries: lease end %s is not after now %s", p.LeaseUntil, p.Now)
	}
	return nil
}

// DeliveryFinishParams records the result of one attempt.
type DeliveryFinishParams struct {
	EventID int64
	Sink    string
	// Attempt is the Attempts the claim returned: the result is recorded
	// only while the delivery is still pending with that many attempts (its
	// lease was not lost to another server's claim).
	Attempt int
	// Lease is the NextAttemptAt the claim returned, the end of its lease:
	// the result is recorded only while the delivery still holds that
	// lease. Attempt alone no longer tells two claims apart once a retry
	// (DeliveriesRetry) has set attempts back to 0. Zero leaves it out.
	Lease time.Time
	// State is the new state: DeliveryDelivered, DeliveryDead, or
	// DeliveryPending to retry at NextAttemptAt.
	State         DeliveryState
	NextAttemptAt time.Time
	// Attempts is the new attempt count: Attempt, or Attempt-1 for an
	// attempt given back unfinished (shutdown), which does not count.
	Attempts int
	Status   int
	Err      string
	Now      time.Time
}

// DeliveriesRetryParams selects the dead deliveries DeliveriesRetry queues
// again: those of Sink (every sink when empty), of the event EventID only
// when positive.
type DeliveriesRetryParams struct {
	Sink    string
	EventID int64
	Now     time.Time
}

// Validate reports params that cannot be recorded.
func (p *DeliveryFinishParams) Validate() error {
	switch {
	case !p.State.Valid():
		return fmt.Errorf("finish delivery %d/%s: unknown state %q", p.EventID, p.Sink, p.State)
	case p.Attempts < 0 || p.Attempts > p.Attempt:
		return fmt.Errorf("finish delivery %d/%s: attempts %d must be between 0 and the attempt, %d", p.EventID, p.Sink, p.Attempts, p.Attempt)
	case p.State == DeliveryPending && p.NextAttemptAt.IsZero():
		return fmt.Errorf("finish delivery %d/%s: a retry needs its time", p.EventID, p.Sink)
	}
	return nil
}

// DeliveryListParams selects deliveries for operators, newest event first.
type DeliveryListParams struct {
	// Sink and State, when set, keep the deliveries of that sink, in that
	// state.
	Sink  string
	State DeliveryState
	// BeforeEventID, when positive, continues a listing after its last
	// event: the events older than it. With AfterSink too, it continues
	// after the last delivery listed, the event BeforeEventID's delivery to
	// AfterSink: that event's deliveries to the sinks after AfterSink (in
	// name order) come first, so that a page that ended among one event's
	// deliveries loses none of the others.
	BeforeEventID int64
	AfterSink     string
	// Limit caps the deliveries listed; it must be positive.
	Limit int
}

// DeliveryCount is the deliveries of one sink, per state: every pending
// and dead one, and those delivered since the time asked for.
type DeliveryCount struct {
	Pending   int `json:"pending"`
	Delivered int `json:"delivered"`
	Dead      int `json:"dead"`
}
