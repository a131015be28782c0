package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// long reports whether the long variant was asked for.
func long() bool { return os.Getenv("PRESCIENT_FAULT_LONG") == "1" }

// size picks the short or the long figure.
func size(short, longer int) int {
	if long() {
		return longer
	}
	return short
}

const alertsDDL = `CREATE TABLE fault_alerts (
	entity_key text NOT NULL,
	stage int NOT NULL,
	slot timestamptz NOT NULL,
	server text NOT NULL
)`

// binary is the faultserver built once for the whole test binary by
// TestMain, and removed when the tests end.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "prescient-faultserver-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "faultserver")
	out, err := exec.Command("go", "build", "-o", binary, "./faultserver").CombinedOutput()
	code := 1
	if err != nil {
		fmt.Fprintf(os.Stderr, "build faultserver: %v\n%s", err, out)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is a set of faultserver processes sharing one database schema.
type cluster struct {
	t      *testing.T
	url    string
	schema string
	dir    string
	config string
	grid   slots.Grid
	store  *postgres.Store
	client *prescient.Client

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// clusterOpts tune the servers' configuration.
type clusterOpts struct {
	auto          bool
	grace         time.Duration
	sweepInterval time.Duration
	// runtime is guards.runtime, when set.
	runtime time.Duration
}

func newCluster(t *testing.T, url, schema string, o clusterOpts) *cluster {
	t.Helper()
	ctx := context.Background()
	c := &cluster{
		t: t, url: url, schema: schema, dir: t.TempDir(),
		grid:  slots.Grid{Resolution: time.Second, Cycle: 6 * time.Second},
		procs: make(map[string]*proc),
	}
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, alertsDDL); err != nil {
		t.Fatal(err)
	}
	c.store = st
	c.client, err = prescient.NewClient(st, &prescient.Config{Server: "scheduler", Grid: c.grid})
	if err != nil {
		t.Fatal(err)
	}
	if o.grace == 0 {
		o.grace = 10 * time.Second
	}
	if o.sweepInterval == 0 {
		o.sweepInterval = 3 * time.Second
	}
	cfg := fmt.Sprintf(`database:
  schema: %q
  max_conns: 12
slots:
  resolution: 1s
  cycle: 6s
ownership:
  auto: %v
  heartbeat: 500ms
  server_timeout: 3s
workers: 8
batch_size: 200
sweep:
  mode: run
  schedule: "@every %s"
  on_start: true
shutdown_grace: %s
log:
  level: info
http:
  listen: "${FAULT_HTTP_LISTEN}"
`, schema, o.auto, o.sweepInterval, o.grace)
	if o.runtime > 0 {
		cfg += fmt.Sprintf("guards:\n  runtime: %s\n", o.runtime)
	}
	c.config = filepath.Join(c.dir, "prescient.yaml")
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stopAll)
	return c
}

// start launches server name; env adds environment variables
// (FAULT_HTTP_LISTEN=127.0.0.1:PORT serves its health endpoints).
func (c *cluster) start(name string, env ...string) {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(binary, "--config", c.config, "run")
	// FAULT_HTTP_LISTEN empty (no health endpoints) unless env sets it: the
	// configuration refuses a variable that is not set.
	cmd.Env = append(os.Environ(), "PRESCIENT_DATABASE_URL="+c.url, "PRESCIENT_SERVER="+name, "FAULT_HTTP_LISTEN=")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
}

func (c *cluster) proc(name string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// kill sends SIGKILL to server name and waits for it to die.
func (c *cluster) kill(name string) {
	p := c.proc(name)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// signal sends sig to server name and returns how it exited and how long
// that took; it fails the test if the server has not exited within limit.
func (c *cluster) signal(name string, sig syscall.Signal, limit time.Duration) (exitCode int, took time.Duration) {
	c.t.Helper()
	p := c.proc(name)
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(limit):
		c.t.Fatalf("%s did not exit within %s of %s\n%s", name, limit, sig, c.logTail(name))
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (c *cluster) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return name + ".log:\n" + strings.Join(lines, "\n")
}

// workload is what was scheduled: how many jobs and which escalate.
type workload struct {
	jobs      int
	escalated int
	lastSlot  time.Time
}

// schedule schedules n jobs over `spread` slots starting at first; every
// escalateEvery-th job escalates once (two alerts); each check takes workMS.
func (c *cluster) schedule(n, spread, escalateEvery, workMS int, first time.Time) workload {
	c.t.Helper()
	w := workload{jobs: n}
	ps := make([]prescient.ScheduleParams, 0, 1000)
	flush := func() {
		if _, err := c.client.ScheduleMany(context.Background(), ps); err != nil {
			c.t.Fatal(err)
		}
		ps = ps[:0]
	}
	for i := range n {
		at := c.grid.Add(c.grid.Ceil(first), i%spread)
		esc := escalateEvery > 0 && i%escalateEvery == 0
		if esc {
			w.escalated++
		}
		payload, _ := json.Marshal(map[string]any{"escalate": esc, "work_ms": workMS})
		ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "fault", At: at, Payload: json.RawMessage(payload)})
		w.lastSlot = maxTime(w.lastSlot, at)
		if len(ps) == cap(ps) {
			flush()
		}
	}
	if len(ps) > 0 {
		flush()
	}
	return w
}

