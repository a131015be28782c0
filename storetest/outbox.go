package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// record records one event for order key in a processing transaction of its
// own, and returns what OutboxRecord answered.
func record(t *testing.T, h *Harness, key, stage string, sinks []string, now time.Time) bool {
	t.Helper()
	tx := beginProcess(t, h)
	ok, err := tx.OutboxRecord(t.Context(), outboxParams(key, stage, sinks, now))
	if err != nil {
		t.Fatalf("record %s/%s: %v", key, stage, err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return ok
}

func outboxParams(key, stage string, sinks []string, now time.Time) *driver.OutboxRecordParams {
	return &driver.OutboxRecordParams{
		JobID: 7, Entity: "order", Key: key, Check: "unshipped", Stage: stage, Event: "order.unshipped",
		Severity: "warning", Payload: json.RawMessage(`{"n": 1}`),
		IdempotencyKey: "order/" + key + "/unshipped/" + stage, Sinks: sinks, Now: now,
	}
}

func claimDeliveries(t *testing.T, h *Harness, sink string, now time.Time, lease time.Duration, limit int) []*driver.Delivery {
	t.Helper()
	ds, err := h.Store.DeliveriesClaim(t.Context(), &driver.DeliveriesClaimParams{
		Sink: sink, Now: now, LeaseUntil: now.Add(lease), Server: "srv-1", Limit: limit})
	if err != nil {
		t.Fatalf("claim deliveries of %s at %s: %v", sink, now, err)
	}
	return ds
}

func finishDelivery(t *testing.T, h *Harness, p *driver.DeliveryFinishParams) bool {
	t.Helper()
	ok, err := h.Store.DeliveryFinish(t.Context(), p)
	if err != nil {
		t.Fatalf("finish delivery %+v: %v", p, err)
	}
	return ok
}

func keysOf(ds []*driver.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Event.Key + "→" + d.Sink
	}
	return out
}

// An event is recorded in the processing transaction and the check's
// savepoint: once per idempotency key, with a pending delivery per sink due
// at once, undone by RollbackTo and by Rollback.
func testOutboxRecord(t *testing.T, h *Harness) {
	now := at(time.Minute)
	tx := beginProcess(t, h)
	ctx := t.Context()
	for i, want := range []bool{true, false} {
		ok, err := tx.OutboxRecord(ctx, outboxParams("1", "alert", []string{"ops", "audit"}, now))
		if err != nil || ok != want {
			t.Fatalf("record #%d: %v, %v; want %v", i+1, ok, err, want)
		}
	}
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := tx.OutboxRecord(ctx, outboxParams("2", "alert", []string{"ops"}, now)); err != nil || !ok {
		t.Fatalf("record in a savepoint: %v, %v", ok, err)
	}
	if err := tx.RollbackTo(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx = beginProcess(t, h)
	if ok, err := tx.OutboxRecord(ctx, outboxParams("3", "alert", []string{"ops"}, now)); err != nil || !ok {
		t.Fatalf("record in a transaction rolled back: %v, %v", ok, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Committed elsewhere, the key is refused; a savepoint rolled back and
	// a transaction rolled back left theirs free.
	if record(t, h, "1", "alert", nil, now) {
		t.Error("an idempotency key committed before was recorded again")
	}
	if !record(t, h, "2", "alert", nil, now) || !record(t, h, "3", "alert", []string{"ops"}, now) {
		t.Error("a key whose recording was rolled back was refused")
	}
	ds, err := h.Store.DeliveryList(ctx, &driver.DeliveryListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(ds), []string{"3→ops", "1→audit", "1→ops"}; !slices.Equal(got, want) {
		t.Fatalf("deliveries %v, want %v (newest event first, then by sink)", got, want)
	}
	var d diff
	e := ds[2].Event
	d.val("State", ds[2].State, driver.DeliveryPending)
	d.val("Attempts", ds[2].Attempts, 0)
	d.time("NextAttemptAt", ds[2].NextAttemptAt, now)
	d.val("IdempotencyKey", e.IdempotencyKey, "order/1/unshipped/alert")
	d.val("Event", e.Event, "order.unshipped")
	d.val("Stage", e.Stage, "alert")
	d.val("Severity", e.Severity, "warning")
	d.val("Entity/Key/Check", e.Entity+"/"+e.Key+"/"+e.Check, "order/1/unshipped")
	d.val("JobID", e.JobID, int64(7))
	d.time("CreatedAt", e.CreatedAt, now)
	var p map[string]int
	if err := json.Unmarshal(e.Payload, &p); err != nil || p["n"] != 1 {
		t.Errorf("payload %s: %v", e.Payload, err)
	}
	d.check(t, "delivery")
}

// A claim takes the due deliveries of one sink, soonest first, adding an
// attempt and a lease: until the lease ends they are not due again. A
// result is recorded only by the attempt the claim started: once another
// claim took the delivery (the lease ran out), the old attempt's result is
// refused.
func testDeliveryLease(t *testing.T, h *Harness) {
	now := at(time.Minute)
	record(t, h, "1", "alert", []string{"ops", "audit"}, now)
	record(t, h, "2", "alert", []string{"ops"}, now.Add(time.Second))
	record(t, h, "3", "alert", []string{"ops"}, now.Add(time.Hour)) // not due yet

	later := now.Add(2 * time.Second)
	first := claimDeliveries(t, h, "ops", later, 30*time.Second, 10)
	if got := keysOf(first); !slices.Equal(got, []string{"1→ops", "2→ops"}) {
		t.Fatalf("claimed %v, want the due deliveries of ops: 1 and 2", got)
	}
	for _, d := range first {
		if d.Attempts != 1 || !d.NextAttemptAt.Equal(later.Add(30*time.Second)) || d.LeaseOwner != "srv-1" {
			t.Errorf("claimed %s: %d attempts, next %s, owner %q; want 1, the lease's end, srv-1", d.Event.Key, d.Attempts, d.NextAttemptAt, d.LeaseOwner)
		}
	}
	if again := claimDeliveries(t, h, "ops", later.Add(29*time.Second), 30*time.Second, 10); len(again) != 0 {
		t.Fatalf("claimed %v again before the lease ended", keysOf(again))
	}
	// The lease of 2 runs out: another claim takes it.
	expired := later.Add(30 * time.Second)
	second := claimDeliveries(t, h, "ops", expired, 30*time.Second, 1)
	if len(second) != 1 || second[0].Event.Key != "1" || second[0].Attempts != 2 {
		t.Fatalf("claimed %v after the lease ended (limit 1), want 1 with 2 attempts", keysOf(second))
	}
	id1 := second[0].Event.ID
	if finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: id1, Sink: "ops", Attempt: 1, Attempts: 1,
		State: driver.DeliveryDelivered, Status: 200, Now: expired}) {
		t.Error("the result of an attempt whose lease was taken over was recorded")
	}
	if !finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: id1, Sink: "ops", Attempt: 2, Attempts: 2,
		State: driver.DeliveryDelivered, Status: 204, Now: expired.Add(time.Second)}) {
		t.Fatal("the result of the attempt under way was refused")
	}
	if finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: id1, Sink: "ops", Attempt: 2, Attempts: 2,
		State: driver.DeliveryDead, Err: "late", Now: expired.Add(time.Second)}) {
		t.Error("a delivered delivery took a second result")
	}
	// 2: a retry a minute later, then dead.
	id2 := first[1].Event.ID
	retryAt := expired.Add(time.Minute)
	if !finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: id2, Sink: "ops", Attempt: 1, Attempts: 1,
		State: driver.DeliveryPending, NextAttemptAt: retryAt, Status: 503, Err: "HTTP 503", Now: expired}) {
		t.Fatal("a retry was refused")
	}
	if ds := claimDeliveries(t, h, "ops", retryAt.Add(-time.Microsecond), time.Minute, 10); len(ds) != 0 {
		t.Fatalf("claimed %v before the retry was due", keysOf(ds))
	}
	retried := claimDeliveries(t, h, "ops", retryAt, time.Minute, 10)
	if len(retried) != 1 || retried[0].Event.ID != id2 || retried[0].Attempts != 2 || retried[0].LastStatus != 503 || retried[0].LastError != "HTTP 503" {
		t.Fatalf("retried %+v, want 2 with its second attempt and the first's status and error", retried)
	}
	if !finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: id2, Sink: "ops", Attempt: 2, Attempts: 2,
		State: driver.DeliveryDead, Err: "timeout", Now: retryAt.Add(time.Second)}) {
		t.Fatal("dead was refused")
	}
	// An attempt given back at shutdown does not count.
	audit := claimDeliveries(t, h, "audit", expired, time.Minute, 10)
	if len(audit) != 1 {
		t.Fatalf("claimed %v of audit, want 1", keysOf(audit))
	}
	if !finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: audit[0].Event.ID, Sink: "audit", Attempt: 1, Attempts: 0,
		State: driver.DeliveryPending, NextAttemptAt: expired, Err: "interrupted", Now: expired}) {
		t.Fatal("giving an attempt back was refused")
	}

	ds, err := h.Store.DeliveryList(t.Context(), &driver.DeliveryListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	byKey := make(map[string]*driver.Delivery)
	for _, d := range ds {
		byKey[d.Event.Key+"→"+d.Sink] = d
	}
	var d diff
	d.val("1→ops state", byKey["1→ops"].State, driver.DeliveryDelivered)
	d.val("1→ops status", byKey["1→ops"].LastStatus, 204)
	d.time("1→ops delivered", byKey["1→ops"].DeliveredAt, expired.Add(time.Second))
	d.val("1→ops owner", byKey["1→ops"].LeaseOwner, "")
	d.val("2→ops state", byKey["2→ops"].State, driver.DeliveryDead)
	d.val("2→ops status", byKey["2→ops"].LastStatus, 0)
	d.val("2→ops error", byKey["2→ops"].LastError, "timeout")
	d.val("2→ops attempts", byKey["2→ops"].Attempts, 2)
	d.time("2→ops delivered", byKey["2→ops"].DeliveredAt, time.Time{})
	d.val("1→audit attempts", byKey["1→audit"].Attempts, 0)
	d.val("1→audit state", byKey["1→audit"].State, driver.DeliveryPending)
	d.time("1→audit next", byKey["1→audit"].NextAttemptAt, expired)
	d.check(t, "deliveries")

	counts, err := h.Store.DeliveryCounts(t.Context(), expired)
	if err != nil {
		t.Fatal(err)
	}
	if c := counts["ops"]; c == nil || *c != (driver.DeliveryCount{Pending: 1, Delivered: 1, Dead: 1}) {
		t.Errorf("counts of ops: %+v, want 1 pending, 1 delivered, 1 dead", c)
	}
	if c := counts["audit"]; c == nil || *c != (driver.DeliveryCount{Pending: 1}) {
		t.Errorf("counts of audit: %+v, want 1 pending", c)
	}
	if counts, err := h.Store.DeliveryCounts(t.Context(), expired.Add(2*time.Second)); err != nil || counts["ops"].Delivered != 0 {
		t.Errorf("deliveries to ops counted since after the delivery: %+v, %v; want none delivered", counts["ops"], err)
	}

	for _, f := range []struct {
		p    driver.DeliveryListParams
		want []string
	}{
		{driver.DeliveryListParams{Sink: "ops", Limit: 10}, []string{"3→ops", "2→ops", "1→ops"}},
		{driver.DeliveryListParams{State: driver.DeliveryDead, Limit: 10}, []string{"2→ops"}},
		{driver.DeliveryListParams{Sink: "ops", State: driver.DeliveryPending, Limit: 10}, []string{"3→ops"}},
		{driver.DeliveryListParams{Limit: 2}, []string{"3→ops", "2→ops"}},
		{driver.DeliveryListParams{BeforeEventID: id2, Limit: 10}, []string{"1→audit", "1→ops"}},
		// A page that ended at event 1's delivery to audit goes on with its
		// delivery to ops.
		{driver.DeliveryListParams{BeforeEventID: id1, AfterSink: "audit", Limit: 10}, []string{"1→ops"}},
		{driver.DeliveryListParams{BeforeEventID: id1, AfterSink: "ops", Limit: 10}, nil},
	} {
		ds, err := h.Store.DeliveryList(t.Context(), &f.p)
		if err != nil {
			t.Fatal(err)
		}
		if got := keysOf(ds); !slices.Equal(got, f.want) {
			t.Errorf("list %+v: %v, want %v", f.p, got, f.want)
		}
	}
}

