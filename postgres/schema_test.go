package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// appAndPrescient returns the URL of a database whose connections default
// to an application schema (standing for public) holding an orders table,
// and a store keeping prescient's tables in a schema of their own, as the
// README recommends.
func appAndPrescient(t *testing.T) (appURL string, s *postgres.Store) {
	t.Helper()
	base, app := pgtest.Schema(t)
	_, own := pgtest.SchemaName(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", app)
	u.RawQuery = q.Encode()
	appURL = u.String()

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
		CREATE TABLE alerts (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s, err = postgres.Open(ctx, appURL, &postgres.Opts{Schema: own})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return appURL, s
}

// With prescient's tables in a schema of their own, the …Tx methods work in
// the application's own transaction, on a connection whose search_path is
// the application's (they used to say "run prescient migrate"), and the
// jobs land in prescient's schema, not in a second set of tables.
func TestCallerTxWithSchema(t *testing.T) {
	t.Parallel()
	appURL, s := appAndPrescient(t)
	ctx := t.Context()
	reg := &checks.Registry{}
	if err := reg.Register("unshipped", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil },
		&checks.Opts{Awaits: []string{"shipped"}}); err != nil {
		t.Fatal(err)
	}
	c, err := prescient.NewTypedClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: time.Minute}, Checks: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	app, err := pgxpool.New(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	at := time.Now().Add(time.Hour)
	err = pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('1', 'unshipped'), ('2', 'unshipped'), ('3', 'unshipped')`); err != nil {
			return err
		}
		for _, k := range []string{"1", "2", "3"} {
			if _, err := c.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: "order", Key: k, Check: "unshipped", At: at}); err != nil {
				return err
			}
		}
		if _, err := c.ScheduleManyTx(ctx, tx, []prescient.ScheduleParams{{Entity: "order", Key: "4", Check: "unshipped", At: at}}); err != nil {
			return err
		}
		if _, err := c.RescheduleTx(ctx, tx, "order", "1", "unshipped", at.Add(time.Hour)); err != nil {
			return err
		}
		if n, err := c.CancelTx(ctx, tx, "order", "2", "unshipped"); err != nil || n != 1 {
			t.Errorf("cancel in the application's transaction: %d, %v; want 1", n, err)
		}
		if n, err := c.ResolveTx(ctx, tx, "order", "3", "shipped"); err != nil || n != 1 {
			t.Errorf("resolve in the application's transaction: %d, %v; want 1", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the …Tx methods in the application's transaction: %v", err)
	}
	for _, k := range []string{"1", "4"} {
		if _, err := c.Job(ctx, "order", k, "unshipped"); err != nil {
			t.Errorf("job %s in prescient's schema: %v", k, err)
		}
	}
	recs, err := c.History(ctx, history.Filter{Entity: "order"})
	if err != nil || len(recs) != 2 {
		t.Errorf("history: %d records, %v; want the cancelled and the resolved job", len(recs), err)
	}
	var stray int
	if err := app.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'prescient_jobs' AND schemaname = current_schema()`).Scan(&stray); err != nil || stray != 0 {
		t.Errorf("prescient tables in the application's schema: %d, %v", stray, err)
	}
}

// Checks see the application's tables through job.Tx when prescient keeps
// its own in a schema of their own.
func TestChecksSeeApplicationTablesWithSchema(t *testing.T) {
	t.Parallel()
	appURL, s := appAndPrescient(t)
	ctx := t.Context()
	app, err := pgxpool.New(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Exec(ctx, `INSERT INTO orders VALUES ('1', 'unshipped')`); err != nil {
		t.Fatal(err)
	}
	reg := &checks.Registry{}
	if err := reg.Register("unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		var status string
		if err := j.Tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, j.Key).Scan(&status); err != nil {
			return time.Time{}, err
		}
		_, err := j.Tx.Exec(ctx, `INSERT INTO alerts VALUES ($1)`, j.Key)
		return time.Time{}, err
	}, nil); err != nil {
		t.Fatal(err)
	}
	now := slotAt
	c, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: 15 * time.Minute}, Checks: reg,
		Now: func() time.Time { return now }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "unshipped", At: slotAt.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	now = slotAt.Add(15 * time.Minute)
	rec, err := c.FireSlot(ctx, now)
	if err != nil || rec.Outcomes[history.Done] != 1 {
		t.Fatalf("fire: %+v, %v; want the check done", rec, err)
	}
	var alerts int
	if err := app.QueryRow(ctx, `SELECT count(*) FROM alerts`).Scan(&alerts); err != nil || alerts != 1 {
		t.Errorf("alerts in the application's table: %d, %v; want 1", alerts, err)
	}
}

// A pool handed to New stays the caller's: closing the store leaves it open.
func TestNewLeavesThePoolOpen(t *testing.T) {
	t.Parallel()
	u, schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := postgres.New(pool, &postgres.Opts{Schema: schema})
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("the caller's pool after the store closed: %v", err)
	}
}
