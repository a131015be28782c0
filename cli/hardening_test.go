package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// sqliteHarness runs commands on the SQLite file path, with a configuration
// file holding database.path and then extra.
func sqliteHarness(t *testing.T, path, extra string) *harness {
	return &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+path+"\n"+extra)}
}

// TestCommandsUseTheGridTheServersRecorded: against a database whose servers
// recorded a 5-second grid, a command whose configuration does not set the
// grid rounds on the servers' grid, not on the default 15 minutes; one whose
// configuration sets another grid is refused, with a message stating both,
// by every command that rounds times (schedule, sweep, status).
func TestCommandsUseTheGridTheServersRecorded(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	servers := sqliteHarness(t, db, "slots:\n  resolution: 5s\n  cycle: 0s\n")
	wantContains(t, "servers' migrate", servers.mustRun("migrate"), "slot grid every 5s")

	plain := sqliteHarness(t, db, "")
	out := plain.mustRun("schedule", "order", "1", "order_unshipped", "--at", "2030-01-01T10:00:01Z")
	wantContains(t, "schedule without slots", out, "next check in slot 2030-01-01T10:00:05Z")
	wantContains(t, "status without slots", plain.mustRun("status"), "(grid every 5s")
	wantContains(t, "migrate without slots", plain.mustRun("migrate"), "slot grid every 5s", "kept from the database")

	explicit := sqliteHarness(t, db, "slots:\n  resolution: 15m\n")
	for _, args := range [][]string{
		{"schedule", "order", "2", "order_unshipped", "--at", "2030-01-01T10:00:01Z"},
		{"sweep", "--mode", "reslot"},
		{"status"},
	} {
		_, err := explicit.run(args...)
		if err == nil {
			t.Errorf("prescient %s with slots.resolution: 15m against a 5s grid: no error", strings.Join(args, " "))
			continue
		}
		wantContains(t, "prescient "+args[0]+" refused", err.Error(),
			explicit.config+":4: slots.resolution: ", "every 15m0s", "every 5s", "slots.resolution: 5s")
	}
	// Commands that do not round times work whatever the grid.
	wantContains(t, "cancel", explicit.mustRun("cancel", "order", "1"), "cancelled 1 job(s)")
	wantContains(t, "history", explicit.mustRun("history"), "cancelled")
	// The servers' own configuration, and a new database, round on the
	// configured grid.
	wantContains(t, "schedule with the servers' grid", servers.mustRun("schedule", "order", "3", "order_unshipped", "--at", "2030-01-01T10:00:06Z"),
		"slot 2030-01-01T10:00:10Z")
	fresh := sqliteHarness(t, filepath.Join(t.TempDir(), "fresh.db"), "slots:\n  resolution: 15m\n")
	wantContains(t, "schedule on a new database", fresh.mustRun("schedule", "order", "4", "order_unshipped", "--at", "2030-01-01T10:00:01Z"),
		"slot 2030-01-01T10:15:00Z")

	// A server without slots in its configuration fires the recorded grid,
	// rather than record the default over it.
	srv := startRun(t, sqliteHarness(t, db, "sweep:\n  on_start: false\n"))
	waitFor(t, 20*time.Second, "run serving", srv, func() bool { return strings.Contains(srv.stderr.String(), "msg=serving") })
	wantContains(t, "run without slots", srv.stderr.String(), "using the slot grid recorded in the database", `grid="every 5s,`)
}

// TestReadOnlyCommandsRefuseAMissingFile: status and history, run where
// there is no SQLite file, say which file they looked for and how to name
// the right one, and do not create an empty database; nor do the commands
// that act on jobs scheduled before (cancel printed "cancelled 0 job(s)"
// from the wrong directory, leaving an empty prescient.db there).
func TestReadOnlyCommandsRefuseAMissingFile(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "elsewhere", "prescient.db")
	h := sqliteHarness(t, missing, "")
	for _, args := range [][]string{{"status"}, {"history"}, {"cancel", "order", "42"}, {"resolve", "order", "42", "shipped"},
		{"reschedule", "order", "42", "order_unshipped", "--in", "1h"}, {"retry", "--entity", "order", "--key", "42"}, {"sweep"}} {
		cmd := strings.Join(args, " ")
		_, err := h.run(args...)
		if err == nil {
			t.Fatalf("%s without a SQLite file: no error", cmd)
		}
		wantContains(t, cmd, err.Error(), h.config+":2: database.path: no SQLite file at "+missing, "--config", "PRESCIENT_DATABASE_URL")
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s created %s (stat: %v)", cmd, missing, err)
		}
	}

	// Without --config, the default file in the working directory.
	abs, err := filepath.Abs(DatabasePathDefault)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err == nil {
		t.Skipf("%s exists", abs)
	}
	t.Cleanup(func() {
		for _, f := range []string{abs, abs + "-wal", abs + "-shm"} {
			os.Remove(f)
		}
	})
	none := &harness{t: t, env: map[string]string{}}
	_, err = none.run("status")
	if err == nil {
		t.Fatal("status without --config or a file: no error")
	}
	wantContains(t, "status without --config", err.Error(), "database.path: no SQLite file at "+abs, "no --config given")
	if _, err := os.Stat(abs); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("status created %s", abs)
	}
}

