package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/sqlite"
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
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "msg=event") && !strings.Contains(l, " server=") {
			t.Errorf("the log sink's line names no server: %s", l)
		}
	}

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
	var noteOut, noteErr strings.Builder
	if err := cmd(context.Background(), &noteOut, &noteErr, "deliveries", "--sink", "hooks"); err != nil {
		t.Fatal(err)
	}
	wantContains(t, "deliveries of a misspelt sink", noteOut.String()+noteErr.String(), "no deliveries match",
		`note: the configuration has no sink named "hooks" (its sinks: console, hook)`)
	// Two deliveries, one shown: the list says more match (found by an
	// SRE's trial: it cut the list silently).
	first := mustRun("deliveries", "--limit", "1")
	id := strconv.FormatInt(ds[0].Event.ID, 10)
	wantContains(t, "deliveries --limit 1", first, "console",
		"more deliveries match than the 1 shown: for the next page, run the same command with --after-event "+id+" --after-sink console")
	// The next page goes on among the same event's deliveries: hook's,
	// after console's, is on it, and it is the last.
	next := mustRun("deliveries", "--limit", "1", "--after-event", id, "--after-sink", "console")
	wantContains(t, "deliveries, the second page", next, "hook", "order/42/order_unshipped/alert")
	if strings.Contains(next, "console") || strings.Contains(next, "more deliveries match") {
		t.Errorf("deliveries, the second page of one: shows console again or says more match:\n%s", next)
	}
	if out := mustRun("deliveries", "--limit", "2"); strings.Contains(out, "more deliveries match") {
		t.Errorf("deliveries --limit 2 of 2 says more match:\n%s", out)
	}
	for _, args := range [][]string{{"--after-event", id}, {"--after-sink", "console"}, {"--after-event", "-1", "--after-sink", "x"}} {
		if err := cmd(context.Background(), io.Discard, io.Discard, append([]string{"deliveries"}, args...)...); err == nil || !strings.Contains(err.Error(), "--after-") {
			t.Errorf("deliveries %v: %v, want an error naming the flag", args, err)
		}
	}
	wantContains(t, "status", mustRun("status"),
		"deliveries: console 0 pending, 1 delivered (24h), 0 dead; hook 0 pending, 1 delivered (24h), 0 dead")
	if err := cmd(context.Background(), io.Discard, io.Discard, "deliveries", "--state", "lost"); err == nil || !strings.Contains(err.Error(), "--state") {
		t.Errorf("deliveries --state lost: %v, want an error naming the flag", err)
	}
}

// A server whose configuration lacks a sink that deliveries are pending for
// warns at start-up that they stay pending, with or without sinks of its
// own: with no sinks section at all (an operator who removed it, or a
// server started with another file) the events once waited forever without
// a word in the log.
func TestRunWarnsOfPendingDeliveriesWithoutSinks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	sqliteWithPendingDelivery(t, path, "order", "1", "order_unshipped", "pager")

	for _, tc := range []struct{ name, sinks string }{
		{"another sink configured", "sinks:\n  console: {type: log}\n"},
		{"no sinks section", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &checks.Registry{}
			if err := orders.Register(reg, orders.Options{}); err != nil {
				t.Fatal(err)
			}
			var errOut syncBuffer
			config := writeConfig(t, "database: {path: "+path+"}\n"+tc.sinks)
			root := NewRootCommand(&Opts{Checks: reg, Out: io.Discard, Err: &errOut, lookupEnv: envOf(map[string]string{})})
			root.SetArgs([]string{"--config", config, "run"})
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- root.ExecuteContext(rctx) }()
			const warning = "deliveries wait for a sink this configuration does not have"
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(errOut.String(), warning) && time.Now().Before(deadline) {
				select {
				case err := <-done:
					t.Fatalf("run ended: %v\n%s", err, errOut.String())
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
			<-done
			if out := errOut.String(); !strings.Contains(out, warning) || !strings.Contains(out, "sink=pager") {
				t.Errorf("run with %s: no warning that the delivery to sink pager waits for a sink:\n%s", tc.name, out)
			}
		})
	}
}

// sqliteWithPendingDelivery creates the SQLite store at path with one event
// of entity/key/check, stage alert, and its delivery to sink pending.
func sqliteWithPendingDelivery(t *testing.T, path, entity, key, check, sink string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := st.Driver().Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tx.OutboxRecord(ctx, &driver.OutboxRecordParams{JobID: 1, Entity: entity, Key: key, Check: check,
		Stage: "alert", Event: entity + ".late", IdempotencyKey: entity + "/" + key + "/" + check + "/alert", Sinks: []string{sink},
		Now: time.Now().UTC()}); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
