package prescient_test

// Events raised through Job.Emit follow the exactly-once rule of the
// processing protocol (execute.go): recorded with the check's writes, in its
// transaction, or not at all. These tests run on every store.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// emitted records what each run of a check got back from Emit.
type emitted struct {
	mu  sync.Mutex
	got map[string][]bool // key -> Emit's answers, in order
}

func (e *emitted) add(key string, recorded bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.got == nil {
		e.got = make(map[string][]bool)
	}
	e.got[key] = append(e.got[key], recorded)
}

func (e *emitted) of(key string) []bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got[key])
}

// alertEvent is the event the tests' checks raise.
func alertEvent(key string) checks.Event {
	return checks.Event{Name: "order.unshipped", Stage: "alert", Severity: "warning",
		Payload: json.RawMessage(fmt.Sprintf(`{"order": %q}`, key))}
}

// eventsOf counts the outbox rows and the deliveries of order key.
func eventsOf(h *harness, key string) (events, deliveries int) {
	return h.count("SELECT * FROM prescient_outbox WHERE entity = 'order' AND entity_key = $1", key),
		h.count(`SELECT * FROM prescient_deliveries d JOIN prescient_outbox o ON o.id = d.event_id
			WHERE o.entity = 'order' AND o.entity_key = $1`, key)
}

// A check that emits and then fails (an error, a panic, an overrun) records
// no event; the checks of its group that succeed record theirs exactly
// once, although in an optimistic group those before the failure run twice.
// With a savepoint per check from the start nothing runs twice, and the
// outcome is the same.
func TestEmitThenFailRecordsNothing(t *testing.T) {
	for _, savepoints := range []bool{false, true} {
		t.Run(fmt.Sprintf("savepoint_every_check=%v", savepoints), func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) {
				clk := newClock("2026-03-10T10:00:00Z")
				release := make(chan struct{})
				defer close(release)
				got := &emitted{}
				rec := &calls{}
				check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
					rec.add(j)
					ok, err := j.Emit(ctx, alertEvent(j.Key))
					if err != nil {
						return time.Time{}, err
					}
					got.add(j.Key, ok)
					switch j.Key {
					case "errors":
						return time.Time{}, errors.New("lookup failed")
					case "panics":
						panic("boom")
					case "overruns":
						<-release // ignores its context: abandoned past its guard
					}
					return time.Time{}, nil
				}
				// The guard is long enough for a check on a busy machine; only
				// "overruns" reaches it.
				opts := &checks.Opts{Sinks: []string{"ops", "audit"}, Guards: guards.Limits{Runtime: 2 * time.Second}}
				c := h.client(clk, register(t, "c", check, opts), func(c *prescient.Config) {
					oneGroup(c)
					c.SavepointEveryCheck = savepoints
				})
				keys := []string{"ok-1", "errors", "ok-2", "panics", "overruns", "ok-3"}
				for _, k := range keys {
					schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
				}
				clk.Set("2026-03-10T10:15:00Z")
				r := fire(t, c, "2026-03-10T10:15:00Z")
				if r.Checked != 6 || r.Failures != 3 || r.Outcomes[history.Done] != 3 {
					var why []string
					for _, k := range keys {
						if j, err := c.Job(context.Background(), "order", k, "c"); err == nil {
							why = append(why, k+": "+j.LastError)
						}
					}
					t.Errorf("slot record %+v, want 6 checked: 3 failures, 3 done; failures: %q", r, why)
				}
				for _, k := range []string{"errors", "panics", "overruns"} {
					if ev, ds := eventsOf(h, k); ev != 0 || ds != 0 {
						t.Errorf("%s: %d events and %d deliveries committed from a failed check, want none", k, ev, ds)
					}
				}
				for _, k := range []string{"ok-1", "ok-2", "ok-3"} {
					if ev, ds := eventsOf(h, k); ev != 1 || ds != 2 {
						t.Errorf("%s: %d events and %d deliveries, want exactly 1 event delivered to 2 sinks", k, ev, ds)
					}
					// Every run of a check that succeeded recorded its event:
					// a run that was rolled back left nothing that made the
					// next one see the stage as raised.
					if answers := got.of(k); len(answers) == 0 || slices.Contains(answers, false) {
						t.Errorf("%s: Emit answered %v over its runs, want true each time", k, answers)
					}
				}
				if !savepoints && len(rec.of("ok-1")) != 2 {
					// The optimistic group ran again after the first failure:
					// the case under test, where events could be recorded twice.
					t.Errorf("ok-1 ran %d times, want 2 (once more after the group's first failure)", len(rec.of("ok-1")))
				}
				if savepoints && len(rec.of("ok-1")) != 1 {
					t.Errorf("ok-1 ran %d times with a savepoint per check, want 1", len(rec.of("ok-1")))
				}
				if n := h.count("SELECT * FROM prescient_outbox"); n != 3 {
					t.Errorf("%d events in the outbox, want 3", n)
				}
			})
		})
	}
}

