package hatest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// binary is internal/faulttest's faultserver, built once by TestMain: the
// prescient command with the check "fault", which writes one row into
// fault_alerts per check through the engine's transaction.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "prescient-hatest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "faultserver")
	out, err := exec.Command("go", "build", "-o", binary, "github.com/prescient-dev/prescient/internal/faulttest/faultserver").CombinedOutput()
	code := 1
	if err != nil {
		fmt.Fprintf(os.Stderr, "build faultserver: %v\n%s", err, out)
	} else {
		code = m.Run()
	}
	destroyShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// alertsDDL is faultserver's effect table, with two columns it does not
// write: when each row was written and on which node (the port of the
// server that ran the insert), so that the test can tell the old primary's
// rows from the new one's.
const alertsDDL = `CREATE TABLE fault_alerts (
	entity_key text NOT NULL,
	stage int NOT NULL,
	slot timestamptz NOT NULL,
	server text NOT NULL,
	written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	written_on int NOT NULL DEFAULT inet_server_port()
)`

// servers is a set of faultserver processes sharing one database schema,
// over the formation's multi-host URL.
type servers struct {
	t      *testing.T
	url    string
	schema string
	dir    string
	config string
	grid   slots.Grid
	store  *postgres.Store
	client *prescient.Client

	mu    sync.Mutex
	procs map[string]*serverProc
}

type serverProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	health string // host:port of its /healthz and /readyz
}

// newServers creates the schema (dropping it when the test ends), migrates
// it, creates fault_alerts and writes the servers' configuration: the one
// internal/faulttest uses, automatic ownership on a 1-second grid. With an
// empty schema it uses the search_path's (the database's own).
func newServers(t *testing.T, url, schema string) *servers {
	t.Helper()
	return newServersVia(t, url, url, schema)
}

// newServersVia is newServers with the migrations and fault_alerts made
// through migrateURL, for servers behind a connection pooler.
func newServersVia(t *testing.T, url, migrateURL, schema string) *servers {
	t.Helper()
	ctx := context.Background()
	s := &servers{
		t: t, url: url, schema: schema, dir: t.TempDir(),
		grid:  slots.Grid{Resolution: time.Second, Cycle: 6 * time.Second},
		procs: map[string]*serverProc{},
	}
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The schema goes with the test, on whichever node is the primary.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for schema != "" && ctx.Err() == nil {
			if _, err := st.Pool().Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond) // polling an external process
		}
		st.Close()
	})
	mst := st
	if migrateURL != url {
		if mst, err = postgres.Open(ctx, migrateURL, &postgres.Opts{Schema: schema}); err != nil {
			t.Fatal(err)
		}
		defer mst.Close()
	}
	if err := mst.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mst.Pool().Exec(ctx, alertsDDL); err != nil {
		t.Fatal(err)
	}
	s.store = st
	s.client, err = prescient.NewClient(st, &prescient.Config{Server: "scheduler", Grid: s.grid})
	if err != nil {
		t.Fatal(err)
	}
	schemaLine := ""
	if schema != "" {
		schemaLine = fmt.Sprintf("  schema: %q\n", schema)
	}
	cfg := fmt.Sprintf(`database:
%s  max_conns: 12
slots:
  resolution: 1s
  cycle: 6s
ownership:
  auto: true
  heartbeat: 500ms
  server_timeout: 3s
workers: 8
batch_size: 200
sweep:
  mode: run
  schedule: "@every 3s"
  on_start: true
shutdown_grace: 10s
log:
  level: info
http:
  listen: "${FAULT_HTTP_LISTEN}"
`, schemaLine)
	s.config = filepath.Join(s.dir, "prescient.yaml")
	if err := os.WriteFile(s.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stopAll)
	return s
}

// start launches server name, serving its health endpoints on a free port.
func (s *servers) start(name string) {
	s.t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		s.t.Fatal(err)
	}
	health := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logf, err := os.OpenFile(filepath.Join(s.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(binary, "--config", s.config, "run")
	cmd.Env = append(os.Environ(), "PRESCIENT_DATABASE_URL="+s.url, "PRESCIENT_SERVER="+name, "FAULT_HTTP_LISTEN="+health)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with the test binary, should it die without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	p := &serverProc{cmd: cmd, done: make(chan struct{}), health: health}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs[name] = p
	s.mu.Unlock()
}

func (s *servers) proc(name string) *serverProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

func (s *servers) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.procs {
		out = append(out, n)
	}
	return out
}

