package prescient_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// A slot that passes while the start-up sweep runs is fired by the first
// tick, not left to the next scheduled sweep: the sweep takes the slots
// before the one in progress when it began, the first tick every owned slot
// from that one on.
func TestSlotsPassingDuringTheStartUpSweep(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:05:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "overdue" {
				clk.Set("2026-03-10T10:50:00Z") // a long sweep: three slots pass
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) { c.SweepOnStartDisabled = false })
		leftOverdue(t, h, c, clk, "overdue", ts("2026-03-10T09:45:00Z"))
		schedule(t, c, "passed", "c", "2026-03-10T10:15:00Z")
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(context.Background())
		// The sweep runs it, or the first tick (re-firing the slot before
		// the one in progress) beside it.
		waitDone(t, c, "overdue")
		// The ticks run beside the sweep and Start's return: wait for them
		// (polling the store, with a deadline).
		deadline := time.Now().Add(10 * time.Second)
		for {
			recs := historyOf(t, c, "passed")
			if len(recs) == 1 && recs[0].Outcome == history.Done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the job due in 10:15, which passed during the start-up sweep, was not fired by the first tick: history %+v", recs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Start warns when the store's pool is no larger than Workers: each running
// group holds a connection for its transaction, so fewer groups would run at
// once than configured, and none could narrow its attempt beside it.
func TestStartWarnsOfAPoolTooSmallForTheWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		conns int32
		warn  bool
	}{{2, true}, {10, true}, {11, false}} {
		h := openPostgresConns(t, tc.conns)
		var logs bytes.Buffer
		c := h.client(newClock("2026-03-10T10:05:00Z"), &checks.Registry{}, func(c *prescient.Config) {
			c.Workers = 10
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(logs.String(), "level=WARN msg=\"the store's connection pool is no larger than workers")
		if warned != tc.warn {
			t.Errorf("pool of %d, 10 workers: warned = %v, want %v; log:\n%s", tc.conns, warned, tc.warn, logs.String())
		}
		if tc.warn && !strings.Contains(logs.String(), fmt.Sprintf("pool=%d workers=10", tc.conns)) {
			t.Errorf("pool of %d: the warning does not give the pool and workers:\n%s", tc.conns, logs.String())
		}
	}
}

// A server heartbeats all through its start-up sweep, however long it runs:
// a sweep longer than ServerTimeout would otherwise make the others take it
// for gone (with AutoOwnership, take its positions, then give them back),
// and two servers restarted together would each see only itself and fire
// every slot. The sweep's check waits for a heartbeat sent after it began.
func TestHeartbeatsDuringTheStartUpSweep(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:20:00Z")
		drv := &heartbeatCounter{Driver: h.store.Driver()}
		var failed error // the check's, read once Start (and so the sweep) has returned
		check := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
			if drv.n.Load() == 0 {
				failed = fmt.Errorf("the start-up sweep ran before Start's first heartbeat")
				return time.Time{}, failed
			}
			// Start's own heartbeat is the first: a second is the loop's.
			// (On SQLite it then waits for the write lock this check's
			// group holds, counted already: wait for no third.)
			for deadline := time.Now().Add(10 * time.Second); drv.n.Load() < 2; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					failed = fmt.Errorf("no heartbeat in 10s of the start-up sweep (heartbeat every 10ms): the others would take this server for gone after server_timeout")
					return time.Time{}, failed
				}
			}
			return time.Time{}, nil
		}
		cfg := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) {
			c.SweepOnStartDisabled = false
			c.Heartbeat, c.ServerTimeout = 10*time.Millisecond, time.Minute // the bound on statements is not the point
		}).Config()
		c, err := prescient.NewClient(wrappedStore{h.store, drv}, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Two slots back: the start-up sweep's, not the first tick's,
		// which re-fires the slot before the one in progress.
		leftOverdue(t, h, c, clk, "overdue", ts("2026-03-10T09:45:00Z"))
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer c.Stop(context.Background())
		if failed != nil {
			t.Fatal(failed)
		}
		wantOutcome(t, c, "overdue", history.Done, 1)
	})
}

// heartbeatCounter counts the heartbeats the client sends.
type heartbeatCounter struct {
	driver.Driver
	n atomic.Int64
}

func (d *heartbeatCounter) ServerHeartbeat(ctx context.Context, srv *driver.Server) error {
	d.n.Add(1)
	return d.Driver.ServerHeartbeat(ctx, srv)
}

