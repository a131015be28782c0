package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// A ledger holding exactly limit rows is read whole: no row lies beyond the
// limit, so its oldest slot is not cut.
func TestLatestSlotsExactlyLimitRowsIsNotCut(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T11:00:00Z")
		c := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), nil)
		drv := h.store.Driver()
		row := func(slot, server string, finished bool) {
			t.Helper()
			r := &driver.SlotRecord{Slot: ts(slot), Server: server, Kind: "fire", StartedAt: ts(slot)}
			if err := drv.SlotStart(ctx, r); err != nil {
				t.Fatal(err)
			}
			if finished {
				r.FinishedAt = ts(slot).Add(time.Second)
				if err := drv.SlotFinish(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
		}
		row("2026-03-10T09:45:00Z", "a", false)
		row("2026-03-10T10:00:00Z", "a", true)
		recs, cut, err := c.LatestSlots(ctx, time.Time{}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 || cut {
			t.Errorf("LatestSlots(limit 2) over a ledger of exactly 2 rows: %d rows, cut %v; want 2 rows, cut false (no row lies beyond the limit)", len(recs), cut)
		}
	})
}
