package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/migrations"
	"github.com/prescient-dev/prescient/sqlite"
)

var slot1 = time.Date(2031, time.March, 4, 5, 15, 0, 0, time.UTC)

// scheduleN schedules n jobs in slot1 and returns their ids.
func scheduleN(t *testing.T, s *sqlite.Store, n int) []int64 {
	t.Helper()
	var params []*driver.JobScheduleParams
	for i := range n {
		params = append(params, &driver.JobScheduleParams{
			Entity: "order", Key: fmt.Sprint(i), Check: "unshipped", At: slot1, Now: slot1.Add(-time.Hour),
		})
	}
	res, err := s.JobSchedule(t.Context(), nil, params)
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// processJobs claims ids in slot1 on s, has fn run the checks and decide
// each claimed job, applies the decisions and commits.
func processJobs(ctx context.Context, s *sqlite.Store, ids []int64, server string, fn func(tx driver.Tx, jobs []*checks.Job) []driver.Decision) error {
	tx, err := s.Begin(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	jobs, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slot1})
	if err != nil {
		return err
	}
	ds := fn(tx, jobs)
	if err := tx.Apply(ctx, &driver.ApplyParams{Slot: slot1, Now: slot1, Server: server, Decisions: ds}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// TestTwoStoresProcessOnce opens the same file twice, as two processes would,
// and has both process the same jobs at once: each job must be processed
// exactly once, and its effect written through the check's transaction exactly
// once.
func TestTwoStoresProcessOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	a := openFile(t, path)
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	b := openFile(t, path)
	if _, err := a.DB().ExecContext(t.Context(), `CREATE TABLE effects (job_id INTEGER NOT NULL, server TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ids := scheduleN(t, a, 200)

	var (
		mu   sync.Mutex
		seen = make(map[int64]int)
		wg   sync.WaitGroup
	)
	for i, s := range []*sqlite.Store{a, b, a, b} {
		server := fmt.Sprint("srv-", i)
		wg.Go(func() {
			// Walk the ids in batches from a different start each, so that
			// the processors collide.
			start := i * len(ids) / 4
			order := append(append([]int64(nil), ids[start:]...), ids[:start]...)
			for len(order) > 0 {
				batch := order[:min(20, len(order))]
				order = order[len(batch):]
				err := processJobs(t.Context(), s, batch, server, func(tx driver.Tx, jobs []*checks.Job) []driver.Decision {
					var ds []driver.Decision
					for _, j := range jobs {
						mu.Lock()
						seen[j.ID]++
						mu.Unlock()
						if _, err := tx.Exec(t.Context(), `INSERT INTO effects (job_id, server) VALUES ($1, $2)`, j.ID, server); err != nil {
							t.Errorf("effect of job %d: %v", j.ID, err)
						}
						ds = append(ds, driver.Decision{ID: j.ID, Outcome: history.Done, Checked: true})
					}
					return ds
				})
				if err != nil {
					t.Errorf("%s: process: %v", server, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("job %d processed %d times, want 1", id, seen[id])
		}
	}
	var effects, distinct, left, done int
	db := b.DB()
	if err := db.QueryRowContext(t.Context(), `SELECT count(*), count(DISTINCT job_id) FROM effects`).Scan(&effects, &distinct); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM prescient_jobs`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM prescient_history WHERE outcome = 'done'`).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if effects != len(ids) || distinct != len(ids) || left != 0 || done != len(ids) {
		t.Errorf("effects %d (%d distinct), pending %d, done %d; want %d, %d, 0, %d",
			effects, distinct, left, done, len(ids), len(ids), len(ids))
	}
}

// TestMigrateConcurrently migrates one fresh file from several stores at once
// (as several processes starting together would), then once more.
func TestMigrateConcurrently(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nested", "dir", "m.db")
	var stores []*sqlite.Store
	for range 4 {
		stores = append(stores, openFile(t, path))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Go(func() { errs[i] = s.Migrate(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrate %d: %v", i, err)
		}
	}
	if err := stores[0].Migrate(t.Context()); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	var applied, locks int
	db := stores[1].DB()
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM prescient_migrations WHERE version_id > 0`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM prescient_migrate_lock`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	files, err := fs.Glob(migrations.SQLite, "sqlite/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(files) || locks != 0 {
		t.Errorf("%d migrations recorded, %d locks left; want %d (one per migration), 0", applied, locks, len(files))
	}
	scheduleN(t, stores[3], 1)
}

// TestTimesTruncateToMicrosUTC schedules times with nanoseconds in other
// zones: like PostgreSQL's timestamptz through pgx, the store keeps them
// truncated (towards the past) to the microsecond and returns them in UTC.
func TestTimesTruncateToMicrosUTC(t *testing.T) {
	s := openStore(t)
	ist := time.FixedZone("IST", 5*3600+30*60)
	for i, tc := range []struct{ at, want time.Time }{
		{time.Date(2031, 3, 4, 10, 45, 0, 123456789, ist), time.Date(2031, 3, 4, 5, 15, 0, 123456000, time.UTC)},
		{time.Date(2031, 3, 4, 10, 45, 0, 999, ist), time.Date(2031, 3, 4, 5, 15, 0, 0, time.UTC)},
		// Before the epoch, truncation still goes towards the past.
		{time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)},
	} {
		res, err := s.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{
			Entity: "order", Key: fmt.Sprint(i), Check: "unshipped", At: tc.at, Now: tc.at,
		}})
		if err != nil {
			t.Fatalf("schedule %d: %v", i, err)
		}
		got, err := s.JobGet(t.Context(), "order", fmt.Sprint(i), "unshipped")
		if err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		for name, v := range map[string]time.Time{
			"returned next": res[0].Job.NextCheckAt, "stored next": got.NextCheckAt,
			"stored first": got.FirstCheckAt, "stored created": got.CreatedAt,
		} {
			if !v.Equal(tc.want) || v.Location() != time.UTC {
				t.Errorf("case %d: %s = %s, want %s", i, name, v.Format(time.RFC3339Nano), tc.want.Format(time.RFC3339Nano))
			}
		}
		// The slot lookups match the truncated time exactly.
		due, err := s.JobsDue(t.Context(), &driver.JobsDueParams{Slot: tc.want.In(ist), Limit: 10})
		if err != nil || len(due) != 1 || due[0].ID != got.ID {
			t.Errorf("case %d: due at %s: %v, %v; want job %d", i, tc.want, due, err, got.ID)
		}
	}
}

// TestWALAndImmediate checks every connection's settings, and that a
// transaction begun on DB() holds the write lock from its start, so a writer
// in another process waits (here, past a short busy timeout) instead of
// meeting a lock upgrade deadlock later.
func TestWALAndImmediate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	a := openFile(t, path)
	if err := a.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// Hold two connections at once so the settings are seen on more than one.
	c1, err := a.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := a.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for i, c := range []interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}{c1, c2} {
		var mode string
		var fk, sync, busy int
		if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		// synchronous NORMAL is 1.
		if mode != "wal" || fk != 1 || sync != 1 || busy != int(sqlite.BusyTimeoutDefault.Milliseconds()) {
			t.Errorf("connection %d: journal_mode %s, foreign_keys %d, synchronous %d, busy_timeout %d; want wal, 1, 1, %d",
				i, mode, fk, sync, busy, sqlite.BusyTimeoutDefault.Milliseconds())
		}
	}

	b, err := sqlite.Open(ctx, path, &sqlite.Opts{BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tx, err := a.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// The transaction has not written yet, but already holds the lock.
	_, err = b.JobSchedule(ctx, nil, []*driver.JobScheduleParams{{Entity: "order", Key: "1", Check: "unshipped", At: slot1, Now: slot1}})
	if err == nil || !strings.Contains(err.Error(), "database is locked") {
		t.Fatalf("schedule beside an open transaction: %v, want database is locked", err)
	}
	// Readers are not blocked in WAL mode.
	if _, err := b.JobsDue(ctx, &driver.JobsDueParams{Slot: slot1, Limit: 1}); err != nil {
		t.Fatalf("read beside an open transaction: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JobSchedule(ctx, nil, []*driver.JobScheduleParams{{Entity: "order", Key: "1", Check: "unshipped", At: slot1, Now: slot1}}); err != nil {
		t.Fatalf("schedule after the transaction ended: %v", err)
	}
}

// TestTxRolledBackUnderChecks interrupts a check's write, which makes SQLite
// roll the whole transaction back: the transaction must say so, and later
// statements must fail rather than run (and commit) on their own.
func TestTxRolledBackUnderChecks(t *testing.T) {
	s := openStore(t)
	if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE effects (n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ids := scheduleN(t, s, 1)
	ctx := t.Context()
	tx, err := s.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slot1}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	// A write far too long to finish before its deadline.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := tx.Exec(short, `
		WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c)
		INSERT INTO effects (n) SELECT i FROM c`); err == nil {
		t.Fatal("the interrupted write succeeded")
	}
	if tx.Err() == nil {
		t.Fatal("Err after SQLite rolled the transaction back: nil")
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (n) VALUES (-1)`); err == nil {
		t.Error("a write after SQLite rolled the transaction back succeeded")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Error("commit after SQLite rolled the transaction back succeeded")
	}
	var effects int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM effects`).Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if effects != 0 {
		t.Errorf("%d effects committed, want 0", effects)
	}
	j, err := s.JobGet(ctx, "order", "0", "unshipped")
	if err != nil || !j.NextCheckAt.Equal(slot1) || j.CheckCount != 0 {
		t.Errorf("job: %+v, %v; want it still due at %s, unchecked", j, err, slot1)
	}
}

// TestOpenRejects refuses paths that are not a database file and bad options.
func TestOpenRejects(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db", filepath.Join(t.TempDir(), "a?b.db")} {
		if s, err := sqlite.Open(t.Context(), path, nil); err == nil {
			s.Close()
			t.Errorf("open %q: no error", path)
		}
	}
	if _, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), &sqlite.Opts{BusyTimeout: -1}); err == nil {
		t.Error("open with a negative busy timeout: no error")
	}
}

// TestOpenSaysWhatCannotBeWritten: a database file that cannot be written,
// or a directory that cannot take it, fails Open with ErrNotWritable naming
// the path and the system's reason; SQLite alone says only "unable to open
// database file". Permissions do not bind root (which runs CI), so the cases
// are ones no user can write: a directory where the file should be, and a
// file where its directory should be.
func TestOpenSaysWhatCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	aFile := filepath.Join(dir, "plain")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
		is         error
	}{
		{dir, "is a directory, not a SQLite database file: name a file (such as " + filepath.Join(dir, "prescient.db") + ")", sqlite.ErrNotAFile},
		{filepath.Join(aFile, "x.db"), "not a directory", sqlite.ErrNotWritable},
		{aFile + "-text", "not a SQLite database file: a file of another kind, or damaged", sqlite.ErrNotAFile},
	} {
		if strings.HasSuffix(tc.path, "-text") {
			if err := os.WriteFile(tc.path, []byte("a text file, long enough to hold what a SQLite header would\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s, err := sqlite.Open(t.Context(), tc.path, nil)
		if err == nil {
			s.Close()
			t.Errorf("open %s: no error", tc.path)
			continue
		}
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("open %s: %v; want %v naming the path and %q", tc.path, err, tc.is, tc.want)
		}
	}
	// A writable directory keeps no probe file behind.
	s, err := sqlite.Open(t.Context(), filepath.Join(dir, "ok.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".prescient-probe") {
			t.Errorf("probe file left behind: %s", e.Name())
		}
	}
}

// TestNotFound translates sql.ErrNoRows at the boundary.
func TestNotFound(t *testing.T) {
	s := openStore(t)
	if _, err := s.JobGet(t.Context(), "order", "1", "unshipped"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("get: %v, want ErrNotFound", err)
	}
	if _, err := s.JobReschedule(t.Context(), nil, &driver.JobRescheduleParams{Entity: "order", Key: "1", Check: "unshipped", At: slot1, Now: slot1}); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("reschedule: %v, want ErrNotFound", err)
	}
}

// TestMigrateWaitsForLock plays another process that is migrating the file
// (a live lease in prescient_migrate_lock): Migrate must wait for it rather
// than run beside it, and must take over a lease whose holder died.
func TestMigrateWaitsForLock(t *testing.T) {
	s := openFile(t, filepath.Join(t.TempDir(), "lock.db"))
	ctx := t.Context()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.DB().ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE prescient_migrate_lock (id INTEGER PRIMARY KEY CHECK (id = 1), owner TEXT NOT NULL, expires_at INTEGER NOT NULL) STRICT`)
	exec(`INSERT INTO prescient_migrate_lock VALUES (1, 'other', $1)`, time.Now().Add(time.Hour).UnixMicro())

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := s.Migrate(short)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("migrate while another process holds the lock: %v, want a deadline error", err)
	}
	var tables int
	if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'prescient_jobs'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatal("migrate ran while another process held the lock")
	}

	// The other process died: its lease expires.
	exec(`UPDATE prescient_migrate_lock SET expires_at = $1`, time.Now().Add(-time.Second).UnixMicro())
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate after the lease expired: %v", err)
	}
	scheduleN(t, s, 1)
}

