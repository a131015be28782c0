package prescient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// calls records every check invocation: which job, in which slot, at what time.
type calls struct {
	mu  sync.Mutex
	log []call
}

type call struct {
	key        string
	slot, now  time.Time
	checkCount int
}

func (c *calls) add(j *checks.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, call{j.Key, j.Slot, j.Now, j.CheckCount})
}

func (c *calls) of(key string) []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []call
	for _, x := range c.log {
		if x.key == key {
			out = append(out, x)
		}
	}
	return out
}

func (c *calls) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.log)
}

// alertOnce is a check that records its call, writes an alert through the
// engine's transaction and is done.
func alertOnce(rec *calls) checks.Func {
	return func(ctx context.Context, j *checks.Job) (time.Time, error) {
		rec.add(j)
		_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key)
		return time.Time{}, err
	}
}

func register(t *testing.T, name string, fn checks.Func, opts *checks.Opts) *checks.Registry {
	t.Helper()
	reg := &checks.Registry{}
	if err := reg.Register(name, fn, opts); err != nil {
		t.Fatal(err)
	}
	return reg
}

func schedule(t *testing.T, c *prescient.Client, key, check, at string) *prescient.Job {
	t.Helper()
	j, err := c.Schedule(context.Background(), prescient.ScheduleParams{Entity: "order", Key: key, Check: check, At: ts(at)})
	if err != nil {
		t.Fatalf("schedule %s: %v", key, err)
	}
	return j
}

func fire(t *testing.T, c *prescient.Client, slot string) *prescient.SlotRecord {
	t.Helper()
	rec, err := c.FireSlot(context.Background(), ts(slot))
	if err != nil {
		t.Fatalf("fire %s: %v", slot, err)
	}
	return rec
}

func historyOf(t *testing.T, c *prescient.Client, key string) []*history.Record {
	t.Helper()
	recs, err := c.History(context.Background(), history.Filter{Entity: "order", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func wantOutcome(t *testing.T, c *prescient.Client, key string, want history.Outcome, checks int) *history.Record {
	t.Helper()
	recs := historyOf(t, c, key)
	if len(recs) != 1 {
		t.Fatalf("history of order %s has %d records, want 1: %+v", key, len(recs), recs)
	}
	r := recs[0]
	if r.Outcome != want || r.CheckCount != checks {
		t.Fatalf("history of order %s: outcome %q after %d checks, want %q after %d (last error %q)", key, r.Outcome, r.CheckCount, want, checks, r.LastError)
	}
	return r
}

func wantPending(t *testing.T, c *prescient.Client, key, check string) *prescient.Job {
	t.Helper()
	j, err := c.Job(context.Background(), "order", key, check)
	if err != nil {
		t.Fatalf("order %s %s should be pending: %v", key, check, err)
	}
	return j
}

func TestFiresInItsSlotNotBefore(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		c := h.client(clk, register(t, "unshipped", alertOnce(rec), nil), nil)
		// 10:20 lies between slots: it must fire at 10:30, not at 10:15 and not later.
		j := schedule(t, c, "1", "unshipped", "2026-03-10T10:20:00Z")
		if want := ts("2026-03-10T10:30:00Z"); !j.NextCheckAt.Equal(want) || !j.FirstCheckAt.Equal(want) {
			t.Fatalf("scheduled at 10:20: next %s first %s, want both %s", j.NextCheckAt, j.FirstCheckAt, want)
		}
		for _, now := range []string{"2026-03-10T10:00:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:29:59Z"} {
			clk.Set(now)
			c.Tick(context.Background())
		}
		if n := rec.total(); n != 0 {
			t.Fatalf("check ran %d times before its slot", n)
		}
		clk.Set("2026-03-10T10:30:00Z")
		c.Tick(context.Background())
		got := rec.of("1")
		if len(got) != 1 || !got[0].slot.Equal(ts("2026-03-10T10:30:00Z")) {
			t.Fatalf("calls = %+v, want one in the 10:30 slot", got)
		}
		// A time already passed lands in the next slot, never in one that may
		// have fired.
		clk.Set("2026-03-10T10:31:00Z")
		if j := schedule(t, c, "2", "unshipped", "2026-03-10T09:00:00Z"); !j.NextCheckAt.Equal(ts("2026-03-10T10:45:00Z")) {
			t.Fatalf("scheduled in the past: next %s, want 10:45", j.NextCheckAt)
		}
		wantOutcome(t, c, "1", history.Done, 1)
		if n := h.count("SELECT * FROM alerts WHERE entity_key = '1'"); n != 1 {
			t.Fatalf("alerts = %d, want 1", n)
		}
	})
}

func TestSweepRunFiresOverdueAtStart(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		reg := register(t, "unshipped", alertOnce(rec), nil)
		app := h.client(clk, reg, nil)
		schedule(t, app, "1", "unshipped", "2026-03-10T10:15:00Z")
		schedule(t, app, "2", "unshipped", "2026-03-10T10:40:00Z")
		schedule(t, app, "3", "unshipped", "2026-03-10T12:00:00Z") // not yet due at restart

		// No server ran through 10:15 and 10:45; one starts at 11:07.
		clk.Set("2026-03-10T11:07:00Z")
		srv := h.client(clk, reg, func(c *prescient.Config) {
			c.SweepOnStartDisabled = false
			c.SweepMode = prescient.SweepRun
		})
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Start returns once the start-up sweep is done; the slot of 10:45,
		// the last before now, is the first tick's, which runs beside the
		// sweep and which a Stop at once would cut short (the job staying
		// due). Wait for both before stopping.
		for deadline := time.Now().Add(10 * time.Second); rec.total() < 2 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if err := srv.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"1", "2"} {
			got := rec.of(k)
			if len(got) != 1 || !got[0].now.Equal(ts("2026-03-10T11:07:00Z")) {
				t.Fatalf("order %s: calls %+v, want one at start-up", k, got)
			}
			r := wantOutcome(t, srv, k, history.Done, 1)
			if r.Lateness <= 0 {
				t.Errorf("order %s: lateness %s, want the time since its slot", k, r.Lateness)
			}
		}
		if got := rec.of("3"); len(got) != 0 {
			t.Fatalf("order 3 fired before its time: %+v", got)
		}
		wantPending(t, srv, "3", "unshipped")
	})
}

func TestSweepReslotMovesOverdueToNextSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		c := h.client(clk, register(t, "unshipped", alertOnce(rec), nil), nil)
		schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T11:07:00Z")
		res, err := c.Sweep(context.Background(), prescient.SweepReslot)
		if err != nil {
			t.Fatal(err)
		}
		next := ts("2026-03-10T11:15:00Z")
		if res.Jobs != 1 || !res.To.Equal(next) {
			t.Fatalf("sweep = %+v, want 1 job moved to 11:15", res)
		}
		if rec.total() != 0 {
			t.Fatal("reslot mode ran the check")
		}
		if j := wantPending(t, c, "1", "unshipped"); !j.NextCheckAt.Equal(next) || !j.FirstCheckAt.Equal(ts("2026-03-10T10:15:00Z")) {
			t.Fatalf("after reslot: next %s first %s", j.NextCheckAt, j.FirstCheckAt)
		}
		clk.Set("2026-03-10T11:15:00Z")
		c.Tick(context.Background())
		if got := rec.of("1"); len(got) != 1 || !got[0].slot.Equal(next) {
			t.Fatalf("calls %+v, want one in the 11:15 slot", got)
		}
		wantOutcome(t, c, "1", history.Done, 1)
	})
}

func TestCancelledAndResolvedNeverFire(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		reg := register(t, "unshipped", alertOnce(rec), &checks.Opts{Awaits: []string{"shipped"}})
		if err := reg.Register("unpaid", alertOnce(rec), &checks.Opts{Awaits: []string{"paid"}}); err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
		schedule(t, c, "2", "unshipped", "2026-03-10T10:15:00Z")
		schedule(t, c, "2", "unpaid", "2026-03-10T10:15:00Z")

		if n, err := c.Cancel(ctx, "order", "1", ""); err != nil || n != 1 {
			t.Fatalf("cancel = %d, %v; want 1", n, err)
		}
		if n, err := c.Cancel(ctx, "order", "1", ""); err != nil || n != 0 {
			t.Fatalf("cancelling again = %d, %v; want 0 and no error", n, err)
		}
		if n, err := c.Resolve(ctx, "order", "2", "shipped"); err != nil || n != 1 {
			t.Fatalf("resolve = %d, %v; want 1 (only the check awaiting shipped)", n, err)
		}
		clk.Set("2026-03-10T10:15:00Z")
		c.Tick(ctx)
		if got := rec.of("1"); len(got) != 0 {
			t.Fatalf("cancelled job fired: %+v", got)
		}
		if got := rec.of("2"); len(got) != 1 {
			t.Fatalf("order 2: %d calls, want exactly the unpaid check", len(got))
		}
		r := wantOutcome(t, c, "1", history.Cancelled, 0)
		if !r.LastCheckAt.IsZero() || r.FinishedBy != "api" {
			t.Errorf("cancelled record: last check %s by %q", r.LastCheckAt, r.FinishedBy)
		}
		recs, err := c.History(ctx, history.Filter{Entity: "order", Key: "2", Check: "unshipped"})
		if err != nil || len(recs) != 1 || recs[0].Outcome != history.Resolved {
			t.Fatalf("order 2 unshipped history = %+v, %v; want resolved", recs, err)
		}
	})
}

