package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestDropRetriedAfterADeadlock: a schema's DROP that PostgreSQL makes the
// victim of a deadlock, with a session that still holds a table of it and
// then needs the schema (as the session of a server process a test has
// just killed may, finishing its last statement), is run again instead of
// failing the test (a CI run failed so).
func TestDropRetriedAfterADeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := Schema(t)
	s := pgx.Identifier{schema}.Sanitize()
	exec(t, url, "CREATE TABLE "+s+".t (id int)")
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	other, watch := conn(), conn()
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT * FROM "+s+".t"); err != nil {
		t.Fatal(err)
	}
	drop := "DROP SCHEMA " + s + " CASCADE"
	done := make(chan error, 1)
	go func() {
		// Once the DROP, holding the schema, waits for the table, the other
		// session needs the schema: a deadlock, found first by the DROP's
		// session, which waited first.
		for {
			var waiting bool
			if err := watch.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query = $1)", drop).Scan(&waiting); err != nil {
				done <- err
				return
			}
			if waiting {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, err := tx.Exec(ctx, "CREATE TABLE "+s+".u (id int)")
		if rerr := tx.Rollback(ctx); err == nil {
			err = rerr
		}
		done <- err
	}()
	exec(t, url, drop)
	if err := <-done; err != nil {
		t.Fatalf("the other session: %v", err)
	}
}