// A file that was never migrated says so, and how to fix it.
func TestNotMigrated(t *testing.T) {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "fresh.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.JobGet(t.Context(), "order", "1", "unshipped"); !errors.Is(err, driver.ErrNotMigrated) {
		t.Fatalf("JobGet before Migrate = %v, want ErrNotMigrated", err)
	}
}

// TestProcessWaitsForTheWriteLockUntilItsContextEnds runs more concurrent
// JobsProcess calls than fit in the busy timeout, as the engine's workers do
// on a slot of slow checks: each waits for the write lock for as long as its
// context lasts, so all succeed, one batch at a time.
func TestProcessWaitsForTheWriteLockUntilItsContextEnds(t *testing.T) {
	const busy = 200 * time.Millisecond
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "busy.db"), &sqlite.Opts{BusyTimeout: busy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	// 5 checks of 100ms each hold the lock for 500ms in all, well past the
	// busy timeout.
	ids := scheduleN(t, s, 5)
	const check = 100 * time.Millisecond
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running int
	)
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Go(func() {
			errs[i] = processJobs(t.Context(), s, []int64{id}, "srv", func(_ driver.Tx, jobs []*checks.Job) []driver.Decision {
				mu.Lock()
				running++
				if running > 1 {
					t.Errorf("%d transactions ran at once, want 1", running)
				}
				mu.Unlock()
				time.Sleep(check) // a slow check, not a synchronisation
				mu.Lock()
				running--
				mu.Unlock()
				return []driver.Decision{{ID: jobs[0].ID, Outcome: history.Done, Checked: true}}
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process job %d: %v", ids[i], err)
		}
	}
	var done int
	if err := s.DB().QueryRowContext(t.Context(), `SELECT count(*) FROM prescient_history WHERE outcome = 'done'`).Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done != len(ids) {
		t.Errorf("%d jobs done, want %d", done, len(ids))
	}
}

// TestWriteBehindACheckGivesUpAfterTheBusyTimeout: while a check holds the
// write lock, another writer of the process (an application's Schedule)
// still fails after the busy timeout rather than hang, and a processor whose
// context ends stops waiting.
func TestWriteBehindACheckGivesUpAfterTheBusyTimeout(t *testing.T) {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "busy.db"), &sqlite.Opts{BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	ids := scheduleN(t, s, 2)
	var scheduleErr, waitErr error
	err = processJobs(t.Context(), s, ids[:1], "srv", func(_ driver.Tx, jobs []*checks.Job) []driver.Decision {
		_, scheduleErr = s.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{Entity: "order", Key: "new", Check: "unshipped", At: slot1, Now: slot1}})
		short, cancel := context.WithCancel(t.Context())
		cancel()
		waitErr = processJobs(short, s, ids[1:], "srv", func(driver.Tx, []*checks.Job) []driver.Decision {
			t.Error("a second transaction ran while the first held the lock")
			return nil
		})
		return []driver.Decision{{ID: jobs[0].ID, Outcome: history.Done, Checked: true}}
	})
	if err != nil {
		t.Fatalf("process: %v", err)
	}
	if scheduleErr == nil || !strings.Contains(scheduleErr.Error(), "database is locked") {
		t.Errorf("schedule behind a running check: %v, want database is locked", scheduleErr)
	}
	if !errors.Is(waitErr, context.Canceled) {
		t.Errorf("process with an ended context behind a running check: %v, want context.Canceled", waitErr)
	}
}
