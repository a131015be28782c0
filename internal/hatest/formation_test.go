package hatest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// The formation runs PostgreSQL 15, the version Debian packages
// pg_auto_failover for.
const (
	autoFailoverPackage = "postgresql-15-auto-failover"
	pgBin               = "/usr/lib/postgresql/15/bin"
	pgAutoctl           = "/usr/bin/pg_autoctl"
	database            = "prescient"
)

// monitorSettings make the monitor decide within seconds rather than the
// defaults' tens of seconds (health_check_period 5s, health_check_timeout 5s,
// health_check_max_retries 2, health_check_retry_delay 2s,
// node_considered_unhealthy_timeout 20s, primary_demote_timeout 30s): the
// test measures prescient, not the monitor's patience. They stay loose
// enough that a loaded machine does not fail over on its own (a node is
// failed over only when the monitor's health checks fail and its keeper has
// not reported for node_considered_unhealthy_timeout). docs/ha.md gives the
// figures both ways.
var monitorSettings = map[string]string{
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "2000",
	"pgautofailover.health_check_max_retries":          "2",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "4000",
	"pgautofailover.primary_demote_timeout":            "2000",
}

// formation is a pg_auto_failover formation of the tests' own: a monitor and
// two PostgreSQL nodes (a primary and a synchronous secondary) on free
// loopback ports, with every file in a temporary directory. When the tests
// run as root, every PostgreSQL and pg_autoctl process runs as the postgres
// user (initdb refuses root).
type formation struct {
	dir         string
	cred        *syscall.Credential // nil unless we are root
	uid, gid    int
	monitorPort int
	monitor     *proc
	nodes       []*node
	watchdog    *exec.Cmd
}

// node is one PostgreSQL node and its pg_autoctl keeper.
type node struct {
	name   string
	port   int
	pgdata string
	mu     sync.Mutex
	proc   *proc // the running `pg_autoctl create … --run` or `pg_autoctl run`; nil or done when killed
}

// proc is a process the formation started in a process group of its own, so
// that one signal reaches pg_autoctl, its services and the postmaster with
// its backends.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) alive() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// killGroup sends SIGKILL to the process group and waits for its leader.
func (p *proc) killGroup() {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// shared is the formation the tests of this package share: building one
// takes half a minute, restoring a pair after a failover half that. TestMain
// destroys it.
var shared struct {
	mu sync.Mutex
	f  *formation
}

// pair returns the shared formation with a healthy primary and synchronous
// secondary, building it on first use and bringing a killed node back (it
// rejoins as the secondary) when a test left one down. It installs
// pg_auto_failover when it is missing.
func pair(t *testing.T) *formation {
	t.Helper()
	requirePackage(t, autoFailoverPackage, pgAutoctl, filepath.Join(pgBin, "pg_ctl"), filepath.Join(pgBin, "initdb"))
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.f == nil {
		began := time.Now()
		f, err := newFormation()
		if err != nil {
			if f != nil {
				f.destroy()
			}
			t.Fatalf("pg_auto_failover formation: %v", err)
		}
		shared.f = f
		t.Logf("formation built in %s: monitor :%d, %s :%d (primary), %s :%d (synchronous secondary)",
			time.Since(began).Round(100*time.Millisecond), f.monitorPort, f.nodes[0].name, f.nodes[0].port, f.nodes[1].name, f.nodes[1].port)
		return f
	}
	f := shared.f
	began := time.Now()
	restarted, err := f.ensurePair()
	if err != nil {
		t.Fatalf("pg_auto_failover formation: bringing the pair back: %v\n%s", err, f.logTails())
	}
	if restarted != "" {
		t.Logf("%s rejoined the formation as the secondary in %s", restarted, time.Since(began).Round(100*time.Millisecond))
	}
	return f
}

func destroyShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.f != nil {
		shared.f.destroy()
		shared.f = nil
	}
}

