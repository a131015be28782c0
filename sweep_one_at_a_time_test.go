package prescient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// sweepLog records the sweeps that finished, by trigger, in order.
type sweepLog struct {
	prescient.NopObserver
	mu       sync.Mutex
	triggers []string
}

func (s *sweepLog) SweepFinished(e prescient.SweepEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.triggers = append(s.triggers, e.Trigger)
}

func (s *sweepLog) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.triggers...)
}

// TestScheduledSweepSkippedBesideTheStartupSweep: the scheduled sweep ran
// beside a long start-up sweep, firing the same overdue slots again (23,186
// slots counted for 19,999; found by a trial of catch-up after downtime).
// One sweep runs at a time: the scheduled one is skipped while the start-up
// sweep runs.
func TestScheduledSweepSkippedBesideTheStartupSweep(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	blocker := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
		once.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return time.Time{}, nil
	}
	logs := &lockedBuffer{}
	sweeps := &sweepLog{}
	c := h.client(clk, register(t, "c", blocker, nil), func(cfg *prescient.Config) {
		cfg.SweepOnStartDisabled = false
		cfg.SweepSchedule = "@every 1s"
		cfg.Observer = sweeps
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T11:00:00Z") // the job's slot is overdue
	started := make(chan error, 1)
	go func() { started <- c.Start(context.Background()) }()
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	<-entered // the start-up sweep runs the check, which waits
	for !strings.Contains(logs.String(), "sweep skipped: another sweep is running") && len(sweeps.all()) == 0 {
		time.Sleep(10 * time.Millisecond) // polling the log, not synchronising goroutines
	}
	close(release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	if got := sweeps.all(); len(got) == 0 || got[0] != prescient.SweepStartup {
		t.Errorf("sweeps finished, in order: %v; want the start-up sweep first, the scheduled ones skipped beside it", got)
	}
	if n := h.count("SELECT * FROM prescient_history"); n != 1 {
		t.Errorf("%d history records; want the job's one", n)
	}
}

// TestSweepFiresOverdueSlotsSideBySide: a catch-up of many small slots ran
// one slot after the other, the workers idle while each slot's firing did
// its round trips and commits (20,000 one-job slots: 200 jobs/s; found by a
// trial of catch-up after downtime). The sweep fires up to 4 overdue slots
// at once: here the checks of three overdue slots each wait until all three
// have started, which they could not one slot at a time.
func TestSweepFiresOverdueSlotsSideBySide(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	var arrived sync.WaitGroup
	arrived.Add(3)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	check := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
		arrived.Done()
		select {
		case <-all:
			return time.Time{}, nil
		case <-time.After(20 * time.Second): // a guard against hanging, not a timing
			return time.Time{}, errors.New("the other overdue slots' checks did not start meanwhile")
		}
	}
	c := h.client(clk, register(t, "c", check, nil), nil)
	for i, at := range []string{"2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z", "2026-03-10T10:45:00Z"} {
		schedule(t, c, fmt.Sprint(i), "c", at)
	}
	clk.Set("2026-03-10T11:20:00Z")
	res, err := c.Sweep(context.Background(), prescient.SweepRun)
	if err != nil {
		t.Fatal(err)
	}
	if res.Slots != 3 || res.Jobs != 3 {
		t.Errorf("sweep: %+v; want 3 slots and 3 jobs", res)
	}
	if n := h.count("SELECT * FROM prescient_history WHERE outcome = 'done'"); n != 3 {
		t.Errorf("%d jobs done; want 3, their checks run side by side", n)
	}
}

// reslotClock is a driver whose every JobsReslot takes a quarter of an hour
// on the test's clock.
type reslotClock struct {
	driver.Driver
	clk   *clock
	calls atomic.Int32
}

func (d *reslotClock) JobsReslot(ctx context.Context, p *driver.JobsReslotParams) (int, error) {
	d.calls.Add(1)
	n, err := d.Driver.JobsReslot(ctx, p)
	d.clk.Add(15 * time.Minute)
	return n, err
}

// TestReslotSweepInBatches: a reslot sweep moved every overdue job in one
// statement, locking them all until it ended (600,000 jobs: 10 s, an
// application's cancel of one waiting as long), into the slot that was
// next when it began, which had fired by the time it ended (found by a
// trial of pending jobs at scale). It moves them in batches of 10,000, each
// to the slot next when the batch runs.
func TestReslotSweepInBatches(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	c0 := h.client(clk, &checks.Registry{}, nil)
	ps := make([]prescient.ScheduleParams, 25_000)
	for i := range ps {
		ps[i] = prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "c", At: ts("2026-03-10T10:15:00Z").Add(time.Duration(i%4) * 15 * time.Minute)}
	}
	if _, err := c0.ScheduleMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	clk.Set("2026-03-10T12:05:00Z")
	drv := &reslotClock{Driver: h.store.Driver(), clk: clk}
	cfg := c0.Config()
	c, err := prescient.NewClient(wrappedStore{h.store, drv}, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Sweep(context.Background(), prescient.SweepReslot)
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 25_000 || drv.calls.Load() < 3 {
		t.Errorf("reslot: %+v in %d statement(s); want 25,000 jobs moved in batches of 10,000", res, drv.calls.Load())
	}
	// Each batch went to the slot next when it ran: 12:15, 12:30, 12:45.
	if n := h.count("SELECT DISTINCT next_check_at FROM prescient_jobs"); n != 3 {
		t.Errorf("the jobs moved to %d slots; want 3, one per batch, each the next slot as it ran", n)
	}
	if n := h.count("SELECT * FROM prescient_jobs WHERE next_check_at < '2026-03-10T12:15:00Z'"); n != 0 {
		t.Errorf("%d jobs left before the first batch's slot", n)
	}
}

// TestCheckSweepsItsOwnClient: a check may sweep its own client (lockAlone
// allows for it); with sweeps taking turns, a check run by a sweep that
// swept waited for the sweep running it, until its runtime guard failed it
// (found by a review). A check's own sweep runs beside.
func TestCheckSweepsItsOwnClient(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	var c *prescient.Client
	nested := make(chan error, 1)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		_, err := c.Sweep(ctx, prescient.SweepRun)
		nested <- err
		return time.Time{}, nil
	}
	c = h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
		cfg.Guards = guards.Limits{Runtime: 20 * time.Second}
	})
	schedule(t, c, "outer", "c", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T11:00:00Z")
	if _, err := c.Sweep(context.Background(), prescient.SweepRun); err != nil {
		t.Fatal(err)
	}
	if err := <-nested; err != nil {
		t.Errorf("a check's sweep of its own client: %v; want it run beside the sweep running the check", err)
	}
	if recs := historyOf(t, c, "outer"); len(recs) != 1 || recs[0].Outcome != history.Done {
		t.Errorf("history %v; want done", recs)
	}
}
