package sqlcheck_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// TestPrepareRefuses: what cannot work is refused when the query is
// prepared, on both stores, each as a *FieldError naming the field.
func TestPrepareRefuses(t *testing.T) {
	forStores(t, func(t *testing.T, d *db) {
		d.order("A", "unshipped", epoch, 1)
		tests := []struct {
			name, query, anchor, field, msg string
			pgOnly                          bool
		}{
			{name: "typo in a column", query: `SELECT id AS key, placd_at FROM orders WHERE ` + d.due(), field: "query", msg: "placd_at"},
			{name: "the line of a typo", query: "SELECT id AS key,\n  placd_at\nFROM orders WHERE " + d.due(), field: "query", msg: "at line 2 of the query", pgOnly: true},
			{name: "no such table", query: `SELECT id AS key FROM order_lines WHERE ` + d.due(), field: "query", msg: "order_lines"},
			{name: "no $1", query: `SELECT id AS key FROM orders WHERE status = 'x'`, field: "query", msg: "$1"},
			{name: "a second parameter", query: `SELECT id AS key FROM orders WHERE ` + d.due() + ` AND status = $2`, field: "query", msg: "$2"},
			{name: "$1 not an array", query: `SELECT id AS key FROM orders WHERE id = $1`, field: "query", msg: "not an array", pgOnly: true},
			{name: "writes", query: `DELETE FROM orders WHERE ` + d.due() + ` RETURNING id AS key`, field: "query", msg: "must only read"},
			{name: "rows for no keys", query: `SELECT id AS key FROM orders WHERE ` + d.due() + ` OR status = 'unshipped'`, field: "query", msg: "returned 1 row(s)"},
			{name: "no key column", query: `SELECT id, placed_at FROM orders WHERE ` + d.due(), field: "query", msg: "no column named key (it returns id, placed_at)"},
			{name: "two columns of one name", query: `SELECT id AS key, status AS s, total AS s FROM orders WHERE ` + d.due(), field: "query", msg: `two columns named "s"`},
			{name: "no anchor column", query: `SELECT id AS key, placed_at FROM orders WHERE ` + d.due(), anchor: "shipped_at", field: "anchor", msg: `no column named "shipped_at"`},
			{name: "anchor not a time", query: `SELECT id AS key, status FROM orders WHERE ` + d.due(), anchor: "status", field: "anchor", msg: "text, not a point in time", pgOnly: true},
		}
		// A query written for the other store (a configuration moved from
		// SQLite to PostgreSQL) is told how this one reads $1.
		if d.kind == sqlcheck.Postgres {
			tests = append(tests, struct {
				name, query, anchor, field, msg string
				pgOnly                          bool
			}{name: "SQLite's form", query: `SELECT id AS key FROM orders WHERE id IN (SELECT value FROM json_each($1))`,
				field: "query", msg: "json_each($1) is SQLite's form: on PostgreSQL $1 is an array of the due keys, write WHERE id = ANY($1)"})
		} else {
			tests = append(tests, struct {
				name, query, anchor, field, msg string
				pgOnly                          bool
			}{name: "PostgreSQL's form", query: `SELECT id AS key FROM orders WHERE id = any ( $1 )`,
				field: "query", msg: "ANY($1) is PostgreSQL's form: on SQLite $1 is a JSON array of the due keys"})
		}
		for _, tt := range tests {
			if tt.pgOnly && d.kind != sqlcheck.Postgres {
				continue
			}
			spec := sqlcheck.Spec{Name: "c", Entity: "order", Query: tt.query, Anchor: tt.anchor,
				Stages: []sqlcheck.Stage{{After: time.Hour, Event: "order.late"}}}
			_, err := sqlcheck.Prepare(d.ctx, d.prepare, spec)
			fes := sqlcheck.FieldErrors(err)
			if len(fes) != 1 || fes[0].Field != tt.field || !strings.Contains(fes[0].Error(), tt.msg) {
				t.Errorf("%s: %v; want one error at %s containing %q", tt.name, err, tt.field, tt.msg)
			}
		}
		// The refused DELETE deleted nothing, and the connection it ran on
		// writes again.
		d.order("B", "unshipped", epoch, 2)
		var n int
		if d.pg != nil {
			err := d.pg.Pool().QueryRow(d.ctx, `SELECT count(*) FROM orders`).Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
		} else if err := d.sqlDB.QueryRowContext(d.ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Errorf("orders after the refused DELETE and an insert: %d, want 2", n)
		}
		good := sqlcheck.Spec{Name: "c", Entity: "order", Anchor: "placed_at",
			Query:  `SELECT id AS key, placed_at, total FROM orders WHERE ` + d.due(),
			Stages: []sqlcheck.Stage{{After: time.Hour, Event: "order.late"}}}
		c, err := sqlcheck.Prepare(d.ctx, d.prepare, good)
		if err != nil {
			t.Fatalf("a good query: %v", err)
		}
		var names []string
		for _, col := range c.Columns() {
			names = append(names, col.Name)
		}
		if got := strings.Join(names, ","); got != "key,placed_at,total" {
			t.Errorf("columns: %s", got)
		}
	})
}