// A heartbeat during the start-up sweep that takes positions over (a
// server died) asks for a sweep of the jobs the dead server left behind:
// the client was not running yet, and that sweep was dropped, leaving them
// to the next scheduled sweep (or none, with SweepSchedule "-"). It runs
// once Start is done. PostgreSQL only: SQLite refuses automatic ownership.
func TestTakeOverDuringTheStartUpSweepSweeps(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:20:00Z")
	drv := &heartbeatCounter{Driver: h.store.Driver()}
	rec := &recorder{}
	var failed error
	check := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
		// Server "b" goes silent: past ServerTimeout, the next heartbeats
		// of "a" take its positions over.
		at := drv.n.Load()
		clk.Set("2026-03-10T10:25:00Z")
		for deadline := time.Now().Add(10 * time.Second); drv.n.Load() < at+2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				failed = fmt.Errorf("no heartbeat in 10s of the start-up sweep")
				return time.Time{}, failed
			}
		}
		return time.Time{}, nil
	}
	cfg := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) {
		c.Server, c.AutoOwnership, c.SweepOnStartDisabled = "a", true, false
		c.Heartbeat, c.ServerTimeout = 10*time.Millisecond, time.Minute
		c.Observer = rec
	}).Config()
	c, err := prescient.NewClient(wrappedStore{h.store, drv}, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.Driver().ServerHeartbeat(ctx, &driver.Server{Name: "b", StartedAt: clk.Now().Add(-time.Hour), HeartbeatAt: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	leftOverdue(t, h, c, clk, "overdue", ts("2026-03-10T10:00:00Z"))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	if failed != nil {
		t.Fatal(failed)
	}
	if got := len(c.Positions()); got != cfg.Grid.Positions() {
		t.Fatalf("a owns %d positions after b went silent, want all %d (the premise)", got, cfg.Grid.Positions())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, sweeps, _ := rec.take()
		if slices.ContainsFunc(sweeps, func(e prescient.SweepEvent) bool { return e.Trigger == "took over positions" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sweep for the positions taken over during the start-up sweep, 10s after Start returned")
		}
	}
}

// A server whose start-up sweep takes long fired no slot until it ended:
// the ticks began after it, while its heartbeats (with automatic
// ownership) already held positions, so a slot of those ran as late as the
// sweep was long (found by an operator's trial: 38s late after a 40s
// sweep). The ticks run beside the sweep: here the sweep's check waits for
// the check of the slot in progress. PostgreSQL only: on SQLite a group
// waits for the write lock the sweep's group holds.
func TestSlotsFireDuringTheStartUpSweep(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:05:00Z")
	ran := make(chan struct{})
	var failed error
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key == "now" {
			close(ran)
			return time.Time{}, nil
		}
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			failed = fmt.Errorf("the job of the slot in progress did not run in 10s of the start-up sweep")
		}
		return time.Time{}, failed
	}
	c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) { c.SweepOnStartDisabled = false })
	for key, at := range map[string]string{"overdue": "2026-03-10T09:30:00Z", "now": "2026-03-10T10:00:00Z"} {
		leftOverdue(t, h, c, clk, key, ts(at))
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	// The overdue job is the start-up sweep's (two slots back): its check
	// has returned with Start.
	if failed != nil {
		t.Fatal(failed)
	}
	wantOutcome(t, c, "overdue", history.Done, 1)
}

// waitDone waits (polling the store, with a deadline) until the job of key
// ended done.
func waitDone(t *testing.T, c *prescient.Client, key string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recs := historyOf(t, c, key)
		if len(recs) == 1 && recs[0].Outcome == history.Done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not done after 20s: history %+v", key, recs)
		}
	}
}

// A firing of a past slot (a catch-up, a sweep) was called incomplete by
// status readers until the server's next heartbeat listed it, up to a
// Heartbeat later (found by an operator's trial). It asks for a heartbeat
// at once: here the check of a job overdue in slot 10:00 (fired by the
// start-up sweep or the first tick's catch-up) waits for its slot to read
// running, the heartbeat being a minute. PostgreSQL only: on SQLite the
// heartbeat waits for the write lock the check's group holds.
func TestFiringOfAPastSlotIsRunningAtOnce(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:20:00Z")
	past := ts("2026-03-10T10:00:00Z")
	failed := make(chan error, 1) // the check's: it runs beside the test's loop
	check := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			srvs, err := h.store.Driver().ServerList(ctx)
			recs, err2 := h.store.Driver().SlotList(ctx, &driver.SlotListParams{})
			if err == nil && err2 == nil {
				states, _ := prescient.JudgeSlots(recs, false, srvs, clk.Now(), ts("2026-03-10T10:15:00Z"), time.Minute)
				for i, r := range recs {
					if r.Slot.Equal(past) && states[i] == prescient.SlotRunning {
						return time.Time{}, nil
					}
				}
			}
			if time.Now().After(deadline) {
				err := fmt.Errorf("10s into the firing of slot 10:00 the servers say %v (%v) and the ledger %v (%v): want it running", srvs, err, rows(recs), err2)
				select {
				case failed <- err:
				default:
				}
				return time.Time{}, err
			}
		}
	}
	c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) {
		c.SweepOnStartDisabled = false
		c.Heartbeat, c.ServerTimeout = time.Minute, 3*time.Minute
	})
	leftOverdue(t, h, c, clk, "overdue", past)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-failed:
			t.Fatal(err)
		default:
		}
		if recs := historyOf(t, c, "overdue"); len(recs) == 1 && recs[0].Outcome == history.Done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("job overdue not done after 20s")
		}
	}
}

// leftOverdue schedules the job of key (check c) and moves it to slot at,
// in the past, as a server that was down leaves it: the client would round
// a past time up to the next slot, the driver stores it as given.
func leftOverdue(t *testing.T, h *harness, c *prescient.Client, clk *clock, key string, at time.Time) {
	t.Helper()
	schedule(t, c, key, "c", clk.Now().Add(time.Hour).Format(time.RFC3339))
	if _, err := h.store.Driver().JobReschedule(context.Background(), nil, &driver.JobRescheduleParams{
		Entity: "order", Key: key, Check: "c", At: at, Now: clk.Now(),
	}); err != nil {
		t.Fatal(err)
	}
}
