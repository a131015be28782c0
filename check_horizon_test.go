package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
)

// A check's own guard override (checks.Opts.Guards.Horizon) shorter than a
// slot: a check asking for a time within it runs again in the next slot.
// When the guard judged the time rounded up to the grid, every job of such
// a check that asked to run again, however soon, ended guard_horizon
// (found by a review).
func TestPerCheckHorizonBelowResolution(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(_ context.Context, j *checks.Job) (time.Time, error) {
			if j.CheckCount > 0 {
				return time.Time{}, nil
			}
			return j.Slot.Add(time.Minute), nil // well within its 5-minute horizon
		}
		reg := register(t, "c", check, &checks.Opts{Guards: guards.Limits{Horizon: 5 * time.Minute}})
		c, err := prescient.NewClient(h.store, &prescient.Config{Server: "s1", Grid: quarterHours, Checks: reg, Now: clk.Now,
			SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-"})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.store.Driver().GridSave(context.Background(), quarterHours); err != nil {
			t.Fatal(err)
		}
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		if recs := historyOf(t, c, "1"); len(recs) > 0 {
			t.Fatalf("NewClient accepted check c with horizon 5m on 15m slots; its check asked for slot+1m and the job ended %q: %s",
				recs[0].Outcome, recs[0].LastError)
		}
	})
}
