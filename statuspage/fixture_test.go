package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// clock is the engine's injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// stores opens each store the page is tested on, migrated and empty.
var stores = []struct {
	name string
	open func(t testing.TB) prescient.Store
}{
	{"postgres", func(t testing.TB) prescient.Store {
		url, schema := pgtest.Schema(t)
		st, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"sqlite", func(t testing.TB) prescient.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "prescient.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

// The fixture's times: a one-minute grid with four positions, on a fixed
// day; the page is looked at during slot 10:02.
var (
	day = time.Date(2031, 3, 4, 0, 0, 0, 0, time.UTC)
	at  = func(h, m, s int) time.Time {
		return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
	}
	slot0958 = at(9, 58, 0)
	slot1000 = at(10, 0, 0)
	slot1001 = at(10, 1, 0)
	slot1002 = at(10, 2, 0)
	slot1003 = at(10, 3, 0)
	slot1005 = at(10, 5, 0)
	slot1011 = at(10, 11, 0)
	pageNow  = at(10, 2, 30)
)

// What the fixture's checks do, for the assertions.
const (
	// boom is the error of the check "flaky": markup and quotes that the
	// page must show as text.
	boom = `<b>boom</b> & "quotes" <script>alert("error")</script>`
	// oddKey is an entity key with a slash, a space and markup.
	oddKey = `a/b <x>`
	// oddPayload is the payload of the job with oddKey.
	oddPayload = `{"note":"<script>alert(1)</script>"}`
)

// fixture is a client over a store with real jobs in every state the page
// shows: slots fired (one with every kind of result, one empty, one left
// incomplete by a dead server), upcoming slots, an overdue job of a check no
// server knows, a live and a gone server, and history with each common
// outcome.
type fixture struct {
	client *prescient.Client
	clock  *fakeClock
	drv    driver.Driver
}

func newFixture(t testing.TB, st prescient.Store) *fixture {
	t.Helper()
	ctx := context.Background()
	clk := &fakeClock{t: at(10, 0, 0).Add(500 * time.Millisecond)}
	reg := &checks.Registry{}
	must(t, reg.Register("greet", func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, nil // done
	}, nil))
	must(t, reg.Register("flaky", func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, errors.New(boom)
	}, nil))
	must(t, reg.Register("again", func(_ context.Context, j *checks.Job) (time.Time, error) {
		return j.Slot.Add(10 * time.Minute), nil
	}, &checks.Opts{Awaits: []string{"shipped"}}))
	client, err := prescient.NewClient(st, &prescient.Config{
		Server:      "web-1",
		Grid:        slots.Grid{Resolution: time.Minute, Cycle: 4 * time.Minute},
		Checks:      reg,
		MaxFailures: 2,
		Now:         clk.Now,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	must(t, err)
	f := &fixture{client: client, clock: clk, drv: st.Driver()}
	must(t, client.SyncCatalog(ctx))

	// A server that died in slot 09:58 left it incomplete.
	must(t, f.drv.SlotStart(ctx, &driver.SlotRecord{Slot: slot0958, Server: "web-2", Kind: prescient.KindFire, StartedAt: at(9, 58, 1)}))
	fire(t, client, slot1000) // nothing due: an empty slot

	clk.Set(at(10, 0, 10))
	schedule := func(entity, key, check string, when time.Time, payload any) {
		t.Helper()
		if _, err := client.Schedule(ctx, prescient.ScheduleParams{Entity: entity, Key: key, Check: check, At: when, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"1", "2", "3"} {
		schedule("order", k, "greet", slot1001, nil)
	}
	schedule("order", oddKey, "flaky", slot1001, json.RawMessage(oddPayload))
	schedule("order", "4", "again", slot1001, nil)
	schedule("order", "5", "mystery", slot1001, nil)
	schedule("order", "9", "greet", slot1005, nil)
	for _, k := range []string{"10", "11", "12", "13", "14", "15", "16"} {
		schedule("order", k, "greet", slot1005, nil)
	}
	schedule("invoice", "1", "mystery", slot1005, nil)
	schedule("invoice", "2", "mystery", slot1005, nil)
	schedule("order", "7", "flaky", slot1002, json.RawMessage(`{"amount": 12, "note": "<i>tip</i>"}`))
	if _, err := client.Cancel(ctx, "order", "9", "greet"); err != nil {
		t.Fatal(err)
	}

	// Slot 10:01, fired 2s late: three done, one rescheduled, one failure,
	// one job of an unknown check left pending (overdue from 10:02 on).
	clk.Set(at(10, 1, 2))
	fire(t, client, slot1001)
	// Slot 10:02: the odd job fails a second time and ends failed; order 7
	// fails once and is retried at 10:03.
	clk.Set(at(10, 2, 3))
	fire(t, client, slot1002)

	clk.Set(pageNow)
	must(t, client.Heartbeat(ctx)) // live, and ready
	must(t, f.drv.ServerHeartbeat(ctx, &driver.Server{Name: "web-1", StartedAt: at(9, 55, 0), HeartbeatAt: at(10, 2, 27), Positions: []int{0, 1, 2, 3}}))
	must(t, f.drv.ServerHeartbeat(ctx, &driver.Server{Name: "web-2", StartedAt: at(9, 0, 0), HeartbeatAt: at(9, 58, 20), Positions: []int{1, 3}}))
	return f
}

func fire(t testing.TB, c *prescient.Client, slot time.Time) {
	t.Helper()
	if _, err := c.FireSlot(context.Background(), slot); err != nil {
		t.Fatalf("fire %s: %v", slot.Format(time.RFC3339), err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serve serves the fixture's page on a real loopback listener.
func (f *fixture) serve(t testing.TB, opts *Opts) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(New(f.client, opts))
	t.Cleanup(srv.Close)
	return srv
}

// get fetches path from srv and returns the status and body.
func get(t testing.TB, srv *httptest.Server, path string) (int, http.Header, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}
