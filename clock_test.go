package prescient_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// databaseClockCheck registers a check "late" that records the
// database's clock when it runs, on ran.
func databaseClockCheck(t *testing.T) (reg *checks.Registry, ran <-chan time.Time) {
	t.Helper()
	at := make(chan time.Time, 10)
	return register(t, "late", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		var now time.Time
		err := j.Tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
		at <- now
		return time.Time{}, err
	}, nil), at
}

// aheadOfTheDatabase is a client on h whose host clock runs 10 minutes
// ahead of the database's, with a check that records the database's clock
// when it runs (on ran), and a job of it another client scheduled `in`
// after the database's clock (as the SQL API would). mods adjust the
// client's configuration.
func aheadOfTheDatabase(t *testing.T, h *harness, in time.Duration, mods ...func(*prescient.Config)) (c *prescient.Client, job *prescient.Job, ran <-chan time.Time) {
	t.Helper()
	ctx := context.Background()
	reg, ran := databaseClockCheck(t)
	grid := slots.Grid{Resolution: time.Second}
	cfg := prescient.Config{Server: "ahead", Checks: reg, Grid: grid, Workers: 1, SweepSchedule: "-", SweepOnStartDisabled: true}
	for _, mod := range mods {
		mod(&cfg)
	}
	cfg = prescient.WithHostClock(cfg, func() time.Time { return time.Now().Add(10 * time.Minute) })
	c, err := prescient.NewClient(h.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	app, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Checks: reg, Grid: grid})
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := h.store.(*postgres.Store).Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	job, err = app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "late", At: dbNow.Add(in)})
	if err != nil {
		t.Fatal(err)
	}
	return c, job, ran
}

// notEarly fails the test for each time on ran (the database's clock when
// the check ran) before the job's slot.
func notEarly(t *testing.T, job *prescient.Job, ran <-chan time.Time) (runs int) {
	t.Helper()
	for {
		select {
		case at := <-ran:
			runs++
			if at.Before(job.NextCheckAt) {
				t.Errorf("the check of slot %s ran at %s by the database's clock, %s before its slot began",
					job.NextCheckAt.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), job.NextCheckAt.Sub(at))
			}
		default:
			return runs
		}
	}
}

// runsOnceNotEarly waits up to wait for the check to run (see notEarly),
// and fails the test unless it ran once, not early.
func runsOnceNotEarly(t *testing.T, job *prescient.Job, ran <-chan time.Time, wait time.Duration) {
	t.Helper()
	runs := 0
	for deadline := time.Now().Add(wait); runs == 0 && time.Now().Before(deadline); runs += notEarly(t, job, ran) {
		time.Sleep(50 * time.Millisecond)
	}
	if runs != 1 {
		t.Errorf("the check ran %d time(s), want once", runs)
	}
}

// holdPool takes every one of the n connections of h's pool, and returns
// what gives them back.
func holdPool(t *testing.T, h *harness, n int) (release func()) {
	t.Helper()
	var held []*pgxpool.Conn
	for range n {
		conn, err := h.store.(*postgres.Store).Pool().Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	return func() {
		for _, conn := range held {
			conn.Release()
		}
	}
}

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
	c, job, ran := aheadOfTheDatabase(t, h, 3*time.Second)
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
	runs := notEarly(t, job, ran)
	for deadline := time.Now().Add(30 * time.Second); runs == 0 && time.Now().Before(deadline); runs += notEarly(t, job, ran) {
		if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // between sweeps, until the slot begins
	}
	if runs != 1 {
		t.Errorf("the check ran %d time(s), want once", runs)
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
	c, job, ran := aheadOfTheDatabase(t, h, 5*time.Second)
	conn, err := h.store.(*postgres.Store).Pool().Acquire(ctx) // another user of the pool, for 4 s
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(4 * time.Second); conn.Release() }()
	if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
		t.Fatal(err)
	}
	notEarly(t, job, ran)
}

// TestServerAheadFiresItsSlotsWhenTheyBegin: a server whose host clock
// runs ahead of the database's fired its own slots by its host's clock, a
// job due in 3 s at once, 10 minutes before its time by a clock 10 minutes
// ahead (warned, and listed as known, since the trial of time). Its ticks
// now wait for the database's clock to reach each slot: the job runs once,
// not before its slot began by the database's clock.
func TestServerAheadFiresItsSlotsWhenTheyBegin(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	c, job, ran := aheadOfTheDatabase(t, h, 3*time.Second, func(cfg *prescient.Config) { cfg.SweepOnStartDisabled = false })
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	runs := 0
	for deadline := time.Now().Add(30 * time.Second); runs == 0 && time.Now().Before(deadline); runs += notEarly(t, job, ran) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a tick or two more: the job ran once
	if runs += notEarly(t, job, ran); runs != 1 {
		t.Errorf("the check ran %d time(s), want once", runs)
	}
}

