package prescient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// heldCheck is a check that records its call and writes an alert; its call
// for order "1" says it started and then waits for release.
func heldCheck(rec *calls, started chan<- struct{}, release <-chan struct{}) checks.Func {
	var once sync.Once
	return func(ctx context.Context, j *checks.Job) (time.Time, error) {
		rec.add(j)
		if j.Key == "1" {
			once.Do(func() { close(started) })
			<-release
		}
		_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key)
		return time.Time{}, err
	}
}

// heldSlot builds a server at 10:00 whose check holds order "1" (see
// heldCheck), one group of one job at a time, with orders 1, 2 and 3 due at
// 10:15.
func heldSlot(t *testing.T, h *harness) (clk *clock, rec *calls, started, release chan struct{}, srv *prescient.Client) {
	t.Helper()
	clk, rec = newClock("2026-03-10T10:00:00Z"), &calls{}
	started, release = make(chan struct{}), make(chan struct{})
	srv = h.client(clk, register(t, "unshipped", heldCheck(rec, started, release), nil), oneAtATime)
	for _, k := range []string{"1", "2", "3"} {
		schedule(t, srv, k, "unshipped", "2026-03-10T10:15:00Z")
	}
	return clk, rec, started, release, srv
}

// fired is what a FireSlot call returned.
type fired struct {
	rec *prescient.SlotRecord
	err error
}

// fireHeld fires slot in the background and returns once its held check has
// started; the channel gets what FireSlot returns.
func fireHeld(t *testing.T, c *prescient.Client, slot string, started <-chan struct{}) <-chan fired {
	t.Helper()
	done := make(chan fired, 1)
	go func() {
		r, err := c.FireSlot(context.Background(), ts(slot))
		done <- fired{r, err}
	}()
	select {
	case <-started:
	case f := <-done:
		t.Fatalf("firing ended before its held check started: %+v, %v", f.rec, f.err)
	}
	return done
}

// oneAtATime runs one group of one job at a time, so that a second firing
// of a slot that a held check occupies could only wait.
func oneAtATime(c *prescient.Config) { c.Workers, c.GroupSize = 1, 1 }

// A sweep that meets a slot the server is still firing past its boundary
// leaves it to that firing: it neither waits for it nor takes its jobs.
func TestSweepLeavesASlotBeingFired(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk, rec, started, release, srv := heldSlot(t, h)
		clk.Set("2026-03-10T10:15:00Z")
		done := fireHeld(t, srv, "2026-03-10T10:15:00Z", started)
		clk.Set("2026-03-10T10:31:00Z") // 10:15 is overdue now, and still running

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := srv.Sweep(ctx, prescient.SweepRun)
		cancel()
		if err != nil || res.Slots != 0 || res.Jobs != 0 {
			t.Fatalf("sweep during the slot's firing: %+v, %v; want it to leave the slot alone", res, err)
		}
		// FireSlot waits for the firing in progress (here until its context
		// ends) instead of running beside it.
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := srv.FireSlot(gone, ts("2026-03-10T10:15:00Z")); !errors.Is(err, context.Canceled) ||
			!strings.Contains(err.Error(), "waiting for this server's firing of it to end") {
			t.Fatalf("FireSlot during the slot's firing, context ended: %v; want it to have waited", err)
		}
		close(release)
		f := <-done
		if f.err != nil || f.rec.Checked != 3 {
			t.Fatalf("firing: %+v, %v; want 3 checked", f.rec, f.err)
		}
		for _, k := range []string{"1", "2", "3"} {
			if n := len(rec.of(k)); n != 1 {
				t.Errorf("order %s checked %d times, want 1", k, n)
			}
			wantOutcome(t, srv, k, history.Done, 1)
		}
	})
}

