package prescient_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
)

// A job without payload carries a nil json.RawMessage (checks.Job.Payload,
// history.Record.Payload). Handing it on as the payload of a follow-up job,
// the natural round trip, must mean "no payload", not "invalid JSON".
func TestNilRawMessagePayloadIsNoPayload(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, nil)
		first := schedule(t, c, "1", "c", "2026-03-10T11:00:00Z") // no payload: first.Payload is nil
		j, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "follow_up",
			At: ts("2026-03-10T12:00:00Z"), Payload: first.Payload})
		if err != nil {
			t.Fatalf("schedule with the payload of a job that has none (%#v): %v", first.Payload, err)
		}
		if j.Payload != nil {
			t.Fatalf("payload %q, want none", j.Payload)
		}
	})
}

// Once the check of jobs left pending is registered (the Registry is safe
// for concurrent use) and those jobs have run, the client must no longer
// report the check as one it has no check for: the status page shows
// UnknownChecks as "has no check of that name".
func TestUnknownChecksForgetsARegisteredCheck(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		reg := &checks.Registry{}
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "late", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		c.Tick(ctx)
		if got := c.UnknownChecks(); got["late"] != 1 {
			t.Fatalf("UnknownChecks = %v before registering, want late:1", got)
		}
		rec := &calls{}
		if err := reg.Register("late", alertOnce(rec), nil); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:30:00Z")
		c.Tick(ctx)
		if rec.total() != 1 {
			t.Fatalf("the late-registered check ran %d times, want 1", rec.total())
		}
		if _, err := c.Job(ctx, "order", "1", "late"); !errors.Is(err, prescient.ErrNotFound) {
			t.Fatalf("job still pending: %v", err)
		}
		if got := c.UnknownChecks(); got["late"] != 0 {
			t.Fatalf("UnknownChecks = %v after the check was registered and its job ran; want no entry for late", got)
		}
	})
}

// Jobs, History and Deliveries refuse a negative limit; Slots must too, the
// same on both stores (SQLite reads LIMIT -1 as "no limit" and returns the
// whole ledger; PostgreSQL fails with an SQL error).
func TestSlotsRefusesNegativeLimit(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, nil)
		for _, s := range []string{"2026-03-10T10:00:00Z", "2026-03-10T10:15:00Z"} {
			clk.Set(s)
			fire(t, c, s)
		}
		recs, err := c.Slots(ctx, &prescient.SlotsParams{Limit: -1})
		if err == nil {
			t.Fatalf("Slots with limit -1: %d rows and no error; want an error naming the limit, as Jobs and History give", len(recs))
		}
		if !strings.Contains(err.Error(), "limit -1") {
			t.Fatalf("Slots with limit -1: %v; want the client's own error naming the limit (as Jobs: \"limit -1 is out of range\")", err)
		}
	})
}

// ErrClosed "is returned by a client that has been stopped": Ready, which the
// health endpoint and the prescient_ready metric read, keeps answering nil
// (ready) after Stop, and no method ever returns ErrClosed.
func TestReadyAfterStopIsErrClosed(t *testing.T) {
	h := openSQLite(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, &checks.Registry{}, nil)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); err != nil {
		t.Fatalf("ready after Start: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); !errors.Is(err, prescient.ErrClosed) {
		t.Fatalf("Ready after Stop = %v, want ErrClosed: the stopped server fires nothing and has deregistered", err)
	}
}

// A nil pgx.Tx of a concrete type (a nil *pgxpool.Tx) must be refused with
// an error, as the SQLite store refuses a nil *sql.Tx ("the SQLite store got
// a nil *sql.Tx"), not crash the application with a nil dereference.
func TestTypedNilPgxTxIsAnError(t *testing.T) {
	h := openPostgres(t)
	ctx := context.Background()
	c, err := prescient.NewTypedClient(h.store.(*postgres.Store), &prescient.Config{Server: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	var tx *pgxpool.Tx // e.g. returned by a helper alongside an error that was not checked
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("ScheduleTx with a nil *pgxpool.Tx panicked: %v", p)
		}
	}()
	_, err = c.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "c", At: time.Now().Add(time.Hour)})
	if !errors.Is(err, prescient.ErrTxType) {
		t.Fatalf("ScheduleTx with a nil *pgxpool.Tx: %v, want ErrTxType", err)
	}
}

