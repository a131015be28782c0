package sqlcheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
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
		{"Pacific/Apia", "2011-12-30 23:00"},     // the day Samoa skipped (-10 → +14): a gap of 24 hours
	} {
		t.Run(tc.zone, func(t *testing.T) { zonelessNotEarly(t, tc.zone, tc.placed) })
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

// TestKeyNeverReadableIsNotRetried: a key the query's $1 can never read as
// itself (not an integer in plain decimal form, for bigint[]) failed its job
// like any error, retried max_failures times over hours though the README
// says it fails at once (found by a trial of the SQL API from Python). Such
// a failure is permanent (checks.Permanent): the job ends failed at once.
func TestKeyNeverReadableIsNotRetried(t *testing.T) {
	c, err := sqlcheck.New(sqlcheck.Spec{Name: "intkey", Entity: "order",
		Query:  `SELECT id AS key FROM orders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}},
		&sqlcheck.Statement{Dialect: sqlcheck.Postgres, KeysType: "bigint[]", Columns: []sqlcheck.Column{{Name: "key", Type: "bigint", TypeKnown: true}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Batch(context.Background(), []*checks.Job{{Entity: "order", Key: "x"}, {Entity: "order", Key: "007"}, {Entity: "invoice", Key: "7"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err == nil || !checks.IsPermanent(r.Err) {
			t.Errorf("job %d: error %v; want a permanent failure", i, r.Err)
		}
	}
}
