package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/promtest"
)

// prescient_deliveries reports, per sink, the deliveries pending and dead:
// a dead delivery is an alert that never reached its receiver, and only the
// log, `prescient status` and `prescient deliveries` said so (found trying
// the README as a new user). A configured sink with none reads 0.
func TestDeliveriesGauge(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ctx := context.Background()
			store := st.open(t)
			clk := &clock{}
			clk.Set("2026-03-10T10:00:00Z")
			reg := &checks.Registry{}
			if err := reg.Register("raise", func(ctx context.Context, j *checks.Job) (time.Time, error) {
				_, err := j.Emit(ctx, checks.Event{Name: "order.unshipped"})
				return time.Time{}, err
			}, &checks.Opts{Sinks: []string{"ops"}}); err != nil {
				t.Fatal(err)
			}
			m := New(&Opts{CacheFor: -1, Sinks: []string{"idle", "ops"}})
			c, err := prescient.NewClient(store, &prescient.Config{Server: "s1", Grid: quarterHours, Checks: reg, Now: clk.Now,
				Observer: m, Logger: quiet, SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-"})
			if err != nil {
				t.Fatal(err)
			}
			m.Watch(c)
			url := serve(t, m)
			for _, k := range []string{"1", "2", "3"} {
				if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: k, Check: "raise", At: ts("2026-03-10T10:15:00Z")}); err != nil {
					t.Fatal(err)
				}
			}
			clk.Set("2026-03-10T10:15:00Z")
			if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err != nil {
				t.Fatal(err)
			}
			// One delivery fails for good.
			drv := store.Driver()
			claimed, err := drv.DeliveriesClaim(ctx, &driver.DeliveriesClaimParams{Sink: "ops", Now: clk.Now(),
				LeaseUntil: clk.Now().Add(time.Minute), Server: "s1", Limit: 1})
			if err != nil || len(claimed) != 1 {
				t.Fatalf("claim a delivery: %v, %v", claimed, err)
			}
			d := claimed[0]
			if ok, err := drv.DeliveryFinish(ctx, &driver.DeliveryFinishParams{EventID: d.Event.ID, Sink: "ops", Attempt: d.Attempts,
				State: driver.DeliveryDead, Attempts: d.Attempts, Status: 500, Err: "receiver down", Now: clk.Now()}); err != nil || !ok {
				t.Fatalf("finish the delivery dead: %v, %v", ok, err)
			}

			f := promtest.MustScrape(t, url)
			want(t, f, 2, "prescient_deliveries", "sink", "ops", "state", "pending")
			want(t, f, 1, "prescient_deliveries", "sink", "ops", "state", "dead")
			want(t, f, 0, "prescient_deliveries", "sink", "idle", "state", "pending")
			want(t, f, 0, "prescient_deliveries", "sink", "idle", "state", "dead")
		})
	}
}
