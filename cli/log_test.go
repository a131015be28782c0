package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// jsonLines parses every line of stderr as a JSON object, failing the test
// for any line that is not one.
func jsonLines(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("stderr line %d is not a JSON object (log.format: json): %q", i+1, l)
			continue
		}
		out = append(out, rec)
	}
	return out
}

// records keeps the log records whose message is msg.
func records(recs []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// logServer is a run test's server on a SQLite file, with a client on the
// same file to schedule and watch jobs.
type logServer struct {
	*runningServer
	client *prescient.Client
}

func startLogServer(t *testing.T, level string) *logServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, path, "slots: {resolution: 1s, cycle: 0s}\nlog: {format: json, level: "+level+"}\n"+
		"http: {listen: \""+freeAddr(t)+"\"}\n")
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := prescient.NewClient(st, &prescient.Config{Server: "test", Grid: secondGrid, Checks: observedChecks(t)})
	if err != nil {
		t.Fatal(err)
	}
	scheduleAll(t, c, "done", "done", time.Now().Add(2*time.Second), 3)
	return &logServer{runningServer: startRunWith(t, h, observedChecks(t)), client: c}
}

// waitWorkAndEmptySlots waits until the 3 jobs are done and the ledger
// shows at least 3 slots fired after theirs, with nothing in them.
func (s *logServer) waitWorkAndEmptySlots(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 60*time.Second, "3 jobs done and 3 empty slots after them", s.runningServer, func() bool {
		recs, err := s.client.History(ctx, history.Filter{Limit: 10})
		if err != nil || len(recs) != 3 {
			return false
		}
		last := recs[0].LastCheckAt
		fired, err := s.client.Slots(ctx, &prescient.SlotsParams{Since: last.Add(time.Second)})
		// Finished ones: a row is written as its firing starts, and the
		// firing under way when the test stops run is cut short.
		n := 0
		for _, r := range fired {
			if r.Complete() {
				n++
			}
		}
		return err == nil && n >= 3
	})
}

// firedWhole returns the "slot fired" records of recs but for a last one the
// shutdown cut short: the test stops run while a slot may be firing, and a
// firing cut short is logged at INFO with its error, by design
// (TestSlotCutShortByStopLogged). Any other error is one.
func firedWhole(t *testing.T, recs []map[string]any) []map[string]any {
	t.Helper()
	fired := records(recs, "slot fired")
	var out []map[string]any
	for i, r := range fired {
		if e, ok := r["error"]; ok {
			if i != len(fired)-1 || !strings.Contains(fmt.Sprint(e), "context canceled") {
				t.Errorf("a slot fired with an error, not the last one cut short by the stop: %v", r)
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// TestLogJSONEveryLineAndSignals: with log.format: json every line `run`
// writes to stderr is a JSON object, through a SIGTERM and the shutdown it
// starts; durations are strings such as "30s"; at log.level: debug every
// slot fired and every sweep is logged, a slot with work at info with its
// counts, an empty one at debug.
//
// It sends a real SIGTERM to this test process, which `run` catches: the
// test is not parallel, so no other test's server is running to catch it
// too, and it signals only once run has logged that it is serving (run
// subscribes to the signals before it logs anything).
func TestLogJSONEveryLineAndSignals(t *testing.T) {
	s := startLogServer(t, "debug")
	waitFor(t, 30*time.Second, "run serving", s.runningServer, func() bool {
		return strings.Contains(s.stderr.String(), `"msg":"serving"`)
	})
	s.waitWorkAndEmptySlots(t)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exit:
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not stop after SIGTERM; logs:\n%s", s.stderr.String())
	}
	if s.err != nil {
		t.Fatalf("run after SIGTERM: %v", s.err)
	}
	recs := jsonLines(t, s.stderr.String())

	sig := records(recs, "received terminated: stopping (a second signal exits at once)")
	if len(sig) != 1 || sig[0]["signal"] != "terminated" || sig[0]["level"] != "INFO" {
		t.Errorf("signal records %v, want one at INFO with signal terminated", sig)
	}
	stopping := records(recs, "stopping")
	if len(stopping) != 1 || stopping[0]["grace"] != "30s" {
		t.Errorf("stopping records %v, want one with grace \"30s\" (a duration as a string)", stopping)
	}
	if len(records(recs, "stopped")) != 1 {
		t.Error("no \"stopped\" record after the signal")
	}

	var work, empty int
	jobs := 0.0
	for _, r := range firedWhole(t, recs) {
		for _, k := range []string{"lag", "duration"} {
			v, ok := r[k].(string)
			if _, err := time.ParseDuration(v); !ok || err != nil {
				t.Errorf("slot record %v: %s is %#v, want a duration string", r, k, r[k])
			}
		}
		switch {
		case r["jobs"] == 0.0 && r["unknown"] == 0.0:
			empty++
			if r["level"] != "DEBUG" {
				t.Errorf("an empty slot logged at %v: %v", r["level"], r)
			}
		default:
			work++
			jobs += r["jobs"].(float64)
			if r["level"] != "INFO" || r["slot"] == nil || r["kind"] == nil {
				t.Errorf("a slot with work logged as %v, want at INFO with slot and kind", r)
			}
		}
	}
	if work == 0 || jobs != 3 || empty < 3 {
		t.Errorf("%d slot records with work (%v jobs), %d empty; want the 3 jobs in at most 3 records, and at least 3 empty slots", work, jobs, empty)
	}
	sweeps := records(recs, "sweep")
	if len(sweeps) == 0 || sweeps[0]["trigger"] != prescient.SweepStartup || sweeps[0]["level"] != "DEBUG" {
		t.Errorf("sweep records %v, want the start-up sweep, empty, at DEBUG", sweeps)
	}
}

// TestLogInfoOneLinePerSlotWithWork: at log.level: info, run logs one line
// per slot that had jobs in it (not one per job) and nothing for the empty
// slots around it.
func TestLogInfoOneLinePerSlotWithWork(t *testing.T) {
	t.Parallel()
	s := startLogServer(t, "info")
	s.waitWorkAndEmptySlots(t)
	s.cancel()
	<-s.exit
	if s.err != nil {
		t.Fatalf("run: %v", s.err)
	}
	recs := jsonLines(t, s.stderr.String())
	fired := firedWhole(t, recs)
	jobs := 0.0
	for _, r := range fired {
		if r["level"] != "INFO" || r["jobs"] == 0.0 {
			t.Errorf("at info, a slot logged as %v; want only slots with jobs, at INFO", r)
		}
		jobs += r["jobs"].(float64)
	}
	if len(fired) == 0 || len(fired) > 3 || jobs != 3 {
		t.Errorf("%d slot records for %v jobs, want the 3 jobs in one record per slot", len(fired), jobs)
	}
	for _, r := range recs {
		if r["level"] == "DEBUG" {
			t.Errorf("a debug record at info: %v", r)
		}
	}
}

// TestLogJSONRunError: a run that fails with log.format: json writes its
// error as a JSON record, not as a plain "Error: ..." line.
func TestLogJSONRunError(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"),
		"log: {format: json}\nhttp: {listen: \""+taken.Addr().String()+"\"}\n")
	_, stderr, err := h.runCtx(context.Background(), "run")
	if err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("run on a port in use: error %v, want one naming http.listen", err)
	}
	recs := jsonLines(t, stderr)
	failed := records(recs, "run failed")
	if len(failed) != 1 || !strings.Contains(failed[0]["error"].(string), "http.listen") || failed[0]["level"] != "ERROR" {
		t.Errorf("records %v, want one \"run failed\" at ERROR with the error", recs)
	}
}
