package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// A job condemned by retry.max_unfinished attempts ends failed without
// running. Its history record must still carry a sane lateness (how late the
// slot fired, here 2 minutes), not one computed from a zero "now".
func TestAbandonedJobRecordsSaneLateness(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
		c := h.client(clk, register(t, "c", check, nil), nil)
		const at = "2026-03-10T10:15:00Z"
		slot := ts(at)
		j := schedule(t, c, "poison", "c", at)
		for range 3 { // the default max_unfinished
			leaveAttempt(t, h, slot, j)
		}
		clk.Set("2026-03-10T10:17:00Z")
		rec := fire(t, c, at)
		r := wantOutcome(t, c, "poison", history.Failed, 0)
		if r.Lateness < 0 || r.Lateness > time.Hour {
			t.Errorf("abandoned job's history lateness %s (slot record max lateness %s), want about 2m", r.Lateness, rec.MaxLateness)
		}
	})
}
