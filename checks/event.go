package checks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Event is something a check raises for the outside world: an alert, an
// escalation. Emitted through Job.Emit, it is recorded in the job's
// transaction (an outbox row, with one delivery per sink of the check's
// Opts.Sinks), so it exists exactly when the check's result commits; the
// server then delivers it to the sinks, at least once, never losing it.
type Event struct {
	// Name names the event, e.g. "order.unshipped".
	Name string `json:"event"`
	// Stage names the step of the check that raised it, e.g. "3h"; it makes
	// the idempotency key. Default: Name.
	Stage string `json:"stage"`
	// Severity is free text for the receiver, e.g. "warning", "critical".
	Severity string `json:"severity,omitempty"`
	// Payload is carried to the sinks as is: JSON, at most PayloadMax bytes.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Outbox records events in a job's transaction. The engine sets Job.Outbox.
type Outbox interface {
	// Emit records ev for the job. An event whose idempotency key
	// (entity/key/check/stage) was recorded before is not recorded again: a
	// stage is raised once per job identity, however often checks run.
	// It reports whether ev was recorded.
	Emit(ctx context.Context, job *Job, ev Event) (bool, error)
}

// ErrNoOutbox is returned by Job.Emit when the job was not handed to a check
// by the engine (a Job built by hand, in a test).
var ErrNoOutbox = errors.New("checks: the job has no outbox (it was not handed to a check by the engine)")

// Emit records ev in the job's transaction (see Event and Outbox), after
// the outbox has checked it (Event.Validate). It returns whether the event
// was recorded: false when its stage was raised before.
func (j *Job) Emit(ctx context.Context, ev Event) (bool, error) {
	if j.Outbox == nil {
		return false, ErrNoOutbox
	}
	return j.Outbox.Emit(ctx, j, ev)
}

// SeverityMax is the longest severity an event may carry, in bytes.
const SeverityMax = 100

// Validate reports what makes ev unfit to record: a name or stage that is
// not a valid name (an empty stage is taken as the name), a severity over
// SeverityMax bytes, a payload that fails ValidatePayload.
func (ev Event) Validate() error {
	stage := ev.Stage
	if stage == "" {
		stage = ev.Name
	}
	if err := ValidateName("event", ev.Name); err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	if err := ValidateName("stage", stage); err != nil {
		return fmt.Errorf("emit %s: %w", ev.Name, err)
	}
	if len(ev.Severity) > SeverityMax {
		return fmt.Errorf("emit %s: severity is %d bytes, more than %d", ev.Name, len(ev.Severity), SeverityMax)
	}
	if len(ev.Payload) > 0 {
		if err := ValidatePayload(ev.Payload); err != nil {
			return fmt.Errorf("emit %s: %w", ev.Name, err)
		}
	}
	return nil
}

// IdempotencyKeyFor is the key the receivers of ev see: entity/key/check/stage.
func (j *Job) IdempotencyKeyFor(ev Event) string {
	stage := ev.Stage
	if stage == "" {
		stage = ev.Name
	}
	return j.Entity + "/" + j.Key + "/" + j.Check + "/" + stage
}
