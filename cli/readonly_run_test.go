package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// README (start-up): "an SQLite file or directory it cannot write) is
// logged at error level naming the cause and what to fix". An existing,
// migrated WAL file that cannot be written opens and migrates without
// error (nothing to write), so run's first write fails later: the retries
// said "database unavailable" with SQLite's bare "readonly database" (found
// by a review); SQLITE_READONLY is now ErrNotWritable. The file is made
// unwritable even for root with chattr +i (e2fsprogs, on ext2/3/4).
func TestRunOnUnwritableMigratedSQLiteFileNamesIt(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, db, "  startup_timeout: 3s\n")
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "42", "order_unshipped", "--in", "3h")
	if out, err := exec.Command("chattr", "+i", db).CombinedOutput(); err != nil {
		t.Fatalf("cannot make the file unwritable (chattr +i, from the package e2fsprogs, on an ext2/3/4 file system): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", db).Run() })
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
