package prescient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

var errSecondPage = errors.New("the second page of due jobs cannot be listed")

// secondPageFails lists the first page of due jobs, then fails.
type secondPageFails struct {
	driver.Driver
	calls atomic.Int32
}

func (d *secondPageFails) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	if d.calls.Add(1) > 1 {
		return nil, errSecondPage
	}
	return d.Driver.JobsDue(ctx, p)
}

// A run-mode sweep counts the jobs it checked (SweepResult.Jobs, the
// observer's SweepEvent.Jobs and so prescient_swept_jobs_total): those of a
// slot whose firing ended with an error after checking some of its jobs
// count too. They were left out: here all three jobs of the overdue slot
// are checked and done in history, and the sweep said it checked none.
func TestSweepCountsJobsOfASlotThatFailedPartway(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		reg := register(t, "unshipped", alertOnce(rec), nil)
		app := h.client(clk, reg, nil)
		for _, k := range []string{"1", "2", "3"} {
			schedule(t, app, k, "unshipped", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T11:07:00Z")
		h.store = wrappedStore{h.store, &secondPageFails{Driver: h.store.Driver()}}
		srv := h.client(clk, reg, nil)
		res, err := srv.Sweep(ctx, prescient.SweepRun)
		if !errors.Is(err, errSecondPage) {
			t.Fatalf("sweep: %+v, %v; want the store's error", res, err)
		}
		for _, k := range []string{"1", "2", "3"} {
			wantOutcome(t, srv, k, history.Done, 1)
		}
		if res == nil || res.Jobs != rec.total() {
			t.Errorf("sweep result %+v: jobs checked %d, want the %d the sweep checked", res, res.Jobs, rec.total())
		}
	})
}