// A tick whose catch-up reaches a slot a sweep is firing leaves it to the
// sweep, without an error, and takes it up again on the next tick: by then
// the ledger says it is complete, and nothing runs twice; or the sweep was
// cut short, and the next tick fires what it left. On PostgreSQL only: on
// SQLite, whose one writer the sweep's running group holds, the tick's own
// ledger write for the slot in progress waits for that group whatever it
// does about the other slot.
func TestTickLeavesASlotASweepIsFiring(t *testing.T) {
	t.Parallel()
	for _, cut := range []bool{false, true} {
		name := map[bool]string{false: "sweep completes", true: "sweep cut short"}[cut]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := openPostgres(t)
			clk := newClock("2026-03-10T10:00:00Z")
			rec := &calls{}
			started, release := make(chan struct{}), make(chan struct{})
			srv := h.client(clk, register(t, "unshipped", heldCheck(rec, started, release), nil), oneAtATime)
			srv.Tick(context.Background()) // 10:00: nothing due; catch-up starts after it
			for _, k := range []string{"1", "2", "3"} {
				schedule(t, srv, k, "unshipped", "2026-03-10T10:15:00Z")
			}
			clk.Set("2026-03-10T10:31:00Z") // 10:15 was missed
			type swept struct {
				res *prescient.SweepResult
				err error
			}
			sweepCtx, stopSweep := context.WithCancel(context.Background())
			defer stopSweep()
			done := make(chan swept, 1)
			go func() {
				r, err := srv.Sweep(sweepCtx, prescient.SweepRun)
				done <- swept{r, err}
			}()
			select {
			case <-started:
			case s := <-done:
				t.Fatalf("sweep ended before its held check started: %+v, %v", s.res, s.err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			srv.Tick(ctx) // catch-up 10:15 (the sweep has it), fire 10:30
			if ctx.Err() != nil {
				t.Fatal("the tick waited for the sweep's firing of 10:15")
			}
			cancel()
			if err := srv.Ready(); err != nil {
				t.Fatalf("tick during the sweep's firing of a slot: %v", err)
			}
			if n := rec.total(); n != 1 {
				t.Fatalf("%d checks ran before the sweep's held check ended, want 1", n)
			}
			if recs := ledger(t, srv, "2026-03-10T10:30:00Z"); len(recs) != 1 || !recs[0].Complete() {
				t.Fatalf("ledger of 10:30 after the tick: %+v; want it fired, not held up by 10:15", recs)
			}
			if cut {
				stopSweep() // interrupts the held check: its job stays due, untouched
			}
			close(release)
			s := <-done
			if !cut && (s.err != nil || s.res.Slots != 1 || s.res.Jobs != 3) {
				t.Fatalf("sweep: %+v, %v; want 1 slot, 3 jobs", s.res, s.err)
			}
			if cut && s.err == nil {
				t.Fatalf("sweep cut short: %+v, no error", s.res)
			}

			clk.Set("2026-03-10T10:46:00Z")
			srv.Tick(context.Background())
			if err := srv.Ready(); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"1", "2", "3"} {
				want := 1
				if cut && k == "1" {
					want = 2 // interrupted, then run by the tick
				}
				if n := len(rec.of(k)); n != want {
					t.Errorf("order %s checked %d times, want %d", k, n, want)
				}
				wantOutcome(t, srv, k, history.Done, 1)
			}
			if recs := ledger(t, srv, "2026-03-10T10:15:00Z"); len(recs) != 1 || recs[0].Checked != 3 || !recs[0].Complete() {
				t.Fatalf("ledger of 10:15: %+v, want one complete row with 3 checked", recs)
			}
		})
	}
}

// A reslot-mode sweep leaves the jobs of a slot the server is firing where
// they are: that firing has them listed, and takes them. On PostgreSQL only:
// on SQLite the reslot's write waits for the firing's group, which holds the
// one writer.
func TestReslotSweepLeavesASlotBeingFired(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk, _, started, release, srv := heldSlot(t, h)
	schedule(t, srv, "4", "unshipped", "2026-03-10T10:00:01Z") // 10:15 too
	schedule(t, srv, "5", "unshipped", "2026-03-10T10:29:00Z") // 10:30, missed
	clk.Set("2026-03-10T10:15:00Z")
	done := fireHeld(t, srv, "2026-03-10T10:15:00Z", started)
	clk.Set("2026-03-10T10:46:00Z") // 10:15 and 10:30 are overdue; 10:15 still running

	res, err := srv.Sweep(context.Background(), prescient.SweepReslot)
	if err != nil || res.Jobs != 1 || !res.To.Equal(ts("2026-03-10T11:00:00Z")) {
		t.Fatalf("reslot sweep: %+v, %v; want order 5 alone moved to 11:00", res, err)
	}
	close(release)
	if f := <-done; f.err != nil || f.rec.Checked != 4 {
		t.Fatalf("firing: %+v, %v; want its 4 jobs checked", f.rec, f.err)
	}
	if j := wantPending(t, srv, "5", "unshipped"); !j.NextCheckAt.Equal(ts("2026-03-10T11:00:00Z")) {
		t.Fatalf("order 5 next check %s, want 11:00", j.NextCheckAt)
	}
}

// ledger returns the ledger rows of one slot.
func ledger(t *testing.T, c *prescient.Client, slot string) []*prescient.SlotRecord {
	t.Helper()
	recs, err := c.Slots(context.Background(), &prescient.SlotsParams{Since: ts(slot), Until: ts(slot).Add(time.Microsecond)})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
