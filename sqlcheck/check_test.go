package sqlcheck_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// ladder is the order check of the tests: alert 3h after the order was
// placed, escalate after 24h, carrying placed_at and total.
func ladder(d *db) sqlcheck.Spec {
	return sqlcheck.Spec{
		Name:   "unshipped",
		Entity: "order",
		Query:  `SELECT id AS key, placed_at, total FROM orders WHERE ` + d.due() + ` AND status = 'unshipped'`,
		Anchor: "placed_at",
		Stages: []sqlcheck.Stage{
			{After: 3 * time.Hour, Event: "order.unshipped", Severity: "warning"},
			{After: 24 * time.Hour, Event: "order.unshipped.escalated", Severity: "critical"},
		},
		Awaits: []string{"shipped"},
	}
}

// byKey groups events by key, keeping their order.
func byKey(evs []event) map[string][]string {
	out := make(map[string][]string)
	for _, e := range evs {
		out[e.Key] = append(out[e.Key], e.String())
	}
	return out
}

// TestLadder runs orders through the stages: one that stays unshipped
// raises both, in order; one scheduled before its first stage raises
// nothing until then; one shipped before its alert, one deleted and one
// resolved raise nothing; one shipped between the stages raises the first
// only. Each job's next check is its next stage's time.
func TestLadder(t *testing.T) {
	forStores(t, func(t *testing.T, d *db) {
		e := d.newEngine(ladder(d))
		for _, id := range []string{"A", "B", "C", "D", "F"} {
			d.order(id, "unshipped", epoch, 10)
			e.schedule("unshipped", id, epoch.Add(3*time.Hour))
		}
		d.exec(`INSERT INTO orders (id, status, placed_at) VALUES ('E', 'unshipped', $1)`, epoch.UTC())
		e.schedule("unshipped", "E", epoch.Add(time.Hour)) // before its first stage

		if rec := e.fire(epoch.Add(time.Hour), epoch.Add(time.Hour)); rec.Checked != 1 || rec.Rescheduled != 1 {
			t.Errorf("slot +1h: checked %d, rescheduled %d; want E checked and rescheduled", rec.Checked, rec.Rescheduled)
		}
		if got := d.events("unshipped"); len(got) != 0 {
			t.Errorf("events after the slot before the first stage: %v, want none", got)
		}
		if got, want := e.next("unshipped", "E"), epoch.Add(3*time.Hour); !got.Equal(want) {
			t.Errorf("E's next check after the early slot: %s, want the first stage's time %s", got, want)
		}

		d.exec(`UPDATE orders SET status = 'shipped' WHERE id = 'B'`)
		d.exec(`DELETE FROM orders WHERE id = 'C'`)
		if n, err := e.client.Resolve(e.ctx, "order", "F", "shipped"); err != nil || n != 1 {
			t.Fatalf("resolve F: %d, %v; want 1 settled", n, err)
		}
		if rec := e.fire(epoch.Add(3*time.Hour), epoch.Add(3*time.Hour)); rec.Checked != 5 || rec.Rescheduled != 3 || rec.Outcomes[history.Done] != 2 {
			t.Errorf("slot +3h: checked %d, rescheduled %d, outcomes %v; want 5 checked (A-E), 3 rescheduled (A, D, E), 2 done (B, C)",
				rec.Checked, rec.Rescheduled, rec.Outcomes)
		}
		for _, id := range []string{"A", "D", "E"} {
			if got, want := e.next("unshipped", id), epoch.Add(24*time.Hour); !got.Equal(want) {
				t.Errorf("%s's next check after its alert: %s, want the escalation's time %s", id, got, want)
			}
		}
		d.exec(`UPDATE orders SET status = 'shipped' WHERE id = 'D'`)
		// Firing the alert slot again finds nothing due: nothing is raised twice.
		if rec := e.fire(epoch.Add(3*time.Hour), epoch.Add(3*time.Hour)); rec.Checked != 0 {
			t.Errorf("slot +3h again: checked %d, want 0", rec.Checked)
		}
		e.fire(epoch.Add(24*time.Hour), epoch.Add(24*time.Hour))

		placed := `"placed_at":"2025-06-01T12:00:00Z"`
		want := map[string][]string{
			"A": {
				`A order.unshipped/order.unshipped warning {` + placed + `,"total":10}`,
				`A order.unshipped.escalated/order.unshipped.escalated critical {` + placed + `,"total":10}`,
			},
			"D": {`D order.unshipped/order.unshipped warning {` + placed + `,"total":10}`},
			"E": {
				`E order.unshipped/order.unshipped warning {` + placed + `,"total":null}`,
				`E order.unshipped.escalated/order.unshipped.escalated critical {` + placed + `,"total":null}`,
			},
		}
		if got := byKey(d.events("unshipped")); !reflect.DeepEqual(got, want) {
			t.Errorf("events:\ngot  %q\nwant %q", got, want)
		}
		outcomes := map[string]history.Outcome{"A": history.Done, "B": history.Done, "C": history.Done, "D": history.Done, "E": history.Done, "F": history.Resolved}
		for id, o := range outcomes {
			if r := e.finished("unshipped", id); r.Outcome != o {
				t.Errorf("%s ended %s, want %s", id, r.Outcome, o)
			}
		}
		if r := e.finished("unshipped", "E"); r.CheckCount != 3 {
			t.Errorf("E ran %d checks, want 3 (early, alert, escalation)", r.CheckCount)
		}
	})
}

