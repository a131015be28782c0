package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// A delivery whose receiver failed it max_attempts times is dead; once the
// receiver is fixed, `deliveries retry` queues it again and a running
// server delivers it. Before, the README's only way was an SQL UPDATE that
// fits PostgreSQL alone (SQLite keeps times as microseconds), with no
// command (found trying the README as a new user).
func TestDeliveriesRetryQueuesDeadOnesAgain(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	var got atomic.Int32
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		got.Add(1)
	}))
	defer rc.Close()

	reg := &checks.Registry{}
	if err := reg.Register("order_unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		_, err := j.Emit(ctx, checks.Event{Name: "order.unshipped", Stage: "alert"})
		return time.Time{}, err
	}, &checks.Opts{Sinks: []string{"hook"}}); err != nil {
		t.Fatal(err)
	}
	config := writeConfig(t, `database:
  path: `+filepath.Join(t.TempDir(), "prescient.db")+`
slots: {resolution: 1s, cycle: 0s}
sinks:
  hook:
    type: webhook
    url: `+rc.URL+`/events
    secret_env: HOOK_SECRET
    timeout: 5s
    max_attempts: 1
`)
	cmd := func(ctx context.Context, out io.Writer, args ...string) error {
		root := NewRootCommand(&Opts{Checks: reg, Out: out, Err: io.Discard, lookupEnv: envOf(map[string]string{"HOOK_SECRET": "s"})})
		root.SetArgs(append([]string{"--config", config}, args...))
		return root.ExecuteContext(ctx)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		var out strings.Builder
		if err := cmd(context.Background(), &out, args...); err != nil {
			t.Fatalf("prescient %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	hookDelivery := func() *prescient.Delivery {
		t.Helper()
		var ds []*prescient.Delivery
		if err := json.Unmarshal([]byte(mustRun("deliveries", "--sink", "hook", "--json")), &ds); err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 {
			return nil
		}
		return ds[0]
	}
	// serveUntil runs a server until the hook's delivery is in state.
	serveUntil := func(state prescient.DeliveryState) *prescient.Delivery {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cmd(ctx, io.Discard, "run") }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if d := hookDelivery(); d != nil && d.State == state {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("the hook's delivery is not %s within 60s: %+v", state, hookDelivery())
			}
			time.Sleep(50 * time.Millisecond) // polling the database
		}
	}

	mustRun("schedule", "order", "42", "order_unshipped", "--in", "1s")
	if d := serveUntil(prescient.DeliveryDead); d.LastStatus != http.StatusServiceUnavailable || d.Attempts != 1 {
		t.Fatalf("dead delivery %+v, want one attempt answered 503", d)
	}

	// A sink that never had a delivery is most likely misspelt: said on
	// stderr (found by an SRE's trial).
	var stdout, stderr strings.Builder
	root := NewRootCommand(&Opts{Checks: reg, Out: &stdout, Err: &stderr, lookupEnv: envOf(map[string]string{"HOOK_SECRET": "s"})})
	root.SetArgs([]string{"--config", config, "deliveries", "retry", "--sink", "hoook"})
	if err := root.ExecuteContext(context.Background()); err != nil || !strings.Contains(stdout.String(), "queued 0 dead deliveries again") ||
		!strings.Contains(stderr.String(), `note: no delivery was ever made to a sink named "hoook" (the configuration's sinks: hook)`) {
		t.Errorf("retry of a sink never delivered to: %v, stdout %q, stderr %q; want 0 queued and a note naming the configured sinks", err, stdout.String(), stderr.String())
	}
	// So is an event that has no delivery (found by a trial of deliveries),
	// and the event's id, as deliveries lists it, is no such note.
	event := hookDelivery().Event.ID
	retryEvent := func(event int64, sink string) string {
		t.Helper()
		var stderr strings.Builder
		root := NewRootCommand(&Opts{Checks: reg, Out: io.Discard, Err: &stderr, lookupEnv: envOf(map[string]string{"HOOK_SECRET": "s"})})
		args := []string{"--config", config, "deliveries", "retry", "--event", fmt.Sprint(event)}
		if sink != "" {
			args = append(args, "--sink", sink)
		}
		root.SetArgs(args)
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		return stderr.String()
	}
	if got := retryEvent(event+1000, ""); !strings.Contains(got, fmt.Sprintf("note: event %d has no delivery (deliveries lists the events' ids): is the id right?", event+1000)) {
		t.Errorf("retry of an event that has no delivery: stderr %q, want a note", got)
	}
	if got := retryEvent(event, "other"); !strings.Contains(got, fmt.Sprintf(`note: event %d has no delivery to the sink "other"`, event)) {
		t.Errorf("retry of an event to a sink it has no delivery to: stderr %q, want a note", got)
	}
	if err := cmd(context.Background(), io.Discard, "deliveries", "retry", "--event", "-1"); err == nil || !strings.Contains(err.Error(), "--event") {
		t.Errorf("deliveries retry --event -1: %v, want an error naming the flag", err)
	}
	fixed.Store(true)
	wantContains(t, "retry", mustRun("deliveries", "retry", "--sink", "hook"), "queued 1 dead delivery again")
	if d := hookDelivery(); d.State != prescient.DeliveryPending || d.Attempts != 0 || d.LastStatus != http.StatusServiceUnavailable {
		t.Fatalf("after retry: %+v, want pending with no attempts, the last status kept", d)
	}
	if d := serveUntil(prescient.DeliveryDelivered); d.Attempts != 1 || got.Load() != 1 {
		t.Fatalf("delivered %+v after %d request(s) to the fixed receiver, want one attempt, one request", d, got.Load())
	}
	if got := retryEvent(event, "hook"); strings.Contains(got, "note:") {
		t.Errorf("retry of an event delivered: stderr %q, want no note (it has a delivery, not dead)", got)
	}
	var n map[string]int
	if err := json.Unmarshal([]byte(mustRun("deliveries", "retry", "--json")), &n); err != nil || n["queued"] != 0 {
		t.Errorf("deliveries retry --json = %v, %v; want queued 0 (nothing is dead)", n, err)
	}
}
