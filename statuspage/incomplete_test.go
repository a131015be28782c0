package statuspage

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/metrics"
)

// TestIncompleteSlotsCountsSlotsNotRows: slot 09:58 was started by
// web-2, which died in it; web-1 then fired it to the end. No slot is left
// unfinished: prescient_slots_incomplete ("not finished by any server") says
// 0, and so must the overview's "Incomplete slots" card, which once
// counted web-2's ledger row and said 1, in red, until the row left the
// timeline.
func TestIncompleteSlotsCountsSlotsNotRows(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			if _, err := f.client.FireSlot(context.Background(), slot0958); err != nil {
				t.Fatal(err)
			}
			metric := incompleteGauge(t, f)
			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			summary := text(between(t, body, `id="summary"`, "</section>"))
			if metric != 0 {
				t.Fatalf("prescient_slots_incomplete = %v, want 0 (the premise)", metric)
			}
			wantText(t, "summary, after web-1 finished slot 09:58", summary, "Incomplete slots 0")
			// web-2's row of it, in red "incomplete" beside the card's 0,
			// is superseded.
			var web2 string
			for _, r := range strings.Split(body, "<tr")[1:] {
				if strings.Contains(r, `data-slot="`+iso(slot0958)+`"`) && strings.Contains(r, "web-2") {
					web2 = r
				}
			}
			if !strings.Contains(web2, `data-state="superseded"`) {
				t.Errorf("web-2's row of slot 09:58, which web-1 fired to the end: %q, want superseded", text(web2))
			}
		})
	}
}

// The overview reads the latest Opts.Fired ledger rows. When they ended
// inside a slot's rows (newest slot first, then by server), that slot was
// judged on the rows read alone: here slot 09:58 has a row of server
// "a-dead", unfinished, read, and web-1's finished row cut off, and the card
// said 1. The oldest slot of a full read is no longer counted.
func TestIncompleteSlotsIgnoresASlotCutByTheRowLimit(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, st.open(t))
			if _, err := f.client.FireSlot(ctx, slot0958); err != nil {
				t.Fatal(err)
			}
			must(t, f.drv.SlotStart(ctx, &driver.SlotRecord{Slot: slot0958, Server: "a-dead", Kind: prescient.KindFire, StartedAt: at(9, 58, 2)}))
			all, err := f.client.Slots(ctx, &prescient.SlotsParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			limit := 0
			for i, r := range all {
				if r.Slot.Equal(slot0958) {
					if r.Server != "a-dead" {
						t.Fatalf("setup: the first row of 09:58 is %s's, want a-dead's", r.Server)
					}
					limit = i + 1
					break
				}
			}
			srv := f.serve(t, &Opts{CacheFor: -1, Fired: limit})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			wantText(t, "summary, the ledger read ending inside slot 09:58", text(between(t, body, `id="summary"`, "</section>")), "Incomplete slots 0")
		})
	}
}

// A live server still firing slot 09:59 past its end (a long slot) is not a
// server that died in it: the timeline said "incomplete" and both the card
// and prescient_slots_incomplete counted it (found by a new user's trial,
// a 6s check on a 2s grid). It is "running" now, and counted by neither:
// web-1's latest heartbeat lists it among the slots it is firing. Its row
// of 09:57, unfinished and not listed (a firing that died, or whose finish
// was lost), is still incomplete. Slot 09:58, where web-2 died, is not
// counted while web-1 fires it.
func TestSlotFiredPastItsEndIsRunning(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, st.open(t))
			slot0957, slot0959 := at(9, 57, 0), at(9, 59, 0)
			for _, s := range []time.Time{slot0957, slot0958, slot0959} {
				must(t, f.drv.SlotStart(ctx, &driver.SlotRecord{Slot: s, Server: "web-1", Kind: prescient.KindFire, StartedAt: s.Add(time.Second)}))
			}
			// The fixture's heartbeat of web-1, listing the slots it fires.
			must(t, f.drv.ServerHeartbeat(ctx, &driver.Server{Name: "web-1", StartedAt: at(9, 55, 0), HeartbeatAt: at(10, 2, 27),
				Positions: []int{0, 1, 2, 3}, Firing: []time.Time{slot0958, slot0959}}))

			metric := incompleteGauge(t, f)
			if metric != 1 {
				t.Errorf("prescient_slots_incomplete = %v, want 1 (09:57, which web-1 no longer fires)", metric)
			}

			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			wantText(t, "slot 09:59", text(row(t, body, `data-slot="`+iso(slot0959)+`"`)), "running", "web-1")
			wantText(t, "slot 09:57", text(row(t, body, `data-slot="`+iso(slot0957)+`"`)), "incomplete", "web-1")
			wantText(t, "summary", text(between(t, body, `id="summary"`, "</section>")), "Incomplete slots 1")
		})
	}
}