// TestPrepareUnreachable: a database that cannot be used is not a
// *FieldError (a caller may try again).
func TestPrepareUnreachable(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	spec := sqlcheck.Spec{Name: "c", Entity: "order", Query: `SELECT id AS key FROM orders WHERE ` + d.due(),
		Stages: []sqlcheck.Stage{{After: time.Hour, Event: "order.late"}}}
	ctx, cancel := context.WithCancel(d.ctx)
	cancel()
	_, err := sqlcheck.Prepare(ctx, d.prepare, spec)
	if err == nil || len(sqlcheck.FieldErrors(err)) != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("prepare with the database out of reach: %v; want context.Canceled, not a field error", err)
	}
}

// TestOneQueryPerBatch: a batch of 1,000 due jobs costs the check one query,
// whatever the number of jobs; the stages are raised for the keys returned.
func TestOneQueryPerBatch(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	for i := range 1000 {
		if i%2 == 0 {
			d.order(fmt.Sprint(i), "unshipped", epoch, i)
		}
	}
	c, err := sqlcheck.Prepare(d.ctx, d.prepare, sqlcheck.Spec{Name: "c", Entity: "order", Anchor: "placed_at",
		Query:  `SELECT id AS key, placed_at, total FROM orders WHERE ` + d.due() + ` AND status = 'unshipped'`,
		Stages: []sqlcheck.Stage{{After: time.Hour, Event: "order.late"}, {After: 2 * time.Hour, Event: "order.later"}}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := d.sqlDB.BeginTx(d.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ctx := &countingTx{tx: tx}
	out := &recordingOutbox{}
	jobs := make([]*checks.Job, 1000)
	for i := range jobs {
		jobs[i] = &checks.Job{ID: int64(i), Entity: "order", Key: fmt.Sprint(i), Check: "c",
			Slot: epoch.Add(time.Hour), FirstCheckAt: epoch.Add(time.Hour), Tx: ctx, Outbox: out}
	}
	res, err := c.Batch(d.ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.queries != 1 {
		t.Errorf("%d queries for 1,000 jobs, want 1", ctx.queries)
	}
	for i, r := range res {
		want := time.Time{}
		if i%2 == 0 {
			want = epoch.Add(2 * time.Hour)
		}
		if r.Err != nil || !r.Next.Equal(want) {
			t.Fatalf("job %d: %+v, want next %s", i, r, want)
		}
	}
	if len(out.events) != 500 {
		t.Fatalf("%d events, want 500", len(out.events))
	}
	var p map[string]any
	if err := json.Unmarshal(out.events[0].Payload, &p); err != nil || p["total"] != float64(0) || p["placed_at"] != "2025-06-01T12:00:00Z" {
		t.Errorf("payload %s (%v), want placed_at and total", out.events[0].Payload, err)
	}
}

// countingTx is a checks.Tx over an *sql.Tx that counts its queries.
type countingTx struct {
	tx      *sql.Tx
	queries int
}

func (c *countingTx) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	r, err := c.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func (c *countingTx) QueryRow(ctx context.Context, q string, args ...any) checks.Row {
	c.queries++
	return c.tx.QueryRowContext(ctx, q, args...)
}

func (c *countingTx) Query(ctx context.Context, q string, args ...any) (checks.Rows, error) {
	c.queries++
	rows, err := c.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (c *countingTx) Driver() any { return c.tx }

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// recordingOutbox keeps what is emitted, once per idempotency key.
type recordingOutbox struct {
	events []checks.Event
	seen   map[string]bool
}

func (o *recordingOutbox) Emit(_ context.Context, job *checks.Job, ev checks.Event) (bool, error) {
	if o.seen == nil {
		o.seen = make(map[string]bool)
	}
	if k := job.IdempotencyKeyFor(ev); !o.seen[k] {
		o.seen[k] = true
		o.events = append(o.events, ev)
		return true, nil
	}
	return false, nil
}
