package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// eventDiff compares every stored field of an event with its deliveries.
func eventDiff(got, want *driver.OutboxEntry) diff {
	var d diff
	g, w := &got.Event, &want.Event
	d.val("ID", g.ID, w.ID)
	d.val("IdempotencyKey", g.IdempotencyKey, w.IdempotencyKey)
	d.val("Event", g.Event, w.Event)
	d.val("Stage", g.Stage, w.Stage)
	d.val("Severity", g.Severity, w.Severity)
	d.val("Entity", g.Entity, w.Entity)
	d.val("Key", g.Key, w.Key)
	d.val("Check", g.Check, w.Check)
	d.val("JobID", g.JobID, w.JobID)
	d.json("Payload", g.Payload, w.Payload)
	d.time("CreatedAt", g.CreatedAt, w.CreatedAt)
	d.val("deliveries", len(got.Deliveries), len(want.Deliveries))
	for i := range min(len(got.Deliveries), len(want.Deliveries)) {
		gd, wd := got.Deliveries[i], want.Deliveries[i]
		p := "delivery " + wd.Sink + ": "
		d.val(p+"Sink", gd.Sink, wd.Sink)
		d.val(p+"Event", gd.Event, (*driver.Event)(nil))
		d.val(p+"State", gd.State, wd.State)
		d.val(p+"Attempts", gd.Attempts, wd.Attempts)
		d.time(p+"NextAttemptAt", gd.NextAttemptAt, wd.NextAttemptAt)
		d.val(p+"LeaseOwner", gd.LeaseOwner, wd.LeaseOwner)
		d.val(p+"LastStatus", gd.LastStatus, wd.LastStatus)
		d.val(p+"LastError", gd.LastError, wd.LastError)
		d.time(p+"DeliveredAt", gd.DeliveredAt, wd.DeliveredAt)
		d.time(p+"UpdatedAt", gd.UpdatedAt, wd.UpdatedAt)
	}
	return d
}

// importEvents are events as another store exported them, out of id order:
// one with a delivery in each state (the pending one leased by a server of
// the source), one with no delivery and no optional field.
func importEvents() []*driver.OutboxEntry {
	return []*driver.OutboxEntry{
		{
			Event: driver.Event{ID: 500, IdempotencyKey: "order/x/unshipped/alert", Event: "order.unshipped", Stage: "alert",
				Severity: "critical", Entity: "order", Key: "x", Check: "unshipped", JobID: 1234,
				Payload: json.RawMessage(`{"amount": 12.5}`), CreatedAt: at(-2*time.Hour + 3*time.Microsecond)},
			Deliveries: []*driver.Delivery{
				{Sink: "audit", State: driver.DeliveryDead, Attempts: 3, NextAttemptAt: at(-time.Hour), LastStatus: 500,
					LastError: "HTTP 500: no", UpdatedAt: at(-time.Hour + 5*time.Microsecond)},
				{Sink: "hook", State: driver.DeliveryPending, Attempts: 2, NextAttemptAt: at(time.Minute), LeaseOwner: "srv-old",
					LastError: "timeout", UpdatedAt: at(-time.Minute)},
				{Sink: "ops", State: driver.DeliveryDelivered, Attempts: 1, NextAttemptAt: at(-2 * time.Hour), LastStatus: 204,
					DeliveredAt: at(-2*time.Hour + time.Second), UpdatedAt: at(-2*time.Hour + time.Second)},
			},
		},
		{
			Event: driver.Event{ID: 400, IdempotencyKey: "user/7/unverified/remind", Event: "user.unverified", Stage: "remind",
				Entity: "user", Key: "7", Check: "unverified", JobID: 99, CreatedAt: at(-3 * time.Hour)},
			Deliveries: []*driver.Delivery{},
		},
	}
}

// exportAllEvents pages through OutboxExport (see exportAll).
func exportAllEvents(t *testing.T, h *Harness, limit int) []*driver.OutboxEntry {
	t.Helper()
	return exportAll(t, "events", limit, func(after int64, limit int) ([]*driver.OutboxEntry, error) {
		return h.Store.OutboxExport(t.Context(), after, limit)
	}, func(en *driver.OutboxEntry) int64 { return en.Event.ID })
}