// orderCheck is the order example's shape: look the order up by key, done
// when it is gone or shipped, alert then escalate otherwise.
func orderCheck(rec *calls, escalateAfter time.Duration) checks.Func {
	return func(ctx context.Context, j *checks.Job) (time.Time, error) {
		rec.add(j)
		var status string
		err := j.Tx.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", j.Key).Scan(&status)
		if errors.Is(err, prescient.ErrNotFound) || status == "shipped" {
			return time.Time{}, nil
		}
		if err != nil {
			return time.Time{}, err
		}
		stage := "alert"
		if j.CheckCount > 0 {
			stage = "escalation"
		}
		if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, $2)", j.Key, stage); err != nil {
			return time.Time{}, err
		}
		if stage == "alert" {
			return j.FirstCheckAt.Add(escalateAfter), nil
		}
		return time.Time{}, nil
	}
}

func TestEntityGoneEndsDoneWithoutAlert(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		c := h.client(clk, register(t, "unshipped", orderCheck(rec, 21*time.Hour), nil), nil)
		schedule(t, c, "404", "unshipped", "2026-03-10T13:00:00Z") // no such order
		clk.Set("2026-03-10T13:00:00Z")
		c.Tick(context.Background())
		if len(rec.of("404")) != 1 {
			t.Fatal("the check did not run")
		}
		wantOutcome(t, c, "404", history.Done, 1)
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Fatalf("%d alerts for an order that does not exist", n)
		}
	})
}

func TestEscalation(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:05:00Z")
		rec := &calls{}
		c := h.client(clk, register(t, "unshipped", orderCheck(rec, 21*time.Hour), nil), nil)
		h.exec("INSERT INTO orders (id, status) VALUES ($1, $2)", "42", "unshipped")
		// Placed 10:05, alert after 3h: 13:05 → slot 13:15; escalate at first+21h.
		schedule(t, c, "42", "unshipped", "2026-03-10T13:05:00Z")
		clk.Set("2026-03-10T13:15:00Z")
		c.Tick(ctx)
		j := wantPending(t, c, "42", "unshipped")
		if want := ts("2026-03-11T10:15:00Z"); j.CheckCount != 1 || !j.NextCheckAt.Equal(want) {
			t.Fatalf("after the alert: check count %d next %s, want 1 and %s", j.CheckCount, j.NextCheckAt, want)
		}
		clk.Set("2026-03-11T10:15:00Z")
		c.Tick(ctx)
		r := wantOutcome(t, c, "42", history.Done, 2)
		if !r.FirstCheckAt.Equal(ts("2026-03-10T13:15:00Z")) || !r.LastCheckAt.Equal(ts("2026-03-11T10:15:00Z")) {
			t.Errorf("history first %s last %s", r.FirstCheckAt, r.LastCheckAt)
		}
		if n := h.count("SELECT * FROM alerts WHERE entity_key = '42'"); n != 2 {
			t.Fatalf("alerts = %d, want alert and escalation", n)
		}
		if got := rec.of("42"); len(got) != 2 || got[1].checkCount != 1 {
			t.Fatalf("calls = %+v", got)
		}
	})
}

func TestGuardMaxChecks(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		again := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			rec.add(j)
			return j.Slot.Add(time.Minute), nil // always asks for the next slot
		}
		c := h.client(clk, register(t, "nag", again, nil), func(c *prescient.Config) { c.Guards.MaxChecks = 3 })
		schedule(t, c, "1", "nag", "2026-03-10T10:15:00Z")
		for i := 1; i <= 5; i++ {
			clk.Add(15 * time.Minute)
			c.Tick(ctx)
		}
		if n := len(rec.of("1")); n != 3 {
			t.Fatalf("the check ran %d times, want 3 (max_checks)", n)
		}
		wantOutcome(t, c, "1", history.GuardMaxChecks, 3)
	})
}

