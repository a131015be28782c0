package prescient_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
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
// context ended; the slot stays incomplete, and its ledger row took 2s.
func TestLedgerTookOfAFiringCutShort(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		cut := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
			clk.Add(2 * time.Second)
			cancel()
			<-ctx.Done()
			return time.Time{}, ctx.Err()
		}
		c := h.client(clk, register(t, "cut", cut, nil), nil)
		schedule(t, c, "1", "cut", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:01Z")
		if _, err := c.FireSlot(ctx, ts("2026-03-10T10:15:00Z")); err == nil {
			t.Fatal("FireSlot whose context ended under its check: no error")
		}
		recs, err := c.Slots(t.Context(), &prescient.SlotsParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			t.Fatalf("ledger: %d rows, want 1 (slot 10:15 of s1)", len(recs))
		}
		if r := recs[0]; r.Complete() || r.Took != 2*time.Second {
			t.Errorf("ledger row %+v: want it incomplete, having taken 2s", *r)
		}
	})
}

// heartbeatRecorder sends the Firing of every heartbeat the client sends,
// as it sends it (before the store writes it: on SQLite the write waits
// for the write lock a group holds).
type heartbeatRecorder struct {
	driver.Driver
	firing chan []time.Time
}

func (d *heartbeatRecorder) ServerHeartbeat(ctx context.Context, srv *driver.Server) error {
	d.firing <- srv.Firing
	return d.Driver.ServerHeartbeat(ctx, srv)
}

// A server's heartbeat lists the slots it is firing, which status readers
// call running (SlotRecord.RunningOn): listed while its check runs, no
// longer at the heartbeat after the firing ended; the store keeps the list.
func TestHeartbeatListsTheSlotsFiring(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		drv := &heartbeatRecorder{Driver: h.store.Driver(), firing: make(chan []time.Time, 1)}
		var (
			c      *prescient.Client
			err    error
			sent   = make(chan error, 1)
			during []time.Time
		)
		check := func(ctx context.Context, _ *checks.Job) (time.Time, error) {
			go func() { sent <- c.Heartbeat(context.Background()) }()
			during = <-drv.firing
			return time.Time{}, nil
		}
		// The harness's configuration, over the recording driver.
		cfg := h.client(clk, register(t, "c", check, nil), nil).Config()
		c, err = prescient.NewClient(wrappedStore{h.store, drv}, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:01Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if len(during) != 1 || !during[0].Equal(ts("2026-03-10T10:15:00Z")) {
			t.Errorf("a heartbeat during the firing listed %v, want slot 10:15", during)
		}
		srvs, err := h.store.Driver().ServerList(t.Context())
		if err != nil || len(srvs) != 1 || len(srvs[0].Firing) != 1 || srvs[0].Timeout != cfg.ServerTimeout || !slices.Equal(srvs[0].Checks, []string{"c"}) {
			t.Errorf("servers after that heartbeat: %v, %v; want s1 firing 10:15, its timeout %s and its check c recorded", srvs, err, cfg.ServerTimeout)
		}
		go func() { sent <- c.Heartbeat(t.Context()) }()
		if after := <-drv.firing; len(after) != 0 {
			t.Errorf("a heartbeat after the firing listed %v, want none", after)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if srvs, err := h.store.Driver().ServerList(t.Context()); err != nil || len(srvs) != 1 || len(srvs[0].Firing) != 0 {
			t.Errorf("servers after the next heartbeat: %v, %v; want s1 firing nothing", srvs, err)
		}
	})
}
