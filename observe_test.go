package prescient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	checks []prescient.CheckEvent
	slots  []prescient.SlotEvent
	sweeps []prescient.SweepEvent
	errs   []prescient.StoreErrorEvent
}

func (r *recorder) CheckFinished(e prescient.CheckEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, e)
}

func (r *recorder) SlotFired(e prescient.SlotEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slots = append(r.slots, e)
}

func (r *recorder) SweepFinished(e prescient.SweepEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweeps = append(r.sweeps, e)
}

func (r *recorder) StoreError(e prescient.StoreErrorEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, e)
}

// take returns the events so far and forgets them.
func (r *recorder) take() (cs []prescient.CheckEvent, ss []prescient.SlotEvent, ws []prescient.SweepEvent, es []prescient.StoreErrorEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, ss, ws, es = r.checks, r.slots, r.sweeps, r.errs
	r.checks, r.slots, r.sweeps, r.errs = nil, nil, nil, nil
	return cs, ss, ws, es
}

// outcomesOf counts check events by check and outcome, "check/outcome".
func outcomesOf(cs []prescient.CheckEvent) map[string]int {
	out := map[string]int{}
	for _, e := range cs {
		out[e.Check+"/"+e.Outcome]++
	}
	return out
}

// observedRegistry holds three checks: done (ends the job), again (asks to
// run an hour later) and boom (fails).
func observedRegistry(t *testing.T) *checks.Registry {
	t.Helper()
	reg := &checks.Registry{}
	for name, fn := range map[string]checks.Func{
		"done":  func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil },
		"again": func(_ context.Context, j *checks.Job) (time.Time, error) { return j.Slot.Add(time.Hour), nil },
		"boom":  func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, errors.New("boom") },
	} {
		if err := reg.Register(name, fn, nil); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// TestObserverSeesWhatTheEngineDoes: the Observer is told of each job's
// check run with its outcome, of each slot fired with its lag on the
// client's clock and its counts, of each sweep, and of a store that fails,
// naming the operation.
func TestObserverSeesWhatTheEngineDoes(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &recorder{}
		c := h.client(clk, observedRegistry(t), func(cfg *prescient.Config) {
			cfg.Observer = rec
			cfg.MaxFailures = 2
		})
		for i, check := range []string{"done", "done", "again", "again", "again", "boom"} {
			schedule(t, c, fmt.Sprint(i), check, "2026-03-10T10:15:00Z")
		}

		clk.Set("2026-03-10T10:16:30Z")
		if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err != nil {
			t.Fatal(err)
		}
		cs, ss, _, es := rec.take()
		want := map[string]int{"done/done": 2, "again/rescheduled": 3, "boom/retry": 1}
		if got := outcomesOf(cs); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("check events by outcome: %v, want %v", got, want)
		}
		for _, e := range cs {
			if (e.Err != nil) != (e.Check == "boom") || !e.Slot.Equal(ts("2026-03-10T10:15:00Z")) {
				t.Errorf("check event %+v: want an error for boom only, and the 10:15 slot", e)
			}
		}
		if len(ss) != 1 {
			t.Fatalf("slot events %+v, want one", ss)
		}
		s := ss[0]
		if !s.Slot.Equal(ts("2026-03-10T10:15:00Z")) || s.Kind != prescient.KindFire || s.Lag != 90*time.Second ||
			s.Checked != 6 || s.Rescheduled != 3 || s.Failures != 1 || s.Outcomes[history.Done] != 2 || s.Err != nil {
			t.Errorf("slot event %+v, want 10:15 fire, lag 1m30s, 6 checked, 3 rescheduled, 1 failure, 2 done", s)
		}
		if len(es) != 0 {
			t.Errorf("store errors %+v, want none", es)
		}

		// boom's retry, one slot later, is its second failure: it ends failed.
		clk.Set("2026-03-10T10:30:00Z")
		if _, err := c.FireSlot(ctx, ts("2026-03-10T10:30:00Z")); err != nil {
			t.Fatal(err)
		}
		cs, ss, _, _ = rec.take()
		if got := outcomesOf(cs); fmt.Sprint(got) != fmt.Sprint(map[string]int{"boom/failed": 1}) {
			t.Errorf("check events of the retry: %v, want boom/failed 1", got)
		}
		if len(ss) != 1 || ss[0].Lag != 0 || ss[0].Checked != 1 || ss[0].Outcomes[history.Failed] != 1 {
			t.Errorf("slot events of the retry %+v, want one with lag 0, 1 checked, 1 failed", ss)
		}

		// A sweep fires an overdue slot: a sweep event, and a slot event of
		// kind sweep.
		schedule(t, c, "late", "done", "2026-03-10T10:45:00Z")
		clk.Set("2026-03-10T11:20:00Z")
		if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
			t.Fatal(err)
		}
		cs, ss, ws, _ := rec.take()
		if len(ws) != 1 || ws[0].Trigger != prescient.SweepCall || ws[0].Mode != prescient.SweepRun || ws[0].Slots != 1 || ws[0].Jobs != 1 || ws[0].Err != nil {
			t.Errorf("sweep events %+v, want one: call, run mode, 1 slot, 1 job", ws)
		}
		if len(ss) != 1 || ss[0].Kind != prescient.KindSweep || ss[0].Lag != 35*time.Minute || len(cs) != 1 {
			t.Errorf("slot events of the sweep %+v (checks %+v), want one of kind sweep, lag 35m, one check", ss, cs)
		}

		// A store that cannot list due jobs: an error naming the operation,
		// and a slot event carrying it.
		fc, err := prescient.NewClient(wrappedStore{h.store, failingDue{h.store.Driver()}}, &prescient.Config{
			Server: "s1", Grid: quarterHours, Checks: observedRegistry(t), Now: clk.Now, Observer: rec,
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fc.FireSlot(ctx, ts("2026-03-10T11:15:00Z")); err == nil {
			t.Fatal("FireSlot with a failing store: no error")
		}
		_, ss, _, es = rec.take()
		if len(es) != 1 || es[0].Op != prescient.StoreOpJobsDue || !errors.Is(es[0].Err, errNoDue) {
			t.Errorf("store errors %+v, want one of %s", es, prescient.StoreOpJobsDue)
		}
		if len(ss) != 1 || ss[0].Err == nil {
			t.Errorf("slot events %+v, want one with the error", ss)
		}
	})
}

