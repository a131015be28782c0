package prescient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// A batch check is one unit: its call fails or succeeds for all of its jobs.
// When the optimistic group of a batch check fails, the group is rolled back
// and run again with the call's failure held for every job. If the
// application replaced one of those jobs (same slot, new payload) between
// the rollback and the claim of the second run, stillHeld dropped that
// job's held failure but kept the others' (found by a review):
//   - the batch's first job replaced: the unit's first job no longer had a
//     held decision, so the whole batch was called again, for every job,
//     and its decisions were added beside the held failures of the same
//     jobs; apply refused two decisions for one job, the group's writes
//     were lost and the slot failed;
//   - a later job replaced: the unit was skipped as held, so the replaced
//     job was claimed and given no decision at all; the firing reported
//     success and the ledger called the slot complete, with the job still
//     due in it, never checked with its new payload.
//
// A unit's held decisions are now kept or dropped as one: the batch is
// called again for all its jobs.
func TestBatchHeldFailureDroppedWholeWhenAJobChanged(t *testing.T) {
	for _, replaced := range []string{"k1", "k2"} {
		t.Run(replaced, func(t *testing.T) {
			h := openPostgres(t)
			ctx := context.Background()
			clk := newClock("2026-03-10T10:00:00Z")
			var calls atomic.Int32
			reg := &checks.Registry{}
			if err := reg.RegisterBatch("b", func(ctx context.Context, jobs []*checks.Job) ([]checks.Result, error) {
				if calls.Add(1) == 1 {
					return nil, errors.New("batch lookup failed")
				}
				rs := make([]checks.Result, len(jobs))
				for _, j := range jobs {
					if err := writeAlert(ctx, j); err != nil {
						return nil, err
					}
				}
				return rs, nil // done, every one
			}, &checks.Opts{BatchSize: 10}); err != nil {
				t.Fatal(err)
			}
			hook := &staleClaimHook{Driver: h.store.Driver(), at: 2}
			base := h.store
			h.store = wrappedStore{base, hook}
			srv := h.client(clk, reg, nil)
			h.store = base
			app := h.client(newClock("2026-03-10T10:14:59Z"), reg, func(c *prescient.Config) { c.Server = "app" })

			for _, k := range []string{"k1", "k2", "k3"} {
				schedule(t, srv, k, "b", "2026-03-10T10:15:00Z")
			}
			var replaceErr error
			ran := false
			hook.hook = func() {
				// Between the rollback of the first run and the claim of the
				// second: the application replaces one job in the same slot.
				ran = true
				_, replaceErr = app.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: replaced, Check: "b",
					At: ts("2026-03-10T10:15:00Z"), Payload: map[string]int{"v": 2}, OnConflict: prescient.ConflictReplace})
			}
			hook.armed.Store(true)
			clk.Set("2026-03-10T10:15:00Z")
			_, err := srv.FireSlot(ctx, ts("2026-03-10T10:15:00Z"))
			if !ran || replaceErr != nil {
				t.Fatalf("setup: hook ran %v, replace error %v", ran, replaceErr)
			}
			if err != nil {
				t.Errorf("fire 10:15: %v", err)
			}
			due := h.count("SELECT id FROM prescient_jobs WHERE next_check_at = $1", ts("2026-03-10T10:15:00Z"))
			if due != 0 {
				t.Errorf("%d job(s) still due in 10:15 after its firing, want 0 (batch called %d times)", due, calls.Load())
			}
		})
	}
}
