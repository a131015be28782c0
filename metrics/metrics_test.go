package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/internal/promtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = ts(s)
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// stores opens a fresh, migrated store of each kind.
var stores = []struct {
	name string
	open func(t *testing.T) prescient.Store
}{
	{"postgres", func(t *testing.T) prescient.Store {
		url, schema := pgtest.Schema(t)
		s, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"sqlite", func(t *testing.T) prescient.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "prescient.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// registry holds three checks: done (ends the job), again (asks to run an
// hour after its slot) and boom (fails).
func registry(t *testing.T) *checks.Registry {
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

var quarterHours = slots.Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}

// quiet is the engine's logger in these tests.
var quiet = slog.New(slog.DiscardHandler)

// serve registers m and serves /metrics on a loopback listener, as `prescient
// run` does; it returns the URL.
func serve(t *testing.T, m *Metrics) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// want checks the value of one series.
func want(t *testing.T, f promtest.Families, value float64, name string, labels ...string) {
	t.Helper()
	got, ok := f.Value(name, labels...)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if got != value {
		t.Errorf("%s%v = %v, want %v", name, labels, got, value)
	}
}

// upcoming returns prescient_jobs_upcoming by slots_ahead, leaving out
// zeros, and fails unless every offset 0..9 is there.
func upcoming(t *testing.T, f promtest.Families) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for i := range UpcomingSlotsDefault {
		v, ok := f.Value("prescient_jobs_upcoming", "slots_ahead", fmt.Sprint(i))
		if !ok {
			t.Errorf("prescient_jobs_upcoming{slots_ahead=%q} missing", fmt.Sprint(i))
		}
		if v != 0 {
			out[fmt.Sprint(i)] = v
		}
	}
	if n := len(f.Labels("prescient_jobs_upcoming", "slots_ahead")); n != UpcomingSlotsDefault {
		t.Errorf("%d prescient_jobs_upcoming series, want %d", n, UpcomingSlotsDefault)
	}
	return out
}

// TestMetricsOverHTTP drives a client on an injected clock on each store,
// with the metrics as its Observer, and scrapes them over HTTP between
// steps: the checks run by check and outcome, failures, slot lag, sweeps
// and the gauges read at scrape time (pending per check and per upcoming
// slot, overdue, unknown checks, incomplete slots, positions, readiness).
func TestMetricsOverHTTP(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := st.open(t)
			clk := &clock{}
			clk.Set("2026-03-10T10:00:00Z")
			m := New(&Opts{CacheFor: -1})
			c, err := prescient.NewClient(store, &prescient.Config{
				Server: "s1", Grid: quarterHours, Checks: registry(t), Now: clk.Now, Observer: m, MaxFailures: 2,
				SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-", Logger: quiet,
			})
			if err != nil {
				t.Fatal(err)
			}
			url := serve(t, m)

			f := promtest.MustScrape(t, url)
			want(t, f, 0, "prescient_ready")
			if _, ok := f.Value("prescient_jobs_overdue"); ok {
				t.Error("prescient_jobs_overdue served before the client is watched")
			}
			m.Watch(c)
			if err := c.Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}

			sched := func(check, at string, n int) {
				t.Helper()
				for i := range n {
					key := fmt.Sprintf("%s-%s-%d", check, at, i)
					if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: check, At: ts(at)}); err != nil {
						t.Fatal(err)
					}
				}
			}
			sched("done", "2026-03-10T10:15:00Z", 2)
			sched("again", "2026-03-10T10:15:00Z", 3)
			sched("boom", "2026-03-10T10:15:00Z", 1)
			sched("ghost", "2026-03-10T10:30:00Z", 1) // no server knows it
			sched("done", "2026-03-10T10:45:00Z", 4)
			sched("again", "2026-03-10T12:00:00Z", 1)
			sched("done", "2026-03-10T13:00:00Z", 2) // 12 slots ahead: beyond the 10 covered

			f = promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_ready")
			want(t, f, 4, "prescient_positions_owned")
			if got, w := upcoming(t, f), map[string]float64{"1": 6, "2": 1, "3": 4, "8": 1}; fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("jobs upcoming by slots_ahead at 10:00: %v, want %v", got, w)
			}
			for check, n := range map[string]float64{"done": 8, "again": 4, "boom": 1, "ghost": 1} {
				want(t, f, n, "prescient_jobs_pending", "check", check)
			}
			want(t, f, 1, "prescient_jobs_unknown_check", "check", "ghost")
			if got := f.Labels("prescient_jobs_unknown_check", "check"); len(got) != 1 {
				t.Errorf("unknown checks %v, want ghost only", got)
			}
			want(t, f, 0, "prescient_jobs_overdue")
			want(t, f, 0, "prescient_slots_incomplete")
			if f.Type("prescient_checks_total") != "" && f.Total("prescient_checks_total") != 0 {
				t.Errorf("checks counted before any ran: %v", f.Total("prescient_checks_total"))
			}

			// The 10:15 slot fires 90 seconds late.
			clk.Set("2026-03-10T10:16:30Z")
			if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err != nil {
				t.Fatal(err)
			}
			f = promtest.MustScrape(t, url)
			want(t, f, 2, "prescient_checks_total", "check", "done", "outcome", "done")
			want(t, f, 3, "prescient_checks_total", "check", "again", "outcome", "rescheduled")
			want(t, f, 1, "prescient_checks_total", "check", "boom", "outcome", "retry")
			if got := f.Total("prescient_checks_total"); got != 6 {
				t.Errorf("checks run: %v, want the 6 due", got)
			}
			want(t, f, 1, "prescient_check_failures_total", "check", "boom")
			// Every registered check's counter exists from the start, at
			// 0 until it fails (found by a new user's trial: absent until
			// the first failure, an alert on its rate saw nothing).
			want(t, f, 0, "prescient_check_failures_total", "check", "done")
			want(t, f, 2, "prescient_check_duration_seconds", "check", "done")
			want(t, f, 3, "prescient_check_duration_seconds", "check", "again")
			want(t, f, 1, "prescient_slot_lag_seconds", "kind", "fire")
			if sum, _ := f.Sum("prescient_slot_lag_seconds", "kind", "fire"); sum != 90 {
				t.Errorf("slot lag sum %v, want 90 (seconds)", sum)
			}
			want(t, f, 1, "prescient_slot_duration_seconds", "kind", "fire")
			// again's jobs moved an hour on (11:15: 4 slots ahead of 10:15);
			// boom's retry is in the next slot with ghost's job.
			if got, w := upcoming(t, f), map[string]float64{"1": 2, "2": 4, "4": 3, "7": 1}; fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("jobs upcoming by slots_ahead at 10:16:30: %v, want %v", got, w)
			}
			want(t, f, 6, "prescient_jobs_pending", "check", "done")

			// 10:30 and 10:45 pass unfired, and a server died in 10:30.
			if err := store.Driver().SlotStart(ctx, &prescient.SlotRecord{Slot: ts("2026-03-10T10:30:00Z"), Server: "gone",
				Kind: prescient.KindFire, StartedAt: ts("2026-03-10T10:30:01Z")}); err != nil {
				t.Fatal(err)
			}
			clk.Set("2026-03-10T11:00:00Z")
			f = promtest.MustScrape(t, url)
			want(t, f, 6, "prescient_jobs_overdue") // ghost and boom at 10:30, 4 done at 10:45
			want(t, f, 1, "prescient_slots_incomplete")
			if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
				t.Fatal(err)
			}
			f = promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_sweeps_total", "mode", "run")
			want(t, f, 0, "prescient_sweeps_total", "mode", "reslot")
			want(t, f, 5, "prescient_swept_jobs_total", "mode", "run") // boom (now failed) and 4 done; ghost stays
			want(t, f, 1, "prescient_checks_total", "check", "boom", "outcome", "failed")
			want(t, f, 2, "prescient_check_failures_total", "check", "boom")
			want(t, f, 2, "prescient_slot_lag_seconds", "kind", "sweep")
			if sum, _ := f.Sum("prescient_slot_lag_seconds", "kind", "sweep"); sum != 45*60 {
				t.Errorf("sweep slot lag sum %v, want 2700 (30m + 15m)", sum)
			}
			// Swept again, 10:30 holds only ghost's job, of no known
			// check: no job is late, so no lag is observed (found by an
			// SRE's trial: every sweep added one, and a lag alert stayed on).
			if _, err := c.Sweep(ctx, prescient.SweepRun); err != nil {
				t.Fatal(err)
			}
			f = promtest.MustScrape(t, url)
			want(t, f, 2, "prescient_sweeps_total", "mode", "run")
			want(t, f, 2, "prescient_slot_lag_seconds", "kind", "sweep")
			want(t, f, 1, "prescient_jobs_overdue") // ghost's
			want(t, f, 1, "prescient_jobs_unknown_check", "check", "ghost")
			// 11:00, which holds no job, fired 4 minutes late (as a
			// restarted server's first tick fires the slot it started
			// into): no job was late, no lag is observed.
			clk.Set("2026-03-10T11:04:00Z")
			if rec, err := c.FireSlot(ctx, ts("2026-03-10T11:00:00Z")); err != nil || rec.Checked != 0 {
				t.Fatalf("fire the empty 11:00 slot: %+v, %v", rec, err)
			}
			f = promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_slot_lag_seconds", "kind", "fire")
			want(t, f, 2, "prescient_slot_duration_seconds", "kind", "fire")
			want(t, f, 0, "prescient_jobs_pending", "check", "boom")
			for _, op := range append(prescient.StoreOps, StoreOpScrape) {
				want(t, f, 0, "prescient_store_errors_total", "operation", op)
			}
			for name, typ := range map[string]string{
				"prescient_checks_total": "counter", "prescient_check_duration_seconds": "histogram",
				"prescient_slot_lag_seconds": "histogram", "prescient_jobs_upcoming": "gauge", "prescient_ready": "gauge",
				"prescient_store_read_timestamp_seconds": "gauge",
			} {
				if got := f.Type(name); got != typ {
					t.Errorf("%s is a %q, want a %s", name, got, typ)
				}
			}

			// A store that fails: the engine's error by operation; a scrape
			// whose reading fails leaves the database's gauges out.
			bad := &faultyDriver{Driver: store.Driver()}
			bad.fail.Store(true)
			bc, err := prescient.NewClient(wrappedStore{store, bad}, &prescient.Config{
				Server: "s1", Grid: quarterHours, Checks: registry(t), Now: clk.Now, Observer: m, Logger: quiet,
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bc.FireSlot(ctx, ts("2026-03-10T11:00:00Z")); err == nil {
				t.Fatal("FireSlot over a failing store: no error")
			}
			m.Watch(bc)
			f = promtest.MustScrape(t, url)
			want(t, f, 1, "prescient_store_errors_total", "operation", prescient.StoreOpJobsDue)
			want(t, f, 1, "prescient_store_errors_total", "operation", StoreOpScrape)
			want(t, f, 0, "prescient_ready")
			if _, ok := f.Value("prescient_jobs_overdue"); ok {
				t.Error("prescient_jobs_overdue served from a reading that failed")
			}
			want(t, f, 6, "prescient_checks_total", "check", "done", "outcome", "done") // the counters stay
		})
	}
}