// scheduleMore schedules n more jobs with keys prefix-0.., all in the slot of
// at, each check taking workMS, and returns n.
func (c *cluster) scheduleMore(prefix string, n, workMS int, at time.Time) int {
	c.t.Helper()
	payload, _ := json.Marshal(map[string]any{"work_ms": workMS})
	ps := make([]prescient.ScheduleParams, n)
	for i := range ps {
		ps[i] = prescient.ScheduleParams{Entity: "order", Key: fmt.Sprintf("%s-%d", prefix, i), Check: "fault", At: at, Payload: json.RawMessage(payload)}
	}
	if _, err := c.client.ScheduleMany(context.Background(), ps); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// logCount counts the occurrences of s in server name's log (all its runs).
func (c *cluster) logCount(name, s string) int {
	b, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	return strings.Count(string(b), s)
}

// waitLog polls server name's log (an external process's output) until it
// holds s at least n times: a restarted server appends to the same log.
func (c *cluster) waitLog(name, s string, n int) {
	c.t.Helper()
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		if c.logCount(name, s) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("%q not %d times in %s's log within 30s\n%s", s, n, name, c.logTail(name))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// figures are what a fault test proved.
type figures struct {
	jobs, alerts, duplicates, lost, pending, notDone int
	worstLateness                                    time.Duration
}

func (f figures) String() string {
	return fmt.Sprintf("jobs %d, alerts %d, duplicates found %d, lost %d, left pending %d, not done %d, worst lateness %s",
		f.jobs, f.alerts, f.duplicates, f.lost, f.pending, f.notDone, f.worstLateness.Round(time.Millisecond))
}

// measure reads the end state from the database.
func (c *cluster) measure(ctx context.Context, w workload) (figures, error) {
	f := figures{jobs: w.jobs}
	pool := c.store.Pool()
	q := func(dst any, sql string) error { return pool.QueryRow(ctx, sql).Scan(dst) }
	var worstUS int64
	for _, x := range []struct {
		dst any
		sql string
	}{
		{&f.alerts, "SELECT count(*) FROM fault_alerts"},
		{&f.duplicates, "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) n FROM fault_alerts GROUP BY entity_key, stage HAVING count(*) > 1) d"},
		{&f.pending, "SELECT count(*) FROM prescient_jobs"},
		{&f.notDone, "SELECT count(*) FROM prescient_history WHERE outcome <> 'done'"},
		{&worstUS, "SELECT coalesce(max(lateness_us), 0) FROM prescient_history"},
	} {
		if err := q(x.dst, x.sql); err != nil {
			return f, err
		}
	}
	var distinct, done int
	if err := q(&distinct, "SELECT count(*) FROM (SELECT DISTINCT entity_key, stage FROM fault_alerts) d"); err != nil {
		return f, err
	}
	if err := q(&done, "SELECT count(*) FROM prescient_history WHERE outcome = 'done'"); err != nil {
		return f, err
	}
	expected := w.jobs + w.escalated
	f.lost = expected - distinct + (w.jobs - done - f.notDone)
	f.worstLateness = time.Duration(worstUS) * time.Microsecond
	return f, nil
}

// waitSettled polls the database (an external system: polling, not a sleep
// standing in for synchronisation) until every job has left the pending
// table, or the deadline passes, and returns the final figures.
func (c *cluster) waitSettled(w workload, deadline time.Duration) figures {
	c.t.Helper()
	ctx := context.Background()
	end := time.Now().Add(deadline)
	for {
		f, err := c.measure(ctx, w)
		if err == nil && f.pending == 0 && f.alerts >= w.jobs+w.escalated {
			return f
		}
		if time.Now().After(end) {
			var logs []string
			for name := range c.procs {
				logs = append(logs, c.logTail(name))
			}
			c.t.Fatalf("not settled after %s: %v (err %v)\n%s\n%s", deadline, f, err, c.trouble(ctx), strings.Join(logs, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// check fails the test unless the figures show nothing lost or doubled.
func (c *cluster) check(f figures) {
	c.t.Helper()
	if f.duplicates != 0 || f.lost != 0 || f.pending != 0 || f.notDone != 0 {
		c.t.Fatalf("end state wrong: %v\n%s", f, c.trouble(context.Background()))
	}
}

// trouble lists, for a failure message, the jobs that did not end done and
// those still pending: what a lost alert's history says about it.
func (c *cluster) trouble(ctx context.Context) string {
	rows, err := c.store.Pool().Query(ctx, `
		SELECT 'history ' || outcome || ' ' || entity_key || ' checks ' || check_count || ' failures ' || failure_count ||
		       ' by ' || finished_by || ' at ' || finished_at || ': ' || coalesce(last_error, '')
		FROM prescient_history WHERE outcome <> 'done'
		UNION ALL
		SELECT 'pending ' || entity_key || ' due ' || next_check_at || ' checks ' || check_count || ' failures ' || failure_count
		FROM prescient_jobs
		LIMIT 20`)
	if err != nil {
		return "trouble: " + err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "trouble: " + err.Error()
	}
	return strings.Join(lines, "\n")
}

// sleepRandom waits between lo and hi: the random moment of the next fault.
func sleepRandom(lo, hi time.Duration) {
	time.Sleep(lo + rand.N(hi-lo))
}

func ready(t *testing.T, pool *pgxpool.Pool, servers int) {
	t.Helper()
	// Wait until every server has registered: they heartbeat into the table.
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM prescient_servers").Scan(&n); err == nil && n >= servers {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("fewer than %d servers registered within 30s", servers)
}
