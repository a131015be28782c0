package sqlcheck_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlcheck"
	"github.com/prescient-dev/prescient/sqlite"
)

// ordersDDL is the application's table the tests' queries read; it runs on
// both stores.
const ordersDDL = `CREATE TABLE orders (
	id        text PRIMARY KEY,
	status    text NOT NULL,
	placed_at timestamp,
	total     integer
)`

// epoch is when the tests' orders are placed: on the 15-minute grid.
var epoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// db is a store of one kind with the orders table, and what the tests do in
// it besides scheduling.
type db struct {
	t       *testing.T
	ctx     context.Context
	kind    sqlcheck.Dialect
	store   prescient.Store
	sqlDB   *sql.DB // SQLite
	pg      *postgres.Store
	prepare sqlcheck.Database
}

// forStores runs fn on a fresh PostgreSQL schema and a fresh SQLite file.
func forStores(t *testing.T, fn func(t *testing.T, d *db)) {
	for _, kind := range []sqlcheck.Dialect{sqlcheck.Postgres, sqlcheck.SQLite} {
		t.Run(string(kind), func(t *testing.T) { fn(t, openDB(t, kind)) })
	}
}

func openDB(t *testing.T, kind sqlcheck.Dialect) *db {
	t.Helper()
	ctx := context.Background()
	d := &db{t: t, ctx: ctx, kind: kind}
	switch kind {
	case sqlcheck.Postgres:
		url, schema := pgtest.SchemaName(t)
		st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		d.store, d.pg = st, st
	default:
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "prescient.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		d.store, d.sqlDB = st, st.DB()
	}
	if err := d.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	d.exec(ordersDDL)
	var err error
	if d.prepare, err = sqlcheck.ForStore(d.store); err != nil {
		t.Fatal(err)
	}
	return d
}

// q picks the query of the store's dialect.
func (d *db) q(pg, lite string) string {
	if d.kind == sqlcheck.Postgres {
		return pg
	}
	return lite
}

// due is the WHERE condition selecting the due keys, in the store's dialect.
func (d *db) due() string {
	return d.q("id = ANY($1)", "id IN (SELECT value FROM json_each($1))")
}

func (d *db) exec(q string, args ...any) {
	d.t.Helper()
	var err error
	if d.pg != nil {
		_, err = d.pg.Pool().Exec(d.ctx, q, args...)
	} else {
		_, err = d.sqlDB.ExecContext(d.ctx, q, args...)
	}
	if err != nil {
		d.t.Fatalf("%s: %v", q, err)
	}
}

// order inserts an order placed at placed (nil: NULL) with total.
func (d *db) order(id, status string, placed any, total int) {
	d.t.Helper()
	if t, ok := placed.(time.Time); ok {
		placed = t.UTC()
	}
	d.exec(`INSERT INTO orders (id, status, placed_at, total) VALUES ($1, $2, $3, $4)`, id, status, placed, total)
}

// event is one recorded event as the tests compare them.
type event struct {
	Key, Stage, Event, Severity, Payload string
}

func (e event) String() string {
	return fmt.Sprintf("%s %s/%s %s %s", e.Key, e.Event, e.Stage, e.Severity, e.Payload)
}

// events returns the events check recorded in the outbox, in the order they
// were recorded, with their payloads' keys sorted.
func (d *db) events(check string) []event {
	d.t.Helper()
	q := d.q(`SELECT entity_key, stage, event, severity, COALESCE(payload::text, '') FROM prescient_outbox WHERE check_name = $1 ORDER BY id`,
		`SELECT entity_key, stage, event, severity, COALESCE(payload, '') FROM prescient_outbox WHERE check_name = $1 ORDER BY id`)
	var out []event
	scan := func(next func() bool, scan func(...any) error) {
		for next() {
			var e event
			if err := scan(&e.Key, &e.Stage, &e.Event, &e.Severity, &e.Payload); err != nil {
				d.t.Fatal(err)
			}
			e.Payload = canonical(d.t, e.Payload)
			out = append(out, e)
		}
	}
	if d.pg != nil {
		rows, err := d.pg.Pool().Query(d.ctx, q, check)
		if err != nil {
			d.t.Fatal(err)
		}
		defer rows.Close()
		scan(rows.Next, rows.Scan)
		if err := rows.Err(); err != nil {
			d.t.Fatal(err)
		}
		return out
	}
	rows, err := d.sqlDB.QueryContext(d.ctx, q, check)
	if err != nil {
		d.t.Fatal(err)
	}
	defer rows.Close()
	scan(rows.Next, rows.Scan)
	if err := rows.Err(); err != nil {
		d.t.Fatal(err)
	}
	return out
}

// canonical re-encodes a JSON payload with its keys sorted ("" stays "").
func canonical(t *testing.T, s string) string {
	t.Helper()
	if s == "" {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("payload %s: %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// engine is a client over d's store on a clock the test moves.
type engine struct {
	*db
	client *prescient.Client
	now    time.Time
}

// newEngine prepares specs against d and starts nothing: the test fires the
// slots itself, on a 15-minute grid. A check that fails once ends failed.
func (d *db) newEngine(specs ...sqlcheck.Spec) *engine {
	d.t.Helper()
	reg := &checks.Registry{}
	for _, s := range specs {
		c, err := sqlcheck.Prepare(d.ctx, d.prepare, s)
		if err != nil {
			d.t.Fatalf("prepare %s: %v", s.Name, err)
		}
		if err := c.Register(reg); err != nil {
			d.t.Fatal(err)
		}
	}
	e := &engine{db: d, now: epoch}
	var err error
	e.client, err = prescient.NewClient(d.store, &prescient.Config{
		Server:      "test",
		Grid:        slots.Grid{Resolution: 15 * time.Minute},
		Checks:      reg,
		MaxFailures: 1,
		Now:         func() time.Time { return e.now },
	})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := e.client.SyncCatalog(d.ctx); err != nil {
		d.t.Fatal(err)
	}
	return e
}

// schedule schedules check for order key at at.
func (e *engine) schedule(check, key string, at time.Time) {
	e.t.Helper()
	if _, err := e.client.Schedule(e.ctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: check, At: at}); err != nil {
		e.t.Fatalf("schedule %s %s at %s: %v", check, key, at, err)
	}
}

// fire fires slot with the clock at now.
func (e *engine) fire(slot, now time.Time) *prescient.SlotRecord {
	e.t.Helper()
	e.now = now
	rec, err := e.client.FireSlot(e.ctx, slot)
	if err != nil {
		e.t.Fatalf("fire %s: %v", slot, err)
	}
	return rec
}

// next returns the next check of check for order key; zero when the job is
// no longer pending.
func (e *engine) next(check, key string) time.Time {
	e.t.Helper()
	j, err := e.client.Job(e.ctx, "order", key, check)
	if err != nil {
		return time.Time{}
	}
	return j.NextCheckAt
}

// finished returns the history record of check for order key.
func (e *engine) finished(check, key string) *history.Record {
	e.t.Helper()
	recs, err := e.client.History(e.ctx, history.Filter{Entity: "order", Key: key, Check: check})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(recs) != 1 {
		e.t.Fatalf("history of %s %s: %d records, want 1", check, key, len(recs))
	}
	return recs[0]
}

// finishedLast returns the latest history record of check for order key.
func (e *engine) finishedLast(check, key string) *history.Record {
	e.t.Helper()
	recs, err := e.client.History(e.ctx, history.Filter{Entity: "order", Key: key, Check: check, Limit: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(recs) != 1 {
		e.t.Fatalf("history of %s %s: no record", check, key)
	}
	return recs[0]
}
