package delivery_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// Each sink has a worker of its own: while one sink's receiver holds its
// request, another sink's events are delivered. Stopping with the slow
// send still under way cancels it once Stop's context ends, and gives the
// attempt back (it does not count; the delivery is due again at once).
func TestSlowSinkDelaysOnlyItself(t *testing.T) {
	forEachStore(t, func(t *testing.T, drv driver.Driver) {
		clk := newClock()
		arrived := make(chan struct{})
		var once sync.Once
		slow := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			once.Do(func() { close(arrived) })
			<-r.Context().Done() // holds the request until the sender gives up
		})
		var logs syncBuffer
		slowKey := record(t, drv, "1", "alert", clk.Now(), "slow", "console")
		fastKey := record(t, drv, "2", "alert", clk.Now(), "console")
		slowTarget := webhookTarget(slow.URL, clk, 5, time.Hour)
		slowTarget.Name = "slow"
		d := newDeliverer(t, drv, clk, slowTarget,
			delivery.Target{Name: "console", Sink: &delivery.Log{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
		d.Start()
		<-arrived
		eventually(t, "the console sink delivers both events while the slow sink's request is held", func() bool {
			return deliveryOf(t, drv, fastKey, "console").State == driver.DeliveryDelivered &&
				deliveryOf(t, drv, slowKey, "console").State == driver.DeliveryDelivered
		})
		if dl := deliveryOf(t, drv, slowKey, "slow"); dl.State != driver.DeliveryPending || dl.Attempts != 1 || dl.LeaseOwner != "srv-1" {
			t.Fatalf("slow delivery while its request is held: %+v, want pending, its first attempt leased by srv-1", dl)
		}
		for _, want := range []string{"event=order.unshipped", "idempotency_key=" + fastKey, "severity=warning", "key=2 ", `payload="{\"order\":`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log sink's lines lack %s:\n%s", want, logs.String())
			}
		}

		stopCtx, cancel := context.WithCancel(context.Background())
		cancel() // no grace: cancel the held send at once
		if err := d.Stop(stopCtx); err == nil {
			t.Error("Stop that had to cancel a send: no error")
		}
		dl := deliveryOf(t, drv, slowKey, "slow")
		if dl.State != driver.DeliveryPending || dl.Attempts != 0 || !dl.NextAttemptAt.Equal(clk.Now()) || dl.LeaseOwner != "" ||
			!strings.Contains(dl.LastError, "interrupted") {
			t.Fatalf("slow delivery after Stop: %+v, want pending, its attempt given back, due now", dl)
		}
	})
}

