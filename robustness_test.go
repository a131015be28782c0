package prescient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// A check that runs a failing statement, ignores the error and returns
// success must not stall the slots after it. On PostgreSQL the failed
// statement aborted the transaction, so nothing the check wrote can commit:
// it counts as failed, and ends failed after max_failures. SQLite does not
// abort a transaction on a failed statement, so there the check succeeds.
func TestCheckSwallowingAStatementError(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		swallow := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "swallows" {
				_, _ = j.Tx.Exec(ctx, "SELECT * FROM no_such_table") // error ignored
			}
			_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, $2)", j.Key, fmt.Sprint(j.CheckCount+j.FailureCount))
			if err != nil && j.Key == "swallows" {
				err = nil // and this one too
			}
			return time.Time{}, err
		}
		c := h.client(clk, register(t, "c", swallow, nil), func(c *prescient.Config) { c.MaxFailures = 2 })
		schedule(t, c, "swallows", "c", "2026-03-10T10:15:00Z")
		schedule(t, c, "later", "c", "2026-03-10T10:30:00Z")
		for _, now := range []string{"2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z", "2026-03-10T10:45:00Z"} {
			clk.Set(now)
			c.Tick(ctx)
		}
		wantOutcome(t, c, "later", history.Done, 1)
		if c.Ready() != nil {
			t.Errorf("Ready = %v: a check's own failure is not the store's", c.Ready())
		}
		recs := historyOf(t, c, "swallows")
		if h.name == "postgres" {
			if len(recs) != 1 || recs[0].Outcome != history.Failed || !strings.Contains(recs[0].LastError, "aborted") {
				t.Fatalf("swallowing check on PostgreSQL: %+v, want it failed, saying the transaction was aborted", recs)
			}
			if n := h.count("SELECT * FROM alerts WHERE entity_key = 'swallows'"); n != 0 {
				t.Fatalf("%d writes of an aborted transaction committed", n)
			}
		} else if len(recs) != 1 || recs[0].Outcome != history.Done {
			t.Fatalf("swallowing check on SQLite: %+v, want done", recs)
		}
	})
}

// Jobs of a check no server knows stay overdue forever; a sweep must page
// past any number of such slots to the jobs it can run.
func TestSweepGoesPastSlotsOfUnknownChecks(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		minutes := slots.Grid{Resolution: time.Minute}
		c := h.client(clk, register(t, "known", alertOnce(rec), nil), func(c *prescient.Config) { c.Grid = minutes })
		var ps []prescient.ScheduleParams
		for i := range 130 {
			ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "typo_check", At: clk.Now().Add(time.Duration(i+1) * time.Minute)})
		}
		ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: "ok", Check: "known", At: clk.Now().Add(131 * time.Minute)})
		if _, err := c.ScheduleMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T13:00:00Z")
		res, err := c.Sweep(ctx, prescient.SweepRun)
		if err != nil {
			t.Fatal(err)
		}
		if res.Slots != 131 || res.Jobs != 1 {
			t.Errorf("sweep = %+v, want 131 slots fired and 1 job checked", res)
		}
		wantOutcome(t, c, "ok", history.Done, 1)
		if st, err := c.Status(ctx, nil); err != nil || st.Jobs.ByCheck["typo_check"] != 130 {
			t.Fatalf("status %+v, %v: want the 130 unknown jobs still pending", st.Jobs, err)
		}
	})
}

// Changing the grid leaves pending jobs on slots of the old one, which no
// tick of the new grid matches; the sweep moves them onto the new grid and
// runs them.
func TestSweepMovesJobsOfAnOldGrid(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		reg := register(t, "c", alertOnce(rec), nil)
		old := h.client(clk, reg, nil) // 15-minute slots
		schedule(t, old, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T11:00:00Z")
		tens := h.client(clk, reg, func(c *prescient.Config) { c.Grid = slots.Grid{Resolution: 10 * time.Minute} })
		if _, err := tens.Sweep(ctx, prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		r := wantOutcome(t, tens, "1", history.Done, 1)
		if !r.LastCheckAt.Equal(ts("2026-03-10T10:20:00Z")) {
			t.Errorf("last check %s, want the job moved up to 10:20 on the new grid", r.LastCheckAt)
		}
	})
}

// Moving an old grid's slot onto the new grid moves that slot's jobs only:
// it once moved every job due before it, such as the jobs of a check no
// server knows in an earlier slot of the new grid (and those of a slot
// being fired, or one that failed), changing the slot they are due in.
func TestSweepMovesOnlyTheOldGridsSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		reg := register(t, "c", alertOnce(&calls{}), nil)
		old := h.client(clk, reg, nil) // 15-minute slots
		schedule(t, old, "1", "c", "2026-03-10T10:15:00Z")
		tens := h.client(clk, reg, func(c *prescient.Config) { c.Grid = slots.Grid{Resolution: 10 * time.Minute} })
		schedule(t, tens, "2", "typo_check", "2026-03-10T10:10:00Z")
		clk.Set("2026-03-10T11:00:00Z")
		if _, err := tens.Sweep(ctx, prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, tens, "1", history.Done, 1)
		if j := wantPending(t, tens, "2", "typo_check"); !j.NextCheckAt.Equal(ts("2026-03-10T10:10:00Z")) {
			t.Errorf("the unknown check's job, due at 10:10 on the new grid, is now due at %s: moving the old grid's 10:15 moved it too",
				j.NextCheckAt.Format(time.RFC3339))
		}
	})
}