// incompleteGauge reads prescient_slots_incomplete from the metrics of the
// fixture's client, read at once (no cache); -1 when it is not reported.
func incompleteGauge(t *testing.T, f *fixture) float64 {
	t.Helper()
	m := metrics.New(&metrics.Opts{CacheFor: -1})
	m.Watch(f.client)
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "prescient_slots_incomplete" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// The page said a cataloged check this server does not run was run by
// "another server" (the catalog records registrations, not who runs what
// now), even when no live server ran it. The servers' heartbeats list the
// checks they run: the page names them, and a check none of them runs,
// with jobs pending, is an unknown check.
func TestChecksRunByTheServersThatSayTheyRunThem(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			ctx := context.Background()
			must(t, f.drv.CatalogSave(ctx, []driver.CatalogEntry{{Check: "legacy"}}))
			if _, err := f.client.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "30", Check: "legacy", At: slot1005}); err != nil {
				t.Fatal(err)
			}
			must(t, f.drv.ServerHeartbeat(ctx, &driver.Server{Name: "web-1", StartedAt: at(9, 55, 0), HeartbeatAt: at(10, 2, 27),
				Positions: []int{0, 1}, Checks: []string{"again", "flaky", "greet"}}))
			must(t, f.drv.ServerHeartbeat(ctx, &driver.Server{Name: "web-3", StartedAt: at(9, 55, 0), HeartbeatAt: at(10, 2, 27),
				Positions: []int{2, 3}, Checks: []string{"greet"}}))
			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			wantText(t, "greet", text(row(t, body, `class="check" data-check="greet"`)), "web-1, web-3")
			wantText(t, "again", text(row(t, body, `class="check" data-check="again"`)), "web-1")
			if r := text(row(t, body, `class="check" data-check="legacy"`)); !strings.Contains(r, "no live server") || strings.Contains(r, "another server") {
				t.Errorf("legacy, cataloged and run by no live server: %s", r)
			}
			wantText(t, "unknown legacy", text(row(t, body, `class="unknown-check" data-check="legacy"`)), "No live server runs it")
		})
	}
}

// The overview lists each sink's deliveries, pending, delivered over the
// last day and dead, as prescient status does: it showed nothing of events
// while 300 deliveries lay dead (found by an SRE's trial).
func TestOverviewListsDeliveries(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			ctx := context.Background()
			now := f.client.Config().Now()
			tx, err := f.drv.Begin(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"1", "2", "3"} {
				if _, err := tx.OutboxRecord(ctx, &driver.OutboxRecordParams{JobID: 1, Entity: "order", Key: key, Check: "greet",
					Stage: "alert", Event: "order.late", IdempotencyKey: "order/" + key + "/greet/alert", Sinks: []string{"ops"}, Now: now}); err != nil {
					t.Fatal(err)
				}
			}
			must(t, tx.Commit(ctx))
			ds, err := f.drv.DeliveriesClaim(ctx, &driver.DeliveriesClaimParams{Sink: "ops", Now: now, LeaseUntil: now.Add(time.Minute), Server: "web-1", Limit: 2})
			if err != nil || len(ds) != 2 {
				t.Fatalf("claim: %d, %v", len(ds), err)
			}
			for i, state := range []driver.DeliveryState{driver.DeliveryDelivered, driver.DeliveryDead} {
				if _, err := f.drv.DeliveryFinish(ctx, &driver.DeliveryFinishParams{EventID: ds[i].Event.ID, Sink: "ops", Attempt: ds[i].Attempts,
					Lease: ds[i].NextAttemptAt, State: state, Attempts: ds[i].Attempts, Status: 500, Now: now}); err != nil {
					t.Fatal(err)
				}
			}
			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			wantText(t, "sink ops", text(row(t, body, `class="sink" data-sink="ops"`)), "ops 1 1 1")
		})
	}
}