// TestOutputNamesTheDatabase: the output of every command that uses the
// database starts with the database it used, and never shows a password.
func TestOutputNamesTheDatabase(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "named.db")
	h := sqliteHarness(t, db, "")
	commands := [][]string{
		{"migrate"},
		{"schedule", "order", "1", "order_unshipped", "--in", "1h"},
		{"status"},
		{"sweep"},
		{"resolve", "order", "1", "shipped"},
		{"cancel", "order", "1"},
		{"history"},
	}
	for _, args := range commands {
		out := h.mustRun(args...)
		if want := "database: sqlite file " + db + "\n"; !strings.HasPrefix(out, want) {
			t.Errorf("prescient %s: output does not start with %q:\n%s", strings.Join(args, " "), want, out)
		}
	}
	for _, args := range [][]string{{"status", "--json"}, {"history", "--json"}} {
		if out := h.mustRun(args...); strings.Contains(out, "database:") {
			t.Errorf("prescient %s: JSON output holds the database line:\n%s", strings.Join(args, " "), out)
		}
	}

	// PostgreSQL: host, port, database and schema, and no password (the
	// test server trusts every connection, so any password will do).
	url, schema := pgtest.SchemaName(t)
	withPassword := strings.Replace(url, "://root@", "://root:hunter2@", 1)
	if withPassword == url {
		t.Skipf("cannot add a password to %s", url)
	}
	pg := &harness{t: t, env: map[string]string{EnvDatabaseURL: withPassword}, config: writeConfig(t, "database:\n  schema: "+schema+"\n")}
	for _, args := range commands {
		out := pg.mustRun(args...)
		if !strings.HasPrefix(out, "database: postgres ") || !strings.Contains(out, " schema "+schema+"\n") || strings.Contains(out, "hunter2") {
			t.Errorf("prescient %s on PostgreSQL: output does not start with its host, port, database and schema, without the password:\n%s",
				strings.Join(args, " "), out)
		}
	}

	// A URL of several hosts (a primary and its standby) names them all,
	// and the one reached: not the first alone, which here does not even
	// listen (found by an operator's trial).
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	// A port just freed: nothing listens on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, dead, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	real := u.Host
	u.Host = "127.0.0.1:" + dead + "," + real
	multi := &harness{t: t, env: map[string]string{EnvDatabaseURL: u.String()}, config: writeConfig(t, "database:\n  schema: "+schema+"\n")}
	out := multi.mustRun("status")
	want := "database: postgres 127.0.0.1:" + dead + "," + real + "/"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "(connected to "+real+") schema "+schema+"\n") {
		t.Errorf("prescient status on a URL of two hosts, the first down: output does not start with %q and name %s as reached:\n%s", want, real, out)
	}
}

