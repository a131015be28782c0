package prescient_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/postgres"
)

// hungWarm fills the pool with idle connections to the proxy, as a
// running server's pool is.
func hungWarm(t *testing.T, s *postgres.Store, n int) {
	t.Helper()
	var held []*pgxpool.Conn
	for range n {
		conn, err := s.Pool().Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	for _, conn := range held {
		conn.Release()
	}
}

func hungStuck(in string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), in)
}

// docs/ha.md and config.go: on PostgreSQL "each statement of the engine's
// own (listing the due jobs, a group's claim, decisions and commit, its
// attempt, the slot's ledger) waits at most server_timeout", "so that a
// primary that hangs cannot hold a firing for longer". But a tick with
// automatic ownership (the HA set-up) first reads the ledger of the slots
// it looks back over (completeSlots: Driver.SlotList), and that read was
// not bounded: on a hung primary Tick never returned. Ticks never overlap
// (tickMu, and cron's SkipIfStillRunning), so the server fired no slot at
// all until TCP gave up on that connection, even once its heartbeat had
// reached the new primary and it reported ready again with its positions
// (found by a review). SlotList is bounded now like the others.
func TestHungPrimaryTickReturns(t *testing.T) {
	h, s, proxy, _ := openHungStore(t, 8)
	clk := newClock("2026-03-10T10:15:00Z")
	const timeout = time.Second
	c := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), func(cfg *prescient.Config) {
		cfg.AutoOwnership = true
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, timeout
		cfg.Guards.Runtime = time.Second // a call that takes a pool connection may wait that much more
	})
	if err := c.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Tick(context.Background()) // fires 10:15 on a live primary
	hungWarm(t, s, 8)
	proxy.freeze()
	clk.Set("2026-03-10T10:30:00Z")

	ticked := make(chan struct{})
	go func() {
		c.Tick(context.Background()) // as cron runs it: the work context, which ends only with Stop
		close(ticked)
	}()
	wait := 60 * timeout
	select {
	case <-ticked:
		t.Logf("the tick on the hung primary returned")
	case <-time.After(wait):
		t.Fatalf("Tick still runs %s after the primary hung (server timeout %s): no later tick can start "+
			"(a goroutine in Client.completeSlots, the tick's read of the ledger: %v; in postgres SlotList: %v)",
			wait, timeout, hungStuck("prescient.(*Client).completeSlots"), hungStuck("postgres.(*Store).SlotList"))
	}
}

// The same on a single server with a static ownership map, the case the
// change names ("on a single server every later slot waited behind the
// firing"): the tick at 10:30 fires on the hung primary and fails within
// the bound, as the change intends; the next tick, at 10:45, catches up
// from the slot that failed, so it reads the ledger first (completeSlots),
// with no bound, on a pool connection to the hung host, and never returns:
// every later slot waits behind it again.
func TestHungPrimaryStaticTickAfterAFailedSlotReturns(t *testing.T) {
	h, s, proxy, _ := openHungStore(t, 8)
	clk := newClock("2026-03-10T10:15:00Z")
	const timeout = time.Second
	c := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), func(cfg *prescient.Config) {
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, timeout
		cfg.Guards.Runtime = time.Second // a call that takes a pool connection may wait that much more
	})
	c.Tick(context.Background()) // fires 10:15 on a live primary
	hungWarm(t, s, 8)
	proxy.freeze()
	clk.Set("2026-03-10T10:30:00Z")
	began := time.Now()
	c.Tick(context.Background()) // fires 10:30 on the hung primary: fails within the bound
	t.Logf("the tick at 10:30 returned after %s", time.Since(began))
	clk.Set("2026-03-10T10:45:00Z")

	ticked := make(chan struct{})
	go func() {
		c.Tick(context.Background())
		close(ticked)
	}()
	wait := 60 * timeout
	select {
	case <-ticked:
		t.Logf("the tick at 10:45 returned")
	case <-time.After(wait):
		t.Fatalf("the tick at 10:45 still runs %s after it started (server timeout %s): no later tick can start "+
			"(a goroutine in Client.completeSlots: %v; in postgres SlotList: %v)",
			wait, timeout, hungStuck("prescient.(*Client).completeSlots"), hungStuck("postgres.(*Store).SlotList"))
	}
}
