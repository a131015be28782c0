package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/internal/pgtest"
)

// TestPoisonJob: one job's check kills its server (exit status 3) every time
// it runs, in a slot of a few hundred jobs. A supervisor restarts the server
// each time, as systemd or Kubernetes would. The server must not crash-loop:
// after retry.max_unfinished (3) attempts that never finished, the job ends
// failed with a reason that says so, and every other job of the slot, the
// ones that shared a group with it included, is checked exactly once.
func TestPoisonJob(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	c := newCluster(t, url, schema, clusterOpts{})
	c.start("a")
	ready(t, c.store.Pool(), 1)

	const jobs = 300
	at := c.grid.Ceil(time.Now().Add(2 * time.Second))
	ps := make([]prescient.ScheduleParams, jobs)
	for i := range ps {
		payload, _ := json.Marshal(map[string]any{"work_ms": 10, "exit": i == jobs/3})
		ps[i] = prescient.ScheduleParams{Entity: "order", Key: fmt.Sprint(i), Check: "fault", At: at, Payload: json.RawMessage(payload)}
	}
	if _, err := c.client.ScheduleMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	poison := fmt.Sprint(jobs / 3)

	// The supervisor: restart the server whenever it dies, until the
	// pending table is empty.
	crashes := 0
	pool := c.store.Pool()
	end := time.Now().Add(90 * time.Second)
	for {
		var pending int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM prescient_jobs").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d jobs still pending after 90s and %d crashes: the server crash-loops\n%s", pending, crashes, c.logTail("a"))
		}
		select {
		case <-c.proc("a").done:
			if code := c.proc("a").cmd.ProcessState.ExitCode(); code != 3 {
				t.Fatalf("server exited with status %d, want 3 (the poison check)\n%s", code, c.logTail("a"))
			}
			crashes++
			if crashes > 10 {
				t.Fatalf("the server crashed %d times: it crash-loops\n%s", crashes, c.logTail("a"))
			}
			c.start("a")
		case <-time.After(100 * time.Millisecond):
		}
	}

	var outcome, lastErr string
	if err := pool.QueryRow(context.Background(), "SELECT outcome, last_error FROM prescient_history WHERE entity_key = $1", poison).
		Scan(&outcome, &lastErr); err != nil {
		t.Fatal(err)
	}
	if outcome != "failed" || !strings.Contains(lastErr, "never finished") {
		t.Errorf("the poison job ended %q (%q), want failed saying its check never finished", outcome, lastErr)
	}
	if crashes != prescient.MaxUnfinishedDefault {
		t.Errorf("the server crashed %d times, want %d (retry.max_unfinished)", crashes, prescient.MaxUnfinishedDefault)
	}
	var done, alerts, keys int
	if err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM prescient_history WHERE outcome = 'done'),
		(SELECT count(*) FROM fault_alerts),
		(SELECT count(DISTINCT entity_key) FROM fault_alerts)`).Scan(&done, &alerts, &keys); err != nil {
		t.Fatal(err)
	}
	if done != jobs-1 || alerts != jobs-1 || keys != jobs-1 {
		t.Errorf("%d done, %d alerts for %d jobs, want %d of each: every other job checked exactly once", done, alerts, keys, jobs-1)
	}
	if n := c.logCount("a", "job failed for good: its check started and never finished"); n != 1 {
		t.Errorf("the log says %d times that the job failed for good, want once\n%s", n, c.logTail("a"))
	}
	t.Logf("poison job: jobs %d, crashes %d, done %d, alerts %d; the poison job ended %s: %s", jobs, crashes, done, alerts, outcome, lastErr)
}
