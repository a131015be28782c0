package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestNewFileIsTheOwnersAlone: a database file Open creates, its WAL and
// shared-memory files and prescient's queue file are readable by their
// owner only, whatever the umask (they hold the applications' keys,
// payloads and errors; found by a security review: 0644 under umask 022).
// A file that exists keeps its mode.
func TestNewFileIsTheOwnersAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prescient.db")
	s, err := Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, name := range []string{"prescient.db", "prescient.db-wal", "prescient.db-shm", "prescient.db" + queueSuffix} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if os.IsNotExist(err) && name != "prescient.db" {
			continue // made later, or not in this journal mode
		}
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want -rw-------", name, fi.Mode().Perm())
		}
	}
	shared := filepath.Join(dir, "shared.db")
	if err := os.WriteFile(shared, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o640); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(context.Background(), shared, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if fi, err := os.Stat(shared); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("an existing file: mode %v (%v), want its own -rw-r-----", fi.Mode().Perm(), err)
	}
}
