package prescient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// Observer receives what the engine does as it happens: every check that
// ran, every slot fired, every sweep and every failed use of the store.
// Package metrics implements it for Prometheus; the engine itself depends on
// no metrics library.
//
// The engine calls an Observer from its own goroutines, concurrently, on the
// path that runs checks: its methods must be safe for concurrent use, quick,
// and must not block (a slow Observer slows every slot). They must not keep
// the events' maps, which the engine may reuse. Embed NopObserver to
// implement only some methods and keep compiling when methods are added.
type Observer interface {
	// CheckFinished is called once per job whose check ran, to a result or
	// to a failure, before its group's transaction commits. A job whose
	// transaction then dies, or whose group runs again after another
	// check failed without a savepoint, runs again and is reported again;
	// a check interrupted by shutdown is not reported.
	CheckFinished(CheckEvent)
	// SlotFired is called once per firing of a slot (FireSlot, a tick, a
	// catch-up, a sweep in run mode) whose start the ledger recorded, after
	// the firing ended, whether it finished or was cut short.
	SlotFired(SlotEvent)
	// SweepFinished is called once per sweep, after it ended.
	SweepFinished(SweepEvent)
	// StoreError is called for each failed use of the store by the engine,
	// except those of its own shutdown (a context canceled).
	StoreError(StoreErrorEvent)
}

// NopObserver is an Observer that ignores every event: Config.Observer's
// default.
type NopObserver struct{}

// CheckFinished does nothing.
func (NopObserver) CheckFinished(CheckEvent) {}

// SlotFired does nothing.
func (NopObserver) SlotFired(SlotEvent) {}

// SweepFinished does nothing.
func (NopObserver) SweepFinished(SweepEvent) {}

// StoreError does nothing.
func (NopObserver) StoreError(StoreErrorEvent) {}

// What a check run led to, as CheckEvent.Outcome names it when the job stays
// pending. A run that ended the job names its history outcome instead (done,
// failed, guard_max_checks, guard_horizon, guard_past).
const (
	// RunRescheduled: the check asked to run again, and will.
	RunRescheduled = "rescheduled"
	// RunRetry: the check failed and will be retried.
	RunRetry = "retry"
)

// CheckEvent is one job's check run.
type CheckEvent struct {
	// Check is the check's name; Slot the slot the job was due in.
	Check string
	Slot  time.Time
	// Outcome is RunRescheduled, RunRetry or the history outcome that ended
	// the job.
	Outcome string
	// Duration is how long the check ran for this job: a batch check's call
	// shared out evenly among its jobs, as history's runtime is.
	Duration time.Duration
	// Err is the check's failure (an error, a panic, an overrun), nil when it
	// ran to a result.
	Err error
}

// SlotEvent is one firing of a slot.
type SlotEvent struct {
	Slot time.Time
	// Kind is KindFire, KindCatchup or KindSweep.
	Kind string
	// Lag is how long after the slot began the firing started, on the
	// client's clock (Config.Now).
	Lag time.Duration
	// Duration is how long the firing took.
	Duration time.Duration
	// Checked, Rescheduled, Failures, Unknown and Outcomes are what this
	// firing committed, counted as the ledger counts them.
	Checked, Rescheduled, Failures, Unknown int
	Outcomes                                map[history.Outcome]int
	// Err says why the firing was cut short (shutdown, a store error), or is
	// nil when it finished. Its jobs left due stay pending for catch-up or
	// the sweep.
	Err error
}

// SweepEvent is one sweep.
type SweepEvent struct {
	// Trigger says what started it: SweepCall, SweepStartup, SweepScheduled,
	// or why the client swept at once ("store recovered", "took over
	// positions").
	Trigger string
	Mode    SweepMode
	// Slots counts the overdue slots fired (run mode); Jobs the jobs checked
	// (run mode) or moved (reslot mode).
	Slots, Jobs int
	Duration    time.Duration
	// Err is the sweep's error, nil when it took everything it could.
	Err error
}

// What started a sweep (SweepEvent.Trigger).
const (
	SweepCall      = "call" // Client.Sweep
	SweepStartup   = "start-up"
	SweepScheduled = "schedule" // Config.SweepSchedule
)

// StoreErrorEvent is a failed use of the store.
type StoreErrorEvent struct {
	// Op names what the engine was doing: one of the StoreOp… constants.
	Op  string
	Err error
}

// What the engine was doing when the store failed (StoreErrorEvent.Op): a
// short, fixed list, fit for a metric's label.
const (
	StoreOpStart     = "start"     // recording the grid and the check catalog
	StoreOpHeartbeat = "heartbeat" // registering, heartbeating, listing or removing servers
	StoreOpLedger    = "ledger"    // reading or writing the slot ledger
	StoreOpJobsDue   = "jobs_due"  // listing the jobs due in a slot
	StoreOpAttempts  = "attempts"  // reading or ending the attempts of checks that never finished
	StoreOpGroup     = "group"     // a group's transaction: claim, apply, commit
	StoreOpSweep     = "sweep"     // listing overdue slots, moving overdue jobs
	StoreOpPrune     = "prune"     // pruning history
)

