package prescient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/slots"
)

// TestSameSlotInEveryStore schedules the same instants, with nanoseconds and
// in other zones, through every store and checks each lands in the same slot
// and comes back with the same first/next check times, in UTC.
func TestSameSlotInEveryStore(t *testing.T) {
	t.Parallel()
	kolkata := time.FixedZone("IST", 5*3600+1800)
	instants := []time.Time{
		time.Date(2026, 3, 10, 10, 14, 59, 999_999_999, time.UTC),
		time.Date(2026, 3, 10, 10, 15, 0, 0, time.UTC),
		time.Date(2026, 3, 10, 10, 15, 0, 1, time.UTC),
		time.Date(2026, 3, 10, 15, 52, 30, 123_456_789, kolkata),
		time.Date(2099, 12, 31, 23, 59, 59, 500_000_000, time.UTC),
	}
	grid := slots.Grid{Resolution: 90 * time.Second, Offset: 7 * time.Second, Cycle: 15 * time.Minute}
	got := map[string][]time.Time{}
	for _, k := range storeKinds {
		h := k.open(t)
		clk := newClock("2026-03-10T09:00:00Z")
		c := h.client(clk, &checks.Registry{}, func(c *prescient.Config) { c.Grid = grid })
		for i, at := range instants {
			j, err := c.Schedule(context.Background(), prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "c", At: at})
			if err != nil {
				t.Fatalf("%s: %v", k.name, err)
			}
			stored, err := c.Job(context.Background(), "order", fmt.Sprint(i), "c")
			if err != nil {
				t.Fatal(err)
			}
			if !stored.NextCheckAt.Equal(j.NextCheckAt) || stored.NextCheckAt.Location() != time.UTC || !grid.IsBoundary(stored.NextCheckAt) {
				t.Fatalf("%s: %s stored as %s (returned %s)", k.name, at, stored.NextCheckAt, j.NextCheckAt)
			}
			if want := grid.Ceil(at); !stored.NextCheckAt.Equal(want) {
				t.Errorf("%s: %s landed in %s, want %s", k.name, at, stored.NextCheckAt, want)
			}
			got[k.name] = append(got[k.name], stored.NextCheckAt)
		}
	}
	for i := range instants {
		var first time.Time
		for name, slots := range got {
			if first.IsZero() {
				first = slots[i]
			} else if !slots[i].Equal(first) {
				t.Errorf("%s: %s differs between stores (%s has %s)", instants[i], first, name, slots[i])
			}
		}
	}
	if len(got) < 2 {
		t.Fatalf("only %d store(s) ran", len(got))
	}
}
