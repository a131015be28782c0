package delivery_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/driver"
)

var secret = []byte("s3cret-for-tests")

// request is what the receiver got.
type request struct {
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint on loopback; answer decides each answer
// (nil: 200).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []request
	answer func(w http.ResponseWriter, r *http.Request, n int)
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, request{r.Header.Clone(), body})
		n := len(rc.got)
		rc.mu.Unlock()
		if rc.answer != nil {
			rc.answer(w, r, n)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.got...)
}

// verifyByRecipe checks a signature the way the README tells a receiver to,
// written out here rather than calling delivery.Verify: split the header at
// ',' into t=… and v1=…, compute HMAC-SHA256(secret, t + "." + body), compare
// its hex with v1 in constant time, and refuse a t more than 5 minutes away.
func verifyByRecipe(header string, body []byte, now time.Time) bool {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(part, "t="); ok {
			ts = v
		}
		if v, ok := strings.CutPrefix(part, "v1="); ok {
			sig = v
		}
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "." + string(body)))
	expected := hex.EncodeToString(mac.Sum(nil))
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	age := now.Sub(time.Unix(sec, 0))
	return hmac.Equal([]byte(sig), []byte(expected)) && age < 5*time.Minute && age > -5*time.Minute
}

func webhookTarget(url string, clk *clock, maxAttempts int, timeout time.Duration) delivery.Target {
	return delivery.Target{
		Name:        "hook",
		Sink:        &delivery.Webhook{URL: url, Secret: secret, Now: clk.Now},
		MaxAttempts: maxAttempts,
		Timeout:     timeout,
		Backoff:     delivery.Backoff{Initial: 10 * time.Second, Max: time.Minute},
	}
}

