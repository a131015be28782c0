package prescient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// A check's error message is arbitrary text: one that quotes raw bytes (a
// NUL, a byte sequence that is not UTF-8, as from a binary protocol or a
// file) must still be recorded as that check's failure. The engine passed
// err.Error() to the store as is; PostgreSQL refuses such text, so Apply
// failed for the whole group: the failure was not recorded, the other
// checks' writes were lost, and the same happened at every firing.
func TestErrorMessageWithRawBytes(t *testing.T) {
	for _, tc := range []struct{ name, msg string }{
		{"NUL", "record \x00 truncated"},
		{"not UTF-8", "bad header \xff\xfe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) {
				clk := newClock("2026-03-10T10:00:00Z")
				check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
					if j.Key == "bad" {
						return time.Time{}, errors.New(tc.msg)
					}
					return time.Time{}, writeAlert(ctx, j)
				}
				c := h.client(clk, register(t, "c", check, nil), oneGroup)
				for _, k := range []string{"ok-1", "bad", "ok-2"} {
					schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
				}
				clk.Set("2026-03-10T10:15:00Z")
				rec, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
				if err != nil {
					t.Errorf("fire: %v", err)
				}
				if rec == nil || rec.Failures != 1 || rec.Outcomes[history.Done] != 2 {
					t.Errorf("slot record %+v, want 1 failure and 2 done", rec)
				}
				if j, err := c.Job(context.Background(), "order", "bad", "c"); err != nil || j.FailureCount != 1 {
					t.Errorf("job bad: %+v, %v; want pending with its failure counted", j, err)
				}
				if got := h.count("SELECT * FROM alerts"); got != 2 {
					t.Errorf("%d alerts committed, want 2 (ok-1, ok-2)", got)
				}
			})
		})
	}
}