// TestCatchUp: a server down past both stages raises both, in order. Run
// late in its own slot, the job raises the stage due by that slot and asks
// for the next, already past, which the engine puts in the first slot after
// now; a job whose slot is past both stages (a reslot sweep moved it) raises
// both in one check.
func TestCatchUp(t *testing.T) {
	forStores(t, func(t *testing.T, d *db) {
		e := d.newEngine(ladder(d))
		d.order("A", "unshipped", epoch, 1)
		d.order("B", "unshipped", epoch, 2)
		e.schedule("unshipped", "A", epoch.Add(3*time.Hour))
		e.schedule("unshipped", "B", epoch.Add(25*time.Hour))

		back := epoch.Add(30*time.Hour + 5*time.Minute) // the server comes back
		e.fire(epoch.Add(3*time.Hour), back)
		if got := d.events("unshipped"); len(got) != 1 || got[0].Event != "order.unshipped" {
			t.Fatalf("events after the late alert slot: %v, want A's alert only", got)
		}
		next := e.next("unshipped", "A")
		if want := epoch.Add(30*time.Hour + 15*time.Minute); !next.Equal(want) {
			t.Fatalf("A's next check after a late alert: %s, want the first slot after now, %s", next, want)
		}
		e.fire(next, next)
		e.fire(epoch.Add(25*time.Hour), back.Add(time.Hour))

		want := map[string][]string{
			"A": {`A order.unshipped/order.unshipped warning {"placed_at":"2025-06-01T12:00:00Z","total":1}`,
				`A order.unshipped.escalated/order.unshipped.escalated critical {"placed_at":"2025-06-01T12:00:00Z","total":1}`},
			"B": {`B order.unshipped/order.unshipped warning {"placed_at":"2025-06-01T12:00:00Z","total":2}`,
				`B order.unshipped.escalated/order.unshipped.escalated critical {"placed_at":"2025-06-01T12:00:00Z","total":2}`},
		}
		if got := byKey(d.events("unshipped")); !reflect.DeepEqual(got, want) {
			t.Errorf("events:\ngot  %q\nwant %q", got, want)
		}
		if r := e.finished("unshipped", "A"); r.Outcome != history.Done || r.CheckCount != 2 {
			t.Errorf("A: %s after %d checks, want done after 2", r.Outcome, r.CheckCount)
		}
		if r := e.finished("unshipped", "B"); r.Outcome != history.Done || r.CheckCount != 1 {
			t.Errorf("B: %s after %d checks, want done after 1", r.Outcome, r.CheckCount)
		}
	})
}

