//go:build unix

package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// TestQueueFileBelongsToTheDatabasesOwner: run as root (an operator's sudo
// prescient schedule on the server's file), SQLite gives its -wal and -shm
// files the database file's owner, and so does the queue's lock file. It
// stayed root's, so that the server's account could not open it for writing
// and, before it fell back to reading, wrote without the queue (found by a
// review). Run as another account, the file is that account's.
func TestQueueFileBelongsToTheDatabasesOwner(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "prescient.db")
	s, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, suffix := range []string{"-wal", "-shm", "-queue"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	want := os.Geteuid()
	if want == 0 {
		want = 65534 // nobody: the server's account
		if err := os.Chown(path, want, want); err != nil {
			t.Fatal(err)
		}
	}
	s, err = sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE owned (id INTEGER PRIMARY KEY)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path + "-queue")
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Sys().(*syscall.Stat_t).Uid; int(got) != want {
		t.Errorf("%s-queue belongs to uid %d, want the database file's owner, uid %d (euid %d)", filepath.Base(path), got, want, os.Geteuid())
	}
}

// TestQueueOfALinkIsBesideTheFile: SQLite follows a symbolic link to the
// database and keeps its -wal and -shm files beside the file it names, so a
// Store opened through a link (an application configured with
// /srv/app/current/prescient.db) and one opened by the file's own path (the
// server's) share one write lock. They share one queue too: its lock file
// is beside the file. It was put beside the link, so that such writers did
// not see each other (found by a review).
func TestQueueOfALinkIsBesideTheFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	file := filepath.Join(dir, "data", "prescient.db")
	link := filepath.Join(dir, "app", "prescient.db")
	s, err := sqlite.Open(ctx, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Remove(file + "-queue"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	app, err := sqlite.Open(ctx, link, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if err := app.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE linked (id INTEGER PRIMARY KEY)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file + "-queue"); err != nil {
		t.Errorf("a write through a link: %v, want the queue's lock file beside the database file", err)
	}
	if _, err := os.Lstat(link + "-queue"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a write through a link left %s (%v), want none beside the link", link+"-queue", err)
	}
}
