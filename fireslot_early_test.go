package prescient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
)

// FireSlot refuses a slot that has not begun: its jobs would run before
// their time, against the promise that a check runs no earlier than its
// slot (found by a new user's trial of the library).
func TestFireSlotRefusesASlotNotBegun(t *testing.T) {
	h := openSQLite(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:30Z")
	ran := 0
	c := h.client(clk, register(t, "c", func(context.Context, *checks.Job) (time.Time, error) { ran++; return time.Time{}, nil }, nil), nil)
	schedule(t, c, "early", "c", "2026-03-10T10:15:00Z")
	if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err == nil || !strings.Contains(err.Error(), "it has not begun (now 2026-03-10T10:00:30Z)") {
		t.Errorf("fire the slot of 10:15 at 10:00:30: %v, want it refused", err)
	}
	if ran != 0 {
		t.Errorf("%d check(s) ran before their slot", ran)
	}
	clk.Set("2026-03-10T10:15:00Z")
	if rec, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err != nil || rec.Checked != 1 {
		t.Errorf("fire it at 10:15: %+v, %v; want the job checked", rec, err)
	}
}
