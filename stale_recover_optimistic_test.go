package prescient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// recover applies a failure held from a dead transaction only to a job
// unchanged since (stillHeld compares ran.basis). A failure held by an
// optimistic group reached recover through its rerun's done list, built by
// claimedOf, which copied only the decisions and dropped the basis, and
// stillHeld kept any ran with a nil basis: with the default optimistic
// groups (TestRecoverDropsAFailureWhoseJobChanged runs each check in a
// savepoint), the stale failure was still applied over the application's
// acknowledged replace (found by a review). claimedOf keeps the basis now.
func TestRecoverDropsAFailureHeldByAnOptimisticGroupWhoseJobChanged(t *testing.T) {
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
	srv := h.client(clk, reg, func(c *prescient.Config) { c.MaxFailures = 2 }) // optimistic groups (the default)
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
	clk.Set("2026-03-10T10:15:00Z") // isolateAfterFailure (1 min) is over: optimistic again
	fire(t, srv, "2026-03-10T10:15:00Z")
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
		t.Fatalf("the job ended %s with %d failure(s) and payload %s: recover applied a failure held by the optimistic group, "+
			"decided before the application's acknowledged replace (failure count 0, payload {\"v\":2})", recs[0].Outcome, recs[0].FailureCount, recs[0].Payload)
	}
	if j := wantPending(t, srv, "42", "unshipped"); j.FailureCount != 0 {
		t.Fatalf("after recover: %+v, want the application's replace (no failures)", j)
	}
}
