package prescient_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// docs/ha.md: a primary that hangs (connections open, nothing answered)
// must not stop a server for longer than the server timeout. The heartbeat
// was bounded by then (TestHungPrimaryMakesTheServerNotReady), but the
// engine's own statements were not: a group whose check had run when the
// primary hung waited for its decisions and commit until TCP gave up on the
// connection (from about 15 minutes to never), and with it the firing of
// the slot and, on a single server, every later slot (a firing still
// running skips the next tick). Now each of the engine's statements on a
// database server gives up after ServerTimeout: the firing ends with the
// group failed, its connection is dropped, and the slot fired again runs
// the job once, on the writable host.
func TestHungPrimaryEndsTheFiringWithinTheServerTimeout(t *testing.T) {
	ctx := context.Background()
	h, _, proxy, schema := openHungStore(t, 8)

	ran := make(chan struct{}, 10)
	frozen := make(chan struct{})
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key); err != nil {
			return time.Time{}, err
		}
		ran <- struct{}{}
		<-frozen // the primary hangs once this check has written, before its group commits
		return time.Time{}, nil
	}
	const timeout = time.Second
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "unshipped", check, nil), func(cfg *prescient.Config) {
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, timeout
		// A call that takes a pool connection may wait for one that long
		// more (runtime guard and group duration): kept short here.
		cfg.Guards.Runtime = time.Second
	})
	schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:15:00Z")

	fired := make(chan error, 1)
	go func() {
		_, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z"))
		fired <- err
	}()
	<-ran
	proxy.freeze()
	close(frozen)
	wait := 60 * timeout
	select {
	case err := <-fired:
		t.Logf("the firing on the hung primary ended: %v", err)
	case <-time.After(wait):
		buf := make([]byte, 1<<20)
		stack := string(buf[:runtime.Stack(buf, true)])
		t.Fatalf("the firing still runs %s after the primary hung (server timeout %s): the group waits on its connection to the hung host "+
			"(a goroutine in postgres.(*procTx).Apply or Commit: %v)", wait, timeout,
			strings.Contains(stack, "postgres.(*procTx).Apply") || strings.Contains(stack, "postgres.(*procTx).Commit"))
	}

	// The host that hung goes away for good (its connections reset, so its
	// backend rolls the group back); the slot fired again runs the job on
	// the writable host, once.
	proxy.close()
	for i := 0; ; i++ {
		rec, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z"))
		if err == nil && rec.Complete() {
			// The hung host's backend rolls the group back once it sees
			// its connection closed, not at once: until then the job's
			// row is locked, and a firing skips it, complete, the job
			// still due (found by CI: fired before that, the job had no
			// history).
			if _, err := c.Job(ctx, "order", "1", "unshipped"); errors.Is(err, prescient.ErrNotFound) {
				break
			}
		}
		if i == 50 {
			t.Fatalf("the slot fired again %d times on the writable host and its job is still due: %v", i+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantOutcome(t, c, "1", history.Done, 1)
	if n := h.count(`SELECT 1 FROM ` + schema + `.alerts WHERE entity_key = '1'`); n != 1 {
		t.Errorf("%d alerts for order 1, want 1: the group on the hung host never committed, the slot fired again did", n)
	}
}