// Claimers running at once never take the same delivery.
func testDeliveryConcurrentClaims(t *testing.T, h *Harness) {
	now := at(time.Minute)
	const n = 24
	for i := range n {
		record(t, h, fmt.Sprint(i), "alert", []string{"ops"}, now)
	}
	var (
		mu  sync.Mutex
		got = make(map[int64]int)
		wg  sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for {
				ds, err := h.Store.DeliveriesClaim(t.Context(), &driver.DeliveriesClaimParams{
					Sink: "ops", Now: now, LeaseUntil: now.Add(time.Minute), Server: "srv", Limit: 3})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(ds) == 0 {
					return
				}
				mu.Lock()
				for _, d := range ds {
					got[d.Event.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(got) != n {
		t.Errorf("%d deliveries claimed, want %d", len(got), n)
	}
	for id, c := range got {
		if c != 1 {
			t.Errorf("delivery of event %d claimed %d times, want once", id, c)
		}
	}
}

// HistoryPrune takes the events recorded before its time with it, once no
// sink still has to deliver them and their job is no longer pending, in
// batches; an event still pending for a sink, or of a job still pending,
// stays, whatever its age.
func testOutboxPrune(t *testing.T, h *Harness) {
	now := at(time.Minute)
	record(t, h, "pending", "alert", []string{"ops"}, now)
	record(t, h, "delivered", "alert", []string{"ops"}, now.Add(time.Second))
	record(t, h, "dead", "alert", []string{"ops"}, now.Add(2*time.Second))
	record(t, h, "no-sink", "alert", nil, now)
	record(t, h, "newer", "alert", nil, now.Add(time.Hour))
	record(t, h, "job-pending", "alert", nil, now)
	schedule(t, h, "order", "job-pending", "unshipped", slot(100), "")
	later := now.Add(3 * time.Second)
	for _, d := range claimDeliveries(t, h, "ops", later, time.Minute, 10) {
		switch d.Event.Key {
		case "delivered":
			finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: d.Event.ID, Sink: "ops", Attempt: 1, Attempts: 1,
				State: driver.DeliveryDelivered, Status: 200, Now: later})
		case "dead":
			finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: d.Event.ID, Sink: "ops", Attempt: 1, Attempts: 1,
				State: driver.DeliveryDead, Status: 500, Err: "HTTP 500", Now: later})
		}
	}
	if h.SetPruneBatch != nil {
		h.SetPruneBatch(1) // the three prunable events go in three batches
	}
	if _, err := h.Store.HistoryPrune(t.Context(), now.Add(time.Minute)); err != nil {
		t.Fatalf("prune: %v", err)
	}
	var left []string
	for _, k := range []string{"pending", "delivered", "dead", "no-sink", "newer", "job-pending"} {
		n, err := h.QueryInt(t.Context(), `SELECT count(*) FROM prescient_outbox WHERE entity_key = $1`, k)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			left = append(left, k)
		}
	}
	if !slices.Equal(left, []string{"pending", "newer", "job-pending"}) {
		t.Errorf("events left after the prune: %v, want the one still pending, the newer one and the pending job's", left)
	}
	if n, err := h.QueryInt(t.Context(), `SELECT count(*) FROM prescient_deliveries`); err != nil || n != 1 {
		t.Errorf("deliveries left: %d, %v; want 1 (the pending one)", n, err)
	}
}

