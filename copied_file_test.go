package prescient_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/sqlite"
)

// A Go program on a SQLite file that `prescient copy` copied (and marked)
// gets sqlite.ErrCopied for every write, and runs no check there: the jobs
// live in the copy's target, which fires them. Before migration 00013 only
// the command line refused the file: a server built with the library fired
// the copied jobs a second time, and jobs scheduled into the file never
// reached the target. With the mark deleted, the file takes writes again.
func TestCopiedSQLiteFileRefusesTheLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, st := openSQLiteFile(t, filepath.Join(t.TempDir(), "prescient.db"), nil)
	clk, rec := newClock("2026-03-10T10:00:00Z"), &calls{}
	reg := register(t, "unshipped", alertOnce(rec), nil)
	c := h.client(clk, reg, nil)
	schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
	// A server running when the file is copied.
	running := h.client(clk, reg, func(cfg *prescient.Config) { cfg.Server = "s3" })
	if err := running.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer running.Stop(ctx)

	frozen, err := st.Freeze(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := frozen.MarkCopied(ctx, "postgres://db.example/app", clk.Now()); err != nil {
		t.Fatal(err)
	}

	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sqlite.ErrCopied) {
			t.Errorf("%s on a copied file: %v, want sqlite.ErrCopied", what, err)
		}
	}
	_, err = c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "2", Check: "unshipped", At: ts("2026-03-10T10:15:00Z")})
	refused("Schedule", err)
	_, err = c.Cancel(ctx, "order", "1", "unshipped")
	refused("Cancel", err)
	clk.Set("2026-03-10T10:15:00Z")
	_, err = c.FireSlot(ctx, ts("2026-03-10T10:15:00Z"))
	refused("FireSlot", err)
	running.Tick(ctx)
	refused("the running server's tick (Ready)", running.Ready())
	if n := rec.total(); n != 0 {
		t.Errorf("the check ran %d time(s) on the copied file, want 0", n)
	}
	srv, err := prescient.NewClient(h.store, &prescient.Config{Server: "s2", Grid: quarterHours, Checks: reg, Now: clk.Now,
		SweepSchedule: "-", PruneSchedule: "-"})
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Start(startCtx); err == nil {
		srv.Stop(ctx)
		t.Error("a server started on the copied file")
	} else {
		refused("Start", err)
	}
	if n := rec.total(); n != 0 {
		t.Errorf("the check ran %d time(s) on the copied file, want 0", n)
	}
	if n := h.count("SELECT id FROM prescient_jobs"); n != 1 {
		t.Errorf("%d job(s) pending in the copied file, want its 1, untouched", n)
	}

	h.exec("DELETE FROM prescient_copied")
	schedule(t, c, "2", "unshipped", "2026-03-10T10:30:00Z")
	fire(t, c, "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:30:00Z")
	fire(t, c, "2026-03-10T10:30:00Z")
	if n := rec.total(); n != 2 {
		t.Errorf("the check ran %d time(s) once the mark was deleted, want 2", n)
	}
}

// A file marked copied by a prescient that made no triggers (the mark
// alone, as before them) refuses writes once migrated.
func TestCopiedSQLiteFileMarkedBeforeRefusesOnceMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, st := openSQLiteFile(t, filepath.Join(t.TempDir(), "prescient.db"), nil)
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "unshipped", alertOnce(&calls{}), nil), nil)
	h.exec("INSERT INTO prescient_copied (id, target, copied_at) VALUES (1, 'postgres://db.example/app', 0)")
	schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z") // no triggers yet
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "2", Check: "unshipped", At: ts("2026-03-10T10:15:00Z")})
	if !errors.Is(err, sqlite.ErrCopied) {
		t.Errorf("Schedule on a file marked copied, migrated: %v, want sqlite.ErrCopied", err)
	}
}
