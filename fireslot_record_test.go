package prescient_test

import (
	"testing"

	"github.com/prescient-dev/prescient"
)

// FireSlot's record names what it is of, as a ledger row does: the slot,
// the server, the kind, this call's start and, once the slot is complete,
// its finish. It carried only the counts (found trying the library as a new
// user).
func TestFireSlotRecordNamesItsSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), nil)
		schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:02Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if !rec.Slot.Equal(ts("2026-03-10T10:15:00Z")) || rec.Server != "s1" || rec.Kind != prescient.KindFire ||
			!rec.StartedAt.Equal(clk.Now()) || !rec.FinishedAt.Equal(clk.Now()) || !rec.Complete() || rec.Checked != 1 {
			t.Errorf("FireSlot's record %+v, want slot 10:15, server s1, kind fire, started and finished at 10:15:02, one job checked", rec)
		}
	})
}
