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
	h, _ := openSQLiteFile(t, filepath.Join(t.TempDir(), "prescient.db"), nil)
	return h
}

// openSQLiteFile opens a migrated store on path with opts, closed when the
// test ends, with the scenario tables beside prescient's.
func openSQLiteFile(t testing.TB, path string, opts *sqlite.Opts) (*harness, *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatalf("open sqlite store: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return newHarness(t, s,
		func(sql string, args ...any) (n int, err error) {
			return n, s.DB().QueryRowContext(ctx, sql, args...).Scan(&n)
		},
		func(sql string, args ...any) error {
			_, err := s.DB().ExecContext(ctx, sql, args...)
			return err
		}), s
}
