package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
)

// Config.Validate refuses guards.horizon shorter than the slot resolution,
// because "a next check is at least one slot away, so a shorter horizon ends
// every job that asks to run again". A check's own guard override
// (checks.Opts.Guards.Horizon) was never held to that rule: NewClient
// accepted it, and then every job of the check that asked to run again,
// however soon, ended guard_horizon. Either the override must be refused, or
// a check asking for a time within its horizon rescheduled (as it is now:
// the guard judges the time asked for, before rounding).
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
		// The same horizon in the config is refused:
		if _, err := prescient.NewClient(h.store, &prescient.Config{Server: "s1", Grid: quarterHours,
			Guards: guards.Limits{Horizon: 5 * time.Minute}, Now: clk.Now}); err == nil {
			t.Fatal("config horizon 5m on 15m slots accepted; this test assumes it is refused")
		}
		c, err := prescient.NewClient(h.store, &prescient.Config{Server: "s1", Grid: quarterHours, Checks: reg, Now: clk.Now,
			SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-"})
		if err != nil {
			return // refused up front, as the config is: fine
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
