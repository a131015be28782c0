package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/delivery"
)

// `prescient run` delivers the events its checks raise to the configured
// sinks: a signed webhook to a receiver on loopback and the log; then
// `prescient deliveries` lists them delivered and `prescient status` counts
// them. On the default SQLite store.
func TestRunDeliversEvents(t *testing.T) {
	t.Parallel()
	const secret = "run-test-secret"
	var (
		mu   sync.Mutex
		keys []string
		bad  []string
	)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := delivery.Verify([]byte(secret), r.Header.Get(delivery.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
			bad = append(bad, err.Error())
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		keys = append(keys, r.Header.Get(delivery.HeaderIdempotencyKey))
	}))
	defer rc.Close()
	received := func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), keys...), append([]string(nil), bad...)
	}

	reg := &checks.Registry{}
	err := reg.Register("order_unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		_, err := j.Emit(ctx, checks.Event{Name: "order.unshipped", Stage: "alert", Severity: "warning"})
		return time.Time{}, err
	}, &checks.Opts{Sinks: []string{"hook", "console"}})
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "prescient.db")
	config := writeConfig(t, `database:
  path: `+db+`
slots: {resolution: 1s, cycle: 0s}
sinks:
  hook:
    type: webhook
    url: `+rc.URL+`/events
    secret_env: HOOK_SECRET
    timeout: 5s
  console:
    type: log
`)
	env := envOf(map[string]string{"HOOK_SECRET": secret})
	cmd := func(ctx context.Context, out, errOut io.Writer, args ...string) error {
		root := NewRootCommand(&Opts{Checks: reg, Out: out, Err: errOut, lookupEnv: env})
		root.SetArgs(append([]string{"--config", config}, args...))
		return root.ExecuteContext(ctx)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		var out strings.Builder
		if err := cmd(context.Background(), &out, io.Discard, args...); err != nil {
			t.Fatalf("prescient %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	mustRun("schedule", "order", "42", "order_unshipped", "--in", "1s")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- cmd(ctx, io.Discard, &logs, "run") }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, _ := received()
		if len(got) > 0 && strings.Contains(mustRun("deliveries", "--state", "delivered"), "console") {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no delivery within 60s; run returned %v; logs:\n%s", <-done, logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling the receiver and the database
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\nlogs:\n%s", err, logs.String())
	}
	got, refused := received()
	if len(refused) > 0 || len(got) != 1 || got[0] != "order/42/order_unshipped/alert" {
		t.Fatalf("receiver got keys %v (refused %v), want order/42/order_unshipped/alert once, signed", got, refused)
	}
	wantContains(t, "run logs", logs.String(), "msg=event", "idempotency_key=order/42/order_unshipped/alert")

	out := mustRun("deliveries")
	wantContains(t, "deliveries", out, "database: sqlite file", "EVENT", "console", "hook", "delivered", "order/42/order_unshipped/alert", "order.unshipped")
	if strings.Contains(out, rc.URL) {
		t.Errorf("deliveries shows the webhook's URL:\n%s", out)
	}
	var ds []*prescient.Delivery
	if err := json.Unmarshal([]byte(mustRun("deliveries", "--sink", "hook", "--json")), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Sink != "hook" || ds[0].State != prescient.DeliveryDelivered || ds[0].LastStatus != 200 || ds[0].Attempts != 1 {
		t.Errorf("deliveries --sink hook --json: %+v, want hook's one delivery, delivered with 200 on the first attempt", ds)
	}
	wantContains(t, "deliveries --state pending", mustRun("deliveries", "--state", "pending"), "no deliveries match")
	wantContains(t, "status", mustRun("status"),
		"deliveries: console 0 pending, 1 delivered (24h), 0 dead; hook 0 pending, 1 delivered (24h), 0 dead")
	if err := cmd(context.Background(), io.Discard, io.Discard, "deliveries", "--state", "lost"); err == nil || !strings.Contains(err.Error(), "--state") {
		t.Errorf("deliveries --state lost: %v, want an error naming the flag", err)
	}
}