func (s *servers) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// exited returns the servers that have exited: none should, ever.
func (s *servers) exited() []string {
	var out []string
	for _, n := range s.names() {
		select {
		case <-s.proc(n).done:
			out = append(out, n)
		default:
		}
	}
	return out
}

func (s *servers) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name+".log"))
	return name + ".log:\n" + lastLinesN(string(b), 30)
}

func (s *servers) logTails() string {
	var out []string
	for _, n := range s.names() {
		out = append(out, s.logTail(n))
	}
	return strings.Join(out, "\n")
}

func lastLinesN(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitRegistered polls the database until n servers have heartbeated and
// every one answers 200 on /readyz.
func (s *servers) waitRegistered(n int) {
	s.t.Helper()
	s.waitTrue(fmt.Sprintf("SELECT count(*) >= %d FROM prescient_servers", n), 30*time.Second)
	for _, name := range s.names() {
		end := time.Now().Add(20 * time.Second)
		for readyz(s.proc(name).health) != http.StatusOK {
			if time.Now().After(end) {
				s.t.Fatalf("%s not ready within 20s\n%s", name, s.logTail(name))
			}
			time.Sleep(50 * time.Millisecond) // polling an external process
		}
	}
}

// waitTrue polls the database until the boolean query is true. Errors (the
// database failing over) count as not yet.
func (s *servers) waitTrue(query string, limit time.Duration, args ...any) {
	s.t.Helper()
	end := time.Now().Add(limit)
	var err error
	for {
		var ok bool
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = s.store.Pool().QueryRow(ctx, query, args...).Scan(&ok)
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(end) {
			s.t.Fatalf("%q not true within %s (last error %v)\n%s", query, limit, err, s.logTails())
		}
		time.Sleep(10 * time.Millisecond) // polling an external process
	}
}

// readyz asks a server's /readyz over loopback HTTP and returns the status
// code, or 0 when it does not answer.
func readyz(addr string) int {
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// readiness records, for each server, every change of its /readyz answer
// while it watches.
type readiness struct {
	mu      sync.Mutex
	changes map[string][]readyChange
	stop    chan struct{}
	wg      sync.WaitGroup
}

type readyChange struct {
	at   time.Time
	code int
}

// watchReadiness polls every server's /readyz every 20ms until stopped.
func (s *servers) watchReadiness() *readiness {
	r := &readiness{changes: map[string][]readyChange{}, stop: make(chan struct{})}
	for _, name := range s.names() {
		addr := s.proc(name).health
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			last := -1
			for {
				code := readyz(addr)
				if code != last {
					r.mu.Lock()
					r.changes[name] = append(r.changes[name], readyChange{time.Now(), code})
					r.mu.Unlock()
					last = code
				}
				select {
				case <-r.stop:
					return
				case <-time.After(20 * time.Millisecond): // the polling interval
				}
			}
		}()
	}
	return r
}

// notReadyWindow stops watching and returns, for server name, when it first
// answered 503 after since and when it next answered 200, or ok false if it
// never did both.
func (r *readiness) notReadyWindow(name string, since time.Time) (down, up time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.changes[name] {
		if c.at.Before(since) {
			continue
		}
		switch {
		case down.IsZero() && c.code == http.StatusServiceUnavailable:
			down = c.at
		case !down.IsZero() && c.code == http.StatusOK:
			return down, c.at, true
		}
	}
	return down, up, false
}

func (r *readiness) close() {
	close(r.stop)
	r.wg.Wait()
}

// workload is what was scheduled: how many jobs, which escalate, and how
// many jobs are due in each slot.
type workload struct {
	jobs      int
	escalated int
	first     time.Time
	lastSlot  time.Time
	perSlot   map[time.Time]int
}

// schedule schedules n jobs over `spread` consecutive slots from the slot of
// first; every escalateEvery-th job escalates once (two alerts); each check
// takes workMS.
func (s *servers) schedule(n, spread, escalateEvery, workMS int, first time.Time) workload {
	s.t.Helper()
	w := workload{jobs: n, first: s.grid.Ceil(first), perSlot: map[time.Time]int{}}
	ps := make([]prescient.ScheduleParams, 0, 1000)
	flush := func() {
		if _, err := s.client.ScheduleMany(context.Background(), ps); err != nil {
			s.t.Fatal(err)
		}
		ps = ps[:0]
	}
	for i := range n {
		at := s.grid.Add(w.first, i%spread)
		esc := escalateEvery > 0 && i%escalateEvery == 0
		if esc {
			w.escalated++
		}
		payload, _ := json.Marshal(map[string]any{"escalate": esc, "work_ms": workMS})
		ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "fault", At: at, Payload: json.RawMessage(payload)})
		w.perSlot[at]++
		if at.After(w.lastSlot) {
			w.lastSlot = at
		}
		if len(ps) == cap(ps) {
			flush()
		}
	}
	if len(ps) > 0 {
		flush()
	}
	return w
}