// faultyDriver fails JobsDue and JobStats while fail is set, and counts
// JobStats calls.
type faultyDriver struct {
	driver.Driver
	fail  atomic.Bool
	stats atomic.Int64
}

var errFault = errors.New("injected fault")

func (d *faultyDriver) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	if d.fail.Load() {
		return nil, errFault
	}
	return d.Driver.JobsDue(ctx, p)
}

func (d *faultyDriver) JobStats(ctx context.Context, p *driver.JobStatsParams) (*driver.JobStats, error) {
	d.stats.Add(1)
	if d.fail.Load() {
		return nil, errFault
	}
	return d.Driver.JobStats(ctx, p)
}

// wrappedStore is a Store with another driver.
type wrappedStore struct {
	prescient.Store
	drv driver.Driver
}

func (s wrappedStore) Driver() driver.Driver { return s.drv }

// TestScrapesReadTheDatabaseOncePerCacheFor: concurrent scrapes share one
// reading; within CacheFor no scrape reads the database; past it a scrape
// serves the latest reading at once and a new one is made in the
// background; a failed reading is not retried within CacheFor either.
func TestScrapesReadTheDatabaseOncePerCacheFor(t *testing.T) {
	ctx := context.Background()
	store := stores[1].open(t)
	drv := &faultyDriver{Driver: store.Driver()}
	clk := &clock{}
	clk.Set("2026-03-10T10:00:00Z")
	c, err := prescient.NewClient(wrappedStore{store, drv}, &prescient.Config{Server: "s1", Grid: quarterHours, Checks: registry(t), Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cache := &clock{}
	cache.Set("2030-01-01T00:00:00Z")
	m := New(&Opts{CacheFor: 30 * time.Second})
	m.now = cache.Now
	m.Watch(c)
	url := serve(t, m)
	schedule := func(key string) {
		t.Helper()
		if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: "done", At: ts("2026-03-10T10:15:00Z")}); err != nil {
			t.Fatal(err)
		}
	}
	schedule("1")

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			f, err := promtest.Scrape(url)
			if err != nil {
				t.Error(err)
				return
			}
			if v, _ := f.Value("prescient_jobs_pending", "check", "done"); v != 1 {
				t.Errorf("first scrapes: %v pending, want 1", v)
			}
		})
	}
	wg.Wait()
	if n := drv.stats.Load(); n != 1 {
		t.Fatalf("8 concurrent first scrapes read the job stats %d times, want once", n)
	}

	schedule("2")
	cache.Add(29 * time.Second)
	f := promtest.MustScrape(t, url)
	want(t, f, 1, "prescient_jobs_pending", "check", "done") // the cached reading
	if n := drv.stats.Load(); n != 1 {
		t.Fatalf("a scrape within CacheFor read the job stats (%d reads)", n)
	}

	cache.Add(2 * time.Second)
	f = promtest.MustScrape(t, url)
	want(t, f, 1, "prescient_jobs_pending", "check", "done") // served at once, while the new reading runs
	deadline := time.Now().Add(20 * time.Second)
	for {
		f = promtest.MustScrape(t, url)
		if v, _ := f.Value("prescient_jobs_pending", "check", "done"); v == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reading past CacheFor never showed the second job (%d reads)", drv.stats.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling the background reading, not synchronising
	}
	if n := drv.stats.Load(); n != 2 {
		t.Fatalf("%d job stats reads, want 2", n)
	}

	// A failing database: the gauges go, and it is not asked again within
	// CacheFor.
	drv.fail.Store(true)
	cache.Add(31 * time.Second)
	promtest.MustScrape(t, url) // starts the reading that fails
	deadline = time.Now().Add(20 * time.Second)
	for {
		f = promtest.MustScrape(t, url)
		if _, ok := f.Value("prescient_jobs_pending", "check", "done"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gauges are still served after the reading failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	reads := drv.stats.Load()
	for range 3 {
		promtest.MustScrape(t, url)
	}
	if n := drv.stats.Load(); n != reads {
		t.Errorf("scrapes within CacheFor of a failed reading read again (%d reads, then %d)", reads, n)
	}
	want(t, f, 1, "prescient_store_errors_total", "operation", StoreOpScrape)
}
