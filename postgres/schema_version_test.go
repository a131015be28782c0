package postgres_test

import (
	"context"
	"testing"

	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// TestSchemaVersionReadsAnotherSchemasTable: SchemaVersion finds
// goose's table with to_regclass, through the whole search_path (the
// store's schema, then the role's: "$user", public); goose itself looks in
// current_schema() only. A fresh schema for a second install, in a database
// whose public schema holds a newer prescient's tables, is read as "newer":
// Migrate refuses to create it (and run without --migrate takes public's
// version for the fresh schema's).
func TestSchemaVersionReadsAnotherSchemasTable(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t, "")
	pub, err := postgres.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// A newer prescient migrated the install in public.
	if _, err := pub.Pool().Exec(ctx, `INSERT INTO prescient_migrations (version_id, is_applied) VALUES (9999, true)`); err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: "tenant_b"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if cur, _, err := st.SchemaVersion(ctx); err != nil || cur != 0 {
		t.Errorf("SchemaVersion of the fresh schema tenant_b before migrating: %d, %v; want 0 (public's table is not tenant_b's)", cur, err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of a fresh schema tenant_b: %v", err)
	}
}
