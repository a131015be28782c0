package pgtest

import (
	"context"
	"fmt"
	"os"
	oexec "os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Instance is a PostgreSQL server of a test's own, in a temporary directory
// on a free loopback port, for tests that stop, restart or cut off the
// database: they must never do that to the shared server.
type Instance struct {
	// URL connects to the instance's postgres database as root.
	URL string
	t   testing.TB
	dir string
	bin string
	as  []string // the command prefix that runs server binaries as postgres when we are root
}

// NewInstance initialises and starts an instance, and stops it and removes
// its files when the test ends. It fails the test, saying what is missing,
// when the server binaries are not installed.
func NewInstance(t testing.TB) *Instance {
	t.Helper()
	bin, err := serverBinDir()
	if err != nil {
		t.Fatalf("pgtest: a throwaway PostgreSQL needs the server binaries (initdb, pg_ctl): %v", err)
	}
	dir, err := os.MkdirTemp("", "prescient-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	in := &Instance{t: t, dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root; run the server as postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root, and there is no postgres user to run initdb as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		in.as = []string{"runuser", "-u", "postgres", "--"}
	}
	t.Cleanup(func() {
		in.ctl("stop", "-m", "immediate")
		os.RemoveAll(dir)
	})
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	in.run("initdb", "-D", in.data(), "-U", "root", "--auth=trust", "--no-sync")
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\nmax_connections = 200\n", port, dir)
	if err := os.WriteFile(filepath.Join(in.data(), "postgresql.auto.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	in.URL = fmt.Sprintf("postgres://root@127.0.0.1:%d/postgres?sslmode=disable", port)
	in.Start()
	return in
}

func (in *Instance) data() string { return filepath.Join(in.dir, "data") }

// Start starts the server and waits until it accepts connections.
func (in *Instance) Start() {
	in.t.Helper()
	in.run("pg_ctl", "-D", in.data(), "-l", filepath.Join(in.dir, "server.log"), "-w", "start")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, in.URL)
		if err == nil {
			conn.Close(ctx)
			return
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(in.dir, "server.log"))
			in.t.Fatalf("pgtest: instance did not accept connections: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process, not synchronising goroutines
	}
}

// Stop stops the server at once, cutting every connection (mode immediate,
// as a crash would).
func (in *Instance) Stop() {
	in.t.Helper()
	if out, err := in.ctl("stop", "-m", "immediate"); err != nil {
		in.t.Fatalf("pgtest: stop instance: %v\n%s", err, out)
	}
}

// Restart stops the server, waits for down, then starts it again.
func (in *Instance) Restart(down time.Duration) {
	in.t.Helper()
	in.Stop()
	time.Sleep(down) // the outage itself: how long the database stays away
	in.Start()
}

func (in *Instance) ctl(args ...string) ([]byte, error) {
	args = append([]string{"-D", in.data(), "-w"}, args...)
	return in.command("pg_ctl", args...).CombinedOutput()
}

func (in *Instance) run(name string, args ...string) {
	in.t.Helper()
	if out, err := in.command(name, args...).CombinedOutput(); err != nil {
		in.t.Fatalf("pgtest: %s: %v\n%s", name, err, out)
	}
}

func (in *Instance) command(name string, args ...string) *oexec.Cmd {
	full := append(append([]string{}, in.as...), append([]string{filepath.Join(in.bin, name)}, args...)...)
	return oexec.Command(full[0], full[1:]...)
}

// serverBinDir finds the directory holding initdb and pg_ctl: pg_config's
// bindir, else the newest /usr/lib/postgresql/*/bin.
func serverBinDir() (string, error) {
	if out, err := oexec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := string(out[:len(out)-1])
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := oexec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("initdb not found in pg_config --bindir, /usr/lib/postgresql/*/bin or PATH")
}
