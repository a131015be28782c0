package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
)

// hookReceiver is a webhook endpoint on loopback that deduplicates by
// idempotency key, as the README tells receivers to. It holds the first
// request it gets without answering, until the sender goes away.
type hookReceiver struct {
	secret []byte
	first  chan string // receives the key of the request it holds

	mu        sync.Mutex
	requests  map[string]int // idempotency key -> requests received
	refused   []string       // why requests were refused (bad signature, body)
	holdFirst bool
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	key := r.Header.Get(delivery.HeaderIdempotencyKey)
	var ev struct {
		IdempotencyKey string `json:"idempotency_key"`
	}
	if err == nil {
		err = delivery.Verify(h.secret, r.Header.Get(delivery.HeaderSignature), body, time.Now(), 5*time.Minute)
	}
	if err == nil {
		err = json.Unmarshal(body, &ev)
	}
	if err == nil && ev.IdempotencyKey != key {
		err = fmt.Errorf("body's key %q differs from the header's %q", ev.IdempotencyKey, key)
	}
	h.mu.Lock()
	if err != nil {
		h.refused = append(h.refused, err.Error())
		h.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.requests[key]++
	hold := h.holdFirst
	h.holdFirst = false
	h.mu.Unlock()
	if hold {
		h.first <- key
		<-r.Context().Done() // its server is killed while it waits
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *hookReceiver) seen() (map[string]int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]int, len(h.requests))
	for k, n := range h.requests {
		m[k] = n
	}
	return m, slices.Clone(h.refused)
}

// TestOutboxNeverLost: a server whose checks raise events (job.Emit, one per
// job, to a webhook sink) is killed with SIGKILL between "event recorded"
// and "delivered": the receiver holds the first delivery, and the test
// kills the server while it waits for the answer. Restarted, the server
// delivers every event (the one it was sending when it died included, once
// its lease ends) and those of the jobs that came due meanwhile. From the
// receiver's point of view, deduplicating by idempotency key, each event
// arrives once; requests received twice for a key are allowed (at least
// once) and reported. No delivery is left pending or dead.
func TestOutboxNeverLost(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	c := newCluster(t, url, schema, clusterOpts{})
	const secret = "fault-test-secret"
	rc := &hookReceiver{secret: []byte(secret), first: make(chan string, 1), requests: make(map[string]int), holdFirst: true}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	// The timeout outlasts the kill by far: the attempt under way records
	// nothing before the server dies. Its lease ends 5s after the timeout.
	sinks := fmt.Sprintf(`sinks:
  hook:
    type: webhook
    url: %s/events
    secret_env: FAULT_WEBHOOK_SECRET
    timeout: 10s
    max_attempts: 20
    backoff_initial: 200ms
    backoff_max: 1s
`, srv.URL)
	f, err := os.OpenFile(c.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(sinks); err != nil {
		t.Fatal(err)
	}
	f.Close()
	env := []string{"FAULT_EMIT_SINKS=hook", "FAULT_WEBHOOK_SECRET=" + secret}
	c.start("a", env...)
	ready(t, c.store.Pool(), 1)

	const jobs = 40
	first := c.grid.Ceil(time.Now().Add(2 * time.Second))
	want := make([]string, jobs)
	ps := make([]prescient.ScheduleParams, jobs)
	for i := range ps {
		key := fmt.Sprint(i)
		ps[i] = prescient.ScheduleParams{Entity: "order", Key: key, Check: "fault_emit", At: c.grid.Add(first, i%8)}
		want[i] = "order/" + key + "/fault_emit/alert"
	}
	if _, err := c.client.ScheduleMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}

	var held string
	select {
	case held = <-rc.first:
	case <-time.After(60 * time.Second):
		t.Fatalf("no delivery reached the receiver within 60s\n%s", c.logTail("a"))
	}
	c.kill("a")
	ctx := context.Background()
	dl := deliveryByKey(t, c, held)
	if dl.State != driver.DeliveryPending || dl.Attempts != 1 || dl.LastError != "" || dl.LeaseOwner != "a" {
		t.Fatalf("the delivery held when the server died: %+v; want pending, its first attempt under way with no result recorded "+
			"(the test must kill the server between recorded and delivered)", dl)
	}
	before, err := c.store.DeliveryCounts(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}

	c.start("a", env...)
	end := time.Now().Add(90 * time.Second)
	for {
		counts, err := c.store.DeliveryCounts(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		var pendingJobs int
		if err := c.store.Pool().QueryRow(ctx, "SELECT count(*) FROM prescient_jobs").Scan(&pendingJobs); err != nil {
			t.Fatal(err)
		}
		if h := counts["hook"]; pendingJobs == 0 && h != nil && h.Pending == 0 && h.Delivered+h.Dead == jobs {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("after 90s: %d jobs pending, deliveries %+v\n%s", pendingJobs, counts["hook"], c.logTail("a"))
		}
		time.Sleep(100 * time.Millisecond) // polling the database
	}

	counts, _ := c.store.DeliveryCounts(ctx, time.Time{})
	if h := counts["hook"]; h.Dead != 0 || h.Delivered != jobs {
		t.Errorf("deliveries %+v, want all %d delivered, none dead", h, jobs)
	}
	var events int
	if err := c.store.Pool().QueryRow(ctx, "SELECT count(*) FROM prescient_outbox").Scan(&events); err != nil || events != jobs {
		t.Errorf("%d events recorded (%v), want %d: one per job", events, err, jobs)
	}
	seen, refused := rc.seen()
	if len(refused) > 0 {
		t.Errorf("the receiver refused %d request(s): %v", len(refused), refused)
	}
	var keys []string
	duplicates := 0
	for k, n := range seen {
		keys = append(keys, k)
		duplicates += n - 1
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("the receiver deduplicated %d keys, want the %d events' keys exactly: got %v", len(keys), len(want), keys)
	}
	if seen[held] < 2 {
		t.Errorf("the event being sent when the server died reached the receiver %d time(s), want again after the restart", seen[held])
	}
	if dl := deliveryByKey(t, c, held); dl.State != driver.DeliveryDelivered || dl.Attempts != 2 {
		t.Errorf("the held delivery ended %+v, want delivered on its second attempt", dl)
	}
	t.Logf("outbox: %d events, each delivered once per idempotency key; %d duplicate request(s) at the HTTP level "+
		"(at least once; the receiver deduplicated them); the server was killed with %d delivery(ies) pending and %d delivered",
		jobs, duplicates, before["hook"].Pending, before["hook"].Delivered) // hook has the held delivery
}

// deliveryByKey returns the hook delivery of the event with idempotency key
// ik.
func deliveryByKey(t *testing.T, c *cluster, ik string) *driver.Delivery {
	t.Helper()
	ds, err := c.store.DeliveryList(context.Background(), &driver.DeliveryListParams{Sink: "hook", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Event.IdempotencyKey == ik {
			return d
		}
	}
	t.Fatalf("no delivery of %s", ik)
	return nil
}
