package prescient_test

import (
	"context"
	"testing"

	"github.com/prescient-dev/prescient"
)

// cancelAfterSlot ends a sweep's context once the firing of one slot has
// ended, as a signal arriving between two slots of a run-mode sweep does.
type cancelAfterSlot struct {
	prescient.NopObserver
	slot   string
	cancel context.CancelFunc
}

func (o *cancelAfterSlot) SlotFired(ev prescient.SlotEvent) {
	if ev.Kind == prescient.KindSweep && ev.Slot.Equal(ts(o.slot)) {
		o.cancel()
	}
}

// A run-mode sweep cut short between two overdue slots must say so, as one
// cut short inside a slot does (TestTickLeavesASlotASweepIsFiring) and as a
// reslot-mode sweep on an ended context does. It returned no error, and the
// CLI printed "sweep (run): fired 1 overdue slot(s)" and exited 0 with the
// second overdue slot untouched.
func TestSweepCutBetweenSlotsSaysSo(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := &cancelAfterSlot{slot: "2026-03-10T10:15:00Z", cancel: cancel}
		c := h.client(clk, register(t, "unshipped", alertOnce(rec), nil), func(cfg *prescient.Config) { cfg.Observer = obs })
		schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
		schedule(t, c, "2", "unshipped", "2026-03-10T10:30:00Z")
		clk.Set("2026-03-10T11:07:00Z")

		res, err := c.Sweep(ctx, prescient.SweepRun)
		if j, jerr := c.Job(context.Background(), "order", "2", "unshipped"); jerr == nil && err == nil {
			t.Errorf("sweep cut short after the 10:15 slot: %+v, no error; order 2 is still overdue in %s", res, j.NextCheckAt)
		}
	})
}