// A check whose goroutine exits without returning or panicking
// (runtime.Goexit: t.FailNow/t.Fatal in a test's check) is a failure at
// once, not an overrun reported only after the whole runtime guard (default
// 30s) while the group's transaction holds its locks.
func TestGoexitInCheckIsAFailureAtOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		reg := register(t, "exits", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			runtime.Goexit()
			return time.Time{}, nil
		}, &checks.Opts{Guards: guards.Limits{Runtime: 60 * time.Second}})
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "exits", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		j, err := c.Job(ctx, "order", "1", "exits")
		if err != nil {
			t.Fatal(err)
		}
		// Not at once, the firing would have waited for the 60s guard and
		// recorded an overrun.
		if j.LastError == "" || strings.Contains(j.LastError, "runtime guard") {
			t.Fatalf("a check that exited its goroutine was recorded as %q; want a failure at once saying what happened", j.LastError)
		}
	})
}

// A check that ends its goroutine (runtime.Goexit) while a statement it
// started on another goroutine, with the check's context, waits has that
// statement cut short: its transaction goes on, and the firing ends, without
// waiting for the statement or the check's guard (found by a review: the
// check's context was left to its guard, 10 minutes here).
func TestGoexitCutsTheChecksStatementsShort(t *testing.T) {
	h := openPostgres(t)
	ctx := context.Background()
	h.exec("CREATE TABLE held (id int PRIMARY KEY)")
	h.exec("INSERT INTO held VALUES (1)")
	// The test's transaction holds the row the check's statement waits for,
	// until the test ends.
	pool := h.store.(*postgres.Store).Pool()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(ctx) })
	if _, err := holder.Exec(ctx, "SELECT * FROM held WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	clk := newClock("2026-03-10T10:00:00Z")
	waiting := make(chan struct{})
	reg := register(t, "exits", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		go func() {
			close(waiting)
			_, _ = j.Tx.Exec(ctx, "SELECT * FROM held WHERE id = 1 FOR UPDATE")
		}()
		<-waiting
		// Until the statement holds the checks.Tx (the row lock waits).
		for h.count("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM held%'") == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		runtime.Goexit()
		return time.Time{}, nil
	}, &checks.Opts{Guards: guards.Limits{Runtime: 10 * time.Minute}})
	c := h.client(clk, reg, nil)
	schedule(t, c, "1", "exits", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:15:00Z")
	fired := make(chan error, 1)
	go func() {
		_, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z"))
		fired <- err
	}()
	select {
	case err := <-fired:
		if err != nil {
			t.Fatalf("fire: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the firing still waits, a minute on, for the statement of a check that exited")
	}
	if j := wantPending(t, c, "1", "exits"); j.FailureCount != 1 || !strings.Contains(j.LastError, "exited its goroutine") {
		t.Errorf("%+v, want one failure saying the check exited", j)
	}
}

// A check that returns no error once its runtime guard has ended its
// context still ran past its guard: it fails, whichever of its return and
// the guard's end the engine saw first (the check's goroutine, or the one
// watching it).
func TestNoErrorAfterTheGuardIsAnOverrun(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		reg := register(t, "late", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			<-ctx.Done()
			return time.Time{}, nil
		}, &checks.Opts{Guards: guards.Limits{Runtime: 50 * time.Millisecond}})
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "late", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		if r := fire(t, c, "2026-03-10T10:15:00Z"); r.Failures != 1 {
			t.Errorf("slot record %+v, want the check failed", r)
		}
		j, err := c.Job(ctx, "order", "1", "late")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(j.LastError, "ran past its runtime guard of 50ms") {
			t.Errorf("last error %q, want the overrun", j.LastError)
		}
	})
}

