package prescient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// workCapturingDriver captures the work context of the first firing (the
// context dispatch lists due jobs with), so that a check can wait for Stop
// to end it.
type workCapturingDriver struct {
	driver.Driver
	once sync.Once
	got  chan struct{} // closed once work is set
	work context.Context
}

func (d *workCapturingDriver) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	d.once.Do(func() { d.work = ctx; close(d.got) })
	return d.Driver.JobsDue(ctx, p)
}

// TestStopDuringTheLastCheckCompletesTheSlot: a
// server stopped (SIGTERM) while the last check of a slot runs lets that
// check finish within the grace and commits it, so nothing of the slot is
// left; yet fireSlot recorded the firing as cut short ("stopped") and the
// ledger row stayed unfinished. No job of the slot is overdue, so neither
// the restarted server's start-up sweep nor its ticks (which start from the
// slot in progress) ever fired it again: the slot was "incomplete" for good,
// prescient_slots_incomplete and the status page's "Incomplete slots" above
// 0, while prescient_jobs_overdue said 0 (found by a review). A stopped
// firing now asks whether any job is still due in its slot.
func TestStopDuringTheLastCheckCompletesTheSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		drv := &workCapturingDriver{Driver: h.store.Driver(), got: make(chan struct{})}
		store := wrappedStore{h.store, drv}
		running := make(chan struct{})
		check := func(_ context.Context, j *checks.Job) (time.Time, error) {
			<-drv.got
			close(running)
			<-drv.work.Done() // Stop has begun: the check finishes within the grace
			return time.Time{}, nil
		}
		reg := register(t, "c", check, nil)
		cfg := func() *prescient.Config {
			return &prescient.Config{Server: "s1", Grid: quarterHours, Checks: reg, Now: clk.Now,
				SweepSchedule: "-", PruneSchedule: "-"}
		}
		c, err := prescient.NewClient(store, cfg())
		if err != nil {
			t.Fatal(err)
		}
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")

		clk.Set("2026-03-10T10:15:30Z")
		if err := c.Start(ctx); err != nil { // fires the slot in progress, 10:15
			t.Fatal(err)
		}
		<-running
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, c, "1", history.Done, 1) // the slot's one job ran and committed

		// The server comes back in the next slot.
		clk.Set("2026-03-10T10:30:30Z")
		c2, err := prescient.NewClient(h.store, cfg())
		if err != nil {
			t.Fatal(err)
		}
		if err := c2.Start(ctx); err != nil { // start-up sweep, then the slot in progress
			t.Fatal(err)
		}
		if err := c2.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := c2.JobStats(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := c2.Slots(ctx, &prescient.SlotsParams{Since: ts("2026-03-10T10:15:00Z"), Until: ts("2026-03-10T10:30:00Z")})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Fatalf("ledger rows of 10:15: %d, want 1", len(recs))
		}
		if !recs[0].Complete() {
			t.Errorf("slot 10:15 still incomplete after the restart (%d pending, %d overdue): its only job finished before the "+
				"server stopped, so no sweep or tick will ever fire it again; ledger row %+v", st.Pending, st.Overdue, *recs[0])
		}
	})
}
