package metrics

import (
	"testing"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/internal/promtest"
)

// TestLedgerRowsAboveSlotsLimitMax: Opts.LedgerRows has no upper
// bound, but Client.Slots now refuses a Limit above SlotsLimitMax (100,000):
// every reading fails, and every database gauge is left out of every
// scrape, with no word in Opts of the bound.
func TestLedgerRowsAboveSlotsLimitMax(t *testing.T) {
	store := stores[1].open(t)
	clk := &clock{}
	clk.Set("2026-03-10T10:00:00Z")
	m := New(&Opts{CacheFor: -1, LedgerRows: prescient.SlotsLimitMax + 1})
	c, err := prescient.NewClient(store, &prescient.Config{
		Server: "s1", Grid: quarterHours, Checks: registry(t), Now: clk.Now, Observer: m,
		SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-", Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, m)
	m.Watch(c)
	f := promtest.MustScrape(t, url)
	if _, ok := f.Value("prescient_jobs_overdue"); !ok {
		t.Errorf("LedgerRows %d: prescient_jobs_overdue not served (the reading failed)", prescient.SlotsLimitMax+1)
	}
}
