package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// FireSlot's record names what it is of, as a ledger row does: the slot,
// the server, the kind, this call's start and, once the slot is complete,
// its finish. It carried only the counts (found trying the library as a new
// user).
func TestFireSlotRecordNamesItsSlot(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), nil)
		schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:02Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if !rec.Slot.Equal(ts("2026-03-10T10:15:00Z")) || rec.Server != "s1" || rec.Kind != prescient.KindFire ||
			!rec.StartedAt.Equal(clk.Now()) || !rec.FinishedAt.Equal(clk.Now()) || !rec.Complete() || rec.Checked != 1 {
			t.Errorf("FireSlot's record %+v, want slot 10:15, server s1, kind fire, started and finished at 10:15:02, one job checked", rec)
		}
	})
}

// The ledger's time is the firings' own, added up: a slot fired at its
// boundary (2s of checks) and again an hour later by the same server, now
// deployed with a check it did not know (1s), took 3s, not the hour from the
// first start to the last finish that the status page and `prescient
// status` showed.
func TestLedgerTookAddsUpFirings(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		takes := func(d time.Duration) checks.Func {
			return func(context.Context, *checks.Job) (time.Time, error) {
				clk.Add(d)
				return time.Time{}, nil
			}
		}
		old := h.client(clk, register(t, "slow", takes(2*time.Second), nil), nil)
		reg := register(t, "slow", takes(2*time.Second), nil)
		if err := reg.Register("later", takes(time.Second), nil); err != nil {
			t.Fatal(err)
		}
		deployed := h.client(clk, reg, nil)
		schedule(t, old, "1", "slow", "2026-03-10T10:15:00Z")
		schedule(t, deployed, "2", "later", "2026-03-10T10:15:00Z")

		clk.Set("2026-03-10T10:15:01Z")
		if rec := fire(t, old, "2026-03-10T10:15:00Z"); rec.Took != 2*time.Second || rec.Unknown != 1 {
			t.Errorf("the first firing's record: took %v, %d unknown; want 2s and 1 (job 2's check)", rec.Took, rec.Unknown)
		}
		clk.Set("2026-03-10T11:15:00Z")
		if rec := fire(t, deployed, "2026-03-10T10:15:00Z"); rec.Took != time.Second || rec.Checked != 1 {
			t.Errorf("the second firing's record: took %v, %d checked; want 1s and 1", rec.Took, rec.Checked)
		}
		recs, err := deployed.Slots(t.Context(), &prescient.SlotsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Fatalf("ledger: %d rows, want 1 (slot 10:15 of s1)", len(recs))
		}
		r := recs[0]
		if r.Took != 3*time.Second || r.Checked != 2 || !r.StartedAt.Equal(ts("2026-03-10T10:15:01Z")) || !r.FinishedAt.Equal(ts("2026-03-10T11:15:01Z")) {
			t.Errorf("ledger row %+v: want 2 checked in 3s, started 10:15:01, finished 11:15:01", r)
		}
	})
}

// A firing cut short still adds its time: its check ran 2s, then the call's
// context ended; the slot stays incomplete, and its ledger row took 2s. The
// row says when the firing under way started while it runs, and no longer
// once it was cut short.
func TestLedgerTookOfAFiringCutShort(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var (
			c      *prescient.Client
			during []*prescient.SlotRecord
			err    error
		)
		cut := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
			during, err = c.Slots(t.Context(), &prescient.SlotsParams{})
			clk.Add(2 * time.Second)
			cancel()
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		}
		c = h.client(clk, register(t, "cut", cut, nil), nil)
		schedule(t, c, "1", "cut", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:01Z")
		if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err == nil {
			t.Fatal("FireSlot whose context ended under its check: no error")
		}
		if err != nil || len(during) != 1 || !during[0].FiringSince.Equal(ts("2026-03-10T10:15:01Z")) {
			t.Errorf("the ledger while the check ran: %v, %v; want one row whose firing started at 10:15:01", during, err)
		}
		recs, err := c.Slots(t.Context(), &prescient.SlotsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Fatalf("ledger: %d rows, want 1 (slot 10:15 of s1)", len(recs))
		}
		if r := recs[0]; r.Complete() || r.Took != 2*time.Second || !r.FiringSince.IsZero() {
			t.Errorf("ledger row %+v: want it incomplete, having taken 2s, with no firing under way", *r)
		}
	})
}
