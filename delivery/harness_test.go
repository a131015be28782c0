package delivery_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func openPostgres(t *testing.T) *postgres.Store {
	t.Helper()
	url, schema := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "prescient.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// forEachStore runs fn on a fresh store of each kind, in parallel.
func forEachStore(t *testing.T, fn func(t *testing.T, drv driver.Driver)) {
	for _, k := range []struct {
		name string
		open func(t *testing.T) driver.Driver
	}{
		{"postgres", func(t *testing.T) driver.Driver { return openPostgres(t) }},
		{"sqlite", func(t *testing.T) driver.Driver { return openSQLite(t) }},
	} {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			fn(t, k.open(t))
		})
	}
}

// record records the event of stage for order key with deliveries to
// sinks, as the engine does in a check's transaction, and returns its
// idempotency key.
func record(t *testing.T, drv driver.Driver, key, stage string, now time.Time, sinks ...string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := drv.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	ik := fmt.Sprintf("order/%s/unshipped/%s", key, stage)
	ok, err := tx.OutboxRecord(ctx, &driver.OutboxRecordParams{JobID: 1, Entity: "order", Key: key, Check: "unshipped",
		Stage: stage, Event: "order.unshipped", Severity: "warning", Payload: []byte(`{"order":"` + key + `"}`),
		IdempotencyKey: ik, Sinks: sinks, Now: now})
	if err != nil || !ok {
		t.Fatalf("record %s: %v, %v", ik, ok, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ik
}

// deliveryOf returns the delivery of the event ik to sink.
func deliveryOf(t *testing.T, drv driver.Driver, ik, sink string) *driver.Delivery {
	t.Helper()
	ds, err := drv.DeliveryList(context.Background(), &driver.DeliveryListParams{Sink: sink, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Event.IdempotencyKey == ik {
			return d
		}
	}
	t.Fatalf("no delivery of %s to %s", ik, sink)
	return nil
}

// eventually polls cond every 10ms until it holds, failing the test after
// 30 seconds with what.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
