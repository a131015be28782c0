package prescient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// applyFailsOnce fails the first Apply after it is armed, as a connection
// lost at the group's apply would, and runs hook before the claim after
// that (recover's, which applies the failures held from the dead
// transaction afresh).
type applyFailsOnce struct {
	driver.Driver
	armed  atomic.Bool
	failed atomic.Bool
	hooked atomic.Bool
	hook   func()
}

func (d *applyFailsOnce) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	tx, err := d.Driver.Begin(ctx, p)
	if err != nil {
		return nil, err
	}
	return &applyFailsOnceTx{Tx: tx, d: d}, nil
}

type applyFailsOnceTx struct {
	driver.Tx
	d *applyFailsOnce
}

func (t *applyFailsOnceTx) Claim(ctx context.Context, p *driver.ClaimParams) ([]*checks.Job, error) {
	if t.d.failed.Load() && t.d.hooked.CompareAndSwap(false, true) {
		t.d.hook()
	}
	return t.Tx.Claim(ctx, p)
}

func (t *applyFailsOnceTx) Apply(ctx context.Context, p *driver.ApplyParams) error {
	if t.d.armed.Load() && t.d.failed.CompareAndSwap(false, true) {
		return errors.New("connection lost at the apply")
	}
	return t.Tx.Apply(ctx, p)
}

// A group whose transaction dies has its checks' failures applied afresh
// (recover), to the jobs claimed again. That claim comes after the dead
// transaction's locks are gone, so an application may change a job in
// between; recover applied the failure decided from the old row anyway.
// Here the application reschedules the job with replace into the slot being
// fired (failure count cleared, a new payload) and is told so; the stale
// failure, its second in a row under max_failures 2, then ended the job
// failed. Such a decision is now dropped like one held by an optimistic
// group: the job stays due with the application's state and runs again.
// With optimistic groups (the default) the failure reached recover through
// the rerun's held decisions, which at first lost the basis to compare
// (claimedOf; found by a review).
func TestRecoverDropsAFailureWhoseJobChanged(t *testing.T) {
	for _, savepoints := range []bool{true, false} {
		t.Run(map[bool]string{true: "savepoints", false: "optimistic"}[savepoints], func(t *testing.T) {
			recoverDropsAFailureWhoseJobChanged(t, savepoints)
		})
	}
}

func recoverDropsAFailureWhoseJobChanged(t *testing.T, savepoints bool) {
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T09:50:00Z")
	var fail atomic.Bool
	fail.Store(true)
	reg := register(t, "unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if fail.Load() {
			return time.Time{}, errors.New("boom")
		}
		return j.Slot.Add(time.Hour), nil
	}, nil)
	hook := &applyFailsOnce{Driver: h.store.Driver()}
	base := h.store
	h.store = wrappedStore{base, hook}
	srv := h.client(clk, reg, func(c *prescient.Config) { c.MaxFailures = 2; c.SavepointEveryCheck = savepoints })
	h.store = base
	app := h.client(newClock("2026-03-10T10:14:59Z"), reg, func(c *prescient.Config) { c.Server = "app" })

	schedule(t, srv, "42", "unshipped", "2026-03-10T10:00:00Z")
	clk.Set("2026-03-10T10:00:00Z")
	fire(t, srv, "2026-03-10T10:00:00Z") // first failure: retried at 10:15
	if j := wantPending(t, srv, "42", "unshipped"); j.FailureCount != 1 || !j.NextCheckAt.Equal(ts("2026-03-10T10:15:00Z")) {
		t.Fatalf("setup: after one failure: %+v", j)
	}

	var replaced *prescient.Job
	var replaceErr error
	hook.hook = func() {
		replaced, replaceErr = app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "42", Check: "unshipped",
			At: ts("2026-03-10T10:15:00Z"), Payload: map[string]int{"v": 2}, OnConflict: prescient.ConflictReplace})
	}
	hook.armed.Store(true)
	clk.Set("2026-03-10T10:15:00Z")
	fire(t, srv, "2026-03-10T10:15:00Z") // nothing a check kept is lost, so no error (optimistic: a minute after the failure, no savepoints again)
	if !hook.failed.Load() {
		t.Fatal("setup: the group's apply never failed")
	}
	if replaceErr != nil {
		t.Fatalf("the application's replace: %v", replaceErr)
	}
	if replaced == nil || replaced.FailureCount != 0 {
		t.Fatalf("setup: the application's replace did not run between the failed apply and recover's claim: %+v", replaced)
	}
	if recs := historyOf(t, srv, "42"); len(recs) > 0 {
		t.Fatalf("the job ended %s with %d failure(s) and payload %s: recover applied a failure decided before the "+
			"application's acknowledged replace (failure count 0, payload {\"v\":2})", recs[0].Outcome, recs[0].FailureCount, recs[0].Payload)
	}
	j := wantPending(t, srv, "42", "unshipped")
	if j.FailureCount != 0 || string(j.Payload) != `{"v": 2}` && string(j.Payload) != `{"v":2}` {
		t.Fatalf("after recover: %+v, want the application's replace (no failures, payload {\"v\":2})", j)
	}

	// The job runs again with its new state when the slot is fired again.
	fail.Store(false)
	fire(t, srv, "2026-03-10T10:15:00Z")
	if j := wantPending(t, srv, "42", "unshipped"); !j.NextCheckAt.Equal(ts("2026-03-10T11:15:00Z")) || j.CheckCount != 1 {
		t.Fatalf("after the slot fired again: %+v, want checked once and next at 11:15", j)
	}
	if recs := historyOf(t, srv, "42"); len(recs) != 0 {
		t.Fatalf("history %+v, want none", recs)
	}
}
