package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// A schema name holding '$' (valid in a PostgreSQL identifier, and quoted
// by the store everywhere else) must work for the …Tx methods in an
// application's own transaction. The store qualifies prescient's names with
// regexp.ReplaceAllString, whose replacement treats "$v2" as a reference to
// a (missing) capture group, so the schema's name is cut short at the '$'.
func TestCallerTxWithDollarInSchemaName(t *testing.T) {
	t.Parallel()
	base, app := pgtest.Schema(t)
	own := app + "$v2"
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{own}.Sanitize()+" CASCADE")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", app)
	u.RawQuery = q.Encode()
	appURL := u.String()

	s, err := postgres.Open(ctx, appURL, &postgres.Opts{Schema: own, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate into schema %q: %v", own, err)
	}
	c, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: time.Minute}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Through the store's own pool: works.
	at := time.Now().Add(time.Hour)
	if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "pool", Check: "unshipped", At: at}); err != nil {
		t.Fatalf("schedule on the store's pool, schema %q: %v", own, err)
	}
	// In the application's transaction, on a connection whose search_path is
	// the application's schema.
	conn, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := c.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: "order", Key: "tx", Check: "unshipped", At: at}); err != nil {
		t.Fatalf("ScheduleTx in the application's transaction, prescient in schema %q: %v", own, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Job(ctx, "order", "tx", "unshipped"); err != nil {
		t.Errorf("job scheduled in the application's transaction, read back from schema %q: %v", own, err)
	}
}