// TestScheduleOfAnUnknownCheck: scheduling a check no server has registered
// warns, naming the checks the servers know; --require-known-check refuses
// it and schedules nothing.
func TestScheduleOfAnUnknownCheck(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "")
	h.mustRun("migrate") // records the binary's catalog: order_unshipped

	_, stderr, err := h.runCtx(context.Background(), "schedule", "order", "1", "order_unshiped", "--in", "1h")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "stderr of a schedule of an unknown check", stderr,
		`warning: no server runs a check named "order_unshiped" (known checks: order_unshipped)`, "--require-known-check")

	_, err = h.run("schedule", "order", "2", "order_unshiped", "--in", "1h", "--require-known-check")
	if err == nil {
		t.Fatal("schedule of an unknown check with --require-known-check: no error")
	}
	wantContains(t, "refusal", err.Error(), `"order_unshiped"`, "known checks: order_unshipped", "not scheduled")
	wantContains(t, "status", h.mustRun("status"), "pending: 1\n")

	_, stderr, err = h.runCtx(context.Background(), "schedule", "order", "3", "order_unshipped", "--in", "1h", "--require-known-check")
	if err != nil || stderr != "" {
		t.Errorf("schedule of a known check: %v, stderr %q; want no error and no warning", err, stderr)
	}

	// A job refused for its key is not warned of: it does not exist
	// (found by a new user's trial).
	_, stderr, err = h.runCtx(context.Background(), "schedule", "order", "a\tb", "order_unshiped", "--in", "1h")
	if err == nil || strings.Contains(stderr, "warning") {
		t.Errorf("schedule of an unknown check with a key holding a tab: %v, stderr %q; want an error and no warning", err, stderr)
	}

	// A time that has passed runs in a later slot, which is said.
	stdout, stderr, err := h.runCtx(context.Background(), "schedule", "order", "5", "order_unshipped", "--at", "2020-01-01T00:00:00Z")
	if err != nil || !strings.Contains(stdout, "created") ||
		!strings.Contains(stderr, "note: --at 2020-01-01T00:00:00Z has passed (it is ") || !strings.Contains(stderr, "the check runs in slot ") {
		t.Errorf("schedule --at in 2020: %v, stdout %q, stderr %q; want it created and a note that the time had passed", err, stdout, stderr)
	}
	if _, stderr, err = h.runCtx(context.Background(), "schedule", "order", "5", "order_unshipped", "--at", "2020-01-01T00:00:00Z", "--on-conflict", "keep"); err != nil || stderr != "" {
		t.Errorf("schedule --at in 2020 of a pending job kept as it was: %v, stderr %q; want no note (the time was not used)", err, stderr)
	}
	_, stderr, err = h.runCtx(context.Background(), "reschedule", "order", "5", "order_unshipped", "--at", "2021-01-01T00:00:00Z")
	if err != nil || !strings.Contains(stderr, "note: --at 2021-01-01T00:00:00Z has passed") {
		t.Errorf("reschedule --at in 2021: %v, stderr %q; want a note that the time had passed", err, stderr)
	}
	if _, stderr, err = h.runCtx(context.Background(), "reschedule", "order", "5", "order_unshipped", "--at", "2099-01-01T00:00:00Z"); err != nil || stderr != "" {
		t.Errorf("reschedule --at in 2099: %v, stderr %q; want no note", err, stderr)
	}

	// On a fresh database no server has recorded a catalog, but this
	// binary runs order_unshipped itself: it is known.
	fresh := sqliteHarness(t, filepath.Join(t.TempDir(), "fresh.db"), "")
	_, stderr, err = fresh.runCtx(context.Background(), "schedule", "order", "4", "order_unshipped", "--in", "1h", "--require-known-check")
	if err != nil || stderr != "" {
		t.Errorf("schedule of the binary's own check on a fresh database: %v, stderr %q; want no error and no warning", err, stderr)
	}
}

// slowDeclared declares a check whose own runtime guard, 2m, is longer than
// the server's.
const slowDeclared = "checks:\n  slow:\n    entity: order\n    query: SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each($1))\n" +
	"    stages: [{after: 0s, event: late}]\n    guards:\n      runtime: 2m\n" + logSink

