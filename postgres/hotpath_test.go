package postgres_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// roundTrips counts the round trips a pool makes: one per query or exec,
// one per batch, one per COPY; and the COPYs, and those that failed.
type roundTrips struct {
	mu       sync.Mutex
	n        int
	commits  int
	copies   int
	copyErrs int
}

func (r *roundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.copies++
	return ctx
}

func (r *roundTrips) TraceCopyFromEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceCopyFromEndData) {
	if d.Err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.copyErrs++
	}
}

// copied returns the COPYs made and those that failed since the last call,
// and starts counting again.
func (r *roundTrips) copied() (copies, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	copies, failed = r.copies, r.copyErrs
	r.copies, r.copyErrs = 0, 0
	return copies, failed
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if strings.EqualFold(strings.TrimSpace(d.SQL), "commit") {
		r.commits++
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) reset() (n, commits int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, commits = r.n, r.commits
	r.n, r.commits = 0, 0
	return n, commits
}

// tracedStore opens a migrated store on a schema of its own whose pool
// counts its round trips.
func tracedStore(t *testing.T) (*postgres.Store, *roundTrips) {
	t.Helper()
	rt := &roundTrips{}
	s, _ := storeOnPool(t, func(cfg *pgxpool.Config, _ string) { cfg.ConnConfig.Tracer = rt })
	return s, rt
}

// A single-job check with two statements (look the order up, write its
// alert) costs two round trips, its savepoint included when it has one: the
// savepoint statements travel with the check's own. Each group adds five
// (record its attempt, begin, claim, apply, commit), whatever its size.
func TestRoundTripsPerCheck(t *testing.T) {
	t.Parallel()
	for _, savepoints := range []bool{true, false} {
		t.Run(fmt.Sprintf("savepoint every check %v", savepoints), func(t *testing.T) {
			t.Parallel()
			testRoundTripsPerCheck(t, savepoints)
		})
	}
}

func testRoundTripsPerCheck(t *testing.T, savepoints bool) {
	s, rt := tracedStore(t)
	ctx := t.Context()
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, status text NOT NULL);
		CREATE TABLE alerts (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	const jobs, groupSize, workers = 200, 50, 2
	if _, err := s.Pool().Exec(ctx, `INSERT INTO orders SELECT g::text, 'unshipped' FROM generate_series(0, $1 - 1) g`, jobs); err != nil {
		t.Fatal(err)
	}
	reg := &checks.Registry{}
	if err := reg.Register("unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		var status string
		if err := j.Tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, j.Key).Scan(&status); err != nil {
			return time.Time{}, err
		}
		_, err := j.Tx.Exec(ctx, `INSERT INTO alerts (order_id) VALUES ($1)`, j.Key)
		return time.Time{}, err
	}, nil); err != nil {
		t.Fatal(err)
	}
	now := slotAt
	c, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: 15 * time.Minute},
		Checks: reg, Workers: workers, GroupSize: groupSize, SavepointEveryCheck: savepoints,
		Now: func() time.Time { return now }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Jobs are scheduled at slotAt and their slot is fired at its time
	// (FireSlot refuses a slot that has not begun).
	fire := func(slot time.Time) (*prescient.SlotRecord, error) {
		now = slot
		defer func() { now = slotAt }()
		return c.FireSlot(ctx, slot)
	}
	var ps []prescient.ScheduleParams
	for i := range jobs {
		ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(i), Check: "unshipped", At: slotAt.Add(time.Minute)})
	}
	// A first slot warms the connections' statement caches, as a running
	// server's are.
	if _, err := c.ScheduleMany(ctx, ps[:workers*groupSize]); err != nil {
		t.Fatal(err)
	}
	next := slotAt.Add(15 * time.Minute)
	if _, err := fire(next); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ScheduleMany(ctx, ps[workers*groupSize:]); err != nil {
		t.Fatal(err)
	}
	rt.reset()
	rec, err := fire(next)
	if err != nil || rec.Outcomes[history.Done] != jobs-workers*groupSize {
		t.Fatalf("fire: %+v, %v; want %d done", rec, err, jobs-workers*groupSize)
	}
	n, commits := rt.reset()
	checked := jobs - workers*groupSize
	groups := checked / groupSize
	// The slot itself: read the ledger, list the attempts left unfinished,
	// start it, two due pages, finish it.
	const perSlot = 6
	// With savepoints, a check's statement that a connection has not run
	// before follows its SAVEPOINT, sent in a round trip of its own (the
	// server must not parse it before the savepoint is in place), and is
	// described in another: once per statement and connection, so at most
	// four round trips per connection of the pool that the warm-up slot did
	// not reach.
	firstRuns := 0
	if savepoints {
		firstRuns = 4 * int(s.Pool().Config().MaxConns)
	}
	if want := 2*checked + 5*groups + perSlot + firstRuns; n > want || commits != groups {
		t.Errorf("%d round trips and %d commits for %d checks in %d groups; want at most %d (2 per check, 5 per group, %d per slot, %d for statements new to a connection) and %d commits",
			n, commits, checked, groups, want, perSlot, firstRuns, groups)
	}
	var alerts int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM alerts`).Scan(&alerts); err != nil || alerts != jobs {
		t.Errorf("alerts: %d, %v; want %d", alerts, err, jobs)
	}
}

// A server started before any job exists must not slow down when a large
// slot arrives. PostgreSQL plans the engine's statements from statistics
// that, until autovacuum comes by, describe the empty table: the due list
// and the claim must not then walk the whole slot for every page or group.
// The test keeps the statistics stale (autovacuum off for the table), warms
// the engine on the empty table, fires a slot of 20,000 jobs and counts the
// index entries read: a handful per job when the plans hold, hundreds when
// they do not.
func TestPlansHoldWhenJobsArriveAfterStart(t *testing.T) {
	t.Parallel()
	var schema string
	s, pool := storeOnPool(t, func(cfg *pgxpool.Config, sch string) {
		schema = sch
		cfg.ConnConfig.RuntimeParams["application_name"] = "plans-" + sch
	})
	url := pool.Config().ConnString()
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `ALTER TABLE prescient_jobs SET (autovacuum_enabled = false); ANALYZE prescient_jobs`); err != nil {
		t.Fatal(err)
	}
	reg := &checks.Registry{}
	if err := reg.Register("c", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil); err != nil {
		t.Fatal(err)
	}
	grid := slots.Grid{Resolution: time.Second}
	now := slotAt
	c, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: grid, Checks: reg,
		Now: func() time.Time { return now }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Warm up on the empty table, and on a tiny slot: past five executions a
	// cached statement would switch to a generic plan made now.
	for i := range 8 {
		if i == 4 {
			if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "warm", Check: "c", At: grid.Add(slotAt, 5)}); err != nil {
				t.Fatal(err)
			}
		}
		now = grid.Add(slotAt, i)
		if _, err := c.FireSlot(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	const jobs = 20_000
	big := grid.Add(slotAt, 100)
	if _, err := pool.Exec(ctx, `
		INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
		SELECT 'order', g::text, 'c', $1, $1, $2, $2 FROM generate_series(1, $3) g`, big, slotAt, jobs); err != nil {
		t.Fatal(err)
	}
	before := indexReads(t, pool, schema)
	now = big
	rec, err := c.FireSlot(ctx, big)
	if err != nil || rec.Outcomes[history.Done] != jobs {
		t.Fatalf("fire the large slot: %+v, %v; want %d done", rec, err, jobs)
	}
	pool.Reset() // the backends flush their statistics as they exit
	waitGone(t, url, "plans-"+schema)
	reads := indexReads(t, pool, schema) - before
	if limit := int64(10 * jobs); reads > limit {
		t.Errorf("firing a slot of %d jobs read %d index entries of prescient_jobs (%.0f per job); want at most %d: "+
			"a statement walked the whole slot again and again", jobs, reads, float64(reads)/jobs, limit)
	}
}

// indexReads returns the index entries read from prescient_jobs's indexes so
// far, as the statistics show them.
func indexReads(t *testing.T, pool *pgxpool.Pool, schema string) int64 {
	t.Helper()
	var n int64
	err := pool.QueryRow(t.Context(), `SELECT coalesce(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
		WHERE schemaname = $1 AND relname = 'prescient_jobs'`, schema).Scan(&n)
	if err != nil {
		t.Fatalf("index statistics: %v", err)
	}
	return n
}

// waitGone waits until no backend of application name app is left, so that
// all of them have flushed their statistics.
func waitGone(t *testing.T, url, app string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for end := time.Now().Add(30 * time.Second); ; {
		var left int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d backends of %s still there after 30s", left, app)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a bound
	}
}