var errNoDue = errors.New("no due jobs today")

// failingDue is a driver that cannot list due jobs.
type failingDue struct{ driver.Driver }

func (failingDue) JobsDue(context.Context, *driver.JobsDueParams) ([]*driver.DueJob, error) {
	return nil, errNoDue
}

// logRecords parses JSON log lines.
func logRecords(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, rec)
	}
	return out
}

// withMsg keeps the records whose message is msg.
func withMsg(recs []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// A slot whose firing is stopped (its context ends) before any job is
// checked is logged at INFO with its error: its jobs, left due, say nothing
// otherwise, and at DEBUG the line was lost in a server's shutdown (found
// by an operator's trial).
func TestSlotCutShortByStopLogged(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		var buf bytes.Buffer
		started := make(chan struct{})
		var once sync.Once
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "c", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		}, nil), func(cfg *prescient.Config) {
			cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		})
		for i := range 3 {
			schedule(t, c, fmt.Sprint(i), "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-started; cancel() }()
		if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err == nil {
			t.Fatal("FireSlot stopped while its first check ran: no error")
		}
		fired := withMsg(logRecords(t, &buf), "slot fired")
		if len(fired) != 1 || fired[0]["level"] != "INFO" || fired[0]["jobs"] != 0.0 || fired[0]["error"] == nil {
			t.Errorf("slot stopped before any job was checked logged as %v, want one line at INFO with jobs 0 and its error", fired)
		}
		for i := range 3 {
			wantPending(t, c, fmt.Sprint(i), "c")
		}
	})
}

