package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	neturl "net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// review4Exec runs sql on url as its role.
func review4Exec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestMigrateIntoAnExistingSchemaWithoutCreateOnTheDatabase: a DBA
// creates the schema for prescient and gives it to the application's role,
// which (least privilege) may not create schemas in the database. Migrate
// must then use the schema that is there; it must not need CREATE on the
// database to "create it if missing".
func TestMigrateIntoAnExistingSchemaWithoutCreateOnTheDatabase(t *testing.T) {
	admin := pgtest.URL()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role := "rv4_app_" + hex.EncodeToString(b)
	schema := "rv4_schema_" + hex.EncodeToString(b)
	review4Exec(t, admin, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	t.Cleanup(func() {
		review4Exec(t, admin, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		review4Exec(t, admin, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	review4Exec(t, admin, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()+" AUTHORIZATION "+pgx.Identifier{role}.Sanitize())

	u, err := neturl.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	s, err := postgres.Open(t.Context(), u.String(), &postgres.Opts{Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatalf("open as %s: %v", role, err)
	}
	defer s.Close()
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate into schema %s, which exists and belongs to the role: %v", schema, err)
	}
}
