package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// Concurrent calls that lock several jobs of the same entities never
// deadlock one another: many clients, each call in a transaction of its own,
// schedule every job of two entities at once in a random order, mixing the
// conflict rules, and cancel or resolve every job of one of them, through
// the Go store and through the SQL functions. Every such statement locks its
// jobs in one order (by identity), so none of them may fail with deadlock
// detected (SQLSTATE 40P01). Issue 9: 100 clients got 5 of them in 20,000
// calls, from ScheduleMany and from cancelling every check of an entity.
func TestConcurrentCallsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	const (
		clients = 16
		calls   = 100 // per client
	)
	ctx := t.Context()
	// Every call waits for the one before it on the same rows, commit
	// included: the test needs contention, not durability. A deadlock
	// stalls its calls for deadlock_timeout (1s by default) before one of
	// them fails; a superuser may shorten that, so that the test runs as
	// quickly without the fix as with it.
	url, schema := pgtest.Schema(t)
	url = withParam(url, "synchronous_commit", "off")
	if superuser(t, url) {
		url = withParam(url, "deadlock_timeout", "20ms")
	}
	s, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema, MaxConns: clients})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	if err := s.CatalogSave(ctx, []driver.CatalogEntry{
		{Check: "unshipped", Awaits: []string{"shipped"}},
		{Check: "unpaid", Awaits: []string{"paid"}},
		{Check: "unsettled", Awaits: []string{"paid", "shipped"}},
	}); err != nil {
		t.Fatalf("save catalog: %v", err)
	}
	keys := []string{"1", "2"}
	// Scheduled first in reverse name order, so that the jobs' ids do not
	// follow their identities.
	checkNames := []string{"unshipped", "unsettled", "unpaid"}
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	var all []*driver.JobScheduleParams
	for _, k := range keys {
		for _, c := range checkNames {
			all = append(all, &driver.JobScheduleParams{Entity: "order", Key: k, Check: c, At: at, Now: at.Add(-time.Hour)})
		}
	}
	if _, err := s.JobSchedule(ctx, nil, all); err != nil {
		t.Fatalf("schedule: %v", err)
	}

	var (
		mu        sync.Mutex
		deadlocks = make(map[string]int)
		total     int // deadlocks
		others    []error
	)
	// Enough to fail: a regression then fails in a moment rather than after
	// every deadlock's wait.
	const enough = 20
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= enough || len(others) > 0
	}
	record := func(op string, err error) {
		if err == nil {
			return
		}
		// The SQL functions' errors are pgx's; the store's keep the SQLSTATE
		// in their text.
		var pgErr *pgconn.PgError
		mu.Lock()
		defer mu.Unlock()
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" || strings.Contains(err.Error(), "SQLSTATE 40P01") {
			deadlocks[op]++
			total++
		} else if len(others) < 5 {
			others = append(others, fmt.Errorf("%s: %w", op, err))
		}
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 9))
			for n := range calls {
				if failed() {
					return
				}
				key := keys[rnd.IntN(len(keys))]
				switch op := rnd.IntN(10); {
				case op < 5:
					ps := make([]*driver.JobScheduleParams, len(all))
					for i, p := range all {
						q := *p
						q.At = at.Add(time.Duration(n%8) * 15 * time.Minute)
						if rnd.IntN(4) == 0 {
							q.OnConflict = driver.ConflictKeep
						}
						ps[i] = &q
					}
					rnd.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
					_, err := s.JobSchedule(ctx, nil, ps)
					record("schedule", err)
				case op < 7:
					_, err := s.JobCancel(ctx, nil, &driver.JobCancelParams{Entity: "order", Key: key, Now: at, By: "test"})
					record("cancel", err)
				case op < 8:
					_, err := s.JobResolve(ctx, nil, &driver.JobResolveParams{Entity: "order", Key: key, Event: "shipped", Now: at, By: "test"})
					record("resolve", err)
				case op < 9:
					_, err := s.Pool().Exec(ctx, `SELECT prescient_cancel('order', $1)`, key)
					record("prescient_cancel", err)
				default:
					_, err := s.Pool().Exec(ctx, `SELECT prescient_resolve('order', $1, 'paid')`, key)
					record("prescient_resolve", err)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range others {
		t.Errorf("unexpected error: %v", err)
	}
	if len(deadlocks) > 0 {
		t.Errorf("deadlock detected (SQLSTATE 40P01) in calls by %d clients: %v (the test stops at %d); want none", clients, deadlocks, enough)
	}
}

// withParam adds a run-time parameter to a connection string, a URL or
// key=value pairs.
func withParam(conn, name, value string) string {
	switch {
	case !strings.Contains(conn, "://"):
		return conn + " " + name + "=" + value
	case strings.Contains(conn, "?"):
		return conn + "&" + name + "=" + value
	}
	return conn + "?" + name + "=" + value
}

// superuser reports whether the role of conn is a superuser.
func superuser(t *testing.T, conn string) bool {
	t.Helper()
	c, err := pgx.Connect(t.Context(), conn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	var on string
	if err := c.QueryRow(t.Context(), `SELECT current_setting('is_superuser')`).Scan(&on); err != nil {
		t.Fatalf("is_superuser: %v", err)
	}
	return on == "on"
}
