package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// TestBeginIdleTimeout: a processing transaction begun with an IdleTimeout
// that then waits longer for its next statement (its process stopped) is
// ended by PostgreSQL, its locks released for others; one begun without
// keeps them, and a setting of one transaction does not outlive it on the
// pool's connection.
func TestBeginIdleTimeout(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	open := func() *postgres.Store {
		s, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema, MaxConns: 1})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(s.Close)
		return s
	}
	s, other := open(), open() // this server's pool, another server's
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ids := scheduleAt(t, s, slotAt, "1")
	// claim begins a transaction and claims the job; the process then
	// sends nothing more.
	claim := func(p *driver.BeginParams) driver.Tx {
		tx, err := s.Begin(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // before the pool closes
		if jobs, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slotAt}); err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v, %v", jobs, err)
		}
		return tx
	}
	// free is another server's claim, on a connection of its own.
	free := func() bool {
		var n int
		if err := other.Pool().QueryRow(ctx,
			"SELECT count(*) FROM (SELECT id FROM prescient_jobs WHERE id = $1 FOR UPDATE SKIP LOCKED) f", ids[0]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	// A transaction with the setting ends at once, its connection back in
	// the pool (of one): the next, without it, keeps its locks however long
	// it waits.
	tx, err := s.Begin(ctx, &driver.BeginParams{IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx = claim(nil)
	time.Sleep(600 * time.Millisecond) // three times the setting, were it kept
	if free() {
		t.Fatal("without an IdleTimeout, the job was released: the setting of the transaction before outlived it on the pool's connection")
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("a transaction begun without IdleTimeout: %v", err)
	}
	_ = tx.Rollback(context.Background())
	tx = claim(&driver.BeginParams{IdleTimeout: 200 * time.Millisecond})
	// Polling the database: PostgreSQL ends the session on its own time.
	for end := time.Now().Add(10 * time.Second); !free(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the job stayed locked 10 s after the transaction began waiting past its IdleTimeout of 200ms")
		}
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("the transaction ended by its IdleTimeout ran a statement")
	}
	_ = tx.Rollback(context.Background())
	// A runtime guard of a year asks for more than the setting takes
	// (MaxInt32 ms): every transaction failed to begin (found by a review).
	tx, err = s.Begin(ctx, &driver.BeginParams{IdleTimeout: 8760 * time.Hour})
	if err != nil {
		t.Fatalf("begin with an IdleTimeout of a year: %v", err)
	}
	_ = tx.Rollback(context.Background())
}
