package prescient_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// heartbeatFaults wraps a real store and injects faults into heartbeats:
// first failures, then one heartbeat that waits until its context ends (the
// server is stopping) and succeeds: the store "recovers" while Stop waits.
type heartbeatFaults struct {
	driver.Driver
	mu      sync.Mutex
	mode    string        // "", "fail" or "recover-on-stop"
	failed  chan struct{} // closed after the first injected failure
	blocked chan struct{} // closed when a heartbeat waits for the stop
}

func (h *heartbeatFaults) ServerHeartbeat(ctx context.Context, s *driver.Server) error {
	h.mu.Lock()
	mode := h.mode
	h.mu.Unlock()
	switch mode {
	case "fail":
		select {
		case <-h.failed:
		default:
			close(h.failed)
		}
		return errors.New("injected: database unreachable")
	case "recover-on-stop":
		select {
		case <-h.blocked:
		default:
			close(h.blocked)
		}
		<-ctx.Done()
		return nil
	}
	return h.Driver.ServerHeartbeat(ctx, s)
}

func (h *heartbeatFaults) set(mode string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode = mode
}

// A store that recovers while the server is stopping starts no sweep and
// does not hold up Stop (it once deadlocked: Stop held the client's lock
// while waiting for the heartbeat, which wanted the lock to start a sweep).
func TestStopWhileTheStoreRecovers(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		faults := &heartbeatFaults{Driver: h.store.Driver(), failed: make(chan struct{}), blocked: make(chan struct{})}
		h.store = wrappedStore{h.store, faults}
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, func(c *prescient.Config) {
			c.Heartbeat, c.ServerTimeout = 5*time.Millisecond, time.Second
			c.ShutdownGrace = 50 * time.Millisecond
		})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		faults.set("fail")
		<-faults.failed
		faults.set("recover-on-stop")
		<-faults.blocked

		stopped := make(chan error, 1)
		go func() { stopped <- c.Stop(context.Background()) }()
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second): // a liveness bound, not a timing assertion
			t.Fatal("Stop did not return: deadlocked with the recovering heartbeat")
		}
	})
}

// A Start whose first heartbeat fails returns the error; the next Start,
// with the store back, sees a recovery, which starts no sweep before the
// client runs, and must not wait for the Start that is running it (it once
// deadlocked: Start held the client's lock across the heartbeat).
func TestStartAgainAfterAFailedHeartbeat(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		faults := &heartbeatFaults{Driver: h.store.Driver(), failed: make(chan struct{}), blocked: make(chan struct{})}
		h.store = wrappedStore{h.store, faults}
		c := h.client(newClock("2026-03-10T10:00:00Z"), &checks.Registry{}, nil)
		faults.set("fail")
		if err := c.Start(context.Background()); err == nil {
			t.Fatal("Start with the store down: no error")
		}
		faults.set("")
		started := make(chan error, 1)
		go func() { started <- c.Start(context.Background()) }()
		select {
		case err := <-started:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second): // a liveness bound, not a timing assertion
			t.Fatal("the second Start did not return: deadlocked with its own heartbeat")
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A store statement cut short because the client is stopping (Stop ends the
// context of the tick in progress) is the client's own doing, not a store
// failure: no StoreError event, so that every deploy does not raise
// prescient_store_errors_total, and the store is not marked unavailable
// (which logs an error). On PostgreSQL the server answers the pool's cancel
// request with SQLSTATE 57014, which used to be reported as the store's
// error. The ledger is held by another connection so that the tick's first
// statement waits, and the tick's context ends while it waits: once on a
// first tick (its first statement starts the slot) and once on a tick after
// a missed one (its first statement reads the ledger back to the last good
// slot). The same for a heartbeat, whose table is held too.
func TestStatementCancelledByStopIsNoStoreError(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		rec := &recorder{}
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, func(c *prescient.Config) { c.Observer = rec })
		// cancelledWhileBlocked runs op with a context it ends once op's
		// statement waits for the held ledger, and returns op's error.
		cancelledWhileBlocked := func(what string, op func(context.Context) error) error {
			t.Helper()
			release := holdLedger(t, h)
			defer release()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- op(ctx) }()
			waitBlocked(t, h)
			select {
			case err := <-done:
				t.Fatalf("%s returned before its context ended (%v): the ledger was not held", what, err)
			default:
			}
			cancel()
			err := <-done
			_, _, _, errs := rec.take()
			for _, e := range errs {
				t.Errorf("%s: store error reported for the client's own cancellation: %s: %v", what, e.Op, e.Err)
			}
			return err
		}
		tick := func(ctx context.Context) error { c.Tick(ctx); return nil }
		cancelledWhileBlocked("first tick", tick)
		if err := c.Ready(); err == nil || err.Error() != "prescient: not started" {
			t.Errorf("readiness after a cancelled first tick: %v, want only \"prescient: not started\"", err)
		}
		c.Tick(context.Background())
		if _, _, _, errs := rec.take(); len(errs) > 0 || c.Ready() != nil {
			t.Fatalf("tick: store errors %v, readiness %v", errs, c.Ready())
		}
		clk.Add(time.Hour) // four slots missed
		cancelledWhileBlocked("tick after missed slots", tick)
		if err := c.Ready(); err != nil {
			t.Errorf("readiness after a cancelled tick: %v, want ready", err)
		}

		if err := cancelledWhileBlocked("heartbeat", c.Heartbeat); !errors.Is(err, context.Canceled) {
			t.Errorf("heartbeat cut short: %v, want context.Canceled", err)
		}
		if err := c.Ready(); err != nil {
			t.Errorf("readiness after a cancelled heartbeat: %v, want ready", err)
		}
	})
}

// waitBlocked returns once a statement waits for the lock holdLedger holds.
// PostgreSQL shows the waiting lock; SQLite's busy handler waits inside the
// library, where nothing shows it, so there it gives the statement a moment
// to start waiting (the caller then checks that it is still waiting).
func waitBlocked(t *testing.T, h *harness) {
	t.Helper()
	if _, ok := h.store.(*postgres.Store); !ok {
		time.Sleep(300 * time.Millisecond)
		return
	}
	for end := time.Now().Add(20 * time.Second); ; {
		if h.count(`SELECT 1 FROM pg_locks WHERE NOT granted
			AND relation IN ('prescient_slots'::regclass, 'prescient_servers'::regclass)`) > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("no statement waited for the held ledger within 20s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, with a bound
	}
}

// holdLedger holds the write lock of h's slot ledger and servers table from
// a connection of its own until release is called.
func holdLedger(t *testing.T, h *harness) (release func()) {
	t.Helper()
	ctx := context.Background()
	switch s := h.store.(type) {
	case *postgres.Store:
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE prescient_slots, prescient_servers IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(ctx) }
	case *sqlite.Store:
		db, err := sql.Open("sqlite", s.Path())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		return func() {
			_, _ = conn.ExecContext(ctx, `ROLLBACK`)
			_ = conn.Close()
			_ = db.Close()
		}
	}
	t.Fatalf("holdLedger: no way to lock a %T", h.store)
	return nil
}
