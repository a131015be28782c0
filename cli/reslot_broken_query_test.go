package cli

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/example/orders"
)

// Declared checks' queries are now prepared only by the commands that run
// checks, so that a query broken by an application's migration does not
// stop the commands operators need then. `sweep --mode reslot` runs no
// check (it moves the overdue jobs to the next slot, for their owner to
// fire); a sweep that always opened with runsChecks prepared every query
// and failed on the broken one (found by a review).
func TestSweepReslotWithABrokenQuery(t *testing.T) {
	forDeclaredStores(t, func(t *testing.T, s *declaredStore, due string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.exec(orders.Schema)
		if _, _, err := runAt(t, ctx, time.Now(), s.env, writeConfig(t, s.head), "migrate"); err != nil {
			t.Fatal(err)
		}
		yaml := s.head + "checks:\n  c:\n    entity: order\n    query: |\n      SELECT id AS key,\n        placd_at\n      FROM orders WHERE " + due + "\n    stages: [{after: 1h, event: e}]\n"
		config := writeConfig(t, yaml)
		if out, _, err := runAt(t, ctx, time.Now(), s.env, config, "sweep", "--mode", "reslot"); err != nil {
			t.Errorf("sweep --mode reslot with a refused query: %v, want it to work (it runs no check)\n%s", err, out)
		}
	})
}