func newDeliverer(t *testing.T, drv driver.Driver, clk *clock, targets ...delivery.Target) *delivery.Deliverer {
	t.Helper()
	d, err := delivery.New(drv, &delivery.Config{Server: "srv-1", Targets: targets, Now: clk.Now, Poll: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func deliverDue(t *testing.T, d *delivery.Deliverer, sink string) int {
	t.Helper()
	n, err := d.DeliverDue(context.Background(), sink)
	if err != nil {
		t.Fatalf("deliver due of %s: %v", sink, err)
	}
	return n
}

// A webhook request carries the event as JSON with its idempotency key,
// event id and attempt in headers, signed so that the README's recipe
// verifies it; delivery.Verify agrees, and refuses a changed body, another
// secret and an old timestamp. The 2xx answer delivers it.
func TestWebhookRequestAndSignature(t *testing.T) {
	drv := openSQLite(t)
	clk := &clock{t: time.Now().UTC().Truncate(time.Second)}
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusAccepted) })
	ik := record(t, drv, "42", "3h", clk.Now(), "hook")
	d := newDeliverer(t, drv, clk, webhookTarget(rc.URL+"/prescient?token=abc", clk, 3, 5*time.Second))
	if n := deliverDue(t, d, "hook"); n != 1 {
		t.Fatalf("delivered %d, want 1", n)
	}
	got := rc.requests()
	if len(got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(got))
	}
	r := got[0]
	if !verifyByRecipe(r.header.Get("Prescient-Signature"), r.body, time.Now()) {
		t.Errorf("the README's recipe does not verify signature %q", r.header.Get("Prescient-Signature"))
	}
	if err := delivery.Verify(secret, r.header.Get(delivery.HeaderSignature), r.body, time.Now(), 5*time.Minute); err != nil {
		t.Errorf("Verify: %v", err)
	}
	tampered := []byte(strings.Replace(string(r.body), `"42"`, `"43"`, 1))
	if verifyByRecipe(r.header.Get("Prescient-Signature"), tampered, time.Now()) ||
		delivery.Verify(secret, r.header.Get(delivery.HeaderSignature), tampered, time.Now(), 5*time.Minute) == nil {
		t.Error("a changed body verifies")
	}
	if delivery.Verify([]byte("other"), r.header.Get(delivery.HeaderSignature), r.body, time.Now(), 5*time.Minute) == nil {
		t.Error("another secret verifies")
	}
	if delivery.Verify(secret, r.header.Get(delivery.HeaderSignature), r.body, time.Now().Add(time.Hour), 5*time.Minute) == nil {
		t.Error("a signature an hour old verifies")
	}
	for h, want := range map[string]string{
		"Idempotency-Key":    ik,
		"Prescient-Attempt":  "1",
		"Content-Type":       "application/json",
		"Prescient-Event-Id": strconv.FormatInt(deliveryOf(t, drv, ik, "hook").Event.ID, 10),
	} {
		if v := r.header.Get(h); v != want {
			t.Errorf("header %s: %q, want %q", h, v, want)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"idempotency_key": ik, "event": "order.unshipped", "stage": "3h", "severity": "warning",
		"entity": "order", "key": "42", "check": "unshipped", "payload": map[string]any{"order": "42"}} {
		if b, w := jsonText(body[k]), jsonText(want); b != w {
			t.Errorf("body %s: %s, want %s", k, b, w)
		}
	}
	if _, ok := body["id"].(float64); !ok {
		t.Errorf("body has no numeric id: %s", r.body)
	}
	dl := deliveryOf(t, drv, ik, "hook")
	if dl.State != driver.DeliveryDelivered || dl.LastStatus != http.StatusAccepted || !dl.DeliveredAt.Equal(clk.Now()) || dl.Attempts != 1 {
		t.Errorf("delivery %+v, want delivered on the first attempt with status 202", dl)
	}
	if n := deliverDue(t, d, "hook"); n != 0 || len(rc.requests()) != 1 {
		t.Errorf("a delivered event was sent again")
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// An answer of 500 is retried after the backoff (exponential, with jitter,
// within its bounds), the same event under the same idempotency key with
// the attempt counted up; after the last attempt the delivery is dead, with
// the last status and the start of the body. Nothing is sent before a retry
// is due.
func TestWebhookRetriesThenDead(t *testing.T) {
	forEachStore(t, func(t *testing.T, drv driver.Driver) {
		clk := newClock()
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			http.Error(w, "database down", http.StatusInternalServerError)
		})
		ik := record(t, drv, "7", "alert", clk.Now(), "hook")
		target := webhookTarget(rc.URL, clk, 3, 5*time.Second)
		d := newDeliverer(t, drv, clk, target)
		for attempt := 1; attempt <= 3; attempt++ {
			if n := deliverDue(t, d, "hook"); n != 1 {
				t.Fatalf("attempt %d: %d deliveries due, want 1", attempt, n)
			}
			dl := deliveryOf(t, drv, ik, "hook")
			if dl.Attempts != attempt || dl.LastStatus != 500 || !strings.Contains(dl.LastError, "HTTP 500") || !strings.Contains(dl.LastError, "database down") {
				t.Fatalf("after attempt %d: %d attempts, status %d, error %q", attempt, dl.Attempts, dl.LastStatus, dl.LastError)
			}
			if attempt == 3 {
				if dl.State != driver.DeliveryDead {
					t.Fatalf("after the last attempt: %s, want dead", dl.State)
				}
				break
			}
			lo, hi := target.Backoff.Bounds(attempt)
			if wait := dl.NextAttemptAt.Sub(clk.Now()); dl.State != driver.DeliveryPending || wait < lo || wait > hi {
				t.Fatalf("after attempt %d: %s, retry in %s; want pending, retried in [%s, %s]", attempt, dl.State, wait, lo, hi)
			}
			clk.Set(dl.NextAttemptAt.Add(-time.Millisecond))
			if n := deliverDue(t, d, "hook"); n != 0 {
				t.Fatalf("attempt %d: sent before its retry was due", attempt+1)
			}
			clk.Set(dl.NextAttemptAt)
		}
		got := rc.requests()
		if len(got) != 3 {
			t.Fatalf("receiver got %d requests, want 3", len(got))
		}
		for i, r := range got {
			if r.header.Get("Idempotency-Key") != ik || r.header.Get("Prescient-Attempt") != strconv.Itoa(i+1) || string(r.body) != string(got[0].body) {
				t.Errorf("request %d: key %q, attempt %q; want %q, %d and the same body", i+1,
					r.header.Get("Idempotency-Key"), r.header.Get("Prescient-Attempt"), ik, i+1)
			}
		}
		clk.Set(clk.Now().Add(24 * time.Hour))
		if n := deliverDue(t, d, "hook"); n != 0 {
			t.Error("a dead delivery was sent again")
		}
	})
}

// The backoff grows from Initial, doubling, up to Max, and its jitter keeps
// each delay within ±50%.
func TestBackoffBounds(t *testing.T) {
	b := delivery.Backoff{Initial: 10 * time.Second, Max: time.Minute}
	for attempt, base := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 3: 40 * time.Second, 4: time.Minute, 9: time.Minute} {
		lo, hi := b.Bounds(attempt)
		if lo != base/2 || hi != base*3/2+1 {
			t.Errorf("attempt %d: bounds [%s, %s], want [%s, %s]", attempt, lo, hi, base/2, base*3/2)
		}
		for range 50 {
			if d := b.Delay(attempt); d < lo || d > hi {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, lo, hi)
			}
		}
	}
	exact := delivery.Backoff{Initial: time.Second, Max: 5 * time.Second, Jitter: delivery.NoJitter}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second} {
		if d := exact.Delay(attempt); d != want {
			t.Errorf("no jitter, attempt %d: %s, want %s", attempt, d, want)
		}
	}
}