// Job and Deliveries refuse names no job or sink can have, as Schedule,
// Cancel and History do: a key with a zero-width space or a misspelt sink read as
// "not found" or as no deliveries, a finished job or a quiet sink.
func TestJobAndDeliveriesRefuseInvalidNames(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		c := h.client(newClock("2026-03-10T10:00:00Z"), &checks.Registry{}, nil)
		schedule(t, c, "1", "c", "2026-03-10T11:00:00Z")
		for _, tc := range []struct{ entity, key, check, want string }{
			{"order", "1\u200b", "c", "key"}, // a zero-width space, as copied from a web page
			{"or der", "1", "c", "entity"},
			{"order", "1", "", "check"},
			{"order", "1", "c\n", "check"},
		} {
			_, err := c.Job(ctx, tc.entity, tc.key, tc.check)
			if err == nil || errors.Is(err, prescient.ErrNotFound) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Job(%q, %q, %q): %v; want an error naming the %s, not ErrNotFound", tc.entity, tc.key, tc.check, err, tc.want)
			}
		}
		if _, err := c.Deliveries(ctx, &prescient.DeliveriesParams{Sink: "pager duty"}); err == nil || !strings.Contains(err.Error(), "sink") {
			t.Errorf("Deliveries of sink %q: %v; want an error naming the sink", "pager duty", err)
		}
		// AfterSink alone would list from the newest event again.
		if _, err := c.Deliveries(ctx, &prescient.DeliveriesParams{AfterSink: "ops"}); err == nil || !strings.Contains(err.Error(), "BeforeEventID") {
			t.Errorf("Deliveries after sink ops with no event: %v; want an error naming BeforeEventID", err)
		}
		if j, err := c.Job(ctx, "order", "1", "c"); err != nil || j.Key != "1" {
			t.Errorf("Job of a valid identity: %+v, %v", j, err)
		}
	})
}

// A guards horizon shorter than one slot is a limit like any other: the
// guard judges the time a check asks for, before it is rounded up to the
// grid, so a check asking for 5 minutes ahead under a 10-minute horizon on
// 15-minute slots runs again (in the next slot). (NewClient refused such a
// horizon for a while, when the guard judged the rounded time and so ended
// every job that asked to run again.)
func TestHorizonShorterThanASlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		ahead := func(d time.Duration) checks.Func {
			return func(_ context.Context, j *checks.Job) (time.Time, error) {
				if j.CheckCount > 0 {
					return time.Time{}, nil
				}
				return j.Slot.Add(d), nil
			}
		}
		reg := &checks.Registry{}
		if err := reg.Register("near", ahead(5*time.Minute), nil); err != nil {
			t.Fatal(err)
		}
		if err := reg.Register("far", ahead(11*time.Minute), nil); err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, func(cfg *prescient.Config) { cfg.Guards = guards.Limits{Horizon: 10 * time.Minute} })
		schedule(t, c, "1", "near", "2026-03-10T10:15:00Z")
		schedule(t, c, "1", "far", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		if j, err := c.Job(context.Background(), "order", "1", "near"); err != nil || !j.NextCheckAt.Equal(ts("2026-03-10T10:30:00Z")) {
			t.Errorf("a check asking 5m ahead under a 10m horizon: %+v, %v; want it due again at 10:30", j, err)
		}
		wantOutcome(t, c, "1", history.GuardHorizon, 1)
	})
}

// A rolling restart under one server name: the new process registers while
// the old one is still stopping. The old one's Stop deregistered by name,
// deleting the new process's registration (which other servers then read as
// gone until its next heartbeat); it now removes only its own.
func TestStopLeavesTheRegistrationOfItsSuccessor(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		old := h.client(clk, &checks.Registry{}, nil)
		if err := old.Start(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:00:07Z")
		successor := h.client(clk, &checks.Registry{}, nil) // the same name, s1
		if err := successor.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer successor.Stop(ctx)
		if err := old.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		srvs, err := h.store.Driver().ServerList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(srvs) != 1 || !srvs[0].StartedAt.Equal(ts("2026-03-10T10:00:07Z")) {
			t.Fatalf("registrations after the old process stopped: %+v; want the successor's, started at 10:00:07", srvs)
		}
	})
}

