package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestInstanceRestart(t *testing.T) {
	t.Parallel()
	in := NewInstance(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, in.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	in.Restart(100 * time.Millisecond)
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a connection survived the restart: the instance was not restarted")
	}
	conn2, err := pgx.Connect(ctx, in.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	var n int
	if err := conn2.QueryRow(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after restart: %d rows, %v", n, err)
	}
}
