package cli

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// status and history only read, and read a SQLite file this process may
// not write (an operator's account reading the file of a server that runs
// as another user, whose -wal and -shm it can read). A writable probe in
// sqlite.Open refused such a file before SQLite tried, so these commands
// failed with "not writable by this process" (found by a review); the probe
// now runs only once SQLite has failed. The test makes the file unwritable
// even for root with chattr +i (e2fsprogs, on an ext2/3/4 file system).
func TestReadOnlyCommandsReadAFileTheyCannotWrite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, db, "")
	h.mustRun("schedule", "order", "42", "order_unshipped", "--in", "3h")
	if out, err := exec.Command("chattr", "+i", db).CombinedOutput(); err != nil {
		t.Fatalf("cannot make the file unwritable (chattr +i, from the package e2fsprogs, on an ext2/3/4 file system): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", db).Run() })
	for _, args := range [][]string{{"status"}, {"history"}, {"jobs", "list"}} {
		if out, err := h.run(args...); err != nil {
			t.Errorf("%v on a file it can read but not write: %v\n%s", args, err, out)
		}
	}
}
