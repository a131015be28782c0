package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/promtest"
)

// prescient_slots_incomplete reads the latest LedgerRows rows. When they
// ended inside a slot's rows (newest slot first, then by server), that slot
// was judged on the rows read alone: a server's unfinished row read and
// another's finished row of the same slot cut off made a slot that was
// fired whole count as incomplete. The oldest slot of a read whose rows go
// on beyond the limit (Client.LatestSlots reads one more) is left out.
func TestSlotsIncompleteIgnoresASlotCutByTheRowLimit(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			store := st.open(t)
			clk := &clock{}
			clk.Set("2026-03-10T11:00:00Z")
			m := New(&Opts{CacheFor: -1, LedgerRows: 2})
			c, err := prescient.NewClient(store, &prescient.Config{Server: "s1", Grid: quarterHours, Checks: registry(t), Now: clk.Now,
				Observer: m, Logger: quiet, SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-"})
			if err != nil {
				t.Fatal(err)
			}
			m.Watch(c)
			url := serve(t, m)
			drv := store.Driver()
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
			// A ledger of exactly LedgerRows rows is read whole: its oldest
			// slot, incomplete, counts.
			row("2026-03-10T09:45:00Z", "a", false)
			row("2026-03-10T10:00:00Z", "a", true)
			f := promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_slots_incomplete")
			row("2026-03-10T09:45:00Z", "b", true) // then another server finished it

			// 10:15 was fired whole by b after a died in it; 10:30 by a.
			row("2026-03-10T10:15:00Z", "a", false)
			row("2026-03-10T10:15:00Z", "b", true)
			row("2026-03-10T10:30:00Z", "a", true)
			f = promtest.MustScrape(t, url)
			want(t, f, 0, "prescient_slots_incomplete")

			// A slot whose rows are all read is still judged, the oldest
			// too: at first every oldest slot of a full read was left out,
			// so a slot the only server died in was not counted once the
			// oldest (found by a review).
			row("2026-03-10T10:45:00Z", "a", false)
			f = promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_slots_incomplete")
			row("2026-03-10T10:50:00Z", "a", true) // off the grid, but a row
			f = promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_slots_incomplete") // 10:45, the oldest of the two read, whole
		})
	}
}
