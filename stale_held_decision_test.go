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
	"github.com/prescient-dev/prescient/history"
)

// staleClaimHook runs a hook just before the n-th claim after it is armed.
type staleClaimHook struct {
	driver.Driver
	armed  atomic.Bool
	claims atomic.Int64
	at     int64
	hook   func()
}

func (d *staleClaimHook) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	tx, err := d.Driver.Begin(ctx, p)
	if err != nil {
		return nil, err
	}
	return &staleClaimHookTx{Tx: tx, d: d}, nil
}

type staleClaimHookTx struct {
	driver.Tx
	d *staleClaimHook
}

func (t *staleClaimHookTx) Claim(ctx context.Context, p *driver.ClaimParams) ([]*checks.Job, error) {
	if t.d.armed.Load() && t.d.claims.Add(1) == t.d.at {
		t.d.hook()
	}
	return t.Tx.Claim(ctx, p)
}

// An optimistic group whose check fails is rolled back and run again, and
// the failure decided in the first run was applied in the second to the job
// claimed again, without looking at what became of the job in between. Its
// lock was released with the rollback, so an application may change the
// job there. Here an application whose clock runs a second behind the
// server's (README, "Clock skew": correctness must not depend on it)
// reschedules the job with replace into the slot being fired, which clears
// its failure count and gives it a new payload, and is told so. The second
// run applied the stale decision ("second failure in a row: failed"), made
// before the application's write from the old failure count: the job ended
// failed with a history record of one failure, under max_failures 2, its
// new payload never checked (found by a review). A held decision whose job
// changed is now dropped, and the job runs again with the group.
func TestStaleHeldFailureLeavesAnApplicationsReplace(t *testing.T) {
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
	hook := &staleClaimHook{Driver: h.store.Driver(), at: 2}
	base := h.store
	h.store = wrappedStore{base, hook}
	srv := h.client(clk, reg, func(c *prescient.Config) { c.MaxFailures = 2 })
	appClk := newClock("2026-03-10T10:14:59Z") // one second behind the server at 10:15
	h.store = base
	app := h.client(appClk, reg, func(c *prescient.Config) { c.Server = "app" })

	schedule(t, srv, "42", "unshipped", "2026-03-10T10:00:00Z")
	clk.Set("2026-03-10T10:00:00Z")
	fire(t, srv, "2026-03-10T10:00:00Z") // first failure: retried at 10:15
	j := wantPending(t, srv, "42", "unshipped")
	if j.FailureCount != 1 || !j.NextCheckAt.Equal(ts("2026-03-10T10:15:00Z")) {
		t.Fatalf("setup: after one failure: %+v", j)
	}

	var replaced *prescient.Job
	var replaceErr error
	hook.hook = func() {
		// Between the rollback of the first run and the claim of the second.
		replaced, replaceErr = app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "42", Check: "unshipped",
			At: ts("2026-03-10T10:15:00Z"), Payload: map[string]int{"v": 2}, OnConflict: prescient.ConflictReplace})
	}
	hook.armed.Store(true)
	clk.Set("2026-03-10T10:15:00Z")
	fire(t, srv, "2026-03-10T10:15:00Z")
	if replaceErr != nil {
		t.Fatalf("the application's replace: %v", replaceErr)
	}
	if replaced == nil {
		t.Fatal("setup: the hook never ran (no second run of the group)")
	}
	if replaced.FailureCount != 0 || !replaced.NextCheckAt.Equal(ts("2026-03-10T10:15:00Z")) {
		t.Fatalf("setup: the application's replace returned %+v", replaced)
	}
	recs := historyOf(t, srv, "42")
	if len(recs) == 1 && recs[0].Outcome == history.Failed && recs[0].FailureCount < 2 {
		t.Fatalf("the job ended %s with %d failure(s) in a row under max_failures 2 (payload %s): the application's "+
			"acknowledged replace (failure count 0, payload {\"v\":2}) was overwritten by a failure decided before it, "+
			"from the old failure count", recs[0].Outcome, recs[0].FailureCount, recs[0].Payload)
	}
}
