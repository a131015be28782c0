package prescient_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// A check taken out of every server leaves its pending jobs behind, unknown
// to all of them, listed as such by status readers forever: RetireCheck
// moves them to history as cancelled, by "retire", in transactions of
// RetireOpts.BatchSize (here three transactions, the last short), and
// removes the check from the catalog. A check the client still runs is refused.
func TestRetireCheck(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "kept", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil), nil)
		if err := h.store.Driver().CatalogSave(ctx, []driver.CatalogEntry{{Check: "retired", Awaits: []string{"shipped"}}}); err != nil {
			t.Fatal(err)
		}
		const batch = 3
		n := 2*batch + 1
		ps := make([]prescient.ScheduleParams, n)
		for i := range ps {
			ps[i] = prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(i), Check: "retired", At: ts("2026-03-10T10:15:00Z")}
		}
		if _, err := c.ScheduleMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		schedule(t, c, "0", "kept", "2026-03-10T10:15:00Z")
		schedule(t, c, "invoice-1", "kept", "2026-03-10T10:15:00Z")
		if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "invoice", Key: "1", Check: "retired", At: ts("2026-03-10T10:15:00Z")}); err != nil {
			t.Fatal(err)
		}

		if _, _, err := c.RetireCheck(ctx, "kept", nil); err == nil || !strings.Contains(err.Error(), "registered with this client") {
			t.Errorf("retire a check the client runs: %v; want it refused", err)
		}
		// A live server that runs it, by its heartbeat; then one of an
		// older prescient, which does not say; then a gone one.
		beat := func(s *driver.Server) {
			t.Helper()
			if err := h.store.Driver().ServerHeartbeat(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		beat(&driver.Server{Name: "web-1", StartedAt: clk.Now(), HeartbeatAt: clk.Now(), Checks: []string{"other", "retired"}})
		if _, _, err := c.RetireCheck(ctx, "retired", nil); err == nil || !strings.Contains(err.Error(), "run by live server(s) web-1") {
			t.Errorf("retire a check a live server runs: %v; want it refused", err)
		}
		beat(&driver.Server{Name: "web-1", StartedAt: clk.Now(), HeartbeatAt: clk.Now()})
		if _, _, err := c.RetireCheck(ctx, "retired", nil); err == nil || !strings.Contains(err.Error(), "web-1 do not say which checks they run") {
			t.Errorf("retire a check beside a live server of an older prescient: %v; want it refused", err)
		}
		beat(&driver.Server{Name: "web-1", StartedAt: clk.Now(), HeartbeatAt: clk.Now(), Checks: []string{"other"}})
		beat(&driver.Server{Name: "web-2", StartedAt: clk.Now(), HeartbeatAt: clk.Now().Add(-time.Hour), Checks: []string{"retired"}})
		// One entity's first: the catalog entry stays.
		if got, removed, err := c.RetireCheck(ctx, "retired", &prescient.RetireOpts{Entity: "invoice"}); err != nil || got != 1 || removed {
			t.Fatalf("retire check retired of the invoices: %d, %v, %v; want 1, false, nil", got, removed, err)
		}
		got, removed, err := c.RetireCheck(ctx, "retired", &prescient.RetireOpts{BatchSize: batch})
		if err != nil || got != n || !removed {
			t.Fatalf("retire check retired: %d, %v, %v; want %d, true, nil", got, removed, err, n)
		}
		stats, err := c.JobStats(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if stats.ByCheck["retired"] != 0 || stats.ByCheck["kept"] != 2 || stats.Pending != 2 {
			t.Errorf("pending after retiring: %v (%d); want kept's 2 alone", stats.ByCheck, stats.Pending)
		}
		for _, key := range []string{"0", strconv.Itoa(n - 1)} {
			recs := historyOf(t, c, key)
			if len(recs) != 1 || recs[0].Check != "retired" || recs[0].Outcome != history.Cancelled || recs[0].FinishedBy != "retire" {
				t.Errorf("history of order %s: %+v; want its job of check retired cancelled by retire", key, recs)
			}
		}
		counts, err := h.store.Driver().HistoryCounts(ctx, ts("2026-03-10T00:00:00Z"))
		if err != nil || counts[history.Cancelled] != n+1 {
			t.Errorf("history counts: %v, %v; want %d cancelled", counts, err, n+1)
		}
		if cat, err := h.store.Driver().CatalogList(ctx); err != nil || len(cat) != 1 || cat[0].Check != "kept" {
			t.Errorf("catalog after retiring: %+v, %v; want kept alone", cat, err)
		}
		if got, removed, err := c.RetireCheck(ctx, "retired", nil); err != nil || got != 0 || removed {
			t.Errorf("retire it again: %d, %v, %v; want 0, false, nil", got, removed, err)
		}
		beat(&driver.Server{Name: "web-1", StartedAt: clk.Now(), HeartbeatAt: clk.Now(), Checks: []string{"retired"}})
		if _, _, err := c.RetireCheck(ctx, "retired", &prescient.RetireOpts{Force: true}); err != nil {
			t.Errorf("retire a check a live server runs, forced: %v", err)
		}
		if _, _, err := c.RetireCheck(ctx, "bad name!", nil); err == nil {
			t.Error("retire an invalid check name: no error")
		}
	})
}

// scheduleBehind is a driver that, on its second JobCancelCheck, first
// schedules a job of the check that sorts before every other: behind the
// batches of a retirement under way. It records every call's After.
type scheduleBehind struct {
	driver.Driver
	c      *prescient.Client
	afters []driver.JobRef
}

func (d *scheduleBehind) JobCancelCheck(ctx context.Context, p *driver.JobCancelCheckParams) (*driver.JobCancelCheckResult, error) {
	d.afters = append(d.afters, p.After)
	if len(d.afters) == 2 {
		if _, err := d.c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "0", Check: "retired", At: ts("2026-03-10T10:15:00Z")}); err != nil {
			return nil, err
		}
	}
	return d.Driver.JobCancelCheck(ctx, p)
}

// RetireCheck reads the check's jobs batch after batch, each starting after
// the last job of the one before (the pending table read once, not once a
// batch), and, having needed more than one batch, reads them once more from
// the first: a job the application scheduled meanwhile before the batch
// under way is cancelled too.
func TestRetireCheckCatchesJobsScheduledBehindIt(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		drv := &scheduleBehind{Driver: h.store.Driver()}
		h.store = wrappedStore{h.store, drv}
		c := h.client(clk, &checks.Registry{}, nil)
		drv.c = c
		var ps []prescient.ScheduleParams
		for i := 1; i <= 5; i++ {
			ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(i), Check: "retired", At: ts("2026-03-10T10:15:00Z")})
		}
		if _, err := c.ScheduleMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		got, _, err := c.RetireCheck(ctx, "retired", &prescient.RetireOpts{BatchSize: 2})
		if err != nil || got != 6 {
			t.Fatalf("retire: %d, %v; want all 6 jobs (5, and one scheduled meanwhile), nil", got, err)
		}
		want := []driver.JobRef{{}, {Entity: "order", Key: "2"}, {Entity: "order", Key: "4"}, {}}
		if !slices.Equal(drv.afters, want) {
			t.Errorf("batches started after %v, want %v: each after the one before, then once more from the first", drv.afters, want)
		}
		if recs := historyOf(t, c, "0"); len(recs) != 1 || recs[0].Outcome != history.Cancelled {
			t.Errorf("history of the job scheduled during the retirement: %+v, want it cancelled", recs)
		}
	})
}