// StoreOps lists every StoreErrorEvent.Op, for metrics that start each at
// zero.
var StoreOps = []string{StoreOpStart, StoreOpHeartbeat, StoreOpLedger, StoreOpJobsDue, StoreOpAttempts, StoreOpGroup, StoreOpSweep, StoreOpPrune}

// storeError tells the observer that the store failed doing op. Errors of
// the client's own shutdown are not the store's.
func (c *Client) storeError(op string, err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	c.cfg.Observer.StoreError(StoreErrorEvent{Op: op, Err: err})
}

// checkFinished tells the observer about one job's check run and its
// decision d.
func (c *Client) checkFinished(check string, slot time.Time, d driver.Decision, err error) {
	outcome := string(d.Outcome)
	switch {
	case outcome != "":
	case d.Err != "":
		outcome = RunRetry
	default:
		outcome = RunRescheduled
	}
	c.cfg.Observer.CheckFinished(CheckEvent{Check: check, Slot: slot, Outcome: outcome, Duration: d.Runtime, Err: err})
}

// slotFired logs a firing of slot that started at start (the client's
// clock) and took took, and tells the observer. A slot with work in it (jobs
// checked or left pending for want of their check) is logged at Info, and
// so is one shutdown cut short (its jobs left due say nothing otherwise), an
// empty one at Debug, one cut short by a failure at Warn.
func (c *Client) slotFired(slot time.Time, kind string, start time.Time, took time.Duration, did *SlotRecord, err error, stopping bool) {
	if did == nil {
		did = &SlotRecord{}
	}
	ev := SlotEvent{Slot: slot, Kind: kind, Lag: start.Sub(slot), Duration: took, Checked: did.Checked,
		Rescheduled: did.Rescheduled, Failures: did.Failures, Unknown: did.Unknown, Outcomes: did.Outcomes, Err: err}
	level := slog.LevelDebug
	switch {
	case err != nil && !stopping:
		level = slog.LevelWarn
	case did.Checked > 0 || did.Unknown > 0 || err != nil:
		level = slog.LevelInfo
	}
	if c.log.Enabled(context.Background(), level) {
		attrs := []any{"slot", slot, "kind", kind, "jobs", did.Checked, "rescheduled", did.Rescheduled,
			"failures", did.Failures, "unknown", did.Unknown}
		if len(did.Outcomes) > 0 {
			outcomes := make([]any, 0, 2*len(did.Outcomes))
			for _, o := range history.Outcomes {
				if n := did.Outcomes[o]; n > 0 {
					outcomes = append(outcomes, string(o), n)
				}
			}
			attrs = append(attrs, slog.Group("outcomes", outcomes...))
		}
		attrs = append(attrs, "lag", ev.Lag, "duration", took)
		if err != nil {
			attrs = append(attrs, "error", err)
		}
		c.log.Log(context.Background(), level, "slot fired", attrs...)
	}
	c.cfg.Observer.SlotFired(ev)
}

// sweepFinished logs a sweep and tells the observer: at Error when it
// failed, at Info when it took jobs, at Debug otherwise.
func (c *Client) sweepFinished(trigger string, mode SweepMode, res *SweepResult, took time.Duration, err error) {
	if res == nil {
		res = &SweepResult{Mode: mode}
	}
	level := slog.LevelDebug
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		level = slog.LevelError
	case res.Jobs > 0:
		// Not for slots that held only jobs of unknown checks, left
		// pending (each slot's line and a warning say so), which every
		// sweep finds again.
		level = slog.LevelInfo
	}
	if c.log.Enabled(context.Background(), level) {
		attrs := []any{"trigger", trigger, "mode", mode, "slots", res.Slots, "jobs", res.Jobs}
		if !res.To.IsZero() {
			attrs = append(attrs, "to", res.To)
		}
		attrs = append(attrs, "duration", took)
		if err != nil {
			attrs = append(attrs, "error", err)
		}
		c.log.Log(context.Background(), level, "sweep", attrs...)
	}
	c.cfg.Observer.SweepFinished(SweepEvent{Trigger: trigger, Mode: mode, Slots: res.Slots, Jobs: res.Jobs, Duration: took, Err: err})
}

// JobStats summarises the pending table as of the slot in progress: how
// many jobs are pending and overdue, the load of the next upcoming slots
// that have jobs (at most upcoming of them; 10 when upcoming is 0 or less),
// and the jobs pending per check name. It is the part of Status that a
// metrics collector reads. Its cost grows with the pending table (it counts
// every row), so a caller that asks often caches it, as package metrics does.
func (c *Client) JobStats(ctx context.Context, upcoming int) (*JobStats, error) {
	if upcoming <= 0 {
		upcoming = 10
	}
	st, err := c.drv.JobStats(ctx, &driver.JobStatsParams{Current: c.cfg.Grid.Floor(c.now()), Upcoming: upcoming})
	if err != nil {
		return nil, fmt.Errorf("prescient: job stats: %w", err)
	}
	st.Upcoming = clampLoads(st.Upcoming)
	st.OldestOverdue = slots.Clamp(st.OldestOverdue)
	return st, nil
}
