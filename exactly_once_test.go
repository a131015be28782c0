package prescient_test

// The exactly-once rule of the processing protocol (execute.go), tested on
// every store: an effect is never recorded without its write, and a failed
// check's writes never commit. The checks of these tests share one group,
// one transaction, so that each also shows one check's fate leaving the
// others' alone.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// oneGroup makes every due job of a slot run in one transaction, one check
// after the other.
func oneGroup(c *prescient.Config) {
	c.Workers, c.GroupSize = 1, 50
}

// writeAlert writes the job's alert through the engine's transaction.
func writeAlert(ctx context.Context, j *checks.Job) error {
	_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key)
	return err
}

func TestFailedChecksWritesNeverCommit(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		release := make(chan struct{})
		defer close(release)
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if err := writeAlert(ctx, j); err != nil {
				return time.Time{}, err
			}
			switch j.Key {
			case "errors":
				return time.Time{}, errors.New("lookup failed")
			case "panics":
				panic("boom")
			case "overruns":
				<-release // ignores its context: abandoned past its guard
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, &checks.Opts{Guards: guards.Limits{Runtime: 100 * time.Millisecond}}), oneGroup)
		keys := []string{"ok-1", "errors", "panics", "overruns", "ok-2"}
		for _, k := range keys {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Checked != 5 || rec.Failures != 3 || rec.Outcomes[history.Done] != 2 {
			t.Errorf("slot record %+v, want 5 checked: 3 failures, 2 done", rec)
		}
		if got := h.count("SELECT * FROM alerts WHERE entity_key IN ('ok-1', 'ok-2')"); got != 2 {
			t.Errorf("%d alerts of the checks that succeeded, want 2", got)
		}
		if got := h.count("SELECT * FROM alerts WHERE entity_key NOT IN ('ok-1', 'ok-2')"); got != 0 {
			t.Errorf("%d alerts of failed checks committed, want 0", got)
		}
		for _, k := range []string{"errors", "panics", "overruns"} {
			if j := wantPending(t, c, k, "c"); j.FailureCount != 1 || j.LastError == "" || !j.NextCheckAt.After(ts("2026-03-10T10:15:00Z")) {
				t.Errorf("%s: %+v, want one failure recorded and a retry later", k, j)
			}
		}
	})
}

// breakTx makes the group's transaction die under the check: the
// connection is closed (PostgreSQL), or a write is interrupted, which makes
// SQLite roll the whole transaction back. The check then returns no error.
func breakTx(ctx context.Context, h *harness, j *checks.Job) {
	switch h.name {
	case "postgres":
		_ = j.Tx.Driver().(pgx.Tx).Conn().Close(ctx)
	default:
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, _ = j.Tx.Exec(short, `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c)
			INSERT INTO alerts (entity_key, stage) SELECT 'x', i FROM c`)
	}
}

