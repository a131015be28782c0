package prescient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// clock is the injected clock of the scenario tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(s string) *clock {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return &clock{t: t}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(s string) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// storeKind opens a fresh, migrated, empty store for one test, plus a way to
// run DDL and queries in the same database for the tests' own tables.
type storeKind struct {
	name string
	open func(t testing.TB) *harness
}

func openPostgres(t testing.TB) *harness {
	t.Helper()
	return openPostgresConns(t, 20)
}

// openPostgresConns is openPostgres with a pool of maxConns connections.
func openPostgresConns(t testing.TB, maxConns int32) *harness {
	t.Helper()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	s, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema, MaxConns: maxConns})
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return newHarness(t, s,
		func(sql string, args ...any) (n int, err error) {
			return n, s.Pool().QueryRow(ctx, sql, args...).Scan(&n)
		},
		func(sql string, args ...any) error {
			_, err := s.Pool().Exec(ctx, sql, args...)
			return err
		})
}

// newHarness builds the harness over a migrated store, given how to read one
// integer and run a statement in its database, and creates the scenario
// tables beside prescient's.
func newHarness(t testing.TB, s prescient.Store, queryInt func(sql string, args ...any) (int, error), execSQL func(sql string, args ...any) error) *harness {
	t.Helper()
	h := &harness{t: t, store: s}
	h.count = func(sql string, args ...any) int {
		t.Helper()
		n, err := queryInt("SELECT count(*) FROM ("+sql+") q", args...)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	h.exec = func(sql string, args ...any) {
		t.Helper()
		if err := execSQL(sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	h.exec(alertsDDL)
	return h
}

const alertsDDL = `CREATE TABLE alerts (entity_key text NOT NULL, stage text NOT NULL, PRIMARY KEY (entity_key, stage));
CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL)`

// storeKinds lists the stores every scenario runs on.
var storeKinds = []storeKind{{"postgres", openPostgres}}

// forEachStore runs a scenario once per store, in parallel.
func forEachStore(t *testing.T, fn func(t *testing.T, h *harness)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			h := k.open(t)
			h.name = k.name
			fn(t, h)
		})
	}
}

// wrappedStore is a Store whose driver wraps the real one's, to inject
// faults or count calls.
type wrappedStore struct {
	prescient.Store
	drv driver.Driver
}

func (s wrappedStore) Driver() driver.Driver { return s.drv }

type harness struct {
	t     testing.TB
	name  string // the store kind
	store prescient.Store
	// count returns the number of rows a query returns.
	count func(sql string, args ...any) int
	// exec runs a statement in the store's database.
	exec func(sql string, args ...any)
}

// quarterHours is the grid of most scenarios: 15-minute slots, 4 positions
// per hour.
var quarterHours = slots.Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}

// client builds a client over the harness store with the given clock and
// checks; mod may adjust the config.
func (h *harness) client(clk *clock, reg *checks.Registry, mod func(*prescient.Config)) *prescient.Client {
	h.t.Helper()
	cfg := &prescient.Config{
		Server:               "s1",
		Grid:                 quarterHours,
		Checks:               reg,
		Now:                  clk.Now,
		SweepOnStartDisabled: true,
		SweepSchedule:        "-",
		PruneSchedule:        "-",
	}
	if mod != nil {
		mod(cfg)
	}
	c, err := prescient.NewClient(h.store, cfg)
	if err != nil {
		h.t.Fatalf("new client: %v", err)
	}
	if err := c.SyncCatalog(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	if err := h.store.Driver().GridSave(context.Background(), cfg.Grid); err != nil {
		h.t.Fatal(err)
	}
	return c
}