// An answer that does not come within the sink's timeout is a failed
// attempt without status, retried; the receiver's next answer delivers.
func TestWebhookTimeoutRetried(t *testing.T) {
	forEachStore(t, func(t *testing.T, drv driver.Driver) {
		clk := newClock()
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 {
				<-r.Context().Done() // never answers: the sender gives up
			}
		})
		ik := record(t, drv, "8", "alert", clk.Now(), "hook")
		d := newDeliverer(t, drv, clk, webhookTarget(rc.URL+"/hook?token=tok3n", clk, 5, 100*time.Millisecond))
		deliverDue(t, d, "hook")
		dl := deliveryOf(t, drv, ik, "hook")
		if dl.State != driver.DeliveryPending || dl.LastStatus != 0 || !strings.Contains(dl.LastError, "timeout") || strings.Contains(dl.LastError, "tok3n") {
			t.Fatalf("after a timeout: %s, status %d, error %q; want pending, no status, a timeout (and no full URL)", dl.State, dl.LastStatus, dl.LastError)
		}
		// The answer that delivers gets a timeout a loaded machine meets.
		clk.Set(dl.NextAttemptAt)
		d = newDeliverer(t, drv, clk, webhookTarget(rc.URL+"/hook?token=tok3n", clk, 5, 10*time.Second))
		deliverDue(t, d, "hook")
		if dl := deliveryOf(t, drv, ik, "hook"); dl.State != driver.DeliveryDelivered || dl.Attempts != 2 || dl.LastStatus != 200 || dl.LastError != "" {
			t.Fatalf("after the second attempt: %+v, want delivered, 2 attempts, status 200, no error", dl)
		}
	})
}

// A Retry-After header makes the retry wait at least that long.
func TestWebhookRetryAfter(t *testing.T) {
	drv := openSQLite(t)
	clk := newClock()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	ik := record(t, drv, "9", "alert", clk.Now(), "hook")
	target := webhookTarget(rc.URL, clk, 5, time.Second)
	target.Backoff.Jitter = delivery.NoJitter
	target.Backoff.Max = time.Hour
	d := newDeliverer(t, drv, clk, target)
	deliverDue(t, d, "hook")
	if dl := deliveryOf(t, drv, ik, "hook"); dl.LastStatus != 429 || !dl.NextAttemptAt.Equal(clk.Now().Add(120*time.Second)) {
		t.Fatalf("after a 429 with Retry-After 120: status %d, next attempt %s, want %s", dl.LastStatus, dl.NextAttemptAt, clk.Now().Add(120*time.Second))
	}
}

// When the last attempt allowed never recorded a result (its server died
// while sending, and the lease ran out), the delivery ends dead without
// another send.
func TestLastAttemptWithoutResultEndsDead(t *testing.T) {
	drv := openSQLite(t)
	clk := newClock()
	rc := newReceiver(t, nil)
	ik := record(t, drv, "10", "alert", clk.Now(), "hook")
	for range 2 { // two attempts that died with their server
		now := clk.Now()
		if ds, err := drv.DeliveriesClaim(context.Background(), &driver.DeliveriesClaimParams{
			Sink: "hook", Now: now, LeaseUntil: now.Add(time.Minute), Server: "dead-server", Limit: 1}); err != nil || len(ds) != 1 {
			t.Fatalf("claim: %v, %v", ds, err)
		}
		clk.Set(now.Add(time.Minute))
	}
	d := newDeliverer(t, drv, clk, webhookTarget(rc.URL, clk, 2, time.Second))
	if n := deliverDue(t, d, "hook"); n != 1 {
		t.Fatalf("%d due, want 1", n)
	}
	if dl := deliveryOf(t, drv, ik, "hook"); dl.State != driver.DeliveryDead || dl.Attempts != 2 || !strings.Contains(dl.LastError, "no result") {
		t.Fatalf("%+v, want dead after 2 attempts, saying the last recorded no result", dl)
	}
	if len(rc.requests()) != 0 {
		t.Error("a delivery past its attempts was sent")
	}
}

