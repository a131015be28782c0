package prescient_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prescient-dev/prescient/sqlite"
)

func init() {
	storeKinds = append(storeKinds, storeKind{"sqlite", openSQLite})
}

// openSQLite opens a migrated store on a fresh file in t.TempDir, with the
// scenario tables beside prescient's.
func openSQLite(t testing.TB) *harness {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "prescient.db"), nil)
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	query := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := s.DB().QueryRowContext(ctx, "SELECT count(*) FROM ("+sql+") q", args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.DB().ExecContext(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(alertsDDL)
	return &harness{t: t, store: s, count: query, exec: exec}
}