func TestGuardRuntime(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		release := make(chan struct{})
		defer close(release)
		hang := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "ignores-context" {
				<-release // never looks at ctx
				return time.Time{}, nil
			}
			_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'too-late')", j.Key)
			if err != nil {
				return time.Time{}, err
			}
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		}
		c := h.client(clk, register(t, "slow", hang, &checks.Opts{Guards: guards.Limits{Runtime: 50 * time.Millisecond}}),
			func(c *prescient.Config) { c.MaxFailures = 1 })
		schedule(t, c, "honours-context", "slow", "2026-03-10T10:15:00Z")
		schedule(t, c, "ignores-context", "slow", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Failures != 2 || rec.Outcomes[history.Failed] != 2 {
			t.Fatalf("slot record %+v, want 2 failures ending failed", rec)
		}
		for _, k := range []string{"honours-context", "ignores-context"} {
			r := wantOutcome(t, c, k, history.Failed, 0)
			if r.LastError == "" {
				t.Errorf("%s: no error recorded", k)
			}
		}
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Fatalf("a timed-out check's write committed (%d rows)", n)
		}
	})
}

// One group may run checks with different runtime guards. A check that
// hangs past its own short guard, run after one whose guard is an hour, is
// abandoned at its own guard, not left running until the hour is up.
func TestGuardRuntimeShorterThanTheCheckBefore(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		release := make(chan struct{})
		defer close(release)
		reg := register(t, "patient", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			return time.Time{}, nil
		}, &checks.Opts{Guards: guards.Limits{Runtime: time.Hour}})
		err := reg.Register("stuck", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			<-release // never looks at ctx
			return time.Time{}, nil
		}, &checks.Opts{Guards: guards.Limits{Runtime: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		// One worker: both jobs in one group, the patient one first.
		c := h.client(clk, reg, func(c *prescient.Config) { c.Workers, c.MaxFailures = 1, 1 })
		schedule(t, c, "1", "patient", "2026-03-10T10:15:00Z")
		schedule(t, c, "2", "stuck", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		type fired struct {
			rec *prescient.SlotRecord
			err error
		}
		out := make(chan fired, 1)
		go func() {
			rec, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
			out <- fired{rec, err}
		}()
		var f fired
		select {
		case f = <-out:
		case <-time.After(time.Minute):
			t.Fatal("the slot did not finish within a minute: the stuck check was left running past its 50ms guard")
		}
		if f.err != nil {
			t.Fatal(f.err)
		}
		if f.rec.Checked != 2 || f.rec.Failures != 1 {
			t.Fatalf("slot record %+v, want 2 checked, 1 failure", f.rec)
		}
		wantOutcome(t, c, "1", history.Done, 1)
		if r := wantOutcome(t, c, "2", history.Failed, 0); !strings.Contains(r.LastError, "runtime guard") {
			t.Fatalf("stuck check's error %q, want its runtime guard named", r.LastError)
		}
	})
}

func TestGuardHorizonAndPast(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		ask := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			switch j.Key {
			case "far":
				return j.Slot.Add(48 * time.Hour), nil
			case "past":
				return j.Slot.Add(-time.Hour), nil
			case "same":
				return j.Slot, nil
			}
			return j.Slot.Add(23 * time.Hour), nil
		}
		c := h.client(clk, register(t, "ask", ask, nil), func(c *prescient.Config) { c.Guards.Horizon = 24 * time.Hour })
		for _, k := range []string{"far", "past", "same", "ok"} {
			schedule(t, c, k, "ask", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		// The record says why, without counting a failure.
		for k, want := range map[string]struct {
			outcome history.Outcome
			why     string
		}{"far": {history.GuardHorizon, "beyond the horizon 24h0m0s"}, "past": {history.GuardPast, "is not after the slot"}, "same": {history.GuardPast, "is not after the slot"}} {
			r := wantOutcome(t, c, k, want.outcome, 1)
			if !strings.Contains(r.LastError, want.why) || r.FailureCount != 0 {
				t.Errorf("%s: last error %q with %d failures, want it to say %q and no failure", k, r.LastError, r.FailureCount, want.why)
			}
		}
		if j := wantPending(t, c, "ok", "ask"); !j.NextCheckAt.Equal(ts("2026-03-11T09:15:00Z")) {
			t.Fatalf("in-horizon job next %s", j.NextCheckAt)
		}
	})
}

