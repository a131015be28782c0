package orders_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
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
)

// env is a store in a fresh schema with the example's tables, and a client
// on a fake clock that the test moves.
type env struct {
	t      *testing.T
	ctx    context.Context
	store  *postgres.Store
	client *prescient.Client
	now    time.Time
	opts   orders.Options
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	url, schema := pgtest.SchemaName(t)
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, orders.Schema); err != nil {
		t.Fatalf("create example tables: %v", err)
	}
	e := &env{t: t, ctx: ctx, store: st,
		now:  time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		opts: orders.Options{AlertAfter: 3 * time.Hour, EscalateAfter: 24 * time.Hour}}
	reg := &checks.Registry{}
	if err := orders.Register(reg, e.opts); err != nil {
		t.Fatal(err)
	}
	e.client, err = prescient.NewClient(st, &prescient.Config{
		Server: "test",
		Grid:   slots.Grid{Resolution: 15 * time.Minute},
		Checks: reg,
		Now:    func() time.Time { return e.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.GridSave(ctx, e.client.Config().Grid); err != nil {
		t.Fatal(err)
	}
	if err := e.client.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) tx(fn func(tx pgx.Tx) error) {
	e.t.Helper()
	if err := pgx.BeginFunc(e.ctx, e.store.Pool(), fn); err != nil {
		e.t.Fatal(err)
	}
}

// fire moves the clock to slot and fires it.
func (e *env) fire(slot time.Time) *prescient.SlotRecord {
	e.t.Helper()
	e.now = slot
	rec, err := e.client.FireSlot(e.ctx, slot)
	if err != nil {
		e.t.Fatalf("fire %s: %v", slot, err)
	}
	return rec
}

func (e *env) alerts() []string {
	e.t.Helper()
	rows, err := e.store.Pool().Query(e.ctx, `SELECT order_id, stage, raised_at FROM alerts ORDER BY raised_at, order_id`)
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id, stage string
		var at time.Time
		err := r.Scan(&id, &stage, &at)
		return fmt.Sprintf("%s %s %s", id, stage, at.Format("Jan 2 15:04")), err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) outcomes() map[string]history.Outcome {
	e.t.Helper()
	recs, err := e.client.History(e.ctx, history.Filter{Entity: orders.Entity})
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string]history.Outcome)
	for _, r := range recs {
		out[r.Key] = r.Outcome
	}
	return out
}

func TestOrderLifecycle(t *testing.T) {
	e := newEnv(t)
	placed := e.now
	for _, id := range []string{"A", "B", "C", "D"} {
		e.tx(func(tx pgx.Tx) error {
			job, err := orders.Place(e.ctx, e.client, tx, id, placed, e.opts)
			if err == nil && !job.NextCheckAt.Equal(placed.Add(3*time.Hour)) {
				t.Errorf("order %s: check at %s, want %s", id, job.NextCheckAt, placed.Add(3*time.Hour))
			}
			return err
		})
	}
	// B ships, C is cancelled, D disappears without telling prescient.
	e.tx(func(tx pgx.Tx) error {
		n, err := orders.Ship(e.ctx, e.client, tx, "B")
		if n != 1 {
			t.Errorf("Ship(B) settled %d checks, want 1", n)
		}
		return err
	})
	e.tx(func(tx pgx.Tx) error {
		n, err := orders.Cancel(e.ctx, e.client, tx, "C")
		if n != 1 {
			t.Errorf("Cancel(C) cancelled %d checks, want 1", n)
		}
		return err
	})
	if _, err := e.store.Pool().Exec(e.ctx, `DELETE FROM orders WHERE id = 'D'`); err != nil {
		t.Fatal(err)
	}

	// Nothing is due before the alert time.
	if rec := e.fire(placed.Add(2*time.Hour + 45*time.Minute)); rec.Checked != 0 {
		t.Errorf("slot before the alert checked %d jobs, want 0", rec.Checked)
	}
	if got := e.alerts(); len(got) != 0 {
		t.Errorf("alerts before the alert time: %q", got)
	}

	alertSlot := placed.Add(3 * time.Hour)
	if rec := e.fire(alertSlot); rec.Checked != 2 || rec.Rescheduled != 1 || rec.Outcomes[history.Done] != 1 {
		t.Errorf("alert slot: checked %d, rescheduled %d, outcomes %v; want 2 checked (A, D), 1 rescheduled (A), done 1 (D)",
			rec.Checked, rec.Rescheduled, rec.Outcomes)
	}
	if got, want := e.alerts(), []string{"A alert Jun 1 15:00"}; !reflect.DeepEqual(got, want) {
		t.Errorf("alerts after the alert slot: got %q, want %q", got, want)
	}
	job, err := e.client.Job(e.ctx, orders.Entity, "A", orders.Check)
	if err != nil {
		t.Fatalf("order A's job after its alert: %v", err)
	}
	if want := placed.Add(24 * time.Hour); !job.NextCheckAt.Equal(want) || job.CheckCount != 1 {
		t.Errorf("order A's job: next %s after %d check(s), want next %s (placed + EscalateAfter) after 1",
			job.NextCheckAt, job.CheckCount, want)
	}

	// Firing the same slot again finds nothing: the alert is not raised twice.
	if rec := e.fire(alertSlot); rec.Checked != 0 || len(e.alerts()) != 1 {
		t.Errorf("re-firing the alert slot: %d checked, alerts %q; want 0 checked, one alert", rec.Checked, e.alerts())
	}

	e.fire(placed.Add(24 * time.Hour))
	want := []string{"A alert Jun 1 15:00", "A escalation Jun 2 12:00"}
	if got := e.alerts(); !reflect.DeepEqual(got, want) {
		t.Errorf("alerts after the escalation slot: got %q, want %q", got, want)
	}
	if _, err := e.client.Job(e.ctx, orders.Entity, "A", orders.Check); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("order A's job after its escalation: err %v, want ErrNotFound", err)
	}
	wantOutcomes := map[string]history.Outcome{"A": history.Done, "B": history.Resolved, "C": history.Cancelled, "D": history.Done}
	if got := e.outcomes(); !reflect.DeepEqual(got, wantOutcomes) {
		t.Errorf("history outcomes: got %v, want %v", got, wantOutcomes)
	}
}

