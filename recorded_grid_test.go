package prescient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/slots"
)

// An application's client that only schedules rounds on the servers' grid
// when built with RecordedGrid: on the default 15 minutes its jobs landed in
// slots the servers' ticks never fire (found by a new user's trial of the
// library).
func TestRecordedGridForAnApplicationsClient(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		if _, err := prescient.RecordedGrid(ctx, h.store); !errors.Is(err, prescient.ErrNotFound) {
			t.Errorf("recorded grid before any server: %v, want ErrNotFound", err)
		}
		fiveAtTwo := slots.Grid{Resolution: 5 * time.Minute, Offset: 2 * time.Minute}
		srv, err := prescient.NewClient(h.store, &prescient.Config{Server: "srv", Grid: fiveAtTwo, Checks: &checks.Registry{}, Now: clk.Now, SweepSchedule: "-"})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer srv.Stop(ctx)
		grid, err := prescient.RecordedGrid(ctx, h.store)
		if err != nil || grid != fiveAtTwo {
			t.Fatalf("recorded grid: %v, %v; want %v", grid, err, fiveAtTwo)
		}
		app, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Grid: grid, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		j, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "c", At: ts("2026-03-10T10:01:00Z")})
		if err != nil || !j.NextCheckAt.Equal(ts("2026-03-10T10:02:00Z")) {
			t.Errorf("scheduled on the recorded grid: %+v, %v; want the slot 10:02", j, err)
		}
	})
}
