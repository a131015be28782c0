package orders_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// appDB is one of the stores with the example's tables, seen as the
// application sees it: its own transactions and a query of the alerts.
type appDB struct {
	store interface {
		prescient.Store
		GridSave(context.Context, slots.Grid) error
	}
	// inTx runs fn in a transaction of the application's, committed when fn
	// succeeds.
	inTx func(ctx context.Context, fn func(tx any) error) error
	// alerts returns "order stage Jan 2 15:04" per alert, oldest first.
	alerts func(ctx context.Context) ([]string, error)
}

func formatAlert(id, stage string, at time.Time) string {
	return fmt.Sprintf("%s %s %s", id, stage, at.Format("Jan 2 15:04"))
}

func postgresApp(t *testing.T) *appDB {
	t.Helper()
	url, schema := pgtest.Schema(t)
	st, err := postgres.Open(t.Context(), url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &appDB{
		store: st,
		inTx: func(ctx context.Context, fn func(tx any) error) error {
			return pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error { return fn(tx) })
		},
		alerts: func(ctx context.Context) ([]string, error) {
			rows, err := st.Pool().Query(ctx, `SELECT order_id, stage, raised_at FROM alerts ORDER BY raised_at, order_id`)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
				var id, stage string
				var at time.Time
				err := r.Scan(&id, &stage, &at)
				return formatAlert(id, stage, at), err
			})
		},
	}
}

func sqliteApp(t *testing.T) *appDB {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "orders.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &appDB{
		store: st,
		inTx: func(ctx context.Context, fn func(tx any) error) error {
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		alerts: func(ctx context.Context) ([]string, error) {
			rows, err := st.DB().QueryContext(ctx, `SELECT order_id, stage, raised_at FROM alerts ORDER BY raised_at, order_id`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var id, stage string
				var at time.Time
				if err := rows.Scan(&id, &stage, &at); err != nil {
					return nil, err
				}
				out = append(out, formatAlert(id, stage, at))
			}
			return out, rows.Err()
		},
	}
}

// An alert the application moves, later or earlier, before it has run still
// raises the alert and then the escalation at placed + EscalateAfter, or in
// the slot after the alert when the alert was moved past that; never a guard
// ending. The job's first check moves with the alert, so history shows the
// alert's slot as the first check, before the escalation's. Issue 9: the
// escalation counted from the job's first check, which used to stay where it
// was first scheduled (guard_horizon for an alert held until 2030 and then
// brought forward, guard_past for one moved past the escalation).
func TestRescheduledAlert(t *testing.T) {
	for name, newApp := range map[string]func(*testing.T) *appDB{"postgres": postgresApp, "sqlite": sqliteApp} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testRescheduledAlert(t, newApp(t))
		})
	}
}