// TestSlotAndSweepLogs: at info a slot with jobs in it is logged once, with
// its counts, and an empty slot or an empty sweep not at all; at debug every
// slot and every sweep is logged.
func TestSlotAndSweepLogs(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
			t.Run(level.String(), func(t *testing.T) {
				var buf bytes.Buffer
				clk := newClock("2026-03-10T10:00:00Z")
				c := h.client(clk, observedRegistry(t), func(cfg *prescient.Config) {
					cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
				})
				key := "k-" + level.String()
				for i := range 5 {
					schedule(t, c, fmt.Sprintf("%s-%d", key, i), "done", "2026-03-10T10:15:00Z")
				}
				clk.Set("2026-03-10T10:15:02Z")
				for _, s := range []string{"2026-03-10T10:00:00Z", "2026-03-10T10:15:00Z"} {
					if _, err := c.FireSlot(ctx, ts(s)); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
					t.Fatal(err)
				}
				recs := logRecords(t, &buf)
				fired := withMsg(recs, "slot fired")
				var work map[string]any
				for _, r := range fired {
					if r["slot"] == "2026-03-10T10:15:00Z" {
						work = r
					}
				}
				if work == nil || work["level"] != "INFO" || work["kind"] != "fire" || work["jobs"] != 5.0 ||
					work["outcomes"].(map[string]any)["done"] != 5.0 || work["lag"] == nil || work["duration"] == nil || work["server"] != "s1" {
					t.Errorf("the slot with 5 jobs logged as %v, want at INFO with kind, jobs 5, outcomes.done 5, lag, duration, server", work)
				}
				sweeps := withMsg(recs, "sweep")
				switch level {
				case slog.LevelInfo:
					if len(fired) != 1 {
						t.Errorf("at info, %d slot lines, want 1 (the empty slot not logged): %v", len(fired), fired)
					}
					if len(sweeps) != 0 {
						t.Errorf("at info, an empty sweep logged: %v", sweeps)
					}
				case slog.LevelDebug:
					if len(fired) != 2 {
						t.Errorf("at debug, %d slot lines, want 2: %v", len(fired), fired)
					}
					for _, r := range fired {
						if r["slot"] == "2026-03-10T10:00:00Z" && (r["level"] != "DEBUG" || r["jobs"] != 0.0) {
							t.Errorf("the empty slot logged as %v, want at DEBUG with jobs 0", r)
						}
					}
					if len(sweeps) != 1 || sweeps[0]["level"] != "DEBUG" || sweeps[0]["trigger"] != prescient.SweepCall || sweeps[0]["jobs"] != 0.0 {
						t.Errorf("at debug, sweep lines %v, want one at DEBUG, trigger call, jobs 0", sweeps)
					}
				}
			})
		}
	})
}

// A sweep that finds only jobs of an unknown check, left pending, logs at
// DEBUG, as a sweep that found nothing: every sweep finds them again, and
// each logged one INFO line more (found by an SRE's trial); the slot's own
// line and the warning about the check still say what is left.
func TestSweepOfUnknownChecksOnlyLogsAtDebug(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var buf bytes.Buffer
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, observedRegistry(t), func(cfg *prescient.Config) {
			cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
		})
		app := h.client(clk, &checks.Registry{}, nil) // knows no check: schedules any
		if _, err := app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "ghost", At: ts("2026-03-10T10:15:00Z")}); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:31:00Z")
		for range 2 {
			if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
				t.Fatal(err)
			}
		}
		recs := logRecords(t, &buf)
		if sweeps := withMsg(recs, "sweep"); len(sweeps) != 0 {
			t.Errorf("at info, sweeps that took no job logged: %v", sweeps)
		}
		if fired := withMsg(recs, "slot fired"); len(fired) == 0 || fired[0]["unknown"] != 1.0 {
			t.Errorf("slot lines %v, want the slot with its unknown job at INFO", fired)
		}
	})
}
