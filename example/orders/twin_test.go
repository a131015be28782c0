package orders_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/cli"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlcheck"
	"github.com/prescient-dev/prescient/sqlite"
)

// twinCheck is the declarative twin's name in declarative-*.yaml.
const twinCheck = "order_unshipped_sql"

// twin is a store with the example's tables and a client running both the
// Go check and its declarative twin, on a clock the test moves.
type twin struct {
	t      *testing.T
	ctx    context.Context
	store  prescient.Store
	client *prescient.Client
	now    time.Time
	// inTx runs fn in an application transaction; query reads.
	inTx  func(fn func(tx any) error)
	query func(q string, args ...any) [][]string
}

func newTwin(t *testing.T, kind string) *twin {
	t.Helper()
	ctx := context.Background()
	tw := &twin{t: t, ctx: ctx, now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	var exec func(string) error
	switch kind {
	case "postgres":
		url, schema := pgtest.SchemaName(t)
		st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		tw.store = st
		exec = func(q string) error { _, err := st.Pool().Exec(ctx, q); return err }
		tw.inTx = func(fn func(tx any) error) {
			t.Helper()
			if err := pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error { return fn(tx) }); err != nil {
				t.Fatal(err)
			}
		}
		tw.query = func(q string, args ...any) [][]string {
			t.Helper()
			rows, err := st.Pool().Query(ctx, q, args...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]string, error) {
				vals := make([]string, len(r.FieldDescriptions()))
				dest := make([]any, len(vals))
				for i := range vals {
					dest[i] = &vals[i]
				}
				return vals, r.Scan(dest...)
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
	default:
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "prescient.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		tw.store = st
		exec = func(q string) error { _, err := st.DB().ExecContext(ctx, q); return err }
		tw.inTx = func(fn func(tx any) error) {
			t.Helper()
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := fn(tx); err != nil {
				tx.Rollback()
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		tw.query = func(q string, args ...any) [][]string {
			t.Helper()
			rows, err := st.DB().QueryContext(ctx, q, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			cols, _ := rows.Columns()
			var out [][]string
			for rows.Next() {
				vals := make([]string, len(cols))
				dest := make([]any, len(vals))
				for i := range vals {
					dest[i] = &vals[i]
				}
				if err := rows.Scan(dest...); err != nil {
					t.Fatal(err)
				}
				out = append(out, vals)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	if err := tw.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := exec(orders.Schema); err != nil {
		t.Fatal(err)
	}

	// The Go check, with its defaults (alert after 3h, escalate after 24h),
	// and its twin, read from the documented configuration file.
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cli.LoadConfig("declarative-" + kind + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	specs := cfg.DeclaredChecks()
	if len(specs) != 1 || specs[0].Name != twinCheck {
		t.Fatalf("declarative-%s.yaml declares %+v, want %s", kind, specs, twinCheck)
	}
	db, err := sqlcheck.ForStore(tw.store)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sqlcheck.Prepare(ctx, db, specs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	tw.client, err = prescient.NewClient(tw.store, &prescient.Config{
		Server: "test",
		Grid:   slots.Grid{Resolution: 15 * time.Minute},
		Checks: reg,
		Now:    func() time.Time { return tw.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.client.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	return tw
}

// place places order id at placedAt and schedules both checks for its alert,
// in one transaction, as the application would.
func (tw *twin) place(id string, placedAt time.Time) {
	tw.t.Helper()
	tw.inTx(func(tx any) error {
		job, err := orders.Place(tw.ctx, tw.client, tx, id, placedAt, orders.Options{})
		if err != nil {
			return err
		}
		_, err = tw.client.ScheduleTx(tw.ctx, tx, prescient.ScheduleParams{Entity: orders.Entity, Key: id, Check: twinCheck, At: job.NextCheckAt})
		return err
	})
}

func (tw *twin) fire(slot, now time.Time) {
	tw.t.Helper()
	tw.now = now
	if _, err := tw.client.FireSlot(tw.ctx, slot); err != nil {
		tw.t.Fatalf("fire %s: %v", slot, err)
	}
}

// events returns the events check raised, by order, in the order raised:
// "event stage severity payload" (the payload's keys sorted).
func (tw *twin) events(check string) map[string][]string {
	tw.t.Helper()
	q := `SELECT entity_key, event, stage, severity, COALESCE(payload, '') FROM prescient_outbox WHERE check_name = $1 ORDER BY id`
	if _, ok := tw.store.(*postgres.Store); ok {
		q = `SELECT entity_key, event, stage, severity, COALESCE(payload::text, '') FROM prescient_outbox WHERE check_name = $1 ORDER BY id`
	}
	out := make(map[string][]string)
	for _, r := range tw.query(q, check) {
		var p any
		if err := json.Unmarshal([]byte(r[4]), &p); err != nil {
			tw.t.Fatalf("payload %q: %v", r[4], err)
		}
		b, _ := json.Marshal(p)
		out[r[0]] = append(out[r[0]], fmt.Sprintf("%s %s %s %s", r[1], r[2], r[3], b))
	}
	return out
}

// outcomes returns how each order's job of check ended.
func (tw *twin) outcomes(check string) map[string]history.Outcome {
	tw.t.Helper()
	recs, err := tw.client.History(tw.ctx, history.Filter{Entity: orders.Entity, Check: check})
	if err != nil {
		tw.t.Fatal(err)
	}
	out := make(map[string]history.Outcome)
	for _, r := range recs {
		out[r.Key] = r.Outcome
	}
	return out
}

// TestDeclarativeTwin runs the Go check and its declarative twin over the
// same orders, through their stages on an injected clock, on both stores,
// and shows that they raise the same events and end the same way: an order
// shipped before its alert, one that stays unshipped, one deleted, one
// cancelled, one shipped between its alert and its escalation, and one
// whose alert slot was fired late, after its escalation was due (a server
// down meanwhile).
func TestDeclarativeTwin(t *testing.T) {
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			tw := newTwin(t, kind)
			t0 := tw.now
			for _, id := range []string{"shipped", "unshipped", "deleted", "cancelled", "late"} {
				tw.place(id, t0)
			}
			tw.place("down", t0.Add(time.Hour))
			tw.inTx(func(tx any) error {
				if _, err := orders.Ship(tw.ctx, tw.client, tx, "shipped"); err != nil {
					return err
				}
				_, err := orders.Cancel(tw.ctx, tw.client, tx, "cancelled")
				return err
			})
			tw.inTx(func(tx any) error {
				switch tx := tx.(type) {
				case pgx.Tx:
					_, err := tx.Exec(tw.ctx, `DELETE FROM orders WHERE id = 'deleted'`)
					return err
				case *sql.Tx:
					_, err := tx.ExecContext(tw.ctx, `DELETE FROM orders WHERE id = 'deleted'`)
					return err
				}
				return nil
			})

			tw.fire(t0.Add(3*time.Hour), t0.Add(3*time.Hour))
			tw.inTx(func(tx any) error { _, err := orders.Ship(tw.ctx, tw.client, tx, "late"); return err })
			tw.fire(t0.Add(24*time.Hour), t0.Add(24*time.Hour))
			// The server was down from before down's alert (t0+4h) until
			// after its escalation was due (t0+25h).
			back := t0.Add(26*time.Hour + 5*time.Minute)
			tw.fire(t0.Add(4*time.Hour), back)
			tw.fire(t0.Add(26*time.Hour+15*time.Minute), t0.Add(26*time.Hour+15*time.Minute))

			goEvents, sqlEvents := tw.events(orders.Check), tw.events(twinCheck)
			alert := `order.unshipped alert warning {"placed_at":"2025-06-01T12:00:00Z"}`
			escalation := `order.unshipped.escalated escalation critical {"placed_at":"2025-06-01T12:00:00Z"}`
			want := map[string][]string{
				"unshipped": {alert, escalation},
				"late":      {alert},
				"down": {`order.unshipped alert warning {"placed_at":"2025-06-01T13:00:00Z"}`,
					`order.unshipped.escalated escalation critical {"placed_at":"2025-06-01T13:00:00Z"}`},
			}
			if !reflect.DeepEqual(goEvents, want) {
				t.Errorf("the Go check's events:\ngot  %q\nwant %q", goEvents, want)
			}
			if !reflect.DeepEqual(sqlEvents, goEvents) {
				t.Errorf("the twins' events differ:\ndeclarative %q\nGo          %q", sqlEvents, goEvents)
			}
			wantOutcomes := map[string]history.Outcome{
				"shipped": history.Resolved, "unshipped": history.Done, "deleted": history.Done,
				"cancelled": history.Cancelled, "late": history.Resolved, "down": history.Done,
			}
			if got := tw.outcomes(orders.Check); !reflect.DeepEqual(got, wantOutcomes) {
				t.Errorf("the Go check's outcomes: got %v, want %v", got, wantOutcomes)
			}
			if got := tw.outcomes(twinCheck); !reflect.DeepEqual(got, wantOutcomes) {
				t.Errorf("the declarative twin's outcomes: got %v, want %v", got, wantOutcomes)
			}
		})
	}
}
