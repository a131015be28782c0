package prescient_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// TestSweepOnAHostAheadWaitsForTheDatabase: the sweep of a process whose
// host clock ran ahead of the database's (a `prescient sweep` from a
// laptop whose clock was off) fired every server's slots before the one in
// progress by its own clock: a job due in three seconds ran at once, its
// history record finished in the future (found by a trial of time). A
// sweep, and FireSlot, now take no slot that has not begun by the
// database's clock either; the job runs once it has.
func TestSweepOnAHostAheadWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	pool := h.store.(*postgres.Store).Pool()
	var mu sync.Mutex
	var ranAt []time.Time // the database's clock when each check ran
	reg := register(t, "late", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		var now time.Time
		if err := j.Tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return time.Time{}, err
		}
		mu.Lock()
		ranAt = append(ranAt, now)
		mu.Unlock()
		return time.Time{}, nil
	}, nil)
	grid := slots.Grid{Resolution: time.Second}
	cfg := prescient.WithHostClock(prescient.Config{Server: "ahead", Checks: reg, Grid: grid, SweepSchedule: "-", SweepOnStartDisabled: true},
		func() time.Time { return time.Now().Add(10 * time.Minute) })
	c, err := prescient.NewClient(h.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Scheduled by another client three seconds ahead of the database's
	// clock (as the SQL API would).
	app, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Checks: reg, Grid: grid})
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	job, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "late", At: dbNow.Add(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Sweep(ctx, prescient.SweepRun)
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 0 {
		t.Errorf("a sweep on a host 10 minutes ahead checked %d job(s) of slot %s before it began by the database's clock",
			res.Jobs, job.NextCheckAt.Format(time.RFC3339))
	}
	if _, err := c.FireSlot(ctx, job.NextCheckAt); err == nil || !strings.Contains(err.Error(), "has not begun") {
		t.Errorf("FireSlot of a slot 3 s ahead by the database's clock on a host 10 minutes ahead: %v; want it refused", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for h.count(`SELECT 1 FROM prescient_history`) == 0 && time.Now().Before(deadline) {
		if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ranAt) != 1 {
		t.Fatalf("the check ran %d time(s), want once", len(ranAt))
	}
	if ranAt[0].Before(job.NextCheckAt) {
		t.Errorf("the check of slot %s ran at %s by the database's clock, %s early",
			job.NextCheckAt.Format(time.RFC3339Nano), ranAt[0].Format(time.RFC3339Nano), job.NextCheckAt.Sub(ranAt[0]))
	}
}

// TestHostClockOffTheDatabaseIsWarned: a server whose host clock is more
// than a second off the database's says so at start, by how much; one
// within it says nothing.
func TestHostClockOffTheDatabaseIsWarned(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	for _, tc := range []struct {
		skew time.Duration
		want string
	}{
		{10 * time.Minute, "this host's clock is ahead of the database's"},
		{-10 * time.Minute, "this host's clock is behind the database's"},
		{300 * time.Millisecond, ""},
	} {
		var log bytes.Buffer
		skew := tc.skew
		cfg := prescient.WithHostClock(prescient.Config{Server: "s", SweepSchedule: "-", SweepOnStartDisabled: true,
			Logger: slog.New(slog.NewTextHandler(&log, nil))}, func() time.Time { return time.Now().Add(skew) })
		c, err := prescient.NewClient(h.store, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(log.String(), "level=WARN msg=\"this host's clock")
		switch {
		case tc.want == "" && warned:
			t.Errorf("host %s off: warned, want nothing:\n%s", skew, log.String())
		case tc.want != "" && (!strings.Contains(log.String(), tc.want) || !strings.Contains(log.String(), "difference="+skew.String()+"\n")):
			t.Errorf("host %s off: log\n%s\nwant a warning %q saying by how much", skew, log.String(), tc.want)
		}
	}
}

// TestSweepOnAHostAheadWhileThePoolIsBusy: the database's clock was read
// with the wait for a pool connection counted in its margin, so a sweep
// whose read waited 4 s for the only connection took a slot almost that
// long before it began (found by a review). Only the statement counts now.
func TestSweepOnAHostAheadWhileThePoolIsBusy(t *testing.T) {
	t.Parallel()
	h := openPostgresConns(t, 1)
	ctx := context.Background()
	pool := h.store.(*postgres.Store).Pool()
	ran := make(chan time.Time, 10)
	reg := register(t, "late", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		var now time.Time
		err := j.Tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
		ran <- now
		return time.Time{}, err
	}, nil)
	grid := slots.Grid{Resolution: time.Second}
	cfg := prescient.WithHostClock(prescient.Config{Server: "ahead", Checks: reg, Grid: grid, Workers: 1, SweepSchedule: "-", SweepOnStartDisabled: true},
		func() time.Time { return time.Now().Add(10 * time.Minute) })
	c, err := prescient.NewClient(h.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	app, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Checks: reg, Grid: grid})
	if err != nil {
		t.Fatal(err)
	}
	job, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "late", At: dbNow.Add(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx) // another user of the pool, for 4 s
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(4 * time.Second); conn.Release() }()
	if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-ran:
		if at.Before(job.NextCheckAt) {
			t.Errorf("the check of slot %s ran at %s by the database's clock, %s before its slot began",
				job.NextCheckAt.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), job.NextCheckAt.Sub(at))
		}
	default:
	}
}
