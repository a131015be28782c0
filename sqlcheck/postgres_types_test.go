package sqlcheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// TestNumericKey: the package documentation says a key column that
// holds a number is compared as its decimal text. A PostgreSQL numeric
// column (numeric(12,0) ids are common) is a number, and its decimal text
// for 1001 is "1001"; the job for order 1001 must raise its stage, not fail
// with "returned key {…}, which is not one of the due keys".
func TestNumericKey(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`CREATE TABLE num_orders (id numeric(12,0) PRIMARY KEY, status text NOT NULL)`)
	d.exec(`INSERT INTO num_orders VALUES (1001, 'unshipped')`)
	spec := sqlcheck.Spec{Name: "numkey", Entity: "order",
		Query:  `SELECT id AS key FROM num_orders WHERE id = ANY($1) AND status = 'unshipped'`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	e := d.newEngine(spec)
	slot := epoch.Add(time.Hour)
	e.schedule("numkey", "1001", slot)
	e.fire(slot, slot)
	r := e.finished("numkey", "1001")
	if r.Outcome != history.Done || r.LastError != "" {
		t.Errorf("numeric key 1001: %s with error %q; want done with its stage raised", r.Outcome, r.LastError)
	}
	if evs := d.events("numkey"); len(evs) != 1 {
		t.Errorf("events %v, want order.seen for 1001", evs)
	}
}