// newFormation builds and starts a monitor, a primary and a secondary, and
// waits until the monitor reports them primary and secondary. On error the
// formation returned, if any, must still be destroyed.
func newFormation() (*formation, error) {
	dir, err := os.MkdirTemp("", "prescient-ha-")
	if err != nil {
		return nil, err
	}
	f := &formation{dir: dir, uid: os.Getuid(), gid: os.Getgid()}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return f, fmt.Errorf("running as root, and there is no postgres user to run PostgreSQL as: %w", err)
		}
		f.uid, _ = strconv.Atoi(u.Uid)
		f.gid, _ = strconv.Atoi(u.Gid)
		f.cred = &syscall.Credential{Uid: uint32(f.uid), Gid: uint32(f.gid)}
	}
	for _, d := range []string{"", "xdg", "xdg/config", "xdg/data", "xdg/run", "logs"} {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return f, err
		}
		if err := os.Chown(p, f.uid, f.gid); err != nil {
			return f, err
		}
	}
	if err := f.startWatchdog(); err != nil {
		return f, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return f, err
	}
	f.monitorPort = ports[0]
	f.nodes = []*node{
		{name: "node1", port: ports[1], pgdata: filepath.Join(dir, "node1")},
		{name: "node2", port: ports[2], pgdata: filepath.Join(dir, "node2")},
	}

	// One initdb (the slow part) for the monitor and the first node;
	// the second node is a base backup of the first. fsync off: the tests
	// kill processes, never the machine, so the page cache survives.
	tmpl := filepath.Join(dir, "template")
	if out, err := f.command(filepath.Join(pgBin, "initdb"), "--no-sync", "-D", tmpl, "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C").CombinedOutput(); err != nil {
		return f, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// checkpoint_completion_target 0: pg_basebackup asks for a spread
	// checkpoint, which would otherwise take minutes.
	conf, err := os.OpenFile(filepath.Join(tmpl, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return f, err
	}
	_, err = conf.WriteString("\nfsync = off\ncheckpoint_completion_target = 0\nmax_connections = 200\n")
	conf.Close()
	if err != nil {
		return f, err
	}
	for _, d := range []string{"monitor", "node1"} {
		if out, err := f.command("cp", "-a", tmpl, filepath.Join(dir, d)).CombinedOutput(); err != nil {
			return f, fmt.Errorf("copy the template cluster: %v\n%s", err, out)
		}
	}

	f.monitor, err = f.spawn("monitor", pgAutoctl, "create", "monitor", "--pgdata", filepath.Join(dir, "monitor"),
		"--pgport", strconv.Itoa(f.monitorPort), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--auth", "trust", "--no-ssl", "--pgctl", filepath.Join(pgBin, "pg_ctl"), "--run")
	if err != nil {
		return f, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.waitMonitor(ctx); err != nil {
		return f, err
	}
	if err := f.tuneMonitor(ctx); err != nil {
		return f, err
	}
	if err := f.startNode(f.nodes[0], true); err != nil {
		return f, err
	}
	if err := f.waitStates(ctx, map[string]string{"node1": "single"}); err != nil {
		return f, err
	}
	if err := f.startNode(f.nodes[1], true); err != nil {
		return f, err
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel2()
	if err := f.waitStates(ctx2, map[string]string{"node1": "primary", "node2": "secondary"}); err != nil {
		return f, err
	}
	return f, nil
}

// env is the environment every pg_autoctl and PostgreSQL process runs
// with: its configuration and state under the formation's directory.
func (f *formation) env() []string {
	x := filepath.Join(f.dir, "xdg")
	return []string{
		"HOME=" + f.dir,
		"XDG_CONFIG_HOME=" + filepath.Join(x, "config"),
		"XDG_DATA_HOME=" + filepath.Join(x, "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(x, "run"),
		"PATH=" + pgBin + ":/usr/bin:/bin",
		"PGUSER=postgres",
		"LANG=C.UTF-8",
		"TMPDIR=" + f.dir,
	}
}

// command returns a command that runs as the formation's user.
func (f *formation) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = f.env()
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	return cmd
}

// spawn starts a long-running process in a process group of its own,
// logging to logs/<logName>.log.
func (f *formation) spawn(logName, name string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(filepath.Join(f.dir, "logs", logName+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := f.command(name, args...)
	cmd.SysProcAttr.Setpgid = true
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// startNode starts n's keeper: `pg_autoctl create postgres … --run` the
// first time (it registers with the monitor, and the second node takes a
// base backup of the primary), `pg_autoctl run` after a kill.
func (f *formation) startNode(n *node, create bool) error {
	args := []string{"run", "--pgdata", n.pgdata}
	if create {
		args = []string{"create", "postgres", "--pgdata", n.pgdata, "--pgport", strconv.Itoa(n.port),
			"--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--name", n.name, "--dbname", database,
			"--monitor", f.monitorURL("autoctl_node"), "--auth", "trust", "--no-ssl",
			"--pgctl", filepath.Join(pgBin, "pg_ctl"), "--run"}
	}
	p, err := f.spawn(n.name, pgAutoctl, args...)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return nil
}

func (f *formation) monitorURL(user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/pg_auto_failover?sslmode=disable", user, f.monitorPort)
}

// URL is the multi-host URL prescient connects with: both nodes, and
// target_session_attrs=read-write so that pgx picks whichever is the
// primary.
func (f *formation) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?target_session_attrs=read-write&sslmode=disable",
		f.nodes[0].port, f.nodes[1].port, database)
}

// nodeURL connects to one node, whatever its role.
func (n *node) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, database)
}

func (f *formation) node(name string) *node {
	for _, n := range f.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitMonitor polls the monitor (an external process) until it answers
// with its pgautofailover schema in place.
func (f *formation) waitMonitor(ctx context.Context) error {
	var last error
	for {
		conn, err := connect(ctx, f.monitorURL("postgres"))
		if err == nil {
			var n int
			err = conn.QueryRow(ctx, "SELECT count(*) FROM pgautofailover.node").Scan(&n)
			conn.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		last = err
		if ctx.Err() != nil {
			return fmt.Errorf("the monitor did not come up: %v\n%s", last, f.logTails())
		}
		time.Sleep(100 * time.Millisecond) // polling an external process
	}
}

func (f *formation) tuneMonitor(ctx context.Context) error {
	conn, err := connect(ctx, f.monitorURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for k, v := range monitorSettings {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", k, v)); err != nil {
			return fmt.Errorf("tune the monitor: %w", err)
		}
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// nodeState is a node as the monitor sees it.
type nodeState struct {
	name, reported, goal string
	port                 int
	// health is the monitor's health check of the node: 1 good, 0 bad,
	// -1 not checked yet.
	health int
}

// states asks the monitor for every node's reported and assigned state.
func (f *formation) states(ctx context.Context) ([]nodeState, error) {
	conn, err := connect(ctx, f.monitorURL("postgres"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT nodename, nodeport, reportedstate::text, goalstate::text, health FROM pgautofailover.node ORDER BY nodeid")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodeState, error) {
		var s nodeState
		err := r.Scan(&s.name, &s.port, &s.reported, &s.goal, &s.health)
		return s, err
	})
}

func describeStates(ss []nodeState) string {
	var b []string
	for _, s := range ss {
		b = append(b, fmt.Sprintf("%s :%d %s (assigned %s, health %d)", s.name, s.port, s.reported, s.goal, s.health))
	}
	return strings.Join(b, ", ")
}

// waitStates polls the monitor until each named node has reported, and been
// assigned, the state wanted.
func (f *formation) waitStates(ctx context.Context, want map[string]string) error {
	var (
		last []nodeState
		err  error
	)
	for {
		last, err = f.states(ctx)
		if err == nil {
			ok := 0
			for _, s := range last {
				if w, named := want[s.name]; named && s.reported == w && s.goal == w {
					ok++
				}
			}
			if ok == len(want) {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the monitor did not report %v: %s (%v)\n%s", want, describeStates(last), err, f.logTails())
		}
		time.Sleep(100 * time.Millisecond) // polling an external process
	}
}

// primary returns the node the monitor reports as the writable one
// (primary, or wait_primary while it has no secondary).
func (f *formation) primary(ctx context.Context) (*node, error) {
	ss, err := f.states(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		if s.reported == s.goal && (s.reported == "primary" || s.reported == "wait_primary" || s.reported == "single") {
			return f.node(s.name), nil
		}
	}
	return nil, fmt.Errorf("no primary: %s", describeStates(ss))
}

// waitPrimary polls the monitor until a node other than old is the writable
// one, and returns it.
func (f *formation) waitPrimary(ctx context.Context, old *node) (*node, error) {
	var err error
	for {
		var p *node
		p, err = f.primary(ctx)
		if err == nil && p != old {
			return p, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no new primary: %v\n%s", err, f.logTails())
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
}

// ensurePair starts the keeper of any node a test killed (it rejoins as
// the secondary, with pg_rewind) and waits for a primary and a secondary.
// It returns the name of the node it restarted, if any.
func (f *formation) ensurePair() (string, error) {
	restarted := ""
	for _, n := range f.nodes {
		n.mu.Lock()
		alive := n.proc.alive()
		n.mu.Unlock()
		if !alive {
			if err := f.startNode(n, false); err != nil {
				return "", err
			}
			restarted = n.name
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		ss, err := f.states(ctx)
		if err == nil && len(ss) == 2 {
			// Both nodes in their roles, and both passed the monitor's
			// health check. Once, right after node1 had rejoined as the
			// secondary, the monitor found no healthy standby in the
			// middle of a switchover, put the primary in wait_primary
			// (writes acknowledged without a synchronous standby) and
			// then promoted node1 without the schedules acknowledged in
			// those two seconds (TestSwitchover failed: pg_auto_failover's
			// doing). Waiting for a good health check is meant to keep a
			// test from starting that early; one failure in many runs
			// does not show that it was the cause.
			roles := map[string]int{}
			for _, s := range ss {
				if s.reported == s.goal && s.health == 1 {
					roles[s.reported]++
				}
			}
			if roles["primary"] == 1 && roles["secondary"] == 1 {
				return restarted, nil
			}
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("no primary and secondary within 90s: %s (%v)", describeStates(ss), err)
		}
		time.Sleep(100 * time.Millisecond) // polling an external process
	}
}

// postmasterPID reads the postmaster's pid from n's postmaster.pid.
func (n *node) postmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.pgdata, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
}

// crash sends SIGKILL at once to every process of node n, as the loss of
// its machine would stop them: its pg_autoctl keeper (so that no keeper is
// left to restart PostgreSQL and the monitor must fail over), its
// postmaster, and every backend and WAL sender (each in a process group of
// its own, found by its working directory, the data directory). It returns
// the postmaster's pid and when the signal was sent, once they are all gone.
func (f *formation) crash(n *node) (int, time.Time, error) {
	pid, err := n.postmasterPID()
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("%s's postmaster: %w", n.name, err)
	}
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if !p.alive() {
		return 0, time.Time{}, fmt.Errorf("%s's keeper is not running", n.name)
	}
	procs := processesIn(n.pgdata)
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		return 0, time.Time{}, err
	}
	at := time.Now()
	for _, q := range procs {
		_ = syscall.Kill(q, syscall.SIGKILL)
	}
	<-p.done
	for _, q := range append(procs, pid) {
		for end := time.Now().Add(10 * time.Second); processAlive(q); {
			if time.Now().After(end) {
				return pid, at, fmt.Errorf("%s's process %d survived SIGKILL", n.name, q)
			}
			time.Sleep(5 * time.Millisecond) // polling an external process
		}
	}
	return pid, at, nil
}

// processesIn returns the processes whose working directory is dir: a
// PostgreSQL data directory's postmaster and all its children.
func processesIn(dir string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil && cwd == dir {
			out = append(out, pid)
		}
	}
	return out
}

// processAlive reports whether pid is a live process (not gone, not a
// zombie waiting to be reaped).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// autoctl runs a pg_autoctl command (switchover, a node setting) to its
// end, or until ctx ends.
func (f *formation) autoctl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, pgAutoctl, args...)
	cmd.Env = f.env()
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd.CombinedOutput()
}

// logTails returns the end of every log of the formation, for failures.
func (f *formation) logTails() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(f.dir, "logs", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "--- %s:\n%s\n", filepath.Base(l), lastLines(string(data), 15))
	}
	return b.String()
}

// watchdogScript waits for the test binary ($1) to be gone and then kills
// every process whose working directory is in the formation's directory
// ($2): the cleanup of a test binary that died without running its own (a
// panic, a timeout).
const watchdogScript = `while kill -0 "$1" 2>/dev/null; do sleep 1; done
for round in 1 2 3 4 5; do
	found=
	for p in /proc/[0-9]*; do
		case "$(readlink "$p/cwd" 2>/dev/null)" in "$2" | "$2"/*) kill -KILL "${p#/proc/}" 2>/dev/null && found=1 ;; esac
	done
	[ -z "$found" ] && break
	sleep 1
done
rm -rf "$2"`

func (f *formation) startWatchdog() error {
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "hatest-watchdog", strconv.Itoa(os.Getpid()), f.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the watchdog: %w", err)
	}
	f.watchdog = cmd
	return nil
}

// destroy kills every process of the formation and removes its files. Every
// one of them works in the formation's directory: pg_autoctl in it, each
// PostgreSQL process in its data directory. Killing the keepers' process
// groups is not enough: PostgreSQL's children lead process groups of their
// own, and the logger and the monitor's health-check worker outlive a
// killed postmaster.
func (f *formation) destroy() {
	if f.watchdog != nil {
		_ = f.watchdog.Process.Kill()
		_ = f.watchdog.Wait()
	}
	f.monitor.killGroup()
	for _, n := range f.nodes {
		n.mu.Lock()
		n.proc.killGroup()
		n.mu.Unlock()
	}
	for range 50 {
		left := processesUnder(f.dir)
		if len(left) == 0 {
			break
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond) // letting the killed processes go
	}
	if os.Getenv("HATEST_KEEP") != "" {
		fmt.Fprintln(os.Stderr, "kept", f.dir)
		return
	}
	os.RemoveAll(f.dir)
}

// processesUnder returns the live processes whose working directory is dir
// or below it.
func processesUnder(dir string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) && processAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// connect opens one connection with a short connect timeout.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 2 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

// freePorts returns n distinct free loopback ports (see pgtest.FreePort).
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := pgtest.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// events returns the monitor's events since t, one line each, with their
// time from origin: the failover's timeline as pg_auto_failover saw it.
func (f *formation) events(ctx context.Context, since, origin time.Time) ([]string, error) {
	conn, err := connect(ctx, f.monitorURL("postgres"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT eventtime, nodename, description FROM pgautofailover.event WHERE eventtime > $1 ORDER BY eventid", since)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var (
			at         time.Time
			name, desc string
		)
		err := r.Scan(&at, &name, &desc)
		return fmt.Sprintf("%+.2fs %s: %s", at.Sub(origin).Seconds(), name, desc), err
	})
}
