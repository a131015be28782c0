package cli

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// PostgreSQL answers SQLSTATE 42501 at connection time when the role lacks
// CONNECT on the database, which is how a maintenance window or a
// switchover commonly drains a database (REVOKE CONNECT ... FROM PUBLIC,
// terminate the sessions, work, GRANT it back). A server starting during
// that window waits (up to database.startup_timeout) for the GRANT, as for
// any other outage; a version that treated 42501 as something "waiting
// cannot change" exited 1 at once (found by a review).
func TestStartupWaitsThroughAConnectDrain(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t, "")
	appURL := pgtest.Role(t, db)
	u, err := url.Parse(appURL)
	if err != nil {
		t.Fatal(err)
	}
	role, dbName := u.User.Username(), strings.TrimPrefix(u.Path, "/")
	admin := func(sql string) {
		t.Helper()
		c, err := pgx.Connect(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() { admin("DROP OWNED BY " + pgx.Identifier{role}.Sanitize()) }) // before pgtest drops the role
	admin("CREATE SCHEMA prescient AUTHORIZATION " + pgx.Identifier{role}.Sanitize())
	// The maintenance window: no new sessions on the database.
	admin("REVOKE CONNECT ON DATABASE " + pgx.Identifier{dbName}.Sanitize() + " FROM PUBLIC")

	cfg := writeConfig(t, "log: {format: json}\nslots: {resolution: 1s, cycle: 0s}\ndatabase:\n  schema: prescient\n  startup_timeout: 2m\n")
	run := startAPIRun(t, map[string]string{EnvDatabaseURL: appURL}, cfg, "--migrate")
	for !strings.Contains(run.log.String(), "not ready, retrying") {
		select {
		case err := <-run.done:
			run.done <- err
			t.Fatalf("run exited during a connection drain instead of waiting for it to end: %v", err)
		case <-time.After(50 * time.Millisecond): // polling a log, not synchronising goroutines
		}
	}
	// The window ends.
	admin("GRANT CONNECT ON DATABASE " + pgx.Identifier{dbName}.Sanitize() + " TO PUBLIC")
	for !strings.Contains(run.log.String(), `"msg":"serving"`) {
		select {
		case err := <-run.done:
			run.done <- err
			t.Fatalf("run returned %v after the drain ended; logs:\n%s", err, run.log.String())
		case <-time.After(50 * time.Millisecond): // polling a log, not synchronising goroutines
		}
	}
}
