package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// immutable makes the file at path unwritable even for root (which runs
// CI, and whom permissions do not bind) until the test ends: chattr +i,
// from the package e2fsprogs, on an ext2/3/4 file system.
func immutable(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Fatalf("cannot make the file unwritable (chattr +i, from the package e2fsprogs, on an ext2/3/4 file system): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
}

// status and history only read, and read a SQLite file this process may
// not write (an operator's account reading the file of a server that runs
// as another user, whose -wal and -shm it can read). A writable probe in
// sqlite.Open refused such a file before SQLite tried, so these commands
// failed with "not writable by this process" (found by a review); the probe
// now runs only once SQLite has failed.
func TestReadOnlyCommandsReadAFileTheyCannotWrite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, db, "")
	h.mustRun("schedule", "order", "42", "order_unshipped", "--in", "3h")
	immutable(t, db)
	for _, args := range [][]string{{"status"}, {"history"}, {"jobs", "list"}} {
		if out, err := h.run(args...); err != nil {
			t.Errorf("%v on a file it can read but not write: %v\n%s", args, err, out)
		}
	}
}

// README (start-up): "an SQLite file or directory it cannot write) is
// logged at error level naming the cause and what to fix". An existing,
// migrated WAL file that cannot be written opens and migrates without
// error (nothing to write), so run's first write fails later: the retries
// said "database unavailable" with SQLite's bare "readonly database" (found
// by a review); SQLITE_READONLY is now ErrNotWritable.
func TestRunOnUnwritableMigratedSQLiteFileNamesIt(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, db, "  startup_timeout: 3s\n")
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "42", "order_unshipped", "--in", "3h")
	immutable(t, db)
	srv := startRun(t, h, "--migrate")
	<-srv.exit
	if srv.err == nil {
		t.Fatalf("run: no error on a file it cannot write; logs:\n%s", srv.stderr.String())
	}
	logs := srv.stderr.String()
	if !strings.Contains(srv.err.Error(), "not writable") || strings.Contains(logs, "database unavailable") {
		i := strings.Index(logs, "cannot start")
		if i < 0 {
			i = 0
		}
		t.Errorf("run on a SQLite file it cannot write does not name it as not writable:\nerror: %v\nfirst retry log: %.600s", srv.err, logs[i:])
	}
}