func testRescheduledAlert(t *testing.T, app *appDB) {
	ctx := t.Context()
	if err := app.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := app.inTx(ctx, func(tx any) error { return execApp(ctx, tx, orders.Schema) }); err != nil {
		t.Fatalf("create the example's tables: %v", err)
	}
	placed := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	now := placed
	opts := orders.Options{AlertAfter: 3 * time.Hour, EscalateAfter: 24 * time.Hour}
	reg := &checks.Registry{}
	if err := orders.Register(reg, opts); err != nil {
		t.Fatal(err)
	}
	grid := slots.Grid{Resolution: 15 * time.Minute}
	c, err := prescient.NewClient(app.store, &prescient.Config{
		Server: "test", Grid: grid, Checks: reg, Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.store.GridSave(ctx, grid); err != nil {
		t.Fatal(err)
	}
	if err := c.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	inTx := func(what string, fn func(tx any) error) {
		t.Helper()
		if err := app.inTx(ctx, fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	reschedule := func(id string, at time.Time) {
		t.Helper()
		if _, err := c.Reschedule(ctx, orders.Entity, id, orders.Check, at); err != nil {
			t.Fatalf("reschedule %s to %s: %v", id, at, err)
		}
	}
	replace := func(id string, at time.Time) {
		t.Helper()
		if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: orders.Entity, Key: id, Check: orders.Check, At: at}); err != nil {
			t.Fatalf("schedule %s at %s: %v", id, at, err)
		}
	}

	// "later": the alert moved past the escalation time.
	inTx("place later", func(tx any) error { _, err := orders.Place(ctx, c, tx, "later", placed, opts); return err })
	reschedule("later", placed.Add(30*time.Hour))
	// "held": an alert scheduled for 2030 (held, say, for a pre-order), then
	// brought forward to now.
	inTx("place held", func(tx any) error {
		if err := execApp(ctx, tx, `INSERT INTO orders (id, status, placed_at) VALUES ($1, $2, $3)`,
			"held", orders.StatusUnshipped, placed); err != nil {
			return err
		}
		_, err := c.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: orders.Entity, Key: "held", Check: orders.Check,
			At: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
		return err
	})
	reschedule("held", now.Add(time.Second))
	// "upsert": scheduled again, later and then earlier (ConflictReplace).
	inTx("place upsert", func(tx any) error { _, err := orders.Place(ctx, c, tx, "upsert", placed, opts); return err })
	replace("upsert", placed.Add(5*time.Hour))
	replace("upsert", placed.Add(time.Hour))

	for _, s := range []time.Duration{15 * time.Minute, time.Hour, 3 * time.Hour, 5 * time.Hour, 24 * time.Hour, 30 * time.Hour, 30*time.Hour + 15*time.Minute} {
		now = placed.Add(s)
		if _, err := c.FireSlot(ctx, now); err != nil {
			t.Fatalf("fire %s: %v", now, err)
		}
	}

	got, err := app.alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"held alert Jun 1 12:15",
		"upsert alert Jun 1 13:00",
		"held escalation Jun 2 12:00",
		"upsert escalation Jun 2 12:00",
		"later alert Jun 2 18:00",
		"later escalation Jun 2 18:15",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("alerts:\n got %q\nwant %q", got, want)
	}
	recs, err := c.History(ctx, history.Filter{Entity: orders.Entity})
	if err != nil {
		t.Fatal(err)
	}
	wantRecs := map[string][2]time.Time{
		"held":   {placed.Add(15 * time.Minute), placed.Add(24 * time.Hour)},
		"upsert": {placed.Add(time.Hour), placed.Add(24 * time.Hour)},
		"later":  {placed.Add(30 * time.Hour), placed.Add(30*time.Hour + 15*time.Minute)},
	}
	if len(recs) != len(wantRecs) {
		t.Errorf("history: %d records, want %d", len(recs), len(wantRecs))
	}
	for _, r := range recs {
		w, ok := wantRecs[r.Key]
		if !ok {
			t.Errorf("history: unexpected record of order %s", r.Key)
			continue
		}
		if r.Outcome != history.Done || r.CheckCount != 2 || !r.FirstCheckAt.Equal(w[0]) || !r.LastCheckAt.Equal(w[1]) {
			t.Errorf("history of order %s: %s after %d checks (%s), first %s, last %s; want done after 2, first %s, last %s",
				r.Key, r.Outcome, r.CheckCount, r.LastError, r.FirstCheckAt.Format(time.RFC3339), r.LastCheckAt.Format(time.RFC3339),
				w[0].Format(time.RFC3339), w[1].Format(time.RFC3339))
		}
		if r.LastCheckAt.Before(r.FirstCheckAt) {
			t.Errorf("history of order %s: first check %s after the last %s", r.Key, r.FirstCheckAt, r.LastCheckAt)
		}
	}
}

// execApp runs a statement in the application's transaction.
func execApp(ctx context.Context, tx any, query string, args ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, query, args...)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, query, args...)
		return err
	}
	return fmt.Errorf("unexpected transaction %T", tx)
}
