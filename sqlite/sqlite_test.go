package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prescient-dev/prescient/sqlite"
	"github.com/prescient-dev/prescient/storetest"
)

// openStore opens a migrated store on a fresh file in t.TempDir, closed when
// the test ends.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s := openFile(t, filepath.Join(t.TempDir(), "prescient.db"))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

// openFile opens a store on path, as one more process would, without
// migrating it.
func openFile(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness {
		s := openStore(t)
		return &storetest.Harness{
			Store:         s,
			SetPruneBatch: s.SetPruneBatch,
			Exec: func(ctx context.Context, sql string, args ...any) error {
				_, err := s.DB().ExecContext(ctx, sql, args...)
				return err
			},
			QueryInt: func(ctx context.Context, sql string, args ...any) (int64, error) {
				var n int64
				err := s.DB().QueryRowContext(ctx, sql, args...).Scan(&n)
				return n, err
			},
			BeginTx: func(ctx context.Context) (*storetest.Tx, error) {
				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					return nil, err
				}
				return &storetest.Tx{Tx: tx, Commit: tx.Commit, Rollback: tx.Rollback}, nil
			},
		}
	})
}
