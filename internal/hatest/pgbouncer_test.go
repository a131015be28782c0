package hatest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

const (
	pgbouncerPackage = "pgbouncer"
	pgbouncerBin     = "/usr/sbin/pgbouncer"
	// bouncerPoolSize is the server connections PgBouncer keeps for the
	// database: fewer than prescient's clients, so that they share them
	// transaction by transaction.
	bouncerPoolSize = 4
)

// bouncer is a PgBouncer of the test's own, in transaction pooling mode on a
// free loopback port, in front of a database of the test's own on the test
// server.
type bouncer struct {
	dir    string
	port   int
	user   string
	direct string // the database's URL, bypassing PgBouncer
	proc   *proc
}

// url connects through PgBouncer, with default_query_exec_mode set unless
// mode is empty.
func (b *bouncer) url(mode string) string {
	u := fmt.Sprintf("postgres://%s@127.0.0.1:%d/prescient?sslmode=disable", url.PathEscape(b.user), b.port)
	if mode != "" {
		u += "&default_query_exec_mode=" + mode
	}
	return u
}

// startPgBouncer creates a database on the test server (dropped when the
// test ends) and starts PgBouncer in front of it.
func startPgBouncer(t *testing.T) *bouncer {
	t.Helper()
	ctx := context.Background()
	backend, err := pgconn.ParseConfig(pgtest.URL())
	if err != nil {
		t.Fatalf("bad %s: %v", pgtest.URLEnv, err)
	}
	db := fmt.Sprintf("prescient_pgbouncer_%d", time.Now().UnixNano())
	admin, err := connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatalf("cannot reach the test PostgreSQL at %s (set %s): %v", pgtest.URL(), pgtest.URLEnv, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runs after PgBouncer is stopped (cleanups run last first).
		if c, err := connect(context.Background(), pgtest.URL()); err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	direct, _ := url.Parse(pgtest.URL())
	direct.Path = "/" + db

	// Not t.TempDir, whose parent only root may enter.
	dir, err := os.MkdirTemp("", "prescient-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := &bouncer{dir: dir, user: backend.User, direct: direct.String()}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	b.port = ports[0]
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, and there is no postgres user to run PgBouncer as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(b.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	conn := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", backend.Host, backend.Port, db, backend.User)
	if backend.Password != "" {
		conn += " password=" + backend.Password
	}
	ini := fmt.Sprintf(`[databases]
prescient = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 200
server_reset_query =
logfile = %s
pidfile = %s
`, conn, b.port, filepath.Join(b.dir, "userlist.txt"), backend.User, bouncerPoolSize,
		filepath.Join(b.dir, "pgbouncer.log"), filepath.Join(b.dir, "pgbouncer.pid"))
	for name, body := range map[string]string{
		"pgbouncer.ini": ini,
		"userlist.txt":  fmt.Sprintf("%q \"\"\n", backend.User),
	} {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(pgbouncerBin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.Dir = b.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	b.proc = &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(b.proc.done)
	}()
	t.Cleanup(b.proc.killGroup)
	// Poll PgBouncer (an external process) until it lets a client through.
	end := time.Now().Add(20 * time.Second)
	for {
		c, err := connect(ctx, b.url("simple_protocol"))
		if err == nil {
			c.Close(ctx)
			break
		}
		if !b.proc.alive() || time.Now().After(end) {
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not accept connections: %v\n%s\n%s", err, out, log)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
	return b
}

// poolFigures asks PgBouncer's admin console how many client and server
// connections the database has.
func (b *bouncer) poolFigures(t *testing.T) (clients, servers int) {
	t.Helper()
	ctx := context.Background()
	c, err := connect(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol", url.PathEscape(b.user), b.port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, x := range []struct {
		show string
		n    *int
	}{{"SHOW CLIENTS", &clients}, {"SHOW SERVERS", &servers}} {
		rows, err := c.Query(ctx, x.show)
		if err != nil {
			t.Fatal(err)
		}
		maps, err := pgx.CollectRows(rows, pgx.RowToMap)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m["database"] == "prescient" {
				*x.n++
			}
		}
	}
	return clients, servers
}

// TestPgBouncer runs prescient behind a real PgBouncer (the Debian package,
// 1.18, which cannot carry prepared statements across server connections:
// max_prepared_statements came in 1.21) in transaction pooling mode.
//
// With pgx's default statement cache, or a schema put in each connection's
// search_path, prescient would keep state on one server connection that
// the next transaction does not get: Open sees that it is behind a pooler
// and refuses, saying what to change, and so does the CLI. With
// default_query_exec_mode=exec in the URL and no schema setting, a real
// server fires every job exactly once, and scheduling and cancelling work,
// all through PgBouncer, with many client connections sharing a few server
// connections.
func TestPgBouncer(t *testing.T) {
	requirePackage(t, pgbouncerPackage, pgbouncerBin)
	b := startPgBouncer(t)
	ctx := context.Background()

	// Refused, and why.
	_, err := postgres.Open(ctx, b.url(""), nil)
	if !errors.Is(err, postgres.ErrPooler) || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
		t.Fatalf("Open through PgBouncer with pgx's statement cache: %v, want a refusal naming default_query_exec_mode=exec", err)
	}
	t.Logf("pgbouncer: with pgx's default statement cache, Open refuses: %v", err)
	_, err = postgres.Open(ctx, b.url("exec"), &postgres.Opts{Schema: "prescient"})
	if !errors.Is(err, postgres.ErrPooler) || !strings.Contains(err.Error(), "search_path") || strings.Contains(err.Error(), "default_query_exec_mode") {
		t.Fatalf("Open through PgBouncer with a schema: %v, want a refusal naming the search_path only", err)
	}
	// The CLI says the same and exits 1.
	cli := exec.Command(binary, "status")
	cli.Env = append(os.Environ(), "PRESCIENT_DATABASE_URL="+b.url(""))
	out, err := cli.CombinedOutput()
	if code := cli.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "connection pooler") || !strings.Contains(string(out), "default_query_exec_mode=exec") {
		t.Fatalf("prescient status through PgBouncer without the URL setting: exit %d (%v), want 1 and the refusal:\n%s", code, err, out)
	}
	// run does not retry what only a new URL can cure: it exits 1 at once
	// (database.startup_timeout, 5m by default, would otherwise keep it retrying).
	run := exec.Command(binary, "run")
	run.Env = append(os.Environ(), "PRESCIENT_DATABASE_URL="+b.url(""))
	out, err = run.CombinedOutput()
	if code := run.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "connection pooler") || strings.Contains(string(out), "retrying") {
		t.Fatalf("prescient run through PgBouncer without the URL setting: exit %d (%v), want 1 at once with the refusal:\n%s", code, err, out)
	}
	// Connected directly, the same settings are not refused.
	if st, err := postgres.Open(ctx, b.direct, &postgres.Opts{Schema: "prescient"}); err != nil {
		t.Fatalf("Open directly: %v", err)
	} else {
		st.Close()
	}

	// Works: migrations directly, everything else through PgBouncer.
	s := newServersVia(t, b.url("exec"), b.direct, "")
	s.start("a")
	s.start("b")
	s.waitRegistered(2)
	w := s.schedule(2000, 6, 10, 1, time.Now().Add(2*time.Second))
	// Scheduled and cancelled through PgBouncer before they are due.
	const cancelled = 50
	for i := range cancelled {
		key := fmt.Sprint(i)
		if _, err := s.client.Schedule(ctx, prescient.ScheduleParams{Entity: "cancelled", Key: key, Check: "fault", At: w.lastSlot}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.Cancel(ctx, "cancelled", key, ""); err != nil {
			t.Fatal(err)
		}
	}
	fig := s.waitSettled(w, 2*time.Minute)
	if fig.duplicates != 0 || fig.lost != 0 || fig.pending != 0 || fig.notDone != 0 {
		t.Fatalf("end state wrong: %v\n%s", fig, s.logTails())
	}
	n, err := s.count("SELECT count(*) FROM prescient_history WHERE entity = 'cancelled' AND outcome = 'cancelled'")
	if err != nil || n != cancelled {
		t.Fatalf("cancelled through PgBouncer: %d of %d in history as cancelled (%v)", n, cancelled, err)
	}
	if gone := s.exited(); len(gone) > 0 {
		t.Fatalf("servers %v exited\n%s", gone, s.logTails())
	}
	status, err := s.client.Status(ctx, nil)
	if err != nil {
		t.Fatalf("status through PgBouncer: %v", err)
	}
	clients, servers := b.poolFigures(t)
	if servers > bouncerPoolSize || clients <= servers {
		t.Fatalf("PgBouncer has %d client and %d server connections: the clients did not share server connections", clients, servers)
	}
	t.Logf("pgbouncer: transaction pooling, default_query_exec_mode=exec, no schema setting: 2 servers fired every job, %v; %d scheduled and cancelled; status lists %d servers; %d client connections shared %d server connections",
		fig, cancelled, len(status.Servers), clients, servers)
}