// TestFirstCheckAnchor: without an anchor column the stages count from the
// job's first check, and a query with no other column raises events
// without a payload.
func TestFirstCheckAnchor(t *testing.T) {
	forStores(t, func(t *testing.T, d *db) {
		spec := sqlcheck.Spec{
			Name: "pinged", Entity: "order",
			Query: `SELECT id AS key FROM orders WHERE ` + d.due(),
			Stages: []sqlcheck.Stage{
				{After: 0, Event: "order.ping"},
				{After: 2 * time.Hour, Event: "order.ping", Name: "again"},
			},
		}
		e := d.newEngine(spec)
		d.order("A", "unshipped", epoch, 1)
		first := epoch.Add(time.Hour)
		e.schedule("pinged", "A", first)
		e.fire(first, first)
		if got, want := e.next("pinged", "A"), first.Add(2*time.Hour); !got.Equal(want) {
			t.Errorf("next check after the first stage: %s, want first check + 2h, %s", got, want)
		}
		e.fire(first.Add(2*time.Hour), first.Add(2*time.Hour))
		want := []string{"A order.ping/order.ping  ", "A order.ping/again  "}
		var got []string
		for _, ev := range d.events("pinged") {
			got = append(got, ev.String())
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("events: got %q, want %q", got, want)
		}
		if r := e.finished("pinged", "A"); r.Outcome != history.Done {
			t.Errorf("A ended %s, want done", r.Outcome)
		}
	})
}

