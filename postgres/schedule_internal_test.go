package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
)

// readScheduled matches an upsert's rows to its params without a string per
// row while they come back in input order, and by identity when they do not;
// a row that matches no params is an error. Rows from a real query, in an
// order of its own.
func TestReadScheduledMatchesRowsInAnyOrder(t *testing.T) {
	url, _ := pgtest.Schema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	now := time.Date(2026, 3, 10, 9, 0, 0, 123456789, time.UTC)
	params := []*driver.JobScheduleParams{
		{Entity: "order", Key: "1", Check: "c", At: now.Add(time.Hour), Now: now},
		{Entity: "order", Key: "2", Check: "c", At: now.Add(time.Hour), Now: now},
		{Entity: "order", Key: "3", Check: "c", At: now.Add(time.Hour), Now: now},
	}
	idx := []int{0, 1, 2}
	for _, order := range []string{"ASC", "DESC"} {
		rows, err := conn.Query(ctx, `SELECT id, 'order'::text, k, 'c'::text, p::jsonb, ins
			FROM (VALUES (11::bigint, '1', '{"b": 1,  "a": 2}', true), (12, '2', NULL, false), (13, '3', NULL, true)) AS v(id, k, p, ins)
			ORDER BY id `+order)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		results := make([]*driver.JobScheduleResult, len(params))
		updated, err := readScheduled(rows, params, idx, results)
		if err != nil {
			t.Fatalf("%s: read: %v", order, err)
		}
		if len(updated) != 1 || updated[12] != 1 || results[1] != nil {
			t.Errorf("%s: updated %v, result 1 %+v; want job 12 at index 1 left to read whole", order, updated, results[1])
		}
		for i, id := range map[int]int64{0: 11, 2: 13} {
			r := results[i]
			if r == nil || !r.Inserted || r.Job.ID != id || r.Job.Key != params[i].Key {
				t.Fatalf("%s: result %d %+v, want job %d inserted", order, i, r, id)
			}
			// The database keeps microseconds: so does the job filled in.
			if want := now.Truncate(time.Microsecond); !r.Job.CreatedAt.Equal(want) || !r.Job.UpdatedAt.Equal(want) {
				t.Errorf("%s: result %d created %v updated %v, want %v", order, i, r.Job.CreatedAt, r.Job.UpdatedAt, want)
			}
		}
		if got := string(results[0].Job.Payload); got != `{"a": 2, "b": 1}` {
			t.Errorf("%s: payload %s, want it as jsonb returned it", order, got)
		}
	}
	rows, err := conn.Query(ctx, `SELECT 14::bigint, 'order'::text, '4'::text, 'c'::text, NULL::jsonb, true`)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	_, err = readScheduled(rows, params, idx, make([]*driver.JobScheduleResult, len(params)))
	if err == nil || !strings.Contains(err.Error(), "order/4/c") {
		t.Errorf("a row of a job not given: %v, want an error naming it", err)
	}
}