// A batch check's per-job error fails that job only, and the batch's writes
// commit with the other results (documented on checks.Result).
func TestBatchCheckPerJobError(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		reg := &checks.Registry{}
		err := reg.RegisterBatch("b", func(ctx context.Context, js []*checks.Job) ([]checks.Result, error) {
			out := make([]checks.Result, len(js))
			for i, j := range js {
				if j.Key == "bad" {
					out[i].Err = errors.New("lookup failed")
					continue
				}
				if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key); err != nil {
					return nil, err
				}
			}
			return out, nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, nil)
		schedule(t, c, "good", "b", "2026-03-10T10:15:00Z")
		schedule(t, c, "bad", "b", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		wantOutcome(t, c, "good", history.Done, 1)
		if j := wantPending(t, c, "bad", "b"); j.FailureCount != 1 || j.LastError != "lookup failed" {
			t.Fatalf("bad job: %+v, want one failure", j)
		}
		if n := h.count("SELECT * FROM alerts WHERE entity_key = 'good'"); n != 1 {
			t.Fatalf("the good job's alert: %d rows, want 1", n)
		}
	})
}

// A check run late (here by a sweep, an hour after its slot) that asks to
// run again at a time that has passed meanwhile lands in the first slot after
// now, like a job scheduled in the past: that slot's owner fires it. Left on
// the passed slot it would wait for the next sweep, its slot long fired.
func TestLateCheckAskingForAPassedTimeLandsInTheNextSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		again := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.CheckCount == 0 {
				return j.Slot.Add(15 * time.Minute), nil // escalate one slot later
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", again, nil), nil)
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T11:07:00Z")
		if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		j := wantPending(t, c, "1", "c")
		if want := ts("2026-03-10T11:15:00Z"); !j.NextCheckAt.Equal(want) {
			t.Fatalf("next check %s, want %s: the first slot after now, not the passed 10:30", j.NextCheckAt, want)
		}
		clk.Set("2026-03-10T11:15:00Z")
		c.Tick(ctx)
		wantOutcome(t, c, "1", history.Done, 2)
	})
}

// A job of a batch check that failed before runs in a call of its own: a
// batch that failed as one (here a key the check cannot take fails the
// whole call, as a query run past its runtime guard does) ran again as one
// at every retry, until every job of it ended failed; now the others are
// done at their first retry and only the bad job keeps failing (found by a
// trial of declared checks: one slow key failed its whole batch for good).
func TestBatchJobThatFailedRunsAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		reg := &checks.Registry{}
		var mu sync.Mutex
		var calls [][]string
		err := reg.RegisterBatch("b", func(ctx context.Context, js []*checks.Job) ([]checks.Result, error) {
			var keys []string
			for _, j := range js {
				keys = append(keys, j.Key)
			}
			slices.Sort(keys)
			mu.Lock()
			calls = append(calls, keys)
			mu.Unlock()
			if slices.Contains(keys, "poison") {
				return nil, errors.New("ran past its runtime guard")
			}
			return make([]checks.Result, len(js)), nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, func(c *prescient.Config) { c.MaxFailures = 3 })
		for _, k := range []string{"a", "poison", "z"} {
			schedule(t, c, k, "b", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		retry := wantPending(t, c, "a", "b").NextCheckAt
		for _, k := range []string{"a", "poison", "z"} {
			if j := wantPending(t, c, k, "b"); j.FailureCount != 1 || !j.NextCheckAt.Equal(retry) {
				t.Fatalf("%s after the first firing: %+v, want one failure and its retry with the others'", k, j)
			}
		}
		clk.Set(retry.Format(time.RFC3339))
		fire(t, c, retry.Format(time.RFC3339))
		wantOutcome(t, c, "a", history.Done, 1)
		wantOutcome(t, c, "z", history.Done, 1)
		if j := wantPending(t, c, "poison", "b"); j.FailureCount != 2 {
			t.Fatalf("poison after its retry: %+v, want a second failure", j)
		}
		mu.Lock()
		defer mu.Unlock()
		// The group's first run without savepoints is undone when poison
		// fails, and runs again without it: a's call may come twice.
		if fmt.Sprint(calls[0]) != "[a poison z]" {
			t.Errorf("the check's first call %v, want the batch whole", calls[0])
		}
		for _, call := range calls[1:] {
			if len(call) != 1 {
				t.Errorf("the check's calls %v, want the batch once, then each job that failed in a call of its own", calls)
				break
			}
		}
	})
}