// TestServerAheadWhileThePoolIsBusy: a tick whose reading of the
// database's clock waited past its bound for a connection (another user
// of the pool held them all) went by the host's clock, and a server 10
// minutes ahead fired every slot up to its host's, a job due in 5 s at
// once (found by a review). It goes by the difference the last reading
// found.
func TestServerAheadWhileThePoolIsBusy(t *testing.T) {
	t.Parallel()
	h := openPostgresConns(t, 2)
	ctx := context.Background()
	c, job, ran := aheadOfTheDatabase(t, h, 5*time.Second, func(cfg *prescient.Config) { cfg.SweepOnStartDisabled = false })
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	release := holdPool(t, h, 2)
	time.Sleep(1500 * time.Millisecond) // a tick or two, their readings waiting for a connection
	release()
	runsOnceNotEarly(t, job, ran, 30*time.Second)
}

// TestHostStepWhileThePoolIsBusy: a tick whose reading of the database's
// clock waited for a connection went by the host's clock less the
// difference found at the latest reading; after a step of the host's
// clock 5 s forward, that fired a slot 3.6 s before it began (found by a
// review). It goes by the latest reading and the time since it, on the
// process's monotonic clock.
func TestHostStepWhileThePoolIsBusy(t *testing.T) {
	t.Parallel()
	h := openPostgresConns(t, 2)
	ctx := context.Background()
	reg, ran := databaseClockCheck(t)
	grid := slots.Grid{Resolution: 4 * time.Second}
	var step atomic.Int64
	cfg := prescient.WithHostClock(prescient.Config{Server: "stepped", Checks: reg, Grid: grid, Workers: 1, SweepSchedule: "-", SweepOnStartDisabled: true},
		func() time.Time { return time.Now().Add(time.Duration(step.Load())) })
	c, err := prescient.NewClient(h.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	app, err := prescient.NewClient(h.store, &prescient.Config{Server: "app", Checks: reg, Grid: grid})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(grid.Next(time.Now())) + 300*time.Millisecond) // just after a boundary
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	slot := grid.Next(grid.Next(time.Now()))
	job, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "late", At: slot})
	if err != nil {
		t.Fatal(err)
	}
	before := grid.Add(slot, -1)
	time.Sleep(time.Until(before) - 300*time.Millisecond)
	step.Store(int64(5 * time.Second)) // the host's clock steps 5 s forward
	time.Sleep(time.Until(before) - 100*time.Millisecond)
	release := holdPool(t, h, 2) // the tick of the boundary before the job's reads no clock
	time.Sleep(time.Until(before) + 400*time.Millisecond)
	release()
	runsOnceNotEarly(t, job, ran, 15*time.Second)
}

// slowClockTracer holds a `SELECT clock_timestamp()` up for delay before
// it is sent: a slow statement (a busy database, a slow link), which the
// driver's Clock counts in its margin.
type slowClockTracer struct{ delay *atomic.Int64 }

func (tr slowClockTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL == `SELECT clock_timestamp()` {
		time.Sleep(time.Duration(tr.delay.Load()))
	}
	return ctx
}
func (slowClockTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestSlowReadingTimesNoTick: on a host ahead of the database, Start's
// reading of the database's clock (bounded by no clockWait) took 2 s, and
// the ticks of the next 30 s went by it: each slot fired about 2 s before
// it began by the database's clock (found by a review). Then, kept only
// when quick, a link on which every reading took 300 ms kept none, and the
// ticks, whose own readings gave up at clockWait, went by the host's
// clock: a job ran 19 s before its slot (found by the next). A reading is
// kept as the earliest the database's clock can have been; a slow one the
// ticks fall back on, reading the clock again.
func TestSlowReadingTimesNoTick(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		start, link time.Duration // a reading's delay at Start, and after
	}{
		{"slow start", 2 * time.Second, 0},
		{"slow link", 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, schema := pgtest.Schema(t)
			s0, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema, MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			if err := s0.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			s0.Close()
			var delay atomic.Int64
			pc, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			pc.MaxConns = 6
			pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Exec(ctx, `SELECT set_config('search_path', $1 || ', ' || current_setting('search_path'), false)`, pgx.Identifier{schema}.Sanitize())
				return err
			}
			pc.ConnConfig.Tracer = slowClockTracer{&delay}
			pool, err := pgxpool.NewWithConfig(ctx, pc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store := postgres.New(pool, &postgres.Opts{Schema: schema})

			reg, ran := databaseClockCheck(t)
			grid := slots.Grid{Resolution: time.Second}
			cfg := prescient.Config{Server: "ahead", Checks: reg, Grid: grid, Workers: 1, SweepSchedule: "-", SweepOnStartDisabled: true}
			cfg.SweepOnStartDisabled = tc.link == 0 // with it, the ticks start from the database's slot
			cfg = prescient.WithHostClock(cfg, func() time.Time { return time.Now().Add(10 * time.Minute) })
			c, err := prescient.NewClient(store, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			delay.Store(int64(tc.start))
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer c.Stop(ctx)
			delay.Store(int64(tc.link))

			app, err := prescient.NewClient(store, &prescient.Config{Server: "app", Checks: reg, Grid: grid})
			if err != nil {
				t.Fatal(err)
			}
			var dbNow time.Time
			if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
				t.Fatal(err)
			}
			job, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "late", At: dbNow.Add(3500 * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			runsOnceNotEarly(t, job, ran, 10*time.Second)
		})
	}
}