func TestFailuresRetryThenFail(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		bad := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			rec.add(j)
			if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, $2)", j.Key, fmt.Sprint(j.FailureCount)); err != nil {
				return time.Time{}, err
			}
			if j.Key == "panics" {
				panic("boom")
			}
			return time.Time{}, errors.New("lookup failed")
		}
		c := h.client(clk, register(t, "bad", bad, nil), func(c *prescient.Config) { c.MaxFailures = 3 })
		schedule(t, c, "panics", "bad", "2026-03-10T10:15:00Z")
		schedule(t, c, "errors", "bad", "2026-03-10T10:15:00Z")

		// Retries back off: 1 then 2 slots after each failure.
		wantNext := []string{"2026-03-10T10:30:00Z", "2026-03-10T11:00:00Z"}
		clk.Set("2026-03-10T10:15:00Z")
		for i, slot := range []string{"2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z", "2026-03-10T11:00:00Z"} {
			clk.Set(slot)
			c.Tick(ctx)
			if i == len(wantNext) {
				break
			}
			for _, k := range []string{"panics", "errors"} {
				j := wantPending(t, c, k, "bad")
				if !j.NextCheckAt.Equal(ts(wantNext[i])) || j.FailureCount != i+1 || j.LastError == "" {
					t.Fatalf("%s after failure %d: next %s failures %d error %q, want next %s", k, i+1, j.NextCheckAt, j.FailureCount, j.LastError, wantNext[i])
				}
			}
		}
		for _, k := range []string{"panics", "errors"} {
			if n := len(rec.of(k)); n != 3 {
				t.Fatalf("%s ran %d times, want 3", k, n)
			}
			r := wantOutcome(t, c, k, history.Failed, 0)
			if r.FailureCount != 3 {
				t.Errorf("%s: failure count %d, want 3", k, r.FailureCount)
			}
		}
		if r := historyOf(t, c, "panics")[0]; !strings.Contains(r.LastError, "boom") {
			t.Errorf("panic not recorded: %q", r.LastError)
		}
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Fatalf("failed checks' writes committed: %d rows", n)
		}
	})
}

func TestUnknownCheckStaysPending(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, nil)
		schedule(t, c, "1", "not_deployed_yet", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Unknown != 1 || rec.Checked != 0 {
			t.Fatalf("slot record %+v, want 1 unknown", rec)
		}
		if got := c.UnknownChecks(); got["not_deployed_yet"] != 1 {
			t.Fatalf("UnknownChecks = %v", got)
		}
		// Firing the slot again (a sweep) still counts one job left pending,
		// not one per firing.
		if rec := fire(t, c, "2026-03-10T10:15:00Z"); rec.Unknown != 1 {
			t.Fatalf("slot fired again: %d unknown, want 1", rec.Unknown)
		}
		wantPending(t, c, "1", "not_deployed_yet")
		// A server that knows the check runs it later, from the sweep.
		clk.Set("2026-03-10T11:00:00Z")
		rec2 := &calls{}
		c2 := h.client(clk, register(t, "not_deployed_yet", alertOnce(rec2), nil), nil)
		if _, err := c2.Sweep(context.Background(), prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		wantOutcome(t, c2, "1", history.Done, 1)
	})
}

func TestTwoServersSplitSlots(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		reg := register(t, "unshipped", alertOnce(rec), nil)
		own := slots.Ownership{"a": {0, 2}, "b": {1, 3}}
		a := h.client(clk, reg, func(c *prescient.Config) { c.Server, c.Ownership = "a", own })
		b := h.client(clk, reg, func(c *prescient.Config) { c.Server, c.Ownership = "b", own })
		for i, at := range []string{"2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z", "2026-03-10T10:45:00Z", "2026-03-10T11:00:00Z"} {
			schedule(t, a, fmt.Sprint(i), "unshipped", at)
		}
		for range 4 {
			clk.Add(15 * time.Minute)
			a.Tick(ctx)
			b.Tick(ctx)
		}
		wantBy := map[string]string{"0": "b", "1": "a", "2": "b", "3": "a"} // positions 1, 2, 3, 0
		for k, by := range wantBy {
			r := wantOutcome(t, a, k, history.Done, 1)
			if r.FinishedBy != by {
				t.Errorf("order %s (slot %s) fired by %q, want %q", k, r.LastCheckAt, r.FinishedBy, by)
			}
		}
		if rec.total() != 4 {
			t.Fatalf("%d calls, want 4", rec.total())
		}
	})
}