// When the transaction dies, the writes of every check that succeeded die
// with it: their jobs stay due, untouched, with no effect recorded, and run
// again (once) when the slot is fired again. A check that failed had its
// writes undone anyway, and a job of the wrong entity wrote nothing: their
// failures are recorded in a fresh transaction.
func TestTransactionDyingUnderKeptWrites(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var broke sync.Once
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if err := writeAlert(ctx, j); err != nil {
				return time.Time{}, err
			}
			switch j.Key {
			case "fails":
				return time.Time{}, errors.New("lookup failed")
			case "breaks":
				broke.Do(func() { breakTx(ctx, h, j) })
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, &checks.Opts{Entity: "order"}), oneGroup)
		app := h.client(clk, &checks.Registry{}, nil) // knows no check: schedules any entity
		slot := ts("2026-03-10T10:15:00Z")
		scheduleEach(t, app,
			prescient.ScheduleParams{Entity: "order", Key: "ok", Check: "c", At: slot},
			prescient.ScheduleParams{Entity: "order", Key: "fails", Check: "c", At: slot},
			prescient.ScheduleParams{Entity: "invoice", Key: "wrong", Check: "c", At: slot},
			prescient.ScheduleParams{Entity: "order", Key: "breaks", Check: "c", At: slot},
			prescient.ScheduleParams{Entity: "order", Key: "never-ran", Check: "c", At: slot})
		clk.Set("2026-03-10T10:15:00Z")
		// Lost: the writes of ok and breaks, not the wrong entity's (none).
		if _, err := c.FireSlot(context.Background(), slot); err == nil || !strings.Contains(err.Error(), "the writes of 2 checked job(s), which are lost") {
			t.Fatalf("fire with the transaction dying: %v, want an error saying the writes of 2 jobs were lost", err)
		}
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Fatalf("%d alerts committed from a transaction that died", n)
		}
		for _, k := range []string{"ok", "breaks", "never-ran"} {
			if j := wantPending(t, c, k, "c"); !j.NextCheckAt.Equal(slot) || j.CheckCount != 0 || j.FailureCount != 0 {
				t.Errorf("%s: %+v, want it still due, untouched", k, j)
			}
		}
		if j := wantPending(t, c, "fails", "c"); j.FailureCount != 1 || !j.NextCheckAt.After(slot) {
			t.Errorf("fails: %+v, want its failure recorded and a retry later", j)
		}
		// The wrong entity's job can never be checked: it ended failed at
		// once (a permanent failure), recorded in the fresh transaction.
		if recs, err := c.History(context.Background(), history.Filter{Entity: "invoice", Key: "wrong"}); err != nil || len(recs) != 1 ||
			recs[0].Outcome != history.Failed || !strings.Contains(recs[0].LastError, "watches entity order only") {
			t.Errorf("the wrong entity's job: %+v, %v; want it ended failed, saying so", recs, err)
		}
		if recs := historyOf(t, c, "ok"); len(recs) != 0 {
			t.Errorf("history of a job whose transaction died: %+v", recs)
		}
		// The group's attempt outlives its transaction: its jobs run alone
		// next time (see unfinished.go).
		if ids := attemptsNaming(t, h); len(ids) != 5 {
			t.Errorf("attempts left name jobs %v, want the group's 5", ids)
		}

		// Fired again, every job left due runs once.
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Checked != 3 || rec.Outcomes[history.Done] != 3 {
			t.Errorf("fired again: %+v, want 3 done", rec)
		}
		for _, k := range []string{"ok", "breaks", "never-ran"} {
			wantOutcome(t, c, k, history.Done, 1)
			if n := h.count("SELECT * FROM alerts WHERE entity_key = $1", k); n != 1 {
				t.Errorf("%s: %d alerts, want exactly 1", k, n)
			}
		}
		// Each job that ran since is settled; "fails", not yet due again,
		// is still named, and so is "wrong", ended failed in the fresh
		// transaction, which settles no attempt (the attempt's row goes
		// with the prune of attempts naming no pending job).
		recs, _ := c.History(context.Background(), history.Filter{Entity: "invoice", Key: "wrong"})
		want := []int64{wantPending(t, c, "fails", "c").ID}
		if len(recs) == 1 {
			want = append(want, recs[0].ID)
		}
		slices.Sort(want)
		if ids := attemptsNaming(t, h); !slices.Equal(ids, want) {
			t.Errorf("attempts left name jobs %v, want only the jobs not yet run again, %v", ids, want)
		}
	})
}

// A checks.Tx is the check's only while it runs: a goroutine of the check
// that uses it afterwards gets an error, and nothing it writes commits.
func TestCheckTxAfterTheCheckReturned(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var kept checks.Tx
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			kept = j.Tx
			return time.Time{}, writeAlert(ctx, j)
		}
		c := h.client(clk, register(t, "c", check, nil), oneGroup)
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		ctx := context.Background()
		if _, err := kept.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ('1', 'late')"); err == nil {
			t.Error("Exec after the check returned: no error")
		}
		var n int
		if err := kept.QueryRow(ctx, "SELECT count(*) FROM alerts").Scan(&n); err == nil {
			t.Error("QueryRow after the check returned: no error")
		}
		if _, err := kept.Query(ctx, "SELECT * FROM alerts"); err == nil {
			t.Error("Query after the check returned: no error")
		}
		if kept.Driver() != nil {
			t.Error("Driver after the check returned: not nil")
		}
		if n := h.count("SELECT * FROM alerts"); n != 1 {
			t.Errorf("%d alerts, want the check's own only", n)
		}
		wantOutcome(t, c, "1", history.Done, 1)
	})
}

