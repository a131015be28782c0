package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// copyJobs is n new jobs of entity "order" due at at, keyed prefix0..,
// shuffled so that their order is not the lock order; every third carries
// a payload that jsonb stores differently from how it is written.
func copyJobs(prefix string, n int, at time.Time) []*driver.JobScheduleParams {
	ps := make([]*driver.JobScheduleParams, n)
	for i := range ps {
		ps[i] = &driver.JobScheduleParams{Entity: "order", Key: fmt.Sprintf("%s%d", prefix, i), Check: "unshipped",
			At: at, Now: at.Add(-time.Hour + 1234*time.Nanosecond)}
		if i%3 == 0 {
			ps[i].Payload = []byte(fmt.Sprintf(`{"z": %d,   "a": [1, 2.50], "a": "last"}`, i))
		}
	}
	rnd := rand.New(rand.NewPCG(uint64(n), 1))
	rnd.Shuffle(n, func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

// sameJob says how got, a job as JobSchedule returned it, differs from want,
// the same job as stored; "" if it does not.
func sameJob(got, want *driver.Job) string {
	switch {
	case got.ID != want.ID || got.Entity != want.Entity || got.Key != want.Key || got.Check != want.Check:
		return fmt.Sprintf("job %d %s/%s/%s, stored %d %s/%s/%s", got.ID, got.Entity, got.Key, got.Check, want.ID, want.Entity, want.Key, want.Check)
	case !got.FirstCheckAt.Equal(want.FirstCheckAt) || !got.NextCheckAt.Equal(want.NextCheckAt) || !got.LastCheckAt.Equal(want.LastCheckAt):
		return fmt.Sprintf("checks first %v next %v last %v, stored %v %v %v", got.FirstCheckAt, got.NextCheckAt, got.LastCheckAt,
			want.FirstCheckAt, want.NextCheckAt, want.LastCheckAt)
	case !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt):
		return fmt.Sprintf("created %v updated %v, stored %v %v", got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt)
	case !bytes.Equal(got.Payload, want.Payload):
		return fmt.Sprintf("payload %s, stored %s", got.Payload, want.Payload)
	case got.CheckCount != want.CheckCount || got.FailureCount != want.FailureCount || got.LastError != want.LastError:
		return fmt.Sprintf("counts %d/%d %q, stored %d/%d %q", got.CheckCount, got.FailureCount, got.LastError,
			want.CheckCount, want.FailureCount, want.LastError)
	}
	return ""
}

// checkStored fails unless each result is its job as stored, inserted as
// wantInserted says.
func checkStored(t *testing.T, s *postgres.Store, ps []*driver.JobScheduleParams, res []*driver.JobScheduleResult, wantInserted func(i int) bool) {
	t.Helper()
	if len(res) != len(ps) {
		t.Fatalf("%d results for %d jobs", len(res), len(ps))
	}
	for i, r := range res {
		stored, err := s.JobGet(t.Context(), ps[i].Entity, ps[i].Key, ps[i].Check)
		if err != nil {
			t.Fatalf("get %s: %v", ps[i].Key, err)
		}
		if d := sameJob(r.Job, stored); d != "" {
			t.Fatalf("result %d (%s): %s", i, ps[i].Key, d)
		}
		if r.Inserted != wantInserted(i) {
			t.Fatalf("result %d (%s): inserted %v, want %v", i, ps[i].Key, r.Inserted, wantInserted(i))
		}
	}
}

// A call of new jobs is written with one COPY, its ids drawn in lock order
// as the upsert draws them, and returns each job as stored, payloads as
// jsonb keeps them.
func TestScheduleManyCopiesNewJobs(t *testing.T) {
	t.Parallel()
	s, rt := tracedStore(t)
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	ps := copyJobs("k", 500, at)
	res, err := s.JobSchedule(t.Context(), nil, ps)
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if copies, failed := rt.copied(); copies != 1 || failed != 0 {
		t.Errorf("scheduling 500 new jobs made %d COPY (%d failed), want 1 that succeeds", copies, failed)
	}
	checkStored(t, s, ps, res, func(int) bool { return true })
	byKey := make(map[string]int64)
	for _, r := range res {
		byKey[r.Job.Key] = r.Job.ID
	}
	// Lock order is byte order of the keys: k0 < k1 < k10 < k100 ...
	var prev string
	for i := range 500 {
		k := fmt.Sprint("k", i)
		if prev != "" && (k < prev) != (byKey[k] < byKey[prev]) {
			t.Fatalf("ids %s=%d, %s=%d do not follow the lock order", prev, byKey[prev], k, byKey[k])
		}
		prev = k
	}

	// Below copyMin jobs the upsert is cheaper; no COPY.
	if _, err := s.JobSchedule(t.Context(), nil, copyJobs("small", 20, at)); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if copies, _ := rt.copied(); copies != 0 {
		t.Errorf("scheduling 20 jobs made %d COPY, want none", copies)
	}
}

// A call that meets a job that exists, however late in its rows, is rolled
// back to its savepoint and upserted: the existing job is replaced or kept by
// its rule, the new ones are inserted once, and the caller's transaction
// goes on with what it did before the call.
func TestScheduleManyCopyFallsBackToUpsert(t *testing.T) {
	t.Parallel()
	s, rt := tracedStore(t)
	ctx := t.Context()
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	slot := func(n int) time.Time { return at.Add(time.Duration(n) * 15 * time.Minute) }
	// Keys "zz..." come last in lock order, after every row the COPY writes.
	old, err := s.JobSchedule(ctx, nil, []*driver.JobScheduleParams{
		{Entity: "order", Key: "zz-replace", Check: "unshipped", At: slot(1), Now: at},
		{Entity: "order", Key: "zz-keep", Check: "unshipped", At: slot(1), Now: at},
	})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	rt.copied()

	ps := append(copyJobs("k", 400, slot(2)),
		&driver.JobScheduleParams{Entity: "order", Key: "zz-replace", Check: "unshipped", At: slot(6), Now: at},
		&driver.JobScheduleParams{Entity: "order", Key: "zz-keep", Check: "unshipped", At: slot(6), Now: at, OnConflict: driver.ConflictKeep},
	)
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `CREATE TABLE before_the_call (n int)`); err != nil {
		t.Fatal(err)
	}
	res, err := s.JobSchedule(ctx, tx, ps)
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if copies, failed := rt.copied(); copies != 1 || failed != 1 {
		t.Errorf("made %d COPY, %d failed; want 1 that fails on the existing jobs", copies, failed)
	}
	// The call leaves no savepoint open in the caller's transaction: the
	// rows the upsert wrote belong to the transaction itself, not to a
	// subtransaction that every later write would nest in.
	var sub bool
	if err := tx.QueryRow(ctx, `SELECT xmin <> pg_current_xact_id()::xid FROM prescient_jobs WHERE entity_key = 'zz-replace'`).Scan(&sub); err != nil || sub {
		t.Errorf("the upserted row written in a subtransaction: %v, %v; want the savepoint of the COPY released", sub, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after the call: %v", err)
	}
	var tables int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'before_the_call'`).Scan(&tables); err != nil || tables != 1 {
		t.Errorf("the caller's own write before the call: %d tables, %v; want it committed", tables, err)
	}
	checkStored(t, s, ps, res, func(i int) bool { return i < 400 })
	replaced, kept := res[400].Job, res[401].Job
	if replaced.ID != old[0].Job.ID || !replaced.NextCheckAt.Equal(slot(6)) {
		t.Errorf("replaced job: id %d next %v, want id %d at %v", replaced.ID, replaced.NextCheckAt, old[0].Job.ID, slot(6))
	}
	if kept.ID != old[1].Job.ID || !kept.NextCheckAt.Equal(slot(1)) {
		t.Errorf("kept job: id %d next %v, want id %d at %v", kept.ID, kept.NextCheckAt, old[1].Job.ID, slot(1))
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM prescient_jobs`).Scan(&n); err != nil || n != 402 {
		t.Errorf("%d jobs stored (%v), want 402", n, err)
	}

	// The calls right after one that met existing jobs upsert without
	// trying COPY.
	if _, err := s.JobSchedule(ctx, nil, copyJobs("next", 300, slot(3))); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if copies, _ := rt.copied(); copies != 0 {
		t.Errorf("the call after a failed COPY made %d COPY, want none", copies)
	}
}

