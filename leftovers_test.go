package prescient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// A tick fires the previous slot again when jobs of checks it runs are still
// due there (scheduled into it after it fired, by an application whose
// clock runs behind). It looked for them in the
// first BatchSize jobs due only, so behind a page of jobs of a check another
// server runs, the server's own job waited for a sweep. It now reads on
// until it finds one or the slot ends.
func TestTickFiresLeftoversBehindAPageOfUnknownChecks(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:15:00Z")
		rec := &calls{}
		srv := h.client(clk, register(t, "unshipped", alertOnce(rec), nil), func(c *prescient.Config) { c.BatchSize = 10; c.Workers = 1; c.GroupSize = 1 })
		appReg := register(t, "unshipped", alertOnce(rec), nil)
		if err := appReg.Register("elsewhere", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil); err != nil {
			t.Fatal(err)
		}
		// The application's clock runs a second behind the server's.
		app := h.client(newClock("2026-03-10T10:14:59Z"), appReg, func(c *prescient.Config) { c.Server = "app" })
		srv.Tick(ctx) // fires the 10:15 slot, empty

		// Scheduled into the slot after it fired: first 125 jobs of a check
		// this server does not run, then one of its own.
		for i := range 125 { // pages of at most 100
			schedule(t, app, fmt.Sprint(100+i), "elsewhere", "2026-03-10T10:15:00Z")
		}
		schedule(t, app, "1", "unshipped", "2026-03-10T10:15:00Z")

		clk.Set("2026-03-10T10:30:00Z")
		srv.Tick(ctx)
		if got := rec.of("1"); len(got) != 1 || !got[0].slot.Equal(ts("2026-03-10T10:15:00Z")) {
			t.Fatalf("calls of order 1: %+v, want one in the 10:15 slot, fired again by the 10:30 tick", got)
		}
		wantOutcome(t, srv, "1", history.Done, 1)
		if j := wantPending(t, srv, "100", "elsewhere"); !j.NextCheckAt.Equal(ts("2026-03-10T10:15:00Z")) {
			t.Fatalf("a job of a check this server does not run moved: %+v", j)
		}
	})
}
