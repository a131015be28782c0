package prescient_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// TestSQLiteBusyTimeoutDefaultOutlastsAGroup: with the defaults, a write
// waiting for the write lock (an application's Schedule, a heartbeat)
// outlasts a group of checks holding it, each as long as the runtime guard
// allows. A busy timeout under the runtime guard failed a Schedule behind a
// 12s check and made a server behind a 25s check report itself not ready.
func TestSQLiteBusyTimeoutDefaultOutlastsAGroup(t *testing.T) {
	hold := guards.RuntimeDefault + prescient.GroupDurationDefault
	if sqlite.BusyTimeoutDefault <= hold {
		t.Errorf("sqlite.BusyTimeoutDefault = %s, want more than guards.RuntimeDefault + GroupDurationDefault = %s",
			sqlite.BusyTimeoutDefault, hold)
	}
}

// TestSQLiteHeartbeatStaysReadyBehindSlowChecks: on SQLite the checks of a
// slot run one group at a time under the write lock, and a slot of several
// slow checks holds it, group after group, for far longer than the busy
// timeout. A heartbeat in the middle of it waits for the group running now,
// not for the ones queued behind it, so it succeeds and the server stays
// ready; so do the records of the groups about to run.
func TestSQLiteHeartbeatStaysReadyBehindSlowChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const (
		// Each check well under the busy timeout, so that a loaded machine's
		// commit time cannot push one group past it (250ms against 300ms
		// failed under load); together far over it.
		busy  = 1500 * time.Millisecond
		slow  = 200 * time.Millisecond
		count = 16
	)
	h, _ := openSQLiteFile(t, filepath.Join(t.TempDir(), "prescient.db"), &sqlite.Opts{BusyTimeout: busy})
	started := make(chan string, count)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		started <- j.Key
		time.Sleep(slow) // a slow check holding the write lock, not a synchronisation
		return time.Time{}, nil
	}
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "slow", check, nil), func(c *prescient.Config) { c.Workers, c.GroupSize = count, 1 })
	var keys []string
	for i := range count {
		keys = append(keys, strconv.Itoa(i+1))
	}
	for _, k := range keys {
		schedule(t, c, k, "slow", "2026-03-10T10:15:00Z")
	}
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}

	clk.Set("2026-03-10T10:15:00Z")
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		c.Tick(ctx)
	}()
	// Once the second check runs, the other groups wait for the lock behind
	// it: 8 × 200ms in all.
	<-started
	<-started
	if err := c.Heartbeat(ctx); err != nil {
		t.Errorf("heartbeat behind the slot's slow checks: %v, want it to wait for the check running now", err)
	}
	if err := c.Ready(); err != nil {
		t.Errorf("Ready while slow checks run: %v, want ready", err)
	}
	<-ticked
	if err := c.Ready(); err != nil {
		t.Errorf("Ready after the slot: %v, want ready (the groups' records waited behind the checks)", err)
	}
	for _, k := range keys {
		wantOutcome(t, c, k, history.Done, 1)
	}
}