// An operator lowers a webhook sink's max_attempts (10 to 3) while a
// delivery has already failed 3 times, each with a recorded result (HTTP
// 500). At the next claim the delivery ends dead, which is fair, but its
// last error once became "attempt 3 of 3 recorded no result (its server
// stopped while sending)": false, and the receiver's answer was gone.
func TestLoweredMaxAttemptsKeepsTheRealReason(t *testing.T) {
	drv := openSQLite(t)
	clk := newClock()
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		http.Error(w, "receiver says no", http.StatusInternalServerError)
	})
	ik := record(t, drv, "11", "alert", clk.Now(), "hook")
	d := newDeliverer(t, drv, clk, webhookTarget(rc.URL, clk, 10, time.Second))
	for range 3 {
		if n := deliverDue(t, d, "hook"); n != 1 {
			t.Fatalf("%d due, want 1", n)
		}
		clk.Set(clk.Now().Add(2 * time.Hour))
	}
	before := deliveryOf(t, drv, ik, "hook")
	if before.Attempts != 3 || !strings.Contains(before.LastError, "HTTP 500") {
		t.Fatalf("after 3 failed attempts: %+v", before)
	}
	// The same sink, now with max_attempts 3.
	d = newDeliverer(t, drv, clk, webhookTarget(rc.URL, clk, 3, time.Second))
	deliverDue(t, d, "hook")
	after := deliveryOf(t, drv, ik, "hook")
	if after.State != driver.DeliveryDead {
		t.Fatalf("after max_attempts lowered to 3: %+v, want dead", after)
	}
	if strings.Contains(after.LastError, "recorded no result") || !strings.Contains(after.LastError, "HTTP 500") {
		t.Errorf("dead delivery's last error %q: want the receiver's answer (HTTP 500 receiver says no), "+
			"not a claim that attempt 3 recorded no result (it recorded %q)", after.LastError, before.LastError)
	}
	if n := len(rc.requests()); n != 3 {
		t.Errorf("%d requests, want 3: none after max_attempts was lowered", n)
	}
}

// NoJitter turns the randomisation off in a running Deliverer too: New
// filled the target's backoff defaults in, NoJitter becoming 0, and Delay
// filled them in again, 0 becoming the default 0.5, so a failed delivery's
// retry came 5 to 15s after it, not 10s (found trying the library as a new
// user).
func TestDelivererNoJitterRetriesExactly(t *testing.T) {
	drv := openSQLite(t)
	clk := newClock()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusInternalServerError) })
	target := webhookTarget(rc.URL, clk, 5, time.Second)
	target.Backoff = delivery.Backoff{Initial: 10 * time.Second, Jitter: delivery.NoJitter}
	d := newDeliverer(t, drv, clk, target)
	for i := range 5 {
		ik := record(t, drv, fmt.Sprint(20+i), "alert", clk.Now(), "hook")
		deliverDue(t, d, "hook")
		if dl := deliveryOf(t, drv, ik, "hook"); !dl.NextAttemptAt.Equal(clk.Now().Add(10 * time.Second)) {
			t.Fatalf("delivery %d failed at %s: retry at %s, want exactly 10s later", i, clk.Now(), dl.NextAttemptAt)
		}
	}
}

// A failed delivery that will be retried is logged at WARN, a dead one at
// ERROR: an operator alerting on WARN and above sees a receiver that keeps
// failing before its deliveries die (it was INFO).
func TestDeliveryFailuresLoggedAtWarnAndError(t *testing.T) {
	drv := openSQLite(t)
	clk := newClock()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Error(w, "database down", http.StatusInternalServerError)
	})
	ik := record(t, drv, "7", "alert", clk.Now(), "hook")
	var buf bytes.Buffer
	d, err := delivery.New(drv, &delivery.Config{Server: "srv-1", Now: clk.Now, Poll: 10 * time.Millisecond,
		Targets: []delivery.Target{webhookTarget(rc.URL, clk, 2, 5*time.Second)}, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		deliverDue(t, d, "hook")
		clk.Set(deliveryOf(t, drv, ik, "hook").NextAttemptAt)
	}
	levels := map[string][]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		levels[rec.Msg] = append(levels[rec.Msg], rec.Level)
	}
	if got := strings.Join(levels["delivery failed, will retry"], ","); got != "WARN" {
		t.Errorf(`"delivery failed, will retry" logged at %q, want WARN once; log:\n%s`, got, buf.String())
	}
	if got := strings.Join(levels["delivery dead: no more attempts"], ","); got != "ERROR" {
		t.Errorf(`"delivery dead" logged at %q, want ERROR once; log:\n%s`, got, buf.String())
	}
}