// A batch check may share job.Tx between goroutines: the calls take turns
// on the transaction's connection, and every write commits.
func TestCheckTxSharedBetweenGoroutines(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		const workers = 16
		reg := &checks.Registry{}
		err := reg.RegisterBatch("c", func(ctx context.Context, js []*checks.Job) ([]checks.Result, error) {
			var wg sync.WaitGroup
			errs := make(chan error, 2*workers)
			for i := range workers {
				wg.Go(func() {
					if _, err := js[0].Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, $2)", js[0].Key, fmt.Sprint(i)); err != nil {
						errs <- err
					}
					var n int
					if err := js[0].Tx.QueryRow(ctx, "SELECT count(*) FROM alerts").Scan(&n); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				return nil, err
			}
			return make([]checks.Result, len(js)), nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		wantOutcome(t, c, "1", history.Done, 1)
		if n := h.count("SELECT * FROM alerts"); n != workers {
			t.Errorf("%d alerts, want %d", n, workers)
		}
	})
}

// A group cut short by shutdown commits the checks that finished when each
// runs in a savepoint of its own; the check it interrupted and the ones it
// never started are left untouched, due, to run again. (An optimistic group
// has no savepoint to undo the interrupted check alone: everything stays
// due, TestShutdownMidOptimisticGroupLeavesItDue.) So too when the check
// ignores its context (its goroutine is left to it, and the transaction
// goes on without it) or then ends its goroutine (runtime.Goexit).
func TestShutdownMidGroupCommitsWhatFinished(t *testing.T) {
	forEachInterruption(t, func(t *testing.T, h *harness, end interruptedEnd) {
		c, slot := shutDownMidGroup(t, h, true, end)
		wantOutcome(t, c, "1", history.Done, 1)
		for _, k := range []string{"2", "3"} {
			if j := wantPending(t, c, k, "c"); !j.NextCheckAt.Equal(slot) || j.CheckCount+j.FailureCount != 0 {
				t.Errorf("%s: %+v, want it due, untouched", k, j)
			}
		}
		if n := h.count("SELECT * FROM alerts"); n != 1 {
			t.Errorf("%d alerts, want job 1's only", n)
		}
		if ids := attemptsNaming(t, h); len(ids) != 0 {
			t.Errorf("attempts left name jobs %v: a shutdown is not a crash", ids)
		}
		recs, err := c.Slots(context.Background(), nil)
		if err != nil || len(recs) != 1 || recs[0].Complete() || recs[0].Checked != 1 {
			t.Errorf("ledger: %+v, %v; want the slot incomplete with 1 checked", recs, err)
		}
	})
}

// An optimistic group cut short by shutdown has no savepoint to undo the
// interrupted check alone: its transaction is rolled back, and every job of
// the group stays due, untouched, with no effect recorded. So too when the
// check ignores its context or ends its goroutine.
func TestShutdownMidOptimisticGroupLeavesItDue(t *testing.T) {
	forEachInterruption(t, func(t *testing.T, h *harness, end interruptedEnd) {
		c, slot := shutDownMidGroup(t, h, false, end)
		for _, k := range []string{"1", "2", "3"} {
			if j := wantPending(t, c, k, "c"); !j.NextCheckAt.Equal(slot) || j.CheckCount+j.FailureCount != 0 {
				t.Errorf("%s: %+v, want it due, untouched", k, j)
			}
		}
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Errorf("%d alerts of a rolled back group, want none", n)
		}
		if ids := attemptsNaming(t, h); len(ids) != 0 {
			t.Errorf("attempts left name jobs %v: a shutdown is not a crash", ids)
		}
	})
}

