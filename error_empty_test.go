package prescient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// A check that fails with an error whose message is empty (errors.New(""),
// or an error type whose Error returns "") has still failed: its writes are
// rolled back, so the failure must be counted, and the max_failures-th one
// must end the job failed with a last error that says something.
func TestEmptyErrorMessageIsCountedAsFailure(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			return time.Time{}, errors.New("")
		}
		c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) { cfg.MaxFailures = 2 })
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Failures != 1 {
			t.Errorf("slot record %+v: %d failures, want 1 (the check returned an error)", rec, rec.Failures)
		}
		j := wantPending(t, c, "1", "c")
		if j.FailureCount != 1 {
			t.Errorf("pending job: failure count %d, want 1", j.FailureCount)
		}
		// Second failure in a row: max_failures is 2, so the job must end failed.
		next := j.NextCheckAt.UTC().Format(time.RFC3339)
		clk.Set(next)
		fire(t, c, next)
		recs := historyOf(t, c, "1")
		if len(recs) != 1 || recs[0].Outcome != history.Failed {
			p, _ := c.Job(context.Background(), "order", "1", "c")
			t.Fatalf("after two failures in a row with max_failures 2: history %+v, pending %+v; want failed", recs, p)
		}
		if recs[0].LastError == "" {
			t.Errorf("failed job's last error is empty: history does not say why it failed")
		}
	})
}
