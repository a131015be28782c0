package cli

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/prescient-dev/prescient/migrations"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// migrateTo applies the PostgreSQL migrations up to version in schema,
// as an earlier prescient would have left the database.
func migrateTo(t *testing.T, url, schema string, version int64) {
	t.Helper()
	st, err := postgres.Open(t.Context(), url, &postgres.Opts{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Pool().Exec(t.Context(), "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	fsys, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(st.Pool())
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName("prescient_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
}

// TestRunRefusesASchemaBehindTheBinary: a new binary started without
// --migrate on a database an earlier prescient migrated (here to version 7,
// before the outbox of 00008) must say that the database needs `prescient
// migrate`, not start serving and fail every check that raises an event
// (each failure counts towards retry.max_failures, and the jobs end failed).
func TestRunRefusesASchemaBehindTheBinary(t *testing.T) {
	t.Parallel()
	h, url, schema := dbHarness(t, "")
	h.config = writeConfig(t, "database:\n  schema: "+schema+"\n  startup_timeout: 2s\nslots: {resolution: 1s, cycle: 0s}\n")
	migrateTo(t, url, schema, 7)

	srv := startRun(t, h)
	select {
	case <-srv.exit:
	case <-time.After(10 * time.Second):
		logs := srv.stderr.String()
		srv.cancel()
		<-srv.exit
		t.Fatalf("run on a schema at version 7 (before this binary's last migrations) still running after 10s, "+
			"serving=%v; logs:\n%s", strings.Contains(logs, "msg=serving "), logs)
	}
	if srv.err == nil || !strings.Contains(srv.err.Error(), "migrate") {
		t.Fatalf("run on a schema at version 7: error %v, want one that says to run prescient migrate; logs:\n%s",
			srv.err, srv.stderr.String())
	}
	// The database is reachable: the retries say what they wait for.
	if logs := srv.stderr.String(); !strings.Contains(logs, "cannot start: the database's schema is not migrated; not ready, retrying") ||
		strings.Contains(logs, "database unavailable") {
		t.Errorf("run on a schema behind the binary: the retries should say the schema is not migrated, not that the database is unavailable:\n%s", logs)
	}
}

// TestMigrateSaysTheDatabaseIsNewer: an older binary's `migrate` on a
// database that a newer prescient migrated (a version this binary does not
// know) must not report "migrated" as if all were well.
func TestMigrateSaysTheDatabaseIsNewer(t *testing.T) {
	t.Parallel()
	h, url, schema := dbHarness(t, "")
	h.mustRun("migrate")
	markMigratedTo(t, url, schema, 9999)
	out, stderr, err := h.runCtx(context.Background(), "migrate")
	if err == nil && !strings.Contains(out+stderr, "9999") {
		t.Fatalf("migrate on a database at version 9999 (this binary knows 11): no error and no word of it:\n%s%s", out, stderr)
	}
}

// TestCommandsWarnOfANewerSchema: a command other than migrate and run on a
// database a newer prescient migrated works, but says so on stderr: it may
// take what the newer version refuses (found by a new user's trial: an
// older schedule created a job the newer SQL would have refused).
func TestCommandsWarnOfANewerSchema(t *testing.T) {
	t.Parallel()
	h, url, schema := dbHarness(t, "")
	h.mustRun("migrate")
	if _, stderr, err := h.runCtx(context.Background(), "schedule", "order", "1", "order_unshipped", "--in", "1h"); err != nil || strings.Contains(stderr, "warning") {
		t.Fatalf("schedule on a current schema: %v, stderr %q; want no warning", err, stderr)
	}
	markMigratedTo(t, url, schema, 9999)
	for _, args := range [][]string{{"schedule", "order", "2", "order_unshipped", "--in", "1h"}, {"status"}} {
		_, stderr, err := h.runCtx(context.Background(), args...)
		if err != nil || !strings.Contains(stderr, "warning: the database's schema is at version 9999, newer than this prescient knows") {
			t.Errorf("prescient %s on a newer schema: %v, stderr %q; want it done, with a warning", strings.Join(args, " "), err, stderr)
		}
	}
}

// TestEnvValueWithALineBreakIsRefused: a variable whose value holds a line
// break, pasted into the file, would end its line: the value would be cut
// and every later error would name the wrong line (workers: 0 on line 3
// was reported on line 4). It is refused, at its own line.
func TestEnvValueWithALineBreakIsRefused(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "database:\n  path: \"${P}\"\nworkers: 0\n")
	cfg, err := loadConfig(path, envOf(map[string]string{"P": "a\nb.db"}))
	if err == nil {
		err = cfg.Validate()
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(err.Error(), "${P} holds a line break") {
		t.Fatalf("a variable holding a line break: error %v, want one at line 2 saying ${P} holds a line break", err)
	}
}

// markMigratedTo records version in schema's goose table, as a newer
// prescient's migrate would have.
func markMigratedTo(t *testing.T, url, schema string, version int64) {
	t.Helper()
	st, err := postgres.Open(t.Context(), url, &postgres.Opts{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Pool().Exec(t.Context(), `INSERT INTO prescient_migrations (version_id, is_applied) VALUES ($1, true)`, version); err != nil {
		t.Fatal(err)
	}
}

// liteMigrateTo applies the SQLite migrations up to version to the file at
// path, as an earlier prescient would have left it.
func liteMigrateTo(t *testing.T, path string, version int64) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fsys, err := fs.Sub(migrations.SQLite, "sqlite")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys,
		goose.WithTableName("prescient_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatalf("migrate to version %d: %v", version, err)
	}
}

// TestCommandsOnASchemaBehindTheBinary: a new binary's commands against a
// database an earlier prescient migrated say to migrate it, before they
// read or write anything. They failed with the SQL error of a missing
// column, and schedule saved the job, then failed reading the catalog
// (exit 1 for a job that exists). On SQLite, the commands that only read
// no longer migrate the file under a running older server; the ones that
// write still do (found by an upgrade's trial).
func TestCommandsOnASchemaBehindTheBinary(t *testing.T) {
	t.Parallel()
	readOnly := [][]string{{"status"}, {"jobs", "list"}, {"history"}, {"deliveries"}}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		h, url, schema := dbHarness(t, "")
		migrateTo(t, url, schema, 17)
		for _, args := range append(readOnly, []string{"schedule", "order", "1", "order_unshipped", "--in", "1h"}, []string{"cancel", "order", "1"}) {
			_, err := h.run(args...)
			if err == nil || !strings.Contains(err.Error(), "the database's schema is at version 17 and this prescient needs") ||
				!strings.Contains(err.Error(), "run `prescient migrate`") {
				t.Errorf("%s on a schema at version 17: %v, want it to say to migrate", strings.Join(args, " "), err)
			}
		}
		h.mustRun("migrate")
		if out := h.mustRun("jobs", "list"); strings.Contains(out, "order_unshipped") {
			t.Errorf("a job was scheduled by the refused schedule:\n%s", out)
		}
		h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "prescient.db")
		liteMigrateTo(t, path, 9)
		h := sqliteHarness(t, path, "")
		for _, args := range readOnly {
			_, err := h.run(args...)
			if err == nil || !strings.Contains(err.Error(), "the database's schema is at version 9 and this prescient needs") ||
				!strings.Contains(err.Error(), "or `prescient run`, which migrates a SQLite file") {
				t.Errorf("%s on a file at version 9: %v, want it to say to migrate", strings.Join(args, " "), err)
			}
		}
		st, err := sqlite.Open(t.Context(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		current, _, err := st.SchemaVersion(t.Context())
		st.Close()
		if err != nil || current != 9 {
			t.Fatalf("after the commands that only read, the file is at version %d (%v), want 9: they migrated it", current, err)
		}
		// A command that writes migrates it, as before.
		h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
		wantContains(t, "jobs list", h.mustRun("jobs", "list"), "order_unshipped")
	})
}
