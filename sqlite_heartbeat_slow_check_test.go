package prescient_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// README "SQLite timeouts": "Within one process, a heartbeat, the record of
// a group or an application's Schedule waits only for the group running
// now, not for the groups queued behind it, so a slot of slow checks does
// not make the server report itself not ready." A group holds the write
// lock for up to guards.runtime + group_duration, and the busy timeout
// must exceed that. The bound of ServerTimeout/2 a heartbeat got against a
// hung database server (15s by default, under the default guards.runtime
// of 30s) made a heartbeat behind ONE check that ran longer than that, but
// well within its runtime guard and the busy timeout, fail, and the server
// report itself not ready (found by a review). SQLite's heartbeat is
// bounded by its busy timeout alone again.
func TestSQLiteHeartbeatBehindOneSlowCheckStaysReady(t *testing.T) {
	ctx := context.Background()
	const (
		busy          = 10 * time.Second
		beat          = 500 * time.Millisecond
		serverTimeout = 2 * time.Second         // a database server's heartbeat would be bounded at 1s
		slow          = 1500 * time.Millisecond // < runtime guard (30s), < busy (10s)
	)
	h, _ := openSQLiteFile(t, filepath.Join(t.TempDir(), "prescient.db"), &sqlite.Opts{BusyTimeout: busy})
	started := make(chan struct{}, 1)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		started <- struct{}{}
		time.Sleep(slow) // a legitimately slow check holding the write lock
		return time.Time{}, nil
	}
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "slow", check, nil), func(c *prescient.Config) {
		c.Heartbeat, c.ServerTimeout = beat, serverTimeout
	})
	schedule(t, c, "1", "slow", "2026-03-10T10:15:00Z")
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Set("2026-03-10T10:15:00Z")
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		c.Tick(ctx)
	}()
	<-started
	began := time.Now()
	if err := c.Heartbeat(ctx); err != nil {
		t.Errorf("heartbeat behind one %v check (runtime guard 30s, busy timeout %v) failed after %v: %v; want it to wait for the check running now",
			slow, busy, time.Since(began).Round(time.Millisecond), err)
	}
	if err := c.Ready(); err != nil {
		t.Errorf("Ready while a slow check runs: %v, want ready", err)
	}
	<-ticked
	wantOutcome(t, c, "1", history.Done, 1)
}
