package prescient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/slots"
)

// Every stored check time lies in [slots.MinTime, slots.MaxTime) (README,
// "Supported times"); a check asking for a time at or past the end ends
// guard_horizon. The engine's own choice of a retry time was not held to
// it: a failure in the last slot of the range was retried at
// 2200-01-01T00:00:00Z, outside the range (retrySlot never checked MaxTime;
// with a large retry.backoff_max the same happened decades earlier). Such a
// job now ends failed, saying why.
func TestEngineChosenNextTimeBeyondRange(t *testing.T) {
	const last = "2199-12-31T23:45:00Z" // the last slot of the range
	for _, tc := range []struct {
		name  string
		check checks.Func
		now   string
	}{
		{"retry after a failure", func(context.Context, *checks.Job) (time.Time, error) {
			return time.Time{}, errors.New("boom")
		}, last},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) {
				clk := newClock("2199-12-31T23:00:00Z")
				c := h.client(clk, register(t, "c", tc.check, nil), nil)
				schedule(t, c, "1", "c", last)
				clk.Set(tc.now)
				fire(t, c, last)
				if recs := historyOf(t, c, "1"); len(recs) > 0 {
					return // ended: fine
				}
				j := wantPending(t, c, "1", "c")
				if !j.NextCheckAt.Before(slots.MaxTime) {
					t.Errorf("job left pending with next check %s, outside the supported range %s (last error %q)",
						j.NextCheckAt.Format(time.RFC3339), slots.Range(), j.LastError)
				}
			})
		})
	}
}
