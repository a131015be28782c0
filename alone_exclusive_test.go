package prescient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// A suspect that one more crash would condemn "runs alone: one at a time,
// with no other group of the slot running, so that a crash then names it and
// nothing else" (unfinished.go). Only the groups of its own slot were held
// back: a firing of another slot by the same client (a scheduled sweep
// beside a tick, a catch-up, FireSlot) ran its checks beside it, on the
// shared workers. Had one of those crashed the process, the attempt of the
// job run alone would have been left too, and the job, which did nothing
// wrong, condemned: ended failed without running. (PostgreSQL: SQLite runs
// one group at a time anyway.)
func TestAloneJobRunsWithNoOtherSlotsChecks(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	var aloneRunning atomic.Bool
	var besideAlone atomic.Int32
	aloneStarted := make(chan struct{})
	otherRan := make(chan struct{}, 1)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		switch j.Key {
		case "alone":
			aloneRunning.Store(true)
			defer aloneRunning.Store(false)
			close(aloneStarted)
			// Give a check of the other slot the chance to run beside it.
			// What is shown is an absence, so the wait is a window, not a
			// synchronisation: if it were too short the test would pass
			// without proving anything; it cannot fail falsely.
			select {
			case <-otherRan:
			case <-time.After(2 * time.Second):
			}
		default:
			if aloneRunning.Load() {
				besideAlone.Add(1)
			}
			select {
			case otherRan <- struct{}{}:
			default:
			}
		}
		return time.Time{}, nil
	}
	c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) { cfg.Workers = 4 })
	const slotA, slotB = "2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z"
	alone := schedule(t, c, "alone", "c", slotA)
	for _, k := range []string{"b1", "b2", "b3"} {
		schedule(t, c, k, "c", slotB)
	}
	// Two crashes named it (default max_unfinished 3): the next run is alone.
	leaveAttempt(t, h, ts(slotA), alone)
	leaveAttempt(t, h, ts(slotA), alone)
	clk.Set(slotB)
	done := make(chan error, 1)
	go func() {
		_, err := c.FireSlot(context.Background(), ts(slotA)) // catch-up of the slot that crashed
		done <- err
	}()
	<-aloneStarted
	if _, err := c.FireSlot(context.Background(), ts(slotB)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := besideAlone.Load(); n > 0 {
		t.Errorf("%d check(s) of another slot ran while the job one more crash would condemn ran \"alone\"; "+
			"a crash now would condemn it with theirs", n)
	}
}