// TestBusyTimeout: database.busy_timeout follows the longest runtime guard
// (the server's or a declared check's own) unless set, is refused when set
// no longer than a group of checks may hold the write lock, and is what the
// SQLite store waits.
func TestBusyTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, yaml string
		want       time.Duration
	}{
		{"default", "", sqlite.BusyTimeoutDefault},
		{"follows guards.runtime", "guards:\n  runtime: 2m\n", 2*time.Minute + time.Second + 15*time.Second},
		{"set", "database:\n  busy_timeout: 90s\n", 90 * time.Second},
		{"set, with PostgreSQL", "database:\n  url: postgres://app@db:5432/app\n  busy_timeout: 1s\n", time.Second},
		{"follows a declared check's longer runtime guard", "guards:\n  runtime: 1s\n" + slowDeclared, 2*time.Minute + time.Second + 15*time.Second},
	} {
		cfg, err := ParseConfig("prescient.yaml", []byte(tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := cfg.busyTimeout(); got != tt.want {
			t.Errorf("%s: busy timeout %s, want %s", tt.name, got, tt.want)
		}
	}
	for _, tt := range []struct{ yaml, want string }{
		{"guards:\n  runtime: 1m\ndatabase:\n  busy_timeout: 1m\n",
			"prescient.yaml:4: database.busy_timeout: 1m0s is not more than guards.runtime + group_duration, 1m1s"},
		{"guards:\n  runtime: 1s\ndatabase:\n  busy_timeout: 1m\n" + slowDeclared,
			"prescient.yaml:4: database.busy_timeout: 1m0s is not more than checks.slow.guards.runtime + group_duration, 2m1s"},
		{"database:\n  busy_timeout: 0s\n", "prescient.yaml:2: database.busy_timeout: must be positive"},
		{"database:\n  busy_timeout: -1\n", "prescient.yaml:2: database.busy_timeout: must be positive"},
		{"database:\n  busy_timeout: 48h\n", "prescient.yaml:2: database.busy_timeout: must be at most 24h0m0s"},
		{"database:\n  startup_timeout: 0s\n", "prescient.yaml:2: database.startup_timeout: must be positive (such as 5m), or -1 to retry forever, got 0s"},
	} {
		cfg, err := ParseConfig("prescient.yaml", []byte(tt.yaml))
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want one containing %q", tt.yaml, err, tt.want)
		}
	}

	// The CLI's store waits that long.
	cfg, err := ParseConfig("prescient.yaml", []byte("database:\n  path: "+filepath.Join(t.TempDir(), "busy.db")+"\n  busy_timeout: 90s\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(context.Background(), cfg, false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ms int64
	if err := st.(*sqlite.Store).DB().QueryRow(`PRAGMA busy_timeout`).Scan(&ms); err != nil || ms != 90_000 {
		t.Errorf("PRAGMA busy_timeout = %d, %v; want 90000", ms, err)
	}
}

// runningServer is `prescient run` in the background.
type runningServer struct {
	stderr *syncBuffer
	exit   chan struct{} // closed when run returns, with err
	err    error
	cancel context.CancelFunc
}

func startRun(t *testing.T, h *harness, args ...string) *runningServer {
	t.Helper()
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &runningServer{stderr: &syncBuffer{}, exit: make(chan struct{}), cancel: cancel}
	root := NewRootCommand(&Opts{Checks: reg, Out: io.Discard, Err: s.stderr, lookupEnv: envOf(h.env)})
	root.SetArgs(append([]string{"--config", h.config, "run"}, args...))
	go func() {
		defer close(s.exit)
		s.err = root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.exit
	})
	return s
}

// running fails the test if run has returned.
func (s *runningServer) running(t *testing.T) {
	t.Helper()
	select {
	case <-s.exit:
		t.Fatalf("run returned: %v; logs:\n%s", s.err, s.stderr.String())
	default:
	}
}

// readyz returns the status code of /readyz at addr, 0 when nothing answers.
func readyz(addr string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// freeAddr returns a loopback address nothing listens on (see
// pgtest.FreePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// waitFor polls cond, which looks at another process or the log of the
// server under test, until it holds or limit passes; the server must keep
// running meanwhile.
func waitFor(t *testing.T, limit time.Duration, what string, srv *runningServer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		srv.running(t)
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; logs:\n%s", what, limit, srv.stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // polling a server and its log, not synchronising goroutines
	}
}

// TestRunWaitsForTheDatabase: `prescient run` started while PostgreSQL is
// down does not exit: it reports not ready on /readyz, logs its retries, and
// starts once the database is up.
func TestRunWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	in := pgtest.NewInstance(t)
	in.Stop()
	addr := freeAddr(t)
	h := &harness{t: t, env: map[string]string{EnvDatabaseURL: in.URL},
		config: writeConfig(t, "server: patient\nslots: {resolution: 1s, cycle: 0s}\nhttp:\n  listen: "+addr+"\n")}
	srv := startRun(t, h, "--migrate")

	waitFor(t, 30*time.Second, "two retries logged", srv, func() bool {
		return strings.Count(srv.stderr.String(), "not ready, retrying") >= 2
	})
	if code := readyz(addr); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the database is down: %d, want 503", code)
	}
	srv.running(t)

	in.Start()
	waitFor(t, 60*time.Second, "/readyz 200 once the database is up", srv, func() bool {
		return readyz(addr) == http.StatusOK
	})
	waitFor(t, 10*time.Second, "serving logged", srv, func() bool {
		return strings.Contains(srv.stderr.String(), "msg=serving ") // not "serving http", logged first
	})
	wantContains(t, "logs", srv.stderr.String(), "database reached: started", "serving")
	// The logs name the schema as every command does: the one in use.
	if logs := srv.stderr.String(); strings.Count(logs, "schema public") < 2 || strings.Contains(logs, "first of the search_path") {
		t.Errorf("run's migrated and serving lines do not name the schema in use (public):\n%s", logs)
	}
	srv.cancel()
	<-srv.exit
	if srv.err != nil {
		t.Errorf("run after a signal: %v", srv.err)
	}
}

