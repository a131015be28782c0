package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
)

// guard_horizon is for a check that "asked for a time further ahead than
// guards.horizon" (README); config.example.yaml: "Farthest ahead of its slot
// a check may ask to run again; farther ends the job". A check asking for
// exactly slot + horizon asked for nothing farther: it must be rescheduled.
// The engine judged the time after rounding it up to the grid, so with a
// horizon that is not a multiple of the resolution (here 20m on 15m slots)
// a request at the horizon, or anywhere in its last partial slot, ended the
// job guard_horizon.
func TestHorizonJudgedOnTheTimeAsked(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(_ context.Context, j *checks.Job) (time.Time, error) {
			if j.CheckCount > 0 {
				return time.Time{}, nil
			}
			return j.Slot.Add(20 * time.Minute), nil // exactly the horizon
		}
		c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
			cfg.Guards = guards.Limits{Horizon: 20 * time.Minute}
		})
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		if recs := historyOf(t, c, "1"); len(recs) > 0 {
			t.Fatalf("check asked for exactly its horizon (20m) ahead; job ended %q: %s", recs[0].Outcome, recs[0].LastError)
		}
		j := wantPending(t, c, "1", "c")
		if j.CheckCount != 1 {
			t.Errorf("check count %d, want 1", j.CheckCount)
		}
	})
}
