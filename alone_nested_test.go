package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// FireSlot's doc contemplates a check that calls FireSlot ("a check that
// calls FireSlot on its own slot waits until ctx ends"); on another slot,
// with workers to spare, it simply runs. Every group holds c.alone for
// reading while its checks run, and a job run alone takes it for writing:
// a check firing a slot that holds such a job waited on the write lock for
// its own group's read lock (sync.RWMutex.Lock ignores ctx), until the
// runtime guard abandoned the outer check, which then counted as a failure
// (found by a review). A firing nested in a check takes no lock now.
func TestCheckFiringASlotWithAnAloneJob(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	const slotA, slotB = "2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z"
	var c *prescient.Client
	nested := make(chan error, 1)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key == "outer" {
			_, err := c.FireSlot(ctx, ts(slotB))
			nested <- err
			return time.Time{}, err
		}
		return time.Time{}, nil
	}
	c = h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
		cfg.Workers = 4
		cfg.Guards = guards.Limits{Runtime: 3 * time.Second}
	})
	schedule(t, c, "outer", "c", slotA)
	alone := schedule(t, c, "alone", "c", slotB)
	// Two crashes named it (max_unfinished 3): its next run is alone.
	leaveAttempt(t, h, ts(slotB), alone)
	leaveAttempt(t, h, ts(slotB), alone)
	clk.Set(slotB)
	fire(t, c, slotA)
	if err := <-nested; err != nil {
		t.Errorf("FireSlot of another slot from a check: %v", err)
	}
	if recs := historyOf(t, c, "outer"); len(recs) != 1 || recs[0].Outcome != history.Done {
		j, _ := c.Job(context.Background(), "order", "outer", "c")
		if j != nil {
			t.Fatalf("the check that fired slot %s did not finish: its job is pending with %d failure(s)", slotB, j.FailureCount)
		}
		t.Fatalf("history of outer: %+v", recs)
	}
	wantOutcome(t, c, "alone", history.Done, 1)
}