// TestBadResults: a query that fails, returns a key that was not due,
// returns a key twice or a NULL key, or runs past its runtime guard fails
// its batch, which is retried and then failed, with the query's error in
// history and no event recorded; a NULL anchor or a job of another entity
// fails that job alone.
func TestBadResults(t *testing.T) {
	forStores(t, func(t *testing.T, d *db) {
		d.exec(`CREATE TABLE gone_orders (id text PRIMARY KEY)`)
		spec := func(name, query string) sqlcheck.Spec {
			return sqlcheck.Spec{Name: name, Entity: "order", Query: query,
				Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
		}
		slow := spec("slow", d.q(
			`SELECT id AS key, (SELECT 1 FROM pg_sleep(60)) AS s FROM orders WHERE `+d.due(),
			`SELECT id AS key, (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000000) SELECT count(*) FROM c) AS s
			 FROM orders WHERE `+d.due()))
		slow.Guards.Runtime = 300 * time.Millisecond
		anchored := spec("anchored", `SELECT id AS key, placed_at FROM orders WHERE `+d.due())
		anchored.Anchor = "placed_at"
		e := d.newEngine(
			spec("gone", `SELECT id AS key FROM gone_orders WHERE `+d.due()),
			spec("stranger", `SELECT id AS key FROM orders WHERE `+d.due()+` OR id = 'Z'`),
			spec("twice", `SELECT id AS key FROM orders WHERE `+d.due()+` UNION ALL SELECT id FROM orders WHERE `+d.due()),
			spec("nullkey", `SELECT NULLIF(id, id) AS key FROM orders WHERE `+d.due()),
			slow,
			anchored,
		)
		e.client = withMaxFailures(t, e, 2)
		d.exec(`DROP TABLE gone_orders`)
		d.order("K", "unshipped", epoch, 1)
		d.order("Z", "unshipped", epoch, 1)
		d.order("N", "unshipped", nil, 1)
		slot := epoch.Add(time.Hour)
		for _, c := range []string{"gone", "stranger", "twice", "nullkey", "slow"} {
			e.schedule(c, "K", slot)
		}
		e.schedule("anchored", "N", slot)
		e.schedule("anchored", "K", slot)
		// A job of another entity than the check's: the client refuses to
		// schedule one (ErrWrongEntity), but one may be there from before
		// the check was declared, scheduled for another check of that name.
		if _, err := e.client.Schedule(e.ctx, prescient.ScheduleParams{Entity: "customer", Key: "K", Check: "anchored", At: slot}); !errors.Is(err, prescient.ErrWrongEntity) {
			t.Fatalf("schedule anchored for a customer: %v, want ErrWrongEntity", err)
		}
		if _, err := e.client.Store().Driver().JobSchedule(e.ctx, nil, []*driver.JobScheduleParams{{Entity: "customer", Key: "K", Check: "anchored",
			At: slot, OnConflict: driver.ConflictReplace, Now: epoch}}); err != nil {
			t.Fatal(err)
		}

		e.fire(slot, slot)
		// The first failure is retried: the job stays, with its error.
		j, err := e.client.Job(e.ctx, "order", "K", "gone")
		if err != nil || j.FailureCount != 1 || !strings.Contains(j.LastError, "gone_orders") {
			t.Fatalf("gone after one failure: %+v, %v; want pending with 1 failure and the query's error", j, err)
		}
		retry := j.NextCheckAt
		e.fire(retry, retry)

		want := map[string]string{
			"gone":     "gone_orders",
			"stranger": `returned key "Z", which is not one of the 1 due key(s)`,
			"twice":    `returned key "K" twice`,
			"nullkey":  "NULL key",
			"slow":     "ran past its runtime guard of 300ms",
		}
		for c, msg := range want {
			r := e.finished(c, "K")
			if r.Outcome != history.Failed || !strings.Contains(r.LastError, msg) {
				t.Errorf("%s: %s with error %q; want failed with %q", c, r.Outcome, r.LastError, msg)
			}
			if evs := d.events(c); len(evs) != 0 {
				t.Errorf("%s: events %v recorded by a failed batch", c, evs)
			}
		}
		if r := e.finished("anchored", "N"); r.Outcome != history.Failed || !strings.Contains(r.LastError, "anchor column placed_at of order N: is NULL") {
			t.Errorf("anchored N: %s with error %q; want failed for its NULL anchor", r.Outcome, r.LastError)
		}
		recs, err := e.client.History(e.ctx, history.Filter{Entity: "customer", Check: "anchored"})
		if err != nil || len(recs) != 1 || recs[0].Outcome != history.Failed || !strings.Contains(recs[0].LastError, "watches entity order") {
			t.Errorf("anchored customer K: %+v, %v; want failed for its entity", recs, err)
		}
		// The batch's other job went on.
		if got := d.events("anchored"); len(got) != 1 || got[0].Key != "K" {
			t.Errorf("anchored events: %v, want K's only", got)
		}
	})
}

// withMaxFailures rebuilds e's client with max failures n.
func withMaxFailures(t *testing.T, e *engine, n int) *prescient.Client {
	t.Helper()
	cfg := e.client.Config()
	cfg.MaxFailures = n
	c, err := prescient.NewClient(e.store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBadKeyFailsAlone: a key the query cannot take (it returns another
// spelling of it, or twice) fails its own job; the other jobs of its batch
// raise their events and finish as if it were not there.
func TestBadKeyFailsAlone(t *testing.T) {
	forStores(t, func(t *testing.T, d *db) {
		// "007" comes back as "7" (not a due key) and "dup" twice: both are
		// the query's fault for those keys only.
		spec := sqlcheck.Spec{Name: "picky", Entity: "order",
			Query: d.q(
				`SELECT CASE WHEN id = '007' THEN '7' ELSE id END AS key FROM orders WHERE `+d.due()+
					` UNION ALL SELECT id FROM orders WHERE id = 'dup' AND `+d.due(),
				`SELECT CASE WHEN id = '007' THEN '7' ELSE id END AS key FROM orders WHERE `+d.due()+
					` UNION ALL SELECT id FROM orders WHERE id = 'dup' AND `+d.due()),
			Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
		e := d.newEngine(spec)
		e.client = withMaxFailures(t, e, 1)
		good := []string{"a", "b", "c", "d", "e", "f"}
		for _, k := range append(append([]string{}, good...), "007", "dup") {
			d.order(k, "unshipped", epoch, 1)
		}
		slot := epoch.Add(time.Hour)
		for _, k := range append(append([]string{}, good...), "007", "dup") {
			e.schedule("picky", k, slot)
		}
		e.fire(slot, slot)
		for _, k := range good {
			if r := e.finished("picky", k); r.Outcome != history.Done {
				t.Errorf("%s: %s (%s), want done: a bad key of its batch failed it", k, r.Outcome, r.LastError)
			}
		}
		for k, msg := range map[string]string{"007": `returned key "7"`, "dup": `returned key "dup" twice`} {
			if r := e.finished("picky", k); r.Outcome != history.Failed || !strings.Contains(r.LastError, msg) {
				t.Errorf("%s: %s with %q, want failed with %q", k, r.Outcome, r.LastError, msg)
			}
		}
		if evs := d.events("picky"); len(evs) != len(good) {
			t.Errorf("events %v, want one per good key (%d)", evs, len(good))
		}
	})
}