// figures are what a test proved.
type figures struct {
	jobs, alerts, duplicates, lost, pending, notDone int
	worstLateness                                    time.Duration
}

func (f figures) String() string {
	return fmt.Sprintf("jobs %d, alerts %d, duplicates found %d, lost %d, left pending %d, not done %d, worst lateness %s",
		f.jobs, f.alerts, f.duplicates, f.lost, f.pending, f.notDone, f.worstLateness.Round(time.Millisecond))
}

// measure reads the end state from the database, as internal/faulttest
// does: an alert row per (job, stage) expected, none twice, every job in
// history as done, nothing pending. The jobs of entity "live" (keys
// live-N), scheduled during a fault, are counted apart (liveScheduler.check)
// but must not be doubled, left pending or end other than done either;
// those of entity "cancelled" are cancelled by their test, which checks
// them.
func (s *servers) measure(ctx context.Context, w workload) (figures, error) {
	f := figures{jobs: w.jobs}
	pool := s.store.Pool()
	q := func(dst any, sql string) error { return pool.QueryRow(ctx, sql).Scan(dst) }
	var worstUS int64
	var distinct, done int
	for _, x := range []struct {
		dst any
		sql string
	}{
		{&f.alerts, "SELECT count(*) FROM fault_alerts WHERE entity_key NOT LIKE 'live-%'"},
		{&f.duplicates, "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) n FROM fault_alerts GROUP BY entity_key, stage HAVING count(*) > 1) d"},
		{&f.pending, "SELECT count(*) FROM prescient_jobs"},
		{&f.notDone, "SELECT count(*) FROM prescient_history WHERE outcome <> 'done' AND entity <> 'cancelled'"},
		{&worstUS, "SELECT coalesce(max(lateness_us), 0) FROM prescient_history"},
		{&distinct, "SELECT count(*) FROM (SELECT DISTINCT entity_key, stage FROM fault_alerts WHERE entity_key NOT LIKE 'live-%') d"},
		{&done, "SELECT count(*) FROM prescient_history WHERE outcome = 'done' AND entity = 'order'"},
	} {
		if err := q(x.dst, x.sql); err != nil {
			return f, err
		}
	}
	expected := w.jobs + w.escalated
	f.lost = expected - distinct + (w.jobs - done - f.notDone)
	f.worstLateness = time.Duration(worstUS) * time.Microsecond
	return f, nil
}

// waitSettled polls the database until every job has left the pending table
// and every expected alert is written, or the deadline passes, and returns
// the final figures.
func (s *servers) waitSettled(w workload, deadline time.Duration) figures {
	s.t.Helper()
	end := time.Now().Add(deadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f, err := s.measure(ctx, w)
		cancel()
		if err == nil && f.pending == 0 && f.alerts >= w.jobs+w.escalated {
			return f
		}
		if time.Now().After(end) {
			s.t.Fatalf("not settled after %s: %v (err %v)\n%s", deadline, f, err, s.logTails())
		}
		time.Sleep(250 * time.Millisecond) // polling an external process
	}
}
