package cli

import (
	"os/exec"

	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"

	_ "modernc.org/sqlite"
)

// waitServing waits for run to log "serving", failing if it returns first.
func waitServing(t *testing.T, srv *runningServer, limit time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(srv.stderr.String(), "msg=serving ") {
		select {
		case <-srv.exit:
			t.Fatalf("%s: run returned %v without serving; logs:\n%s", what, srv.err, srv.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not serving within %s; logs:\n%s", what, limit, srv.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSQLiteRollbackServes: checkSchema only warns of a schema a
// newer prescient migrated, "so that rolling back a release does not stop
// the servers". On SQLite (the default) every command opens the file with
// Migrate, which now refuses such a schema (ErrSchemaNewer): after a
// rollback, run never starts (and status, jobs, history fail too).
func TestSQLiteRollbackServes(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, db, "slots: {resolution: 1s, cycle: 0s}\n")
	h.mustRun("migrate")
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	// As a newer prescient's migration would leave it.
	if _, err := raw.Exec(`INSERT INTO prescient_migrations (version_id, is_applied) VALUES (9999, 1)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, err := h.run("status"); err != nil {
		t.Errorf("status after a rollback (file at version 9999, newer than this binary's): %v", err)
	}
	h.config = writeConfig(t, "database:\n  path: "+db+"\n  startup_timeout: 3s\nslots: {resolution: 1s, cycle: 0s}\n")
	srv := startRun(t, h)
	waitServing(t, srv, 10*time.Second, "run after a rollback on SQLite")
}

// TestRunMigrateAfterRollback: `run --migrate` (a common entrypoint)
// of an older release on a database a newer one migrated: goose's Up had
// nothing to do and run served, with checkSchema's stated intent that a
// rollback not stop the servers; now Migrate refuses, start-up retries it
// as "database unavailable" and gives up.
func TestRunMigrateAfterRollback(t *testing.T) {
	t.Parallel()
	h, url, schema := dbHarness(t, "")
	h.mustRun("migrate")
	markMigratedTo(t, url, schema, 9999)
	h.config = writeConfig(t, "database:\n  schema: "+schema+"\n  startup_timeout: 3s\nslots: {resolution: 1s, cycle: 0s}\n")
	srv := startRun(t, h, "--migrate")
	waitServing(t, srv, 10*time.Second, "run --migrate after a rollback")
}

// TestEnvTrailingNewline: a variable read from a secret file
// (Kubernetes secretKeyRef of a file created with a trailing newline,
// docker --env-file of such a value, export X="$(cat f; echo)") ends with
// "\n". Unquoted in the file it used to end its own line harmlessly; now
// the whole configuration is refused.
func TestEnvTrailingNewline(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "database:\n  path: ${P}\nworkers: 2\n")
	cfg, err := loadConfig(path, envOf(map[string]string{"P": "/var/lib/prescient/jobs.db\n"}))
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("a variable ending with a newline: %v", err)
	}
	if cfg.Database.Path != "/var/lib/prescient/jobs.db" {
		t.Errorf("database.path %q", cfg.Database.Path)
	}
}

// TestShellWordNonPrintingKey: a valid key may hold characters
// unicode.IsPrint calls non-printing that checks.ValidateKey allows: the
// zero-width joiner of emoji sequences (U+200D), the ZWNJ of Persian text
// (U+200C), a no-break space (U+00A0), a soft hyphen (U+00AD). shellWord
// then returns safeText(s) unquoted: a space, $, ; or ' in the same key is
// read by the shell (split words, expansion, a second command), and the
// \u escapes are read as the letters u200d.
func TestShellWordNonPrintingKey(t *testing.T) {
	for _, key := range []string{
		"A 1\u200d",             // a space: two words
		"a$(echo X)\u200c",      // command substitution
		"x;echo INJECTED\u00a0", // a second command
		"it's\u00ad",            // a lone quote: the shell waits for its pair
		"👨\u200d👩\u200d👧",       // a family emoji, on its own
	} {
		if err := checks.ValidateKey("order", key); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		word := shellWord(key)
		for _, sh := range []string{"sh", "bash"} {
			out, err := exec.Command(sh, "-c", `set -- `+word+`; printf '%s\n' "$#"; printf '%s' "$1"`).CombinedOutput()
			if err != nil || string(out) != "1\n"+key {
				t.Errorf("key %q: shellWord gives %s, which %s reads as %q (%v); want the one word %q",
					key, word, sh, out, err, key)
			}
		}
	}
}