// testDeliveriesRetry: dead deliveries are queued again, of one sink or
// every sink, of one event or all, and nothing but dead ones: pending, with
// no attempts, due at once, their last status and error kept.
func testDeliveriesRetry(t *testing.T, h *Harness) {
	now := at(time.Minute)
	for _, k := range []string{"1", "2", "3"} {
		record(t, h, k, "alert", []string{"ops", "audit"}, now)
	}
	kill := func(sink string, keep int) {
		t.Helper()
		for i, d := range claimDeliveries(t, h, sink, now, time.Minute, 10) {
			state := driver.DeliveryDead
			if i >= 3-keep {
				state = driver.DeliveryDelivered
			}
			if !finishDelivery(t, h, &driver.DeliveryFinishParams{EventID: d.Event.ID, Sink: sink, Attempt: 1, Attempts: 1,
				State: state, Status: 500, Err: "receiver down", Now: now}) {
				t.Fatalf("finish %s→%s refused", d.Event.Key, sink)
			}
		}
	}
	kill("ops", 1)   // 1 and 2 dead, 3 delivered
	kill("audit", 0) // all dead
	ids := map[string]int64{}
	all, err := h.Store.DeliveryList(t.Context(), &driver.DeliveryListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range all {
		ids[d.Event.Key] = d.Event.ID
	}

	later := now.Add(time.Hour)
	retry := func(p driver.DeliveriesRetryParams, want int) {
		t.Helper()
		p.Now = later
		n, err := h.Store.DeliveriesRetry(t.Context(), &p)
		if err != nil || n != want {
			t.Fatalf("retry %+v = %d, %v; want %d", p, n, err, want)
		}
	}
	retry(driver.DeliveriesRetryParams{Sink: "ops", EventID: ids["2"]}, 1)
	retry(driver.DeliveriesRetryParams{Sink: "ops", EventID: ids["3"]}, 0) // delivered: left alone
	retry(driver.DeliveriesRetryParams{Sink: "nowhere"}, 0)
	retry(driver.DeliveriesRetryParams{Sink: "ops"}, 1)
	retry(driver.DeliveriesRetryParams{}, 3)
	retry(driver.DeliveriesRetryParams{}, 0)

	counts, err := h.Store.DeliveryCounts(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	if c := counts["ops"]; c == nil || *c != (driver.DeliveryCount{Pending: 2, Delivered: 1}) {
		t.Errorf("ops after retries: %+v, want 2 pending, 1 delivered", c)
	}
	if c := counts["audit"]; c == nil || *c != (driver.DeliveryCount{Pending: 3}) {
		t.Errorf("audit after retries: %+v, want 3 pending", c)
	}
	ds := claimDeliveries(t, h, "ops", later, time.Minute, 10)
	if got := keysOf(ds); !slices.Equal(got, []string{"1→ops", "2→ops"}) {
		t.Fatalf("claimed %v of ops once due again, want 1 and 2", got)
	}
	for _, d := range ds {
		if d.Attempts != 1 || d.LastStatus != 500 || d.LastError != "receiver down" {
			t.Errorf("%s→ops claimed again: %d attempts, last %d %q; want its first attempt again, the dead one's status and error kept",
				d.Event.Key, d.Attempts, d.LastStatus, d.LastError)
		}
	}
}