// KnownChecks lists, once each and sorted, the checks the client runs and
// those the catalog holds from other servers.
func TestKnownChecks(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		other := register(t, "omega", alertOnce(&calls{}), nil)
		if err := other.Register("zeta", alertOnce(&calls{}), nil); err != nil {
			t.Fatal(err)
		}
		h.client(newClock("2026-03-10T10:00:00Z"), other, nil) // records omega and zeta in the catalog
		reg := register(t, "alpha", alertOnce(&calls{}), nil)
		if err := reg.Register("zeta", alertOnce(&calls{}), nil); err != nil {
			t.Fatal(err)
		}
		c, err := prescient.NewClient(h.store, &prescient.Config{Server: "s2", Checks: reg})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.KnownChecks(ctx)
		if err != nil || !slices.Equal(got, []string{"alpha", "omega", "zeta"}) {
			t.Fatalf("KnownChecks: %v, %v; want [alpha omega zeta] (alpha from the registry, omega from the catalog, zeta from both)", got, err)
		}
	})
}

// TestScheduleManyGivenAJobTwice: a job given twice to one ScheduleMany
// call (a short one, and one long enough for the stores' bulk path) returns
// two rows that both show the job as stored: under replace the last
// params' time and payload, under keep the first's; only the row that
// created it says Inserted. The first row showed the first params, which
// the second had replaced (found by a Go user's trial).
func TestScheduleManyGivenAJobTwice(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, nil)
		for _, n := range []int{2, 300} {
			for _, rule := range []prescient.ConflictRule{prescient.ConflictReplace, prescient.ConflictKeep} {
				key := fmt.Sprintf("dup-%d-%s", n, rule)
				ps := benchParams("ret", 0, n, ts("2026-03-10T11:00:00Z"))
				ps[0] = prescient.ScheduleParams{Entity: "order", Key: key, Check: "ret", At: ts("2026-03-10T11:00:00Z"), Payload: 1}
				ps[n-1] = prescient.ScheduleParams{Entity: "order", Key: key, Check: "ret", At: ts("2026-03-10T12:00:00Z"), Payload: 2, OnConflict: rule}
				rows, err := c.ScheduleMany(ctx, ps)
				if err != nil {
					t.Fatalf("%d params, %s: %v", n, rule, err)
				}
				stored, err := c.Job(ctx, "order", key, "ret")
				if err != nil {
					t.Fatal(err)
				}
				wantAt, wantPayload := ts("2026-03-10T12:00:00Z"), "2"
				if rule == prescient.ConflictKeep {
					wantAt, wantPayload = ts("2026-03-10T11:00:00Z"), "1"
				}
				if !stored.NextCheckAt.Equal(wantAt) || string(stored.Payload) != wantPayload {
					t.Fatalf("%d params, %s: stored due %s with payload %s, want %s and %s", n, rule, stored.NextCheckAt, stored.Payload, wantAt, wantPayload)
				}
				for i, r := range []*prescient.Job{rows[0], rows[n-1]} {
					if r.ID != stored.ID || !r.NextCheckAt.Equal(stored.NextCheckAt) || string(r.Payload) != string(stored.Payload) {
						t.Errorf("%d params, %s: row %d of the job: id %d due %s payload %s, want it as stored: id %d due %s payload %s",
							n, rule, i, r.ID, r.NextCheckAt, r.Payload, stored.ID, stored.NextCheckAt, stored.Payload)
					}
				}
				if !rows[0].Inserted || rows[n-1].Inserted {
					t.Errorf("%d params, %s: Inserted %v and %v, want true for the row that created the job only", n, rule, rows[0].Inserted, rows[n-1].Inserted)
				}
			}
		}
	})
}
