package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// DeliveryFinish records a result only while the delivery is pending with
// the attempts the claim returned, so that a server whose lease ran out
// does not record over the attempt that took over. That fence relied on
// attempts only growing: DeliveriesRetry sets them back to 0, so after dead
// -> retry -> claim the count came back to a value a stale lease holder
// still carried, and its late result was recorded over the live claim,
// clearing its lease (found by a review). The result now names the claim's
// lease too (DeliveryFinishParams.Lease, as the deliverer passes it).
func TestRetriedDeliveryRefusesAStaleLeasesResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		reg := &checks.Registry{}
		if err := reg.Register("raise", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			_, err := j.Emit(ctx, checks.Event{Name: "order.unshipped"})
			return time.Time{}, err
		}, &checks.Opts{Sinks: []string{"ops"}}); err != nil {
			t.Fatal(err)
		}
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "raise", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		drv := h.store.Driver()
		claim := func(server string) *driver.Delivery {
			t.Helper()
			ds, err := drv.DeliveriesClaim(ctx, &driver.DeliveriesClaimParams{Sink: "ops", Now: clk.Now(),
				LeaseUntil: clk.Now().Add(time.Minute), Server: server, Limit: 1})
			if err != nil || len(ds) != 1 {
				t.Fatalf("claim by %s: %v, %v", server, ds, err)
			}
			return ds[0]
		}
		stale := claim("a") // attempt 1; server a's call outlives its lease
		clk.Add(2 * time.Minute)
		b := claim("b") // attempt 2 takes over, and fails for good
		if ok, err := drv.DeliveryFinish(ctx, &driver.DeliveryFinishParams{EventID: b.Event.ID, Sink: "ops", Attempt: b.Attempts,
			Lease: b.NextAttemptAt, State: driver.DeliveryDead, Attempts: b.Attempts, Status: 500, Err: "down", Now: clk.Now()}); err != nil || !ok {
			t.Fatalf("b's dead result: %v, %v", ok, err)
		}
		if n, err := c.RetryDeliveries(ctx, "ops", 0); err != nil || n != 1 {
			t.Fatalf("retry: %d, %v", n, err)
		}
		live := claim("c") // the receiver is fixed: attempt 1 again
		// Server a's result of its attempt 1, minutes old, arrives now.
		ok, err := drv.DeliveryFinish(ctx, &driver.DeliveryFinishParams{EventID: stale.Event.ID, Sink: "ops", Attempt: stale.Attempts,
			Lease: stale.NextAttemptAt, State: driver.DeliveryPending, Attempts: stale.Attempts, NextAttemptAt: clk.Now(), Status: 503, Err: "stale", Now: clk.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			ds, _ := c.Deliveries(ctx, &prescient.DeliveriesParams{Sink: "ops"})
			t.Errorf("a result of attempt %d whose lease ran out before the delivery went dead and was retried was recorded over "+
				"server c's live attempt %d (lease until %s): now %+v; the fence attempts = %d no longer tells them apart after a retry reset attempts to 0",
				stale.Attempts, live.Attempts, live.NextAttemptAt.Format(time.RFC3339), ds[0], stale.Attempts)
		}
		// The live claim's own result is recorded.
		if ok, err := drv.DeliveryFinish(ctx, &driver.DeliveryFinishParams{EventID: live.Event.ID, Sink: "ops", Attempt: live.Attempts,
			Lease: live.NextAttemptAt, State: driver.DeliveryDelivered, Attempts: live.Attempts, Status: 200, Now: clk.Now()}); err != nil || !ok {
			t.Errorf("the live claim's result: recorded %v, %v; want recorded", ok, err)
		}
	})
}
