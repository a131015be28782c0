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

// TestZonelessEastOfUTC12: wallTime looks for the offsets before
// and after a change 12 hours either side of the wall clock read as UTC,
// not of the instant. East of UTC+12 both lookups fall after a change that
// happened in the hours before: Pacific/Auckland's spring gap (02:30,
// PostgreSQL 14:30Z) and even a plain, valid 02:00 in Pacific/Chatham
// (13:15Z) are read an hour early, and the stage is raised an hour before
// PostgreSQL's own comparison says it is due.
func TestZonelessEastOfUTC12(t *testing.T) {
	for _, tc := range []struct{ zone, placed string }{
		{"Pacific/Auckland", "2023-09-24 02:30"}, // the spring gap
		{"Pacific/Chatham", "2023-09-24 02:00"},  // 45 minutes before its gap: one reading
		{"Pacific/Apia", "2020-09-27 02:00"},     // an hour before its gap (+13 → +14)
	} {
		t.Run(tc.zone, func(t *testing.T) {
			ctx := context.Background()
			url, schema := pgtest.SchemaName(t)
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			st, err := postgres.Open(ctx, url+sep+"timezone="+tc.zone, &postgres.Opts{Schema: schema})
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
			d.exec(`INSERT INTO orders (id, status, placed_at, total) VALUES ('A', 'unshipped', $1::timestamp, 1)`, tc.placed)
			var pgInstant time.Time
			if err := st.Pool().QueryRow(ctx, `SELECT placed_at::timestamptz FROM orders WHERE id = 'A'`).Scan(&pgInstant); err != nil {
				t.Fatal(err)
			}
			// 15 minutes before PostgreSQL's 3h mark: not due yet.
			slot := pgInstant.Add(3*time.Hour - 15*time.Minute).UTC()
			var cronDue bool
			if err := st.Pool().QueryRow(ctx, `SELECT placed_at <= $1::timestamptz - interval '3 hours' FROM orders WHERE id = 'A'`,
				slot).Scan(&cronDue); err != nil || cronDue {
				t.Fatalf("PostgreSQL itself: due at %s: %v, %v (want not due)", slot, cronDue, err)
			}
			e := d.newEngine(ladder(d))
			e.now = slot.Add(-15 * time.Minute)
			e.schedule("unshipped", "A", slot)
			e.fire(slot, slot)
			if evs := d.events("unshipped"); len(evs) != 0 {
				t.Errorf("placed_at %s in %s (PostgreSQL: %s): stage raised at %s, before PostgreSQL's 3h mark %s: %v",
					tc.placed, tc.zone, pgInstant.UTC().Format(time.RFC3339), slot.Format(time.RFC3339),
					pgInstant.Add(3*time.Hour).UTC().Format(time.RFC3339), evs)
			}
		})
	}
}

// TestJSONBNumberKey: the key column is no longer scanned raw when
// it is jsonb, so pgx decodes it with encoding/json: a JSON number passes
// through float64. doc->>'id' (what the query compares with $1) is
// "12345678901234567" or "1.50"; the key read is "12345678901234568" or
// "1.5", and the job fails "not one of the due keys".
func TestJSONBNumberKey(t *testing.T) {
	for _, key := range []string{"12345678901234567", "1.50"} {
		t.Run(key, func(t *testing.T) {
			d := openDB(t, sqlcheck.Postgres)
			d.exec(`CREATE TABLE docs (doc jsonb NOT NULL)`)
			d.exec(`INSERT INTO docs VALUES (('{"id": ` + key + `, "status": "unshipped"}')::jsonb)`)
			spec := sqlcheck.Spec{Name: "jkey", Entity: "order",
				Query:  `SELECT doc->'id' AS key FROM docs WHERE doc->>'id' = ANY($1) AND doc->>'status' = 'unshipped'`,
				Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}}
			e := d.newEngine(spec)
			slot := epoch.Add(time.Hour)
			e.schedule("jkey", key, slot)
			e.fire(slot, slot)
			if r := e.finished("jkey", key); r.Outcome != history.Done || r.LastError != "" {
				t.Errorf("jsonb number key %s: %s with error %q; want done with its stage raised", key, r.Outcome, r.LastError)
			}
		})
	}
}