// TestRunGivesUpAfterTheStartupTimeout: with nothing listening, run retries
// until database.startup_timeout, not ready meanwhile, then exits with an
// error that says so.
func TestRunGivesUpAfterTheStartupTimeout(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	url := fmt.Sprintf("postgres://app@%s/app?sslmode=disable&connect_timeout=2", freeAddr(t))
	h := &harness{t: t, env: map[string]string{EnvDatabaseURL: url},
		config: writeConfig(t, "database:\n  startup_timeout: 2s\nhttp:\n  listen: "+addr+"\n")}
	srv := startRun(t, h)
	waitFor(t, 10*time.Second, "a retry logged", srv, func() bool {
		return strings.Contains(srv.stderr.String(), "not ready, retrying")
	})
	if code := readyz(addr); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while retrying: %d, want 503", code)
	}
	<-srv.exit
	err := srv.err
	if err == nil {
		t.Fatalf("run with no database: no error; logs:\n%s", srv.stderr.String())
	}
	wantContains(t, "error", err.Error(), "gave up starting after", "database.startup_timeout is 2s", "-1 retries forever", "database.url")
	if n := strings.Count(srv.stderr.String(), "not ready, retrying"); n < 2 {
		t.Errorf("%d retries logged, want several:\n%s", n, srv.stderr.String())
	}
}

// TestRunRefusesANonUTF8Database: a database not encoded in UTF-8 cannot
// become usable by waiting, so run exits at once saying what to change,
// even when told to retry forever.
func TestRunRefusesANonUTF8Database(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t, "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	h := &harness{t: t, env: map[string]string{EnvDatabaseURL: url},
		config: writeConfig(t, "database:\n  startup_timeout: -1\n")}
	srv := startRun(t, h, "--migrate")
	select {
	case <-srv.exit:
	case <-time.After(30 * time.Second):
		srv.cancel()
		<-srv.exit
		t.Fatalf("run on a LATIN1 database still running after 30 s; logs:\n%s", srv.stderr.String())
	}
	if srv.err == nil {
		t.Fatalf("run on a LATIN1 database: no error; logs:\n%s", srv.stderr.String())
	}
	wantContains(t, "error", srv.err.Error(), "encoded in LATIN1", "ENCODING 'UTF8'")
	if strings.Contains(srv.stderr.String(), "not ready, retrying") {
		t.Errorf("run retried a database it cannot use:\n%s", srv.stderr.String())
	}
}

// TestEnvironmentOverridesNamedInErrors: a value refused that came from
// PRESCIENT_SERVER or PRESCIENT_DATABASE_URL is named by that variable, not
// by a key of the file, which may not even set it.
func TestEnvironmentOverridesNamedInErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	config := writeConfig(t, "slots:\n  resolution: 15m\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"server", map[string]string{EnvServer: "web 1"}, `PRESCIENT_SERVER (overriding server): invalid server name "web 1"`},
		{"database URL", map[string]string{EnvDatabaseURL: pgtest.WithParam(pgtest.URL(), "client_encoding=LATIN1")},
			"PRESCIENT_DATABASE_URL (overriding database.url): open postgres: not a UTF-8 database connection"},
	} {
		_, _, err := runAt(t, ctx, time.Now(), tc.env, config, "status")
		if err == nil {
			t.Errorf("%s: status with a bad override: no error", tc.name)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), config) {
			t.Errorf("%s: error %q; want it to begin %q and not name the file", tc.name, err, tc.want)
		}
	}
	// A URL written in the file is named by its line, as database.path is
	// (found by a new user's trial).
	inFile := writeConfig(t, "workers: 3\ndatabase:\n  url: postgres://root:hunter2@127.0.0.1:99999/x\n")
	_, _, err := runAt(t, ctx, time.Now(), map[string]string{}, inFile, "status")
	if want := inFile + ":3: database.url: open postgres: cannot parse"; err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("status with a bad database.url in the file: %v; want it to begin %q, without the password", err, want)
	}
}

