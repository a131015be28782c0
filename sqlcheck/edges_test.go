package sqlcheck_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// TestJSONBKey: a key column that is jsonb (doc->'id', the id of a
// document table) read as the key before 55b58f9 (decoded: "A1" → A1);
// now it is scanned as a json.RawMessage, which keyText does not know, and
// fmt.Sprint makes it "[34 65 49 34]": every job fails "not one of the due
// keys".
func TestJSONBKey(t *testing.T) {
	d := openDB(t, sqlcheck.Postgres)
	d.exec(`CREATE TABLE docs (doc jsonb NOT NULL)`)
	d.exec(`INSERT INTO docs VALUES ('{"id": "A1", "status": "unshipped"}')`)
	spec := sqlcheck.Spec{Name: "jkey", Entity: "order",
		Query:  `SELECT doc->'id' AS key FROM docs WHERE doc->>'id' = ANY($1) AND doc->>'status' = 'unshipped'`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
	e := d.newEngine(spec)
	slot := epoch.Add(time.Hour)
	e.schedule("jkey", "A1", slot)
	e.fire(slot, slot)
	if r := e.finished("jkey", "A1"); r.Outcome != history.Done || r.LastError != "" {
		t.Errorf("jsonb key \"A1\": %s with error %q; want done with its stage raised", r.Outcome, r.LastError)
	}
}

// TestZonelessAmbiguousHour: in America/New_York, 2024-11-03 01:30
// happens twice; PostgreSQL reads a timestamp without time zone there as
// standard time (06:30Z), and in the spring gap (02:30) with the offset
// before the jump (07:30Z). time.Date picks the other offset in both cases
// for a zone west of UTC, so the check fires the stage an hour before
// PostgreSQL's own comparison says it is due.
func TestZonelessAmbiguousHour(t *testing.T) {
	for _, tc := range []struct{ name, placed string }{
		{"fall-back", "2024-11-03 01:30"},
		{"spring-gap", "2024-03-10 02:30"},
	} {
		t.Run(tc.name, func(t *testing.T) { zonelessNotEarly(t, "America/New_York", tc.placed) })
	}
}

// openDBInZone opens a PostgreSQL store whose sessions' TimeZone is zone,
// with the orders table, in a schema of the test's own.
func openDBInZone(t *testing.T, zone string) *db {
	t.Helper()
	ctx := context.Background()
	url, schema := pgtest.SchemaName(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	st, err := postgres.Open(ctx, url+sep+"timezone="+zone, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	d := &db{t: t, ctx: ctx, kind: sqlcheck.Postgres, store: st, pg: st}
	if d.prepare, err = sqlcheck.ForStore(st); err != nil {
		t.Fatal(err)
	}
	d.exec(ordersDDL)
	return d
}

// zonelessNotEarly checks that an order placed at the wall clock placed (a
// timestamp without time zone) in zone does not raise its 3h stage in the
// slot 15 minutes before PostgreSQL's own reading says it is due.
func zonelessNotEarly(t *testing.T, zone, placed string) {
	d := openDBInZone(t, zone)
	d.exec(`INSERT INTO orders (id, status, placed_at, total) VALUES ('A', 'unshipped', $1::timestamp, 1)`, placed)
	var pgInstant time.Time
	if err := d.pg.Pool().QueryRow(d.ctx, `SELECT placed_at::timestamptz FROM orders WHERE id = 'A'`).Scan(&pgInstant); err != nil {
		t.Fatal(err)
	}
	slot := pgInstant.Add(3*time.Hour - 15*time.Minute).UTC()
	var cronDue bool
	if err := d.pg.Pool().QueryRow(d.ctx, `SELECT placed_at <= $1::timestamptz - interval '3 hours' FROM orders WHERE id = 'A'`,
		slot).Scan(&cronDue); err != nil || cronDue {
		t.Fatalf("PostgreSQL itself: due at %s: %v, %v (want not due)", slot, cronDue, err)
	}
	e := d.newEngine(ladder(d))
	e.now = slot.Add(-15 * time.Minute)
	e.schedule("unshipped", "A", slot)
	e.fire(slot, slot)
	if evs := d.events("unshipped"); len(evs) != 0 {
		t.Errorf("placed_at %s in %s (PostgreSQL: %s): stage raised at %s, before PostgreSQL's 3h mark %s: %v",
			placed, zone, pgInstant.UTC().Format(time.RFC3339), slot.Format(time.RFC3339),
			pgInstant.Add(3*time.Hour).UTC().Format(time.RFC3339), evs)
	}
}