// In a caller's transaction on a connection whose search_path does not name
// the store's schema, COPY writes to the store's schema, and the caller's
// rollback takes the jobs back.
func TestScheduleManyCopyInCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, schema := pgtest.Schema(t)
	s, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	app, err := pgxpool.New(ctx, pgtest.URL()) // search_path: public
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	ps := copyJobs("k", 300, at)

	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.JobSchedule(ctx, tx, ps)
	if err != nil {
		t.Fatalf("schedule in the caller's transaction: %v", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "prescient_jobs"}.Sanitize()).Scan(&n); err != nil || n != 300 {
		t.Fatalf("%d jobs in the store's schema inside the transaction (%v), want 300", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JobGet(ctx, "order", "k1", "unshipped"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("job after the caller's rollback: %v, want ErrNotFound", err)
	}

	tx, err = app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err = s.JobSchedule(ctx, tx, ps); err != nil {
		t.Fatalf("schedule in the caller's transaction: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkStored(t, s, ps, res, func(int) bool { return true })
}

// Calls scheduling the same new jobs at once, each in its own order, neither
// fail nor deadlock nor store a job twice: a COPY that waits for another's
// insert of the same job fails once it commits and is upserted instead.
func TestScheduleManyConcurrentCopies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, rt := tracedStore(t)
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	const clients, rounds, n = 6, 4, 300
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		inserted = make(map[string]int)
		errs     []error
	)
	for c := range clients {
		wg.Go(func() {
			for r := range rounds {
				ps := copyJobs(fmt.Sprintf("r%d-", r), n, at)
				rnd := rand.New(rand.NewPCG(uint64(c), uint64(r)))
				rnd.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
				res, err := s.JobSchedule(ctx, nil, ps)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, x := range res {
					if x.Inserted {
						inserted[x.Job.Key]++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("concurrent schedule: %v", err)
	}
	if len(inserted) != rounds*n {
		t.Errorf("%d jobs reported inserted, want %d", len(inserted), rounds*n)
	}
	for k, times := range inserted {
		if times != 1 {
			t.Errorf("job %s reported inserted %d times, want once", k, times)
		}
	}
	var stored int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM prescient_jobs`).Scan(&stored); err != nil || stored != rounds*n {
		t.Errorf("%d jobs stored (%v), want %d", stored, err, rounds*n)
	}
	if copies, _ := rt.copied(); copies == 0 {
		t.Errorf("no call used COPY")
	}
}
