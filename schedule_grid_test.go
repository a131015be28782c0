package prescient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/slots"
)

// An application's client that leaves Config.Grid out rounds what it
// schedules on the grid the servers recorded, as the CLI and the SQL
// functions do: on the default 15 minutes its jobs landed in slots the
// servers' ticks never fire, and ran only when a sweep moved them (never,
// with the sweep off; found by a new user's trial of the library). Until a
// grid is recorded, it rounds on the default one; a client that starts
// rounds on its own.
func TestClientWithoutAGridFollowsTheServers(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		app, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		schedule := func(key string) time.Time {
			t.Helper()
			j, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: "c", At: ts("2026-03-10T10:01:00Z")})
			if err != nil {
				t.Fatal(err)
			}
			return j.NextCheckAt
		}
		if got := schedule("before"); !got.Equal(ts("2026-03-10T10:15:00Z")) {
			t.Errorf("with no grid recorded: slot %s, want the default grid's 10:15", got)
		}
		ran := make(chan string, 10)
		reg := &checks.Registry{}
		if err := reg.Register("c", func(_ context.Context, j *checks.Job) (time.Time, error) { ran <- j.Key; return time.Time{}, nil }, nil); err != nil {
			t.Fatal(err)
		}
		fiveAtTwo := slots.Grid{Resolution: 5 * time.Minute, Offset: 2 * time.Minute, Cycle: 0}
		srv, err := prescient.NewClient(h.store, &prescient.Config{Server: "srv", Grid: fiveAtTwo, Checks: reg, Now: clk.Now, SweepSchedule: "-"})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer srv.Stop(ctx)
		clk.Add(recordedGridTTLForTests) // the app's grid read before is old
		if got := schedule("after"); !got.Equal(ts("2026-03-10T10:02:00Z")) {
			t.Errorf("with the servers' 5m+2m grid recorded: slot %s, want 10:02", got)
		}
		clk.Set("2026-03-10T10:02:00Z")
		srv.Tick(ctx)
		select {
		case key := <-ran:
			if key != "after" {
				t.Errorf("the server's tick at 10:02 ran %s, want after", key)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the server's tick at 10:02 ran nothing")
		}
		// A client that starts rounds on its own grid, which it records.
		own, err := prescient.NewClient(h.store, &prescient.Config{Server: "own", Now: clk.Now, SweepSchedule: "-", Checks: &checks.Registry{}})
		if err != nil {
			t.Fatal(err)
		}
		if err := own.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer own.Stop(ctx)
		j, err := own.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "own", Check: "c", At: ts("2026-03-10T10:16:00Z")})
		if err != nil || !j.NextCheckAt.Equal(ts("2026-03-10T10:30:00Z")) {
			t.Errorf("a started client without a grid: %v, %v; want its own default grid's 10:30", j, err)
		}
	})
}

// recordedGridTTLForTests is past how long a client keeps the grid it read.
const recordedGridTTLForTests = time.Minute

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