// The CLI's PostgreSQL pool is sized for its workers unless
// database.max_conns or the URL's pool_max_conns says otherwise.
func TestStorePoolSizedForTheWorkers(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.SchemaName(t)
	for _, tc := range []struct {
		yaml string
		want int32
	}{
		{"workers: 30\n", 30 + postgres.PoolSpare},
		{"workers: 30\ndatabase:\n  max_conns: 6\n", 6},
	} {
		cfg, err := ParseConfig("prescient.yaml", []byte(tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Database.URL, cfg.Database.Schema = url, schema
		st, err := openStore(context.Background(), cfg, false, false)
		if err != nil {
			t.Fatal(err)
		}
		got := st.(*postgres.Store).Pool().Config().MaxConns
		st.Close()
		if got != tc.want {
			t.Errorf("%q: pool of %d connections, want %d", tc.yaml, got, tc.want)
		}
	}
}

// TestRunSaysWhatWaitingMayNotFix: a database or role that does not exist,
// a privilege the role lacks or a SQLite file it cannot write usually mean
// the configuration is wrong: each retry says so at error level, naming the
// cause, rather than "database unavailable", and the final error names it.
// (It is tried again all the same: an operator may be creating the database
// or role, or a maintenance window may have revoked CONNECT; an earlier
// version that gave up at once failed a server started during such a drain.)
func TestRunSaysWhatWaitingMayNotFix(t *testing.T) {
	t.Parallel()
	missingDB, err := neturl.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	missingDB.Path = "/prescient_no_such_database"
	missingRole, err := neturl.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	missingRole.User = neturl.User("prescient_no_such_role")
	// A role of its own may connect, but PostgreSQL 15 gives it no right to
	// create tables in a new database's public schema, which --migrate needs.
	unprivileged := pgtest.Role(t, pgtest.Database(t, ""))

	// A SQLite path that is a directory, and one no one can write (root
	// included): a file where its directory should be.
	sqliteDir := t.TempDir()
	aFile := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, url, database string
		want                []string
	}{
		{"missing database", missingDB.String(), "", []string{`database "prescient_no_such_database" does not exist`, "the database does not exist"}},
		{"missing role", missingRole.String(), "", []string{`prescient_no_such_role`, "SQLSTATE 28000", "the server refuses this role"}},
		{"no privilege", unprivileged, "", []string{"permission denied", "the role lacks a privilege"}},
		{"SQLite path that is a directory", "", "  path: " + sqliteDir + "\n", []string{"database.path", sqliteDir, "is a directory, not a SQLite database file", "names no SQLite database file"}},
		{"unwritable SQLite file", "", "  path: " + filepath.Join(aFile, "x.db") + "\n", []string{"database.path", aFile, "not writable", "not a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			if tc.url != "" {
				env[EnvDatabaseURL] = tc.url
			}
			h := &harness{t: t, env: env,
				config: writeConfig(t, "database:\n"+tc.database+"  startup_timeout: 12s\n")} // long enough to retry, under load, a migration that takes 3s to refuse
			srv := startRun(t, h, "--migrate")
			<-srv.exit
			if srv.err == nil {
				t.Fatalf("run: no error; logs:\n%s", srv.stderr.String())
			}
			wantContains(t, "error", srv.err.Error(), append([]string{"gave up starting after"}, tc.want...)...)
			logs := srv.stderr.String()
			if !strings.Contains(logs, "level=ERROR msg=\"cannot start: ") || !strings.Contains(logs, "retrying in case it is being set up (if not, fix the URL, the role or its grants)") ||
				strings.Contains(logs, "database unavailable") {
				t.Errorf("the retries should say, at error level, what is refused and what to fix, not that the database is unavailable:\n%s", logs)
			}
		})
	}
}