// shutDownMidGroup schedules jobs 1, 2 and 3 in one group, fires their slot
// and shuts down while job 2's check runs (after it wrote its alert through
// job.Tx); it returns the client and the slot. savepoints sets
// SavepointEveryCheck; end says how job 2's check ends once interrupted.
func shutDownMidGroup(t *testing.T, h *harness, savepoints bool, end interruptedEnd) (*prescient.Client, time.Time) {
	t.Helper()
	clk := newClock("2026-03-10T10:00:00Z")
	entered := make(chan struct{})
	over := make(chan struct{})
	t.Cleanup(func() { close(over) })
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if err := writeAlert(ctx, j); err != nil {
			return time.Time{}, err
		}
		if j.Key == "2" {
			close(entered)
			switch end {
			case ignoresContext:
				<-over
			case exitsGoroutine:
				<-ctx.Done()
				runtime.Goexit()
			}
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		}
		return time.Time{}, nil
	}
	c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) {
		oneGroup(c)
		c.SavepointEveryCheck = savepoints
	})
	for _, k := range []string{"1", "2", "3"} {
		schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
	}
	slot := ts("2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:15:00Z")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.FireSlot(ctx, slot)
		done <- err
	}()
	<-entered
	cancel()
	if err := <-done; err == nil {
		t.Error("fire cut short: no error, want the slot reported incomplete")
	}
	return c, slot
}

// interruptedEnd is how a check interrupted by shutdown ends.
type interruptedEnd string

const (
	returns        interruptedEnd = "returns"         // with its context's error
	ignoresContext interruptedEnd = "ignores_context" // returns only once the test is over
	exitsGoroutine interruptedEnd = "exits_goroutine" // runtime.Goexit (found by a review: taken for a failure)
)

// forEachInterruption runs fn on every store, once for each way a check
// interrupted by shutdown may end.
func forEachInterruption(t *testing.T, fn func(t *testing.T, h *harness, end interruptedEnd)) {
	for _, end := range []interruptedEnd{returns, ignoresContext, exitsGoroutine} {
		t.Run(string(end), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) { fn(t, h, end) })
		})
	}
}

// In an optimistic group, a failing check makes the group run again with a
// savepoint per check: the checks before it run twice, their effects through
// job.Tx commit once, the failed check is not run again, and its failure is
// recorded once. The next groups use savepoints from the start.
func TestOptimisticGroupRunsAgainAfterAFailure(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			rec.add(j)
			if err := writeAlert(ctx, j); err != nil {
				return time.Time{}, err
			}
			if j.Key == "3" {
				return time.Time{}, errors.New("lookup failed")
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, nil), oneGroup)
		for _, k := range []string{"1", "2", "3", "4"} {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		r := fire(t, c, "2026-03-10T10:15:00Z")
		if r.Checked != 4 || r.Failures != 1 || r.Outcomes[history.Done] != 3 {
			t.Errorf("slot record %+v, want 4 checked: 1 failure, 3 done", r)
		}
		for key, want := range map[string]int{"1": 2, "2": 2, "3": 1, "4": 1} {
			if got := len(rec.of(key)); got != want {
				t.Errorf("job %s checked %d times, want %d", key, got, want)
			}
		}
		for _, k := range []string{"1", "2", "4"} {
			if n := h.count("SELECT * FROM alerts WHERE entity_key = $1", k); n != 1 {
				t.Errorf("%s: %d alerts, want exactly 1", k, n)
			}
		}
		if n := h.count("SELECT * FROM alerts WHERE entity_key = '3'"); n != 0 {
			t.Errorf("the failed check's alert committed")
		}
		if j := wantPending(t, c, "3", "c"); j.FailureCount != 1 {
			t.Errorf("failed job: %+v, want one failure", j)
		}

		// The next group, right after the failure, runs with savepoints: job
		// 3's retry (one slot later) fails again among new jobs, and nothing
		// runs twice.
		for _, k := range []string{"5", "6", "7"} {
			schedule(t, c, k, "c", "2026-03-10T10:30:00Z")
		}
		clk.Set("2026-03-10T10:30:00Z")
		r = fire(t, c, "2026-03-10T10:30:00Z")
		if r.Checked != 4 || r.Failures != 1 {
			t.Errorf("second slot record %+v, want 4 checked, 1 failure", r)
		}
		for key, want := range map[string]int{"3": 2, "5": 1, "6": 1, "7": 1} {
			if got := len(rec.of(key)); got != want {
				t.Errorf("after a recent failure: job %s checked %d times in all, want %d", key, got, want)
			}
		}
		if j := wantPending(t, c, "3", "c"); j.FailureCount != 2 {
			t.Errorf("failed job after its retry: %+v, want two failures", j)
		}
	})
}