// A shipment after the alert stops the escalation: the check is resolved,
// and a check that finds the order shipped is done without an alert.
func TestShippedAfterAlert(t *testing.T) {
	e := newEnv(t)
	placed := e.now
	e.tx(func(tx pgx.Tx) error {
		_, err := orders.Place(e.ctx, e.client, tx, "A", placed, e.opts)
		return err
	})
	e.fire(placed.Add(3 * time.Hour))
	// Ship without resolving, as an application that forgot would: the
	// check itself sees the status.
	if _, err := e.store.Pool().Exec(e.ctx, `UPDATE orders SET status = 'shipped' WHERE id = 'A'`); err != nil {
		t.Fatal(err)
	}
	rec := e.fire(placed.Add(24 * time.Hour))
	if rec.Checked != 1 || rec.Outcomes[history.Done] != 1 {
		t.Errorf("escalation slot: checked %d, outcomes %v; want 1 done", rec.Checked, rec.Outcomes)
	}
	if got, want := e.alerts(), []string{"A alert Jun 1 15:00"}; !reflect.DeepEqual(got, want) {
		t.Errorf("alerts: got %q, want %q (no escalation for a shipped order)", got, want)
	}
}

// The order and its check commit together: a rolled-back placement leaves
// neither.
func TestPlaceRolledBack(t *testing.T) {
	e := newEnv(t)
	tx, err := e.store.Pool().Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orders.Place(e.ctx, e.client, tx, "A", e.now, e.opts); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Job(e.ctx, orders.Entity, "A", orders.Check); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("job after rollback: err %v, want ErrNotFound", err)
	}
	var n int
	if err := e.store.Pool().QueryRow(e.ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 0 {
		t.Errorf("orders after rollback: %d (%v), want 0", n, err)
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		o    orders.Options
		want string // "" for valid
	}{
		{orders.Options{}, ""},
		{orders.Options{AlertAfter: time.Hour, EscalateAfter: 2 * time.Hour}, ""},
		{orders.Options{AlertAfter: 2 * time.Hour, EscalateAfter: time.Hour}, "must be longer than AlertAfter"},
		{orders.Options{AlertAfter: -time.Hour}, "must be positive"},
	}
	for _, tt := range tests {
		err := orders.Register(&checks.Registry{}, tt.o)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if (tt.want == "") != (got == "") || (tt.want != "" && !strings.Contains(got, tt.want)) {
			t.Errorf("Register(%+v): error %q, want %q", tt.o, got, tt.want)
		}
	}
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		t.Fatal(err)
	}
	c, ok := reg.Lookup(orders.Check)
	if !ok || !reflect.DeepEqual(c.Opts.Awaits, []string{orders.EventShipped}) {
		t.Errorf("registered check: %+v, want %s awaiting %s", c, orders.Check, orders.EventShipped)
	}
	if err := orders.Register(reg, orders.Options{}); !errors.Is(err, checks.ErrDuplicate) {
		t.Errorf("second Register: %v, want ErrDuplicate", err)
	}
	_, err := orders.Place(context.Background(), nil, struct{}{}, "A", time.Now(), orders.Options{})
	if !errors.Is(err, prescient.ErrTxType) {
		t.Errorf("Place with a %T: %v, want ErrTxType", struct{}{}, err)
	}
}