// On a grid finer than a second, the commands print a slot with its
// fraction: cut to the second, it named a slot that does not exist (found by
// an operator's trial: 06:05:47Z for the slot 06:05:47.750Z).
func TestSubSecondSlotsPrintedWhole(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "slots:\n  resolution: 250ms\n  cycle: 0s\n")
	h.mustRun("migrate")
	out := h.mustRun("schedule", "order", "1", "order_unshipped", "--at", "2030-01-01T10:00:01.6Z")
	wantContains(t, "schedule", out, "next check in slot 2030-01-01T10:00:01.75Z", "first check 2030-01-01T10:00:01.75Z")
	wantContains(t, "jobs list", h.mustRun("jobs", "list"), "2030-01-01T10:00:01.75Z")
	out = h.mustRun("schedule", "order", "2", "order_unshipped", "--at", "2030-01-01T10:00:01Z")
	wantContains(t, "schedule on a whole second", out, "next check in slot 2030-01-01T10:00:01Z")
}

// A Go check of the binary with a runtime guard of its own, longer than the
// server's, holds SQLite's write lock that long too: busy_timeout follows
// it, and one set shorter is refused (found by a review).
func TestBusyTimeoutFollowsAGoChecksRuntimeGuard(t *testing.T) {
	t.Parallel()
	reg := &checks.Registry{}
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	if err := reg.Register("slow_go", noop, &checks.Opts{Guards: guards.Limits{Runtime: 2 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
	e := &env{configPath: writeConfig(t, "guards:\n  runtime: 1s\n"), opts: (&Opts{Checks: reg, lookupEnv: noEnv}).withDefaults()}
	cfg, err := e.config()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.busyTimeout(), 2*time.Minute+time.Second+15*time.Second; got != want {
		t.Errorf("busy timeout %s, want %s", got, want)
	}
	e.configPath = writeConfig(t, "guards:\n  runtime: 1s\ndatabase:\n  busy_timeout: 1m\n")
	if _, err := e.config(); err == nil || !strings.Contains(err.Error(), "database.busy_timeout: 1m0s is not more than the runtime guard a Go check of this binary sets + group_duration, 2m1s") {
		t.Errorf("busy_timeout 1m beside a Go check's 2m guard: %v, want it refused", err)
	}
}

// migrate with another grid than the one recorded says it replaced it: it
// printed the new grid alone, and an operator who changed it by mistake had
// no word of what the servers and the SQL functions now follow (found by a
// new user's trial).
func TestMigrateSaysItReplacedTheGrid(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "prescient.db")
	first := sqliteHarness(t, db, "slots:\n  resolution: 5s\n  cycle: 0s\n")
	if out := first.mustRun("migrate"); strings.Contains(out, "replaced") {
		t.Errorf("first migrate says it replaced a grid:\n%s", out)
	}
	if out := first.mustRun("migrate"); strings.Contains(out, "replaced") {
		t.Errorf("migrate with the same grid says it replaced it:\n%s", out)
	}
	other := sqliteHarness(t, db, "slots:\n  resolution: 15m\n")
	// SQLite has no SQL function to follow it (found by a new user's trial).
	out := other.mustRun("migrate")
	wantContains(t, "migrate with another grid", out, "slot grid every 15m0s",
		"the slot grid recorded before, every 5s, is replaced: restart the servers with it")
	if strings.Contains(out, "prescient_schedule") {
		t.Errorf("migrate on SQLite speaks of prescient_schedule, PostgreSQL's:\n%s", out)
	}
	url, schema := pgtest.SchemaName(t)
	pgFirst := &harness{t: t, env: map[string]string{EnvDatabaseURL: url}, config: writeConfig(t, "database:\n  schema: "+schema+"\nslots:\n  resolution: 5s\n  cycle: 0s\n")}
	pgFirst.mustRun("migrate")
	pgOther := &harness{t: t, env: map[string]string{EnvDatabaseURL: url}, config: writeConfig(t, "database:\n  schema: "+schema+"\nslots:\n  resolution: 15m\n")}
	wantContains(t, "migrate with another grid on PostgreSQL", pgOther.mustRun("migrate"),
		"the slot grid recorded before, every 5s, is replaced: prescient_schedule rounds to the new one now, restart the servers with it")
	var res struct {
		Replaced string `json:"grid_replaced"`
	}
	back := sqliteHarness(t, db, "slots:\n  resolution: 5s\n  cycle: 0s\n")
	if err := json.Unmarshal([]byte(back.mustRun("migrate", "--json")), &res); err != nil || res.Replaced != "every 15m0s" {
		t.Errorf("migrate --json back to 5s: grid_replaced %q, %v; want every 15m0s", res.Replaced, err)
	}
}