// Stopping idle workers after the grace has already ended (the checks'
// shutdown took it all) cuts nothing short, and says so: no error, which
// `prescient run` logged as sends cut short while none was under way
// (found by an operator's trial).
func TestStopIdleAfterTheGraceEnded(t *testing.T) {
	forEachStore(t, func(t *testing.T, drv driver.Driver) {
		clk := newClock()
		for i := range 20 {
			var logs syncBuffer
			d := newDeliverer(t, drv, clk, delivery.Target{Name: "console", Sink: &delivery.Log{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
			d.Start()
			// Stopped at various moments of the worker's first look for
			// due deliveries: none is due, so at any of them nothing is
			// cut short (the pause varies the moment; nothing waits on it).
			time.Sleep(time.Duration(i%3) * 10 * time.Millisecond)
			stopCtx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := d.Stop(stopCtx); err != nil {
				t.Fatalf("run %d: Stop of idle workers with the grace over: %v, want no error (nothing was under way)", i, err)
			}
		}
	})
}

// A send its receiver holds delays none of the sink's other deliveries: the
// worker keeps a batch of sends under way and claims more as they end. It
// waited for a whole batch to end, so one event the receiver choked on held
// every later event of the sink for up to the timeout, at every attempt
// (found by an SRE's trial).
func TestHeldSendDelaysNoOtherOfItsSink(t *testing.T) {
	forEachStore(t, func(t *testing.T, drv driver.Driver) {
		clk := newClock()
		held := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n == 1 { // the first event's first attempt
				once.Do(func() { close(held) })
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
		})
		slowKey := record(t, drv, "1", "alert", clk.Now(), "hook")
		d := newDeliverer(t, drv, clk, webhookTarget(rc.URL, clk, 5, time.Hour))
		d.Start()
		defer d.Stop(context.Background())
		defer close(release) // first: the held send ends, then Stop returns
		<-held
		laterKey := record(t, drv, "2", "alert", clk.Now(), "hook")
		d.Wake()
		eventually(t, "the later event is delivered while the first is held", func() bool {
			return deliveryOf(t, drv, laterKey, "hook").State == driver.DeliveryDelivered
		})
		if dl := deliveryOf(t, drv, slowKey, "hook"); dl.State != driver.DeliveryPending || dl.Attempts != 1 {
			t.Errorf("the held delivery: %+v, want pending, its first attempt under way", dl)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Two servers' deliverers on one store never send the same delivery: each
// event reaches the receiver once (nothing failed, so nothing was resent).
func TestTwoDeliverersSendEachOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, drv driver.Driver) {
		clk := newClock()
		rc := newReceiver(t, nil)
		const n = 30
		for i := range n {
			record(t, drv, strconv.Itoa(i), "alert", clk.Now(), "hook")
		}
		var ds []*delivery.Deliverer
		for _, server := range []string{"a", "b"} {
			d, err := delivery.New(drv, &delivery.Config{Server: server, Now: clk.Now, Poll: 5 * time.Millisecond, Batch: 3,
				Targets: []delivery.Target{webhookTarget(rc.URL, clk, 3, 5*time.Second)}, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			d.Start()
			ds = append(ds, d)
		}
		eventually(t, "every event delivered", func() bool {
			counts, err := drv.DeliveryCounts(context.Background(), clk.Now())
			return err == nil && counts["hook"] != nil && counts["hook"].Delivered == n
		})
		for _, d := range ds {
			if err := d.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		seen := make(map[string]int)
		for _, r := range rc.requests() {
			seen[r.header.Get("Idempotency-Key")]++
		}
		if len(seen) != n {
			t.Errorf("receiver saw %d events, want %d", len(seen), n)
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("%s sent %d times, want once", k, c)
			}
		}
	})
}

// The postgres sink NOTIFYs the channel with the event's id: a consumer
// LISTENing on a connection of its own receives it and reads the row.
func TestPostgresSinkNotifies(t *testing.T) {
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	store, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	// Channels are the database's, not the schema's: one of the test's own.
	channel := schema + "_events"
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	ik := record(t, store, "5", "alert", clk.Now(), "audit")
	d := newDeliverer(t, store, clk, delivery.Target{Name: "audit", Sink: &delivery.Notify{Notifier: store, Channel: channel}})
	if n := deliverDue(t, d, "audit"); n != 1 {
		t.Fatalf("delivered %d, want 1", n)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	note, err := conn.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if note.Channel != channel {
		t.Errorf("notified on %q, want %q", note.Channel, channel)
	}
	// What a consumer does with the notification: read the event by id, on
	// its own connection.
	var key, event string
	if err := conn.QueryRow(ctx, `SELECT idempotency_key, event FROM `+schema+`.prescient_outbox WHERE id = $1`,
		note.Payload).Scan(&key, &event); err != nil {
		t.Fatalf("read event %s: %v", note.Payload, err)
	}
	if key != ik || event != "order.unshipped" {
		t.Errorf("event %s: %s %s, want %s", note.Payload, key, event, ik)
	}
	if dl := deliveryOf(t, store, ik, "audit"); dl.State != driver.DeliveryDelivered {
		t.Errorf("delivery %+v, want delivered", dl)
	}
}

// A claim under way when Stop begins is not cut short: the store could
// commit its lease (an attempt counted) while the worker saw only the
// cancellation, leaving the delivery leased and unsent until the lease ran
// out, and dead without a send if that was its last attempt. The claim
// finishes and its delivery is sent within the grace.
func TestStopLetsAClaimUnderWayFinish(t *testing.T) {
	ctx := context.Background()
	st := openPostgres(t)
	clk := newClock()
	rc := newReceiver(t, nil)
	ik := record(t, st, "1", "alert", clk.Now(), "hook")
	lock, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE prescient_deliveries IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	d := newDeliverer(t, st, clk, webhookTarget(rc.URL, clk, 3, 5*time.Second))
	d.Start()
	eventually(t, "the claim waits for the table lock", func() bool {
		var n int
		err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'prescient_deliveries'::regclass`).Scan(&n)
		return err == nil && n > 0
	})
	stopped := make(chan error, 1)
	go func() {
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stopped <- d.Stop(stopCtx)
	}()
	time.Sleep(300 * time.Millisecond) // Stop has begun: no new claim
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if dl := deliveryOf(t, st, ik, "hook"); dl.State != driver.DeliveryDelivered || dl.Attempts != 1 || len(rc.requests()) != 1 {
		t.Fatalf("delivery whose claim was under way when Stop began: %+v, %d request(s); want delivered in one attempt", dl, len(rc.requests()))
	}
}