func TestTwoServersOwningTheSameSlotProcessEachJobOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		// On PostgreSQL each server's first check waits until the other
		// server has begun too, so that the two really process the slot at
		// the same time. Each runs one small group at a time, and both list
		// the slot in the same order, so the second to claim a group finds
		// part of it held and goes on past it. (SQLite runs checks under the
		// database's write lock, one group at a time: both servers fire
		// concurrently and the lock serialises them.)
		begun := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
		var once = map[string]*sync.Once{"a": {}, "b": {}}
		overlapping := func(server, other string) checks.Func {
			return func(ctx context.Context, j *checks.Job) (time.Time, error) {
				once[server].Do(func() {
					if h.name != "postgres" {
						return
					}
					close(begun[server])
					select {
					case <-begun[other]:
					case <-time.After(20 * time.Second): // a liveness bound
						t.Errorf("server %s: server %s never began the slot", server, other)
					}
				})
				return alertOnce(rec)(ctx, j)
			}
		}
		a := h.client(clk, register(t, "unshipped", overlapping("a", "b"), nil), func(c *prescient.Config) { c.Server, c.GroupSize, c.Workers = "a", 7, 1 })
		b := h.client(clk, register(t, "unshipped", overlapping("b", "a"), nil), func(c *prescient.Config) { c.Server, c.GroupSize, c.Workers = "b", 5, 1 })
		const n = 200
		ps := make([]prescient.ScheduleParams, n)
		for i := range ps {
			ps[i] = prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "unshipped", At: ts("2026-03-10T10:15:00Z")}
		}
		if _, err := a.ScheduleMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:15:00Z")
		var wg sync.WaitGroup
		for _, c := range []*prescient.Client{a, b} {
			wg.Go(func() { c.Tick(ctx) })
		}
		wg.Wait()
		if got := rec.total(); got != n {
			t.Fatalf("%d check calls for %d jobs", got, n)
		}
		if got := h.count("SELECT DISTINCT entity_key FROM alerts"); got != n {
			t.Fatalf("%d alerted orders, want %d", got, n)
		}
		recs, err := a.History(ctx, history.Filter{Check: "unshipped", Limit: 1000})
		if err != nil || len(recs) != n {
			t.Fatalf("history: %d records, %v", len(recs), err)
		}
	})
}

func TestServerDyingMidSlotLosesNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		dying, die := context.WithCancel(context.Background())
		var once sync.Once
		var started atomic.Int32
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			rec.add(j)
			if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key); err != nil {
				return time.Time{}, err
			}
			if started.Add(1) >= 10 {
				// The server dies with this check's transaction open.
				once.Do(die)
				<-ctx.Done()
			}
			return time.Time{}, nil
		}
		reg := register(t, "unshipped", check, nil)
		a := h.client(clk, reg, func(c *prescient.Config) { c.Server = "a"; c.Workers = 2; c.BatchSize = 10 })
		const n = 60
		for i := range n {
			schedule(t, a, fmt.Sprint(i), "unshipped", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		if _, err := a.FireSlot(dying, ts("2026-03-10T10:15:00Z")); err == nil {
			t.Fatal("the dying server's slot reported success")
		}
		done := h.count("SELECT * FROM alerts")
		if done >= n {
			t.Fatalf("the server did not die mid-slot (%d of %d done)", done, n)
		}
		slotsLedger, err := a.Slots(context.Background(), nil)
		if err != nil || len(slotsLedger) != 1 || slotsLedger[0].Complete() {
			t.Fatalf("ledger %+v, %v: want the slot incomplete", slotsLedger, err)
		}
		if got := slotsLedger[0].Checked; got != done {
			t.Fatalf("ledger says %d checked; %d committed before the server died", got, done)
		}
		// The next sweep, on another server, takes the rest.
		clk.Set("2026-03-10T10:31:00Z")
		b := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), func(c *prescient.Config) { c.Server = "b" })
		if _, err := b.Sweep(context.Background(), prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		if got := h.count("SELECT DISTINCT entity_key FROM alerts"); got != n {
			t.Fatalf("%d orders alerted after the sweep, want %d", got, n)
		}
		recs, err := b.History(context.Background(), history.Filter{Outcomes: []history.Outcome{history.Done}, Limit: 1000})
		if err != nil || len(recs) != n {
			t.Fatalf("history: %d done, %v; want %d", len(recs), err, n)
		}
	})
}
