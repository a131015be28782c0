package prescient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
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
