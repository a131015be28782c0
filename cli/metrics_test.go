package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/promtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// observedChecks holds three checks: done (ends the job), again (asks to
// run an hour after its slot) and boom (fails).
func observedChecks(t *testing.T) *checks.Registry {
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

// startRunWith runs `prescient run` in-process with the checks of reg, as
// startRun does with the order example's.
func startRunWith(t *testing.T, h *harness, reg *checks.Registry, args ...string) *runningServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServer{stderr: &syncBuffer{}, exit: make(chan struct{}), cancel: cancel}
	root := NewRootCommand(&Opts{Checks: reg, Out: io.Discard, Err: s.stderr, lookupEnv: envOf(h.env)})
	root.SetArgs(append([]string{"--config", h.config, "run"}, args...))
	go func() {
		defer close(s.exit)
		s.err = root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.exit
	})
	return s
}

// secondGrid is the grid of the run tests: a slot every second.
var secondGrid = slots.Grid{Resolution: time.Second}

// scheduleAll schedules n jobs of check in the slot of at, keys prefix-0…
func scheduleAll(t *testing.T, c *prescient.Client, prefix, check string, at time.Time, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.Schedule(context.Background(), prescient.ScheduleParams{
			Entity: "order", Key: fmt.Sprintf("%s-%d", prefix, i), Check: check, At: at,
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMetricsEndpoint: `prescient run` serves /metrics on http.listen, in
// the Prometheus text format, on SQLite and PostgreSQL. After real jobs ran
// in real slots, the checks counted by check and outcome are exactly the
// jobs scheduled and what became of them, the failures are counted, and the
// gauges read from the database show what is left pending, per check and
// per upcoming slot.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	const extra = "slots: {resolution: 1s, cycle: 0s}\nretry: {max_failures: 2}\n"
	for _, tc := range []struct {
		name string
		// setup returns the harness and a store on the same database.
		setup func(t *testing.T, listen string) (*harness, prescient.Store)
	}{
		{"sqlite", func(t *testing.T, listen string) (*harness, prescient.Store) {
			path := filepath.Join(t.TempDir(), "prescient.db")
			h := sqliteHarness(t, path, extra+"http: {listen: \""+listen+"\"}\n")
			st, err := sqlite.Open(context.Background(), path, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			if err := st.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			return h, st
		}},
		{"postgres", func(t *testing.T, listen string) (*harness, prescient.Store) {
			h, url, schema := dbHarness(t, extra+"http: {listen: \""+listen+"\"}\n")
			h.mustRun("migrate")
			st, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			return h, st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			addr := freeAddr(t)
			h, st := tc.setup(t, addr)
			c, err := prescient.NewClient(st, &prescient.Config{Server: "test", Grid: secondGrid, Checks: observedChecks(t)})
			if err != nil {
				t.Fatal(err)
			}
			soon := time.Now().Add(2 * time.Second)
			later := time.Now().Add(time.Hour)
			scheduleAll(t, c, "done", "done", soon, 3)
			scheduleAll(t, c, "again", "again", soon, 2)
			scheduleAll(t, c, "boom", "boom", soon, 1)
			scheduleAll(t, c, "later", "done", later, 4)

			srv := startRunWith(t, h, observedChecks(t))
			// Done when the history holds the 3 done and the failed boom
			// (its retry, a slot later, is its second failure), and again's
			// jobs have run once.
			waitFor(t, 60*time.Second, "the due jobs checked", srv, func() bool {
				recs, err := c.History(ctx, history.Filter{Limit: 100})
				if err != nil || len(recs) != 4 {
					return false
				}
				for i := range 2 {
					j, err := c.Job(ctx, "order", fmt.Sprintf("again-%d", i), "again")
					if err != nil || j.CheckCount != 1 {
						return false
					}
				}
				return true
			})

			// The first scrape: the database is read now, after the work.
			f := promtest.MustScrape(t, "http://"+addr+"/metrics")
			wantSeries := func(value float64, name string, labels ...string) {
				t.Helper()
				got, ok := f.Value(name, labels...)
				if !ok || got != value {
					t.Errorf("%s%v = %v (present %v), want %v", name, labels, got, ok, value)
				}
			}
			wantSeries(3, "prescient_checks_total", "check", "done", "outcome", "done")
			wantSeries(2, "prescient_checks_total", "check", "again", "outcome", "rescheduled")
			wantSeries(1, "prescient_checks_total", "check", "boom", "outcome", "retry")
			wantSeries(1, "prescient_checks_total", "check", "boom", "outcome", "failed")
			if got := f.Total("prescient_checks_total"); got != 7 {
				t.Errorf("checks run: %v, want 7 (6 jobs, one retried)", got)
			}
			wantSeries(2, "prescient_check_failures_total", "check", "boom")
			wantSeries(3, "prescient_check_duration_seconds", "check", "done")
			for check, n := range map[string]float64{"done": 4, "again": 2, "boom": 0} {
				wantSeries(n, "prescient_jobs_pending", "check", check)
			}
			// What is left is an hour away: nothing in the next 10 slots,
			// nothing overdue, no check unknown.
			if got := f.Total("prescient_jobs_upcoming"); got != 0 || len(f.Labels("prescient_jobs_upcoming", "slots_ahead")) != 10 {
				t.Errorf("jobs upcoming: %v in %v slots, want 0 in 10", got, f.Labels("prescient_jobs_upcoming", "slots_ahead"))
			}
			wantSeries(0, "prescient_jobs_overdue")
			if got := f.Labels("prescient_jobs_unknown_check", "check"); len(got) != 0 {
				t.Errorf("unknown checks %v, want none", got)
			}
			wantSeries(1, "prescient_ready")
			wantSeries(1, "prescient_positions_owned")
			if got := f.Total("prescient_sweeps_total", "mode", "run"); got < 1 {
				t.Errorf("sweeps in run mode: %v, want the start-up sweep at least", got)
			}
			// A firing is observed just after its ledger row is finished,
			// which is after its jobs' history commits: the retry's may
			// come a moment after the scrape above. Only firings that
			// checked a job observe a lag (a restart's first tick fires the
			// slot it started into late, with nothing in it).
			waitFor(t, 10*time.Second, "the slot and boom's retry observed", srv, func() bool {
				g := promtest.MustScrape(t, "http://"+addr+"/metrics")
				return g.Total("prescient_slot_lag_seconds") >= 2 && g.Total("prescient_slot_duration_seconds") >= 2
			})
			for _, op := range []string{prescient.StoreOpGroup, prescient.StoreOpJobsDue, prescient.StoreOpLedger} {
				wantSeries(0, "prescient_store_errors_total", "operation", op)
			}
			if _, ok := f.Value("prescient_slots_incomplete"); !ok {
				t.Error("prescient_slots_incomplete missing")
			}
			for name, typ := range map[string]string{
				"prescient_checks_total": "counter", "prescient_check_duration_seconds": "histogram",
				"prescient_jobs_pending": "gauge", "go_goroutines": "gauge", "process_start_time_seconds": "gauge",
			} {
				if got := f.Type(name); got != typ {
					t.Errorf("%s is a %q, want a %s", name, got, typ)
				}
			}
			srv.running(t)
		})
	}
}
