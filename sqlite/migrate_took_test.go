package sqlite_test

import (
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/migrations"
)

// Migration 00005 adds the ledger's took_us. A slot a file recorded before
// it reads as the span from its start to its finish; Down drops the column
// (SQLite's DROP COLUMN on a STRICT table), and Migrate brings it back.
func TestLedgerTookMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openFile(t, filepath.Join(t.TempDir(), "prescient.db"))
	fsys, err := fs.Sub(migrations.SQLite, "sqlite")
	if err != nil {
		t.Fatal(err)
	}
	provider, err := goose.NewProvider(goose.DialectSQLite3, s.DB(), fsys,
		goose.WithTableName("prescient_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := provider.UpTo(ctx, 4); err != nil {
		t.Fatalf("migrate up to 4: %v", err)
	}
	start := time.Date(2031, 3, 4, 10, 0, 1, 0, time.UTC)
	us := func(t time.Time) int64 { return t.UnixMicro() }
	if _, err := s.DB().ExecContext(ctx, `
		INSERT INTO prescient_slots (slot, server, kind, started_at, finished_at, checked)
		VALUES ($1, 'web-1', 'fire', $2, $3, 3), ($1, 'web-2', 'fire', $2, NULL, 0)`,
		us(start.Truncate(time.Minute)), us(start), us(start.Add(2500*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	recs, err := s.SlotList(ctx, &driver.SlotListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Took != 2500*time.Millisecond || recs[1].Took != 0 {
		t.Fatalf("ledger after 00005: %+v; want web-1's finished row to take 2.5s and web-2's unfinished one none", recs)
	}
	if _, err := provider.DownTo(ctx, 4); err != nil {
		t.Fatalf("migrate down to 4: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
}
