package sqlite_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/sqlite"
)

// TestQueueFileOnlyForWrites: the write queue's lock file (<database>-queue)
// is created by the first write, with the database file's permissions; a
// Store that only reads leaves none behind. Closing such a Store used to
// create it, so that `prescient status` wrote beside a database it only
// read.
func TestQueueFileOnlyForWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "prescient.db")
	w, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		t.Fatal(err)
	}
	if err := w.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fi, err := os.Stat(path + "-queue")
	if err != nil {
		t.Fatalf("after a write: %v, want the queue's lock file", err)
	}
	if got := fi.Mode().Perm(); got != 0o660 {
		t.Errorf("the queue's lock file has mode %o, want the database file's %o", got, 0o660)
	}
	if err := os.Remove(path + "-queue"); err != nil {
		t.Fatal(err)
	}

	r, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.JobStats(ctx, &driver.JobStatsParams{}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := os.Stat(path + "-queue"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a Store that only read left %s behind (%v), want none", path+"-queue", err)
	}
}