// When the group's transaction dies under the checks, their events die with
// it; the jobs stay due and, fired again, record each event once.
func TestEmitDiesWithTheTransaction(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var broke sync.Once
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if _, err := j.Emit(ctx, alertEvent(j.Key)); err != nil {
				return time.Time{}, err
			}
			if j.Key == "breaks" {
				broke.Do(func() { breakTx(ctx, h, j) })
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, &checks.Opts{Sinks: []string{"ops"}}), oneGroup)
		for _, k := range []string{"ok", "breaks"} {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		if _, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z")); err == nil {
			t.Fatal("fire with the transaction dying: no error")
		}
		if n := h.count("SELECT * FROM prescient_outbox"); n != 0 {
			t.Fatalf("%d events committed from a transaction that died", n)
		}
		fire(t, c, "2026-03-10T10:15:00Z")
		for _, k := range []string{"ok", "breaks"} {
			wantOutcome(t, c, k, history.Done, 1)
			if ev, ds := eventsOf(h, k); ev != 1 || ds != 1 {
				t.Errorf("%s: %d events, %d deliveries after the slot fired again, want 1 and 1", k, ev, ds)
			}
		}
	})
}

// Emit records the event with one pending delivery per distinct sink of the
// check's Opts.Sinks, due at once; the same stage of the same job is raised
// once however often the check runs, another stage is a new event.
func TestEmitWithSinksCreatesDeliveries(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		got := &emitted{}
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			// Every check raises "alert"; the second also "escalation".
			ok, err := j.Emit(ctx, alertEvent(j.Key))
			if err != nil {
				return time.Time{}, err
			}
			got.add("alert", ok)
			if j.CheckCount == 0 {
				return j.Slot.Add(15 * time.Minute), nil
			}
			ok, err = j.Emit(ctx, checks.Event{Name: "order.unshipped.escalated", Severity: "critical"})
			if err != nil {
				return time.Time{}, err
			}
			got.add("escalation", ok)
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "order_unshipped", check, &checks.Opts{Sinks: []string{"ops", "audit", "ops"}}), nil)
		if _, err := c.Schedule(context.Background(), prescient.ScheduleParams{Entity: "order", Key: "42 / b", Check: "order_unshipped", At: ts("2026-03-10T10:15:00Z")}); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:15:07Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		ds, err := c.Deliveries(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 2 {
			t.Fatalf("%d deliveries after the first check, want 2 (ops and audit, once each): %+v", len(ds), ds)
		}
		sinks := []string{ds[0].Sink, ds[1].Sink}
		slices.Sort(sinks)
		if !slices.Equal(sinks, []string{"audit", "ops"}) {
			t.Errorf("deliveries to %v, want audit and ops", sinks)
		}
		job := wantPending(t, c, "42 / b", "order_unshipped")
		for _, d := range ds {
			e := d.Event
			if d.State != prescient.DeliveryPending || d.Attempts != 0 || !d.NextAttemptAt.Equal(ts("2026-03-10T10:15:07Z")) {
				t.Errorf("delivery to %s: state %s, %d attempts, next %s; want pending, 0, due when the check ran", d.Sink, d.State, d.Attempts, d.NextAttemptAt)
			}
			if e.IdempotencyKey != "order/42 / b/order_unshipped/alert" || e.Event != "order.unshipped" || e.Stage != "alert" ||
				e.Severity != "warning" || e.Entity != "order" || e.Key != "42 / b" || e.Check != "order_unshipped" ||
				e.JobID != job.ID || !e.CreatedAt.Equal(ts("2026-03-10T10:15:07Z")) {
				t.Errorf("event %+v, want alert of order 42 / b raised at 10:15:07", e)
			}
			var p map[string]string
			if err := json.Unmarshal(e.Payload, &p); err != nil || p["order"] != "42 / b" {
				t.Errorf("payload %s (%v), want {\"order\": \"42 / b\"}", e.Payload, err)
			}
		}

		clk.Set("2026-03-10T10:30:00Z")
		fire(t, c, "2026-03-10T10:30:00Z")
		wantOutcome(t, c, "42 / b", history.Done, 2)
		if a, e := got.of("alert"), got.of("escalation"); !slices.Equal(a, []bool{true, false}) || !slices.Equal(e, []bool{true}) {
			t.Errorf("Emit answered %v for alert and %v for escalation, want [true false] and [true]", a, e)
		}
		if n := h.count("SELECT * FROM prescient_outbox"); n != 2 {
			t.Errorf("%d events, want 2 (alert once, escalation once)", n)
		}
		if n := h.count("SELECT * FROM prescient_deliveries"); n != 4 {
			t.Errorf("%d deliveries, want 4 (two events to two sinks)", n)
		}
		esc, err := c.Deliveries(context.Background(), &prescient.DeliveriesParams{Sink: "ops", Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(esc) != 1 || esc[0].Event.IdempotencyKey != "order/42 / b/order_unshipped/order.unshipped.escalated" || esc[0].Event.Severity != "critical" {
			t.Errorf("newest delivery to ops: %+v, want the escalation, its stage defaulting to its name", esc)
		}
		st, err := c.Status(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"ops", "audit"} {
			if n := st.Deliveries[s]; n == nil || n.Pending != 2 || n.Delivered != 0 || n.Dead != 0 {
				t.Errorf("status of sink %s: %+v, want 2 pending", s, n)
			}
		}
	})
}