// TestJSONPayloadExact: the payload carries "JSON as itself"
// (jsonValue's documentation); a jsonb column holding an id above 2^53 must
// reach the event as written, not rounded through float64.
func TestJSONPayloadExact(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`ALTER TABLE orders ADD COLUMN meta jsonb`)
	d.order("A", "unshipped", epoch, 1)
	d.exec(`UPDATE orders SET meta = '{"customer_id": 9007199254740993}' WHERE id = 'A'`)
	spec := sqlcheck.Spec{Name: "meta", Entity: "order",
		Query:  `SELECT id AS key, meta FROM orders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	e := d.newEngine(spec)
	slot := epoch.Add(time.Hour)
	e.schedule("meta", "A", slot)
	e.fire(slot, slot)
	var payload string
	if err := d.pg.Pool().QueryRow(d.ctx, `SELECT payload::text FROM prescient_outbox WHERE check_name = 'meta'`).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(payload, "9007199254740993") {
		t.Errorf("payload %s: the jsonb column's customer_id 9007199254740993 was changed on its way to the event", payload)
	}
}

// TestTimestampAnchorInSessionZone: Prepare accepts a timestamp
// (without time zone) anchor. PostgreSQL reads such a value as a point in
// time in the session's TimeZone: it is what `placed_at < now() - interval
// '3 hours'` (the cron the README replaces) compares, and what a column
// written with DEFAULT now() holds. On a database whose TimeZone is
// Europe/Paris, an order placed at 12:00Z holds 14:00; its 3h stage is due
// at 15:00Z, as the cron says, not at 17:00Z.
func TestTimestampAnchorInSessionZone(t *testing.T) {
	d := openDBInZone(t, "Europe/Paris")
	ctx, st := d.ctx, d.pg
	// As the application writes it: placed_at timestamp DEFAULT now(), at 12:00Z.
	d.exec(`INSERT INTO orders (id, status, placed_at, total) VALUES ('A', 'unshipped', $1::timestamptz, 1)`, epoch)
	var cronDue bool
	if err := st.Pool().QueryRow(ctx, `SELECT placed_at <= $1::timestamptz - interval '3 hours' FROM orders WHERE id = 'A'`,
		epoch.Add(3*time.Hour)).Scan(&cronDue); err != nil || !cronDue {
		t.Fatalf("PostgreSQL itself: order A due for its 3h stage at 15:00Z: %v, %v", cronDue, err)
	}
	e := d.newEngine(ladder(d))
	slot := epoch.Add(3 * time.Hour)
	e.schedule("unshipped", "A", slot)
	e.fire(slot, slot)
	if evs := d.events("unshipped"); len(evs) != 1 {
		t.Errorf("events at 15:00Z: %v; want order.unshipped, due by PostgreSQL's own reading of placed_at (next check now %s)",
			evs, e.next("unshipped", "A").Format(time.RFC3339))
	}
}

// TestPaddedKey: a character(n) key comes back padded with blanks, which
// PostgreSQL ignores when it compares (id = ANY($1) matches 'A1'); the check
// must too, or every job fails "not one of the due keys".
func TestPaddedKey(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`CREATE TABLE char_orders (id character(10) PRIMARY KEY, status text NOT NULL)`)
	d.exec(`INSERT INTO char_orders VALUES ('A1', 'unshipped')`)
	spec := sqlcheck.Spec{Name: "charkey", Entity: "order",
		Query:  `SELECT id AS key FROM char_orders WHERE id = ANY($1) AND status = 'unshipped'`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	e := d.newEngine(spec)
	slot := epoch.Add(time.Hour)
	e.schedule("charkey", "A1", slot)
	e.fire(slot, slot)
	if r := e.finished("charkey", "A1"); r.Outcome != history.Done || r.LastError != "" {
		t.Errorf("character(10) key A1: %s with error %q; want done with its stage raised", r.Outcome, r.LastError)
	}
	if evs := d.events("charkey"); len(evs) != 1 {
		t.Errorf("events %v, want order.seen for A1", evs)
	}
}

// TestDateAnchorInSessionZone: a date anchor is, to PostgreSQL, midnight in
// the session's TimeZone (`due_on <= now()` compares it so). On a database
// whose TimeZone is Asia/Tokyo, an invoice due on 2025-06-02 is due at
// 2025-06-01 15:00Z; read as midnight UTC, its stage fired nine hours late.
func TestDateAnchorInSessionZone(t *testing.T) {
	d := openDBInZone(t, "Asia/Tokyo")
	d.exec(`CREATE TABLE invoices (id text PRIMARY KEY, due_on date NOT NULL, status text NOT NULL)`)
	d.exec(`INSERT INTO invoices VALUES ('I1', '2025-06-02', 'open')`)
	slot := time.Date(2025, 6, 1, 15, 0, 0, 0, time.UTC)
	var pgDue bool
	if err := d.pg.Pool().QueryRow(d.ctx, `SELECT due_on <= $1::timestamptz FROM invoices WHERE id = 'I1'`, slot).Scan(&pgDue); err != nil || !pgDue {
		t.Fatalf("PostgreSQL itself: invoice I1 due at %s: %v, %v", slot, pgDue, err)
	}
	e := d.newEngine(sqlcheck.Spec{Name: "overdue", Entity: "order", // the harness schedules orders
		Query:  `SELECT id AS key, due_on FROM invoices WHERE ` + d.due() + ` AND status = 'open'`,
		Anchor: "due_on",
		Stages: []sqlcheck.Stage{{After: 0, Event: "invoice.overdue"}}})
	e.now = slot.Add(-15 * time.Minute)
	e.schedule("overdue", "I1", slot)
	e.fire(slot, slot)
	if evs := d.events("overdue"); len(evs) != 1 {
		t.Errorf("events at %s: %v; want invoice.overdue, due by PostgreSQL's reading of the date (next check %s)",
			slot.Format(time.RFC3339), evs, e.next("overdue", "I1").Format(time.RFC3339))
	}
}

// TestColumnRetypedSinceStartFailsClearly: the check reads each column as
// the query returned it when the server prepared it. A timestamp column
// retyped timestamptz while the server runs would have been read in the
// session's zone, its stages firing hours off with no error; one added
// under SELECT * made every row fail to scan, saying nothing of why. Both
// now fail their jobs saying what changed and that a restart prepares the
// query again, and raise nothing (found by a trial of declared checks).
func TestColumnRetypedSinceStartFailsClearly(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`CREATE TABLE norders (id text PRIMARY KEY, placed_at timestamp NOT NULL)`)
	d.exec(`INSERT INTO norders VALUES ('A', '2030-01-01 00:00:00'), ('B', '2030-01-01 00:00:00')`)
	retyped := sqlcheck.Spec{Name: "retyped", Entity: "order", Anchor: "placed_at",
		Query:  `SELECT id AS key, placed_at FROM norders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.late"}}}
	star := sqlcheck.Spec{Name: "star", Entity: "order",
		Query:  `SELECT id AS key, * FROM norders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	e := d.newEngine(retyped, star)
	d.exec(`ALTER TABLE norders ALTER placed_at TYPE timestamptz`)
	d.exec(`ALTER TABLE norders ADD COLUMN note text`)
	hour := 0
	for _, c := range []struct{ check, key, want string }{
		{"retyped", "A", "its column placed_at is no longer of type timestamp without time zone"},
		{"star", "B", "column(s), and 3 when this server prepared it"},
	} {
		// A connection that ran the query before answers PostgreSQL's
		// "cached plan must not change result type" once, and pgx
		// prepares it again: the next job meets the new columns.
		var r *history.Record
		for i := 0; i < 10; i++ {
			hour++
			slot := epoch.Add(time.Duration(hour) * time.Hour)
			e.schedule(c.check, c.key, slot)
			e.fire(slot, slot)
			r = e.finishedLast(c.check, c.key)
			if !strings.Contains(r.LastError, "cached plan must not change result type") {
				break
			}
		}
		if r.Outcome != history.Failed || !strings.Contains(r.LastError, c.want) || !strings.Contains(r.LastError, "restart the servers") {
			t.Errorf("%s/%s: %s with error %q; want failed saying %q and to restart", c.check, c.key, r.Outcome, r.LastError, c.want)
		}
		if evs := d.events(c.check); len(evs) != 0 {
			t.Errorf("%s raised %v from a result read as it no longer is", c.check, evs)
		}
	}
}

// TestIntegerKeysInTheQuerysForm: with $1 read as bigint[], a key that is
// not an integer in its plain decimal form (007, " 9", +7) fails its job
// saying so, as the query's own key column would give it back another
// key: with 7 due in the same batch, 007 found no row and ended done, no
// event raised (found by a trial of declared checks).
func TestIntegerKeysInTheQuerysForm(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`CREATE TABLE int_orders (id bigint PRIMARY KEY, status text NOT NULL)`)
	d.exec(`INSERT INTO int_orders VALUES (7, 'unshipped'), (9, 'unshipped'), (-5, 'unshipped')`)
	spec := sqlcheck.Spec{Name: "intkey", Entity: "order",
		Query:  `SELECT id AS key FROM int_orders WHERE id = ANY($1) AND status = 'unshipped'`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	e := d.newEngine(spec)
	slot := epoch.Add(time.Hour)
	for _, k := range []string{"7", "007", " 9", "+7", "-5"} {
		e.schedule("intkey", k, slot)
	}
	e.fire(slot, slot)
	for _, k := range []string{"7", "-5"} {
		if r := e.finished("intkey", k); r.Outcome != history.Done || r.LastError != "" {
			t.Errorf("key %q: %s with error %q; want done with its stage raised", k, r.Outcome, r.LastError)
		}
	}
	for _, k := range []string{"007", " 9", "+7"} {
		r := e.finished("intkey", k)
		if r.Outcome != history.Failed || !strings.Contains(r.LastError, "is not an integer written as the query's $1 (bigint[]) writes it back") {
			t.Errorf("key %q: %s with error %q; want failed saying to schedule it in its plain decimal form", k, r.Outcome, r.LastError)
		}
	}
	if evs := d.events("intkey"); len(evs) != 2 {
		t.Errorf("events %v, want order.seen for 7 and -5 only", evs)
	}
}
