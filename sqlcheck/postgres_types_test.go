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

// TestColumnsChangedSinceStartArePreparedAgain: the check reads each column
// as the query returned it when it was prepared. A timestamp column retyped
// timestamptz while the servers run would be read in the session's zone,
// its stages firing hours off with no error, and one added under SELECT *
// made every row fail to scan; then both failed their jobs until a
// restart. A migration is routine while servers run: the query is now
// prepared again, the jobs read the columns as they are, and a connection
// that cached the old plan (PostgreSQL's "cached plan must not change
// result type") runs it again instead of failing its job. A change the
// check no longer fits (its anchor retyped text) fails the job saying so.
func TestColumnsChangedSinceStartArePreparedAgain(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`CREATE TABLE norders (id text PRIMARY KEY, placed_at timestamp NOT NULL)`)
	d.exec(`INSERT INTO norders SELECT 'A' || g, '2025-06-01 10:00:00' FROM generate_series(1, 8) g`)
	d.exec(`CREATE TABLE bdue (id text PRIMARY KEY, due_at timestamptz NOT NULL)`)
	d.exec(`INSERT INTO bdue VALUES ('B1', '2025-06-01 10:00:00+00'), ('B2', '2025-06-01 10:00:00+00')`)
	retyped := sqlcheck.Spec{Name: "retyped", Entity: "order", Anchor: "placed_at",
		Query:  `SELECT id AS key, placed_at FROM norders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.late"}, {After: 48 * time.Hour, Event: "order.later"}}}
	star := sqlcheck.Spec{Name: "star", Entity: "order",
		Query:  `SELECT id AS key, * FROM norders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	broken := sqlcheck.Spec{Name: "broken", Entity: "order", Anchor: "due_at",
		Query:  `SELECT id AS key, due_at FROM bdue WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.due"}}}
	e := d.newEngine(retyped, star, broken)
	// Before the migration: the connections that run these prepare and
	// cache the queries as they are.
	hour := 0
	fireOne := func(check, key string) {
		hour++
		slot := epoch.Add(time.Duration(hour) * time.Hour)
		e.schedule(check, key, slot)
		e.fire(slot, slot)
	}
	for _, key := range []string{"A1", "A2", "A3"} {
		fireOne("retyped", key)
		fireOne("star", key)
	}
	fireOne("broken", "B1")
	d.exec(`ALTER TABLE norders ALTER placed_at TYPE timestamptz`)
	d.exec(`ALTER TABLE norders ADD COLUMN note text DEFAULT 'fragile'`)
	d.exec(`ALTER TABLE bdue ALTER due_at TYPE text`)

	var placed time.Time
	if err := d.pg.Pool().QueryRow(d.ctx, `SELECT placed_at FROM norders WHERE id = 'A4'`).Scan(&placed); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"A4", "A5", "A6"} {
		fireOne("retyped", key)
		if want := placed.Add(48 * time.Hour); !e.next("retyped", key).Equal(want) {
			recs, _ := e.client.History(e.ctx, history.Filter{Entity: "order", Key: key, Check: "retyped"})
			t.Errorf("retyped %s: next check %s, want %s (placed_at as PostgreSQL reads it now, + 48h); history %v",
				key, e.next("retyped", key), want, recs)
		}
		fireOne("star", key)
		if r := e.finished("star", key); r.Outcome != history.Done || r.LastError != "" {
			t.Errorf("star %s: %s with error %q; want done, read with the column added", key, r.Outcome, r.LastError)
		}
	}
	if evs := d.events("retyped"); len(evs) != 6 {
		t.Errorf("retyped raised %v; want order.late for each of A1-A6", evs)
	}
	seen := d.events("star")
	if len(seen) != 6 || !strings.Contains(seen[5].Payload, `"note":"fragile"`) {
		t.Errorf("star raised %v; want order.seen for each of A1-A6, the last with the added column in its payload", seen)
	}

	fireOne("broken", "B2")
	r := e.finished("broken", "B2")
	if r.Outcome != history.Failed || !strings.Contains(r.LastError, "its column due_at is no longer of type timestamp with time zone") ||
		!strings.Contains(r.LastError, "no longer fits its columns") || !strings.Contains(r.LastError, "not a point in time") {
		t.Errorf("broken B2: %s with error %q; want failed saying the anchor changed and is no longer a time", r.Outcome, r.LastError)
	}
	// Mended, the table is read again with no restart.
	d.exec(`ALTER TABLE bdue ALTER due_at TYPE timestamptz USING due_at::timestamptz`)
	d.exec(`INSERT INTO bdue VALUES ('B3', '2025-06-01 10:00:00+00')`)
	fireOne("broken", "B3")
	if r := e.finished("broken", "B3"); r.Outcome != history.Done || r.LastError != "" {
		t.Errorf("broken B3, after the table was mended: %s with error %q; want done", r.Outcome, r.LastError)
	}
	if evs := d.events("broken"); len(evs) != 2 || evs[1].Key != "B3" {
		t.Errorf("broken raised %v; want order.due for B1 and B3 (B2's anchor was no longer a time)", evs)
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