// A batch check emits for each of its jobs; a check without sinks records
// its events with no delivery; Emit refuses a job the call was not handed,
// a bad event, and use after the check returned.
func TestEmitBatchAndMisuse(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var (
			mu     sync.Mutex
			kept   *checks.Job
			errs   = map[string]error{}
			stored = &checks.Job{Entity: "order", Key: "x", Check: "b"}
		)
		batch := func(ctx context.Context, jobs []*checks.Job) ([]checks.Result, error) {
			for _, j := range jobs {
				if _, err := j.Emit(ctx, alertEvent(j.Key)); err != nil {
					return nil, err
				}
			}
			mu.Lock()
			defer mu.Unlock()
			_, errs["foreign"] = jobs[0].Outbox.Emit(ctx, stored, alertEvent("x"))
			_, errs["bad name"] = jobs[0].Emit(ctx, checks.Event{Name: "no spaces allowed"})
			_, errs["bad payload"] = jobs[0].Emit(ctx, checks.Event{Name: "e", Payload: json.RawMessage(`{`)})
			_, errs["severity"] = jobs[0].Outbox.Emit(ctx, jobs[0], checks.Event{Name: "e", Stage: "s", Severity: strings.Repeat("x", 101)})
			kept = jobs[0]
			return make([]checks.Result, len(jobs)), nil
		}
		reg := &checks.Registry{}
		if err := reg.RegisterBatch("b", batch, nil); err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, nil)
		for _, k := range []string{"1", "2", "3"} {
			schedule(t, c, k, "b", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		for _, k := range []string{"1", "2", "3"} {
			wantOutcome(t, c, k, history.Done, 1)
			if ev, ds := eventsOf(h, k); ev != 1 || ds != 0 {
				t.Errorf("%s: %d events, %d deliveries; want 1 event and no delivery (the check has no sinks)", k, ev, ds)
			}
		}
		for what, err := range errs {
			if err == nil {
				t.Errorf("Emit with a %s: no error", what)
			}
		}
		if _, err := kept.Emit(context.Background(), checks.Event{Name: "late"}); err == nil {
			t.Error("Emit after the check returned: no error")
		}
		if _, err := (&checks.Job{}).Emit(context.Background(), checks.Event{Name: "e"}); !errors.Is(err, checks.ErrNoOutbox) {
			t.Errorf("Emit on a job built by hand: %v, want ErrNoOutbox", err)
		}
		if n := h.count("SELECT * FROM prescient_outbox"); n != 3 {
			t.Errorf("%d events, want the batch's 3 only", n)
		}
	})
}
