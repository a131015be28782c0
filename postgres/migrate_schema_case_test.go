package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// Migration 00012 found prescient's functions with
// current_schema()::regnamespace, which parses the schema's name as SQL:
// unquoted, "Prescient" reads as prescient (no such schema), and a name
// needing quotes ("my-app") is a syntax error. Migrate worked on such a
// schema before 00012 (every other statement quotes the name), and does
// again (found by a review).
func TestMigrateSchemaNeedingQuotes(t *testing.T) {
	t.Parallel()
	base, name := pgtest.SchemaName(t)
	own := "Quoted_" + name // upper case: must be quoted
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{own}.Sanitize()+" CASCADE")
	})
	s, err := postgres.Open(t.Context(), base, &postgres.Opts{Schema: own, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate into schema %q: %v", own, err)
	}
}