// Events and their deliveries leave a store as they are and enter another
// as they were, but for leases; an imported event's idempotency key keeps
// its stage from being raised again.
func testCopyOutboxRoundTrip(t *testing.T, h *Harness) {
	ctx := t.Context()
	now := at(0)
	// The store's own: one event delivered to ops and leased to audit, one
	// with no sink.
	record(t, h, "1", "alert", []string{"ops", "audit"}, now)
	record(t, h, "2", "alert", nil, now)
	ops := claimDeliveries(t, h, "ops", now, time.Minute, 10)
	finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: ops[0].Event.ID, Sink: "ops", Attempt: 1, Attempts: 1,
		State: driver.DeliveryDelivered, Status: 200, Now: now.Add(time.Second)})
	claimDeliveries(t, h, "audit", now, time.Minute, 10)
	listed, err := h.Store.DeliveryList(ctx, &driver.DeliveryListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	own := exportAllEvents(t, h, 100)
	if len(own) != 2 || len(own[0].Deliveries) != 2 || len(own[1].Deliveries) != 0 {
		t.Fatalf("export of the store's own events: %+v, want 2 events, with 2 and no deliveries", own)
	}
	for _, d := range own[0].Deliveries {
		for _, l := range listed {
			if l.Sink == d.Sink && l.Event.ID == own[0].Event.ID {
				le := *l
				le.Event = nil
				eventDiff(&driver.OutboxEntry{Event: own[0].Event, Deliveries: []*driver.Delivery{d}},
					&driver.OutboxEntry{Event: *l.Event, Deliveries: []*driver.Delivery{&le}}).check(t, "export against DeliveryList, sink "+d.Sink)
			}
		}
	}

	in := importEvents()
	if err := h.Store.OutboxImport(ctx, nil, in); err != nil {
		t.Fatalf("import: %v", err)
	}
	want := map[int64]*driver.OutboxEntry{}
	for _, en := range append(own, importEvents()...) {
		for _, d := range en.Deliveries {
			if en.Event.ID >= 400 {
				d.LeaseOwner = "" // an attempt under way in the source is not under way here
			}
		}
		want[en.Event.ID] = en
	}
	for _, limit := range []int{1, 2, 100} {
		got := exportAllEvents(t, h, limit)
		if len(got) != len(want) {
			t.Errorf("export, limit %d: %d events, want %d", limit, len(got), len(want))
		}
		for _, g := range got {
			if w, ok := want[g.Event.ID]; ok {
				eventDiff(g, w).check(t, fmt.Sprintf("export of event %d, limit %d", g.Event.ID, limit))
			} else {
				t.Errorf("export, limit %d: event %d was never recorded", limit, g.Event.ID)
			}
		}
	}

	// The imported key holds: the stage is not raised again; a new event
	// takes an id past the imported ones.
	tx := beginProcess(t, h)
	p := outboxParams("x", "alert", []string{"ops"}, now)
	if ok, err := tx.OutboxRecord(ctx, p); err != nil || ok {
		t.Errorf("record %s after its import: %v, %v; want false (raised before)", p.IdempotencyKey, ok, err)
	}
	if ok, err := tx.OutboxRecord(ctx, outboxParams("3", "alert", []string{"ops"}, now)); err != nil || !ok {
		t.Errorf("record a new event: %v, %v", ok, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	all := exportAllEvents(t, h, 100)
	if last := all[len(all)-1]; last.Event.IdempotencyKey != "order/3/unshipped/alert" || last.Event.ID <= 500 {
		t.Errorf("a new event after the import got id %d (%s), want one past 500", last.Event.ID, last.Event.IdempotencyKey)
	}

	if _, err := h.Store.OutboxExport(ctx, 0, 0); err == nil {
		t.Error("export with limit 0: no error")
	}
}

// An import that collides with what the store holds, or that contradicts
// itself, is refused naming the culprit, and writes nothing; one in a
// caller's transaction that rolls back leaves nothing.
func testCopyOutboxImportConflicts(t *testing.T, h *Harness) {
	ctx := t.Context()
	if err := h.Store.OutboxImport(ctx, nil, importEvents()); err != nil {
		t.Fatal(err)
	}
	fresh := func(id int64, key string, ds ...*driver.Delivery) *driver.OutboxEntry {
		return &driver.OutboxEntry{Event: driver.Event{ID: id, IdempotencyKey: key, Event: "e", Stage: "s", Entity: "order",
			Key: "k", Check: "c", JobID: 1, CreatedAt: at(0)}, Deliveries: ds}
	}
	pending := func(sink string) *driver.Delivery {
		return &driver.Delivery{Sink: sink, State: driver.DeliveryPending, NextAttemptAt: at(0), UpdatedAt: at(0)}
	}
	for _, tc := range []struct {
		name    string
		entries []*driver.OutboxEntry
		want    []string
	}{
		{"key already recorded", []*driver.OutboxEntry{fresh(600, "new"), fresh(601, "order/x/unshipped/alert")}, []string{"order/x/unshipped/alert", "already recorded"}},
		{"id already used", []*driver.OutboxEntry{fresh(600, "new"), fresh(400, "other")}, []string{"400", "user/7/unverified/remind"}},
		{"key twice", []*driver.OutboxEntry{fresh(600, "new"), fresh(601, "new")}, []string{"new", "twice"}},
		{"id twice", []*driver.OutboxEntry{fresh(600, "new"), fresh(600, "other")}, []string{"id 600", "twice"}},
		{"id not positive", []*driver.OutboxEntry{fresh(0, "new")}, []string{"new", "positive"}},
		{"unknown state", []*driver.OutboxEntry{fresh(600, "new", &driver.Delivery{Sink: "ops", State: "lost"})}, []string{"new", "ops", `"lost"`}},
		{"sink twice", []*driver.OutboxEntry{fresh(600, "new", pending("ops"), pending("ops"))}, []string{"new", "two deliveries", "ops"}},
	} {
		err := h.Store.OutboxImport(ctx, nil, tc.entries)
		if err == nil {
			t.Errorf("%s: imported", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to name %q", tc.name, err, w)
			}
		}
	}
	if n := len(exportAllEvents(t, h, 100)); n != 2 {
		t.Errorf("after refused imports: %d events, want the 2 imported first", n)
	}

	tx := begin(t, h)
	if err := h.Store.OutboxImport(ctx, tx.Tx, []*driver.OutboxEntry{fresh(700, "in-tx", pending("ops"))}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := len(exportAllEvents(t, h, 100)); n != 2 {
		t.Errorf("after an import rolled back: %d events, want 2", n)
	}
	for _, err := range []error{
		h.Store.OutboxImport(ctx, "not a tx", []*driver.OutboxEntry{fresh(700, "in-tx")}),
		h.Store.OutboxImport(ctx, "not a tx", nil),
	} {
		if !errors.Is(err, driver.ErrTxType) {
			t.Errorf("import with a string for tx: %v, want ErrTxType", err)
		}
	}
}
