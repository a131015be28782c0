package prescient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// TestHostClockAheadFollowsTheDatabase: a process whose host clock ran
// ahead of the database's fired slots early, and its sweep (a `prescient
// sweep` run from a laptop whose clock was off) fired every server's slots
// before they began: a job due in three minutes ran at once, its history
// record finished in the future (found by a trial of time). The client now
// runs on the database's clock when its host's differs by more than
// clockTolerance: the sweep finds nothing overdue, and the job runs no
// earlier than its slot by the database's clock.
func TestHostClockAheadFollowsTheDatabase(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	pool := h.store.(*postgres.Store).Pool()
	dbNow := func() time.Time {
		var now time.Time
		if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
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
	ahead := 10 * time.Minute
	cfg := prescient.WithHostClock(prescient.Config{
		Server: "ahead", Checks: reg, Grid: slots.Grid{Resolution: time.Second},
		SweepSchedule: "-", SweepOnStartDisabled: true,
	}, func() time.Time { return time.Now().Add(ahead) })
	c, err := prescient.NewClient(h.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Scheduled by the database's clock (as the SQL API does) three
	// seconds ahead, by another client.
	other, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Checks: reg, Grid: slots.Grid{Resolution: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	at := dbNow().Add(3 * time.Second)
	job, err := other.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "late", At: at})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Sweep(ctx, prescient.SweepRun)
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 0 {
		t.Errorf("sweep on a host 10 minutes ahead checked %d job(s) of slot %s, %s before it began by the database's clock",
			res.Jobs, job.NextCheckAt.Format(time.RFC3339), time.Until(job.NextCheckAt).Round(time.Millisecond))
	}
	if d := c.Config().Now().Sub(dbNow()).Abs(); d > time.Second {
		t.Errorf("the client's clock is %s off the database's; want it to follow the database's", d)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for h.count(`SELECT 1 FROM prescient_history`) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
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

// TestInjectedClockIsKept: a client given Config.Now keeps it, however far
// it is from the database's (tests and simulations run on such clocks).
func TestInjectedClockIsKept(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2031-03-04T05:06:07Z")
	c, err := prescient.NewClient(h.store, &prescient.Config{Server: "sim", Now: clk.Now, SweepSchedule: "-", SweepOnStartDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sweep(context.Background(), prescient.SweepRun); err != nil {
		t.Fatal(err)
	}
	if got := c.Config().Now(); !got.Equal(ts("2031-03-04T05:06:07Z")) {
		t.Errorf("Config().Now() = %s, want the injected 2031-03-04T05:06:07Z", got)
	}
}

// TestHostClockCloseEnoughIsKept: a host clock within clockTolerance
// (100ms) of the database's is not corrected: below that a correction would
// only add the noise of the readings.
func TestHostClockCloseEnoughIsKept(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	host := func() time.Time { return time.Now().Add(30 * time.Millisecond) }
	cfg := prescient.WithHostClock(prescient.Config{Server: "close", SweepSchedule: "-", SweepOnStartDisabled: true}, host)
	c, err := prescient.NewClient(h.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sweep(context.Background(), prescient.SweepRun); err != nil {
		t.Fatal(err)
	}
	// Read back to back, the two clocks are the same one: the host's.
	if d := c.Config().Now().Sub(host()); d > 0 || d < -20*time.Millisecond {
		t.Errorf("the client's clock is %s off the host's 30ms skew; want it kept", d)
	}
}
