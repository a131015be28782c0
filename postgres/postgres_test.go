package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/migrations"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/storetest"
)

// open returns a store on a new schema that is not migrated yet.
func open(t testing.TB, url, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// newStore returns a migrated, empty store on a schema of its own.
func newStore(t testing.TB) *postgres.Store {
	t.Helper()
	return newStoreConns(t, 4)
}

// newStoreConns is newStore with a pool of conns connections.
func newStoreConns(t testing.TB, conns int32) *postgres.Store {
	t.Helper()
	url, schema := pgtest.Schema(t)
	s, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema, MaxConns: conns})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness {
		s := newStore(t)
		return &storetest.Harness{
			Store:         s,
			SetPruneBatch: s.SetPruneBatch,
			Exec: func(ctx context.Context, sql string, args ...any) error {
				_, err := s.Pool().Exec(ctx, sql, args...)
				return err
			},
			QueryInt: func(ctx context.Context, sql string, args ...any) (int64, error) {
				var n int64
				err := s.Pool().QueryRow(ctx, sql, args...).Scan(&n)
				return n, err
			},
			BeginTx: func(ctx context.Context) (*storetest.Tx, error) {
				tx, err := s.Pool().Begin(ctx)
				if err != nil {
					return nil, err
				}
				return &storetest.Tx{
					Tx:       tx,
					Commit:   func() error { return tx.Commit(ctx) },
					Rollback: func() error { return tx.Rollback(ctx) },
				}, nil
			},
		}
	})
}

// sqlSchedule calls prescient_schedule with the default payload and rule.
func sqlSchedule(t *testing.T, s *postgres.Store, key string, at time.Time) (time.Time, error) {
	t.Helper()
	var got time.Time
	err := s.Pool().QueryRow(t.Context(), `SELECT prescient_schedule('order', $1, 'unshipped', $2)`, key, at).Scan(&got)
	return got.UTC(), err
}

func TestSQLScheduleRoundsLikeGrid(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if _, err := sqlSchedule(t, s, "none", time.Now()); err == nil || !strings.Contains(err.Error(), "no slot grid") {
		t.Errorf("schedule before a grid is saved: %v, want an error saying no slot grid is saved", err)
	}
	grids := []slots.Grid{
		{Resolution: 15 * time.Minute},
		{Resolution: time.Hour, Offset: 7*time.Minute + 500*time.Millisecond},
		{Resolution: 1500 * time.Millisecond, Offset: time.Millisecond},
	}
	times := []time.Time{
		time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC),
		time.Date(2031, 3, 4, 5, 7, 30, 0, time.UTC),
		time.Date(2031, 3, 4, 5, 7, 30, 1000, time.UTC),
		time.Date(2031, 3, 4, 5, 7, 29, 999999000, time.UTC),
		time.Date(2031, 3, 4, 5, 59, 59, 999999000, time.UTC),
		time.Date(2031, 3, 4, 11, 30, 0, 0, time.FixedZone("IST", 5*3600+30*60)),
		// Near both ends of the supported range; times outside it are refused
		// (TestSQLScheduleRefusesTimesOutsideTheRange).
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 1000, time.UTC),
		time.Date(2199, 12, 31, 22, 0, 0, 123000, time.UTC),
	}
	for gi, g := range grids {
		if err := s.GridSave(t.Context(), g); err != nil {
			t.Fatalf("save grid %v: %v", g, err)
		}
		for ti, at := range times {
			key := fmt.Sprintf("g%d-t%d", gi, ti)
			var got, now time.Time
			err := s.Pool().QueryRow(t.Context(), `SELECT prescient_schedule('order', $1, 'unshipped', $2), now()`, key, at).Scan(&got, &now)
			if err != nil {
				t.Fatalf("prescient_schedule(%s): %v", at.Format(time.RFC3339Nano), err)
			}
			// A time already passed lands in the first slot after now, as
			// Client.Schedule does.
			want := g.Ceil(at)
			if !want.After(now) {
				want = g.Next(now)
			}
			if !got.Equal(want) {
				t.Errorf("grid %v: prescient_schedule(%s) = %s, want %s",
					g, at.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
			}
			j, err := s.JobGet(t.Context(), "order", key, "unshipped")
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if !j.NextCheckAt.Equal(got) || !j.FirstCheckAt.Equal(got) {
				t.Errorf("stored next %v first %v, want both %v", j.NextCheckAt, j.FirstCheckAt, got)
			}
		}
	}
}

func TestSQLScheduleConflictRules(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if err := s.GridSave(t.Context(), slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	base := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	call := func(at time.Time, payload any, rule string) (time.Time, error) {
		var got time.Time
		err := s.Pool().QueryRow(t.Context(),
			`SELECT prescient_schedule('order', '1', 'unshipped', $1, $2::jsonb, $3)`, at, payload, rule).Scan(&got)
		return got.UTC(), err
	}
	if got, err := call(base.Add(time.Minute), `{"v": 1}`, "replace"); err != nil || !got.Equal(base.Add(15*time.Minute)) {
		t.Fatalf("first schedule: %v, %v", got, err)
	}
	if got, err := call(base.Add(time.Hour), `{"v": 2}`, "keep"); err != nil || !got.Equal(base.Add(15*time.Minute)) {
		t.Errorf("keep: returned %v, %v; want the pending job's %v", got, err, base.Add(15*time.Minute))
	}
	j, err := s.JobGet(t.Context(), "order", "1", "unshipped")
	if err != nil || string(j.Payload) != `{"v": 1}` {
		t.Errorf("after keep: %+v, %v; want payload {\"v\": 1}", j, err)
	}
	if got, err := call(base.Add(time.Hour), nil, "replace"); err != nil || !got.Equal(base.Add(time.Hour)) {
		t.Errorf("replace: %v, %v; want %v", got, err, base.Add(time.Hour))
	}
	j, err = s.JobGet(t.Context(), "order", "1", "unshipped")
	// The job has never run, so its first check moves with its next one
	// (TestSQLScheduleMovesFirstCheckUntilRun).
	if err != nil || string(j.Payload) != `{"v": 1}` || !j.FirstCheckAt.Equal(base.Add(time.Hour)) {
		t.Errorf("after replace without payload: %+v, %v; want payload kept and first check %v", j, err, base.Add(time.Hour))
	}
	if _, err := call(base, nil, "overwrite"); err == nil || !strings.Contains(err.Error(), `invalid conflict rule "overwrite"`) {
		t.Errorf("unknown rule: %v, want an error naming it", err)
	}
}

func TestSQLCancelAndResolve(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	if err := s.CatalogSave(ctx, []driver.CatalogEntry{{Check: "unpaid", Awaits: []string{"paid"}}}); err != nil {
		t.Fatalf("save catalog: %v", err)
	}
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	for _, c := range []string{"unshipped", "unpaid", "unreviewed"} {
		for _, k := range []string{"1", "2"} {
			if _, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', $1, $2, $3)`, k, c, at); err != nil {
				t.Fatalf("schedule: %v", err)
			}
		}
	}
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := s.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	if n := count(`SELECT prescient_resolve('order', '1', 'paid')`); n != 1 {
		t.Errorf("resolve paid: %d, want 1", n)
	}
	if n := count(`SELECT prescient_cancel('order', '1', 'unshipped')`); n != 1 {
		t.Errorf("cancel one check: %d, want 1", n)
	}
	if n := count(`SELECT prescient_cancel('order', '2')`); n != 3 {
		t.Errorf("cancel every check: %d, want 3", n)
	}
	if n := count(`SELECT prescient_cancel('order', '2')`); n != 0 {
		t.Errorf("cancel again: %d, want 0", n)
	}
	recs, err := s.HistoryList(ctx, history.Filter{})
	if err != nil || len(recs) != 5 {
		t.Fatalf("history: %d records, %v; want 5", len(recs), err)
	}
	outcomes := map[history.Outcome]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
		if r.FinishedBy != "sql" || r.FinishedAt.IsZero() {
			t.Errorf("record %d: finished by %q at %v, want sql and a time", r.ID, r.FinishedBy, r.FinishedAt)
		}
	}
	if outcomes[history.Resolved] != 1 || outcomes[history.Cancelled] != 4 {
		t.Errorf("outcomes %v, want 1 resolved, 4 cancelled", outcomes)
	}
	if _, err := s.JobGet(ctx, "order", "1", "unreviewed"); err != nil {
		t.Errorf("untouched job: %v", err)
	}

	// Inside the caller's transaction, rolled back: nothing happens.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT prescient_cancel('order', '1'), prescient_schedule('order', '9', 'unshipped', $1)`, at); err != nil {
		t.Fatalf("in tx: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if _, err := s.JobGet(ctx, "order", "1", "unreviewed"); err != nil {
		t.Errorf("job cancelled in a rolled back tx: %v", err)
	}
	if _, err := s.JobGet(ctx, "order", "9", "unshipped"); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("job scheduled in a rolled back tx: %v, want ErrNotFound", err)
	}
}

func TestSQLFunctionsOutsideSearchPath(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	s := open(t, url, schema)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := s.GridSave(t.Context(), slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	// An application's connection need not have the schema in its search_path.
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	q := pgx.Identifier{schema}.Sanitize()
	at := time.Date(2031, 3, 4, 5, 0, 30, 0, time.UTC)
	var got time.Time
	if err := conn.QueryRow(t.Context(), `SELECT `+q+`.prescient_schedule('order', '1', 'unshipped', $1)`, at).Scan(&got); err != nil {
		t.Fatalf("schema-qualified prescient_schedule: %v", err)
	}
	if want := at.Add(30 * time.Second); !got.Equal(want) {
		t.Errorf("prescient_schedule = %v, want %v", got, want)
	}
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT `+q+`.prescient_cancel('order', '1')`).Scan(&n); err != nil || n != 1 {
		t.Errorf("schema-qualified prescient_cancel: %d, %v; want 1, nil", n, err)
	}
}

func TestSQLValidatesNames(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if err := s.GridSave(t.Context(), slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	names := []string{"order", "a", "_x", "9lives", "a.b:c-d_e", strings.Repeat("n", 100),
		"", "-x", ".x", "bad name", "tab\tname", "ünïcode", strings.Repeat("n", 101), "semi;colon", `quo"te`}
	for _, name := range names {
		calls := []struct {
			what, sql string
			args      []any
		}{
			{"entity", `SELECT prescient_schedule($1, 'k', 'unshipped', $2)`, []any{name, at}},
			{"check", `SELECT prescient_schedule('order', 'k', $1, $2)`, []any{name, at}},
			{"entity", `SELECT prescient_cancel($1, 'k')`, []any{name}},
			{"check", `SELECT prescient_cancel('order', 'k', $1)`, []any{name}},
			{"event", `SELECT prescient_resolve('order', 'k', $1)`, []any{name}},
		}
		for _, c := range calls {
			_, err := s.Pool().Exec(t.Context(), c.sql, c.args...)
			goErr := checks.ValidateName(c.what, name)
			if goErr == nil {
				if err != nil {
					t.Errorf("%s with %s name %q: %v, want success as checks.ValidateName allows it", c.sql, c.what, name, err)
				}
				continue
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
				t.Errorf("%s with %s name %q: %v, want SQLSTATE 22023", c.sql, c.what, name, err)
				continue
			}
			if pgErr.Message != goErr.Error() {
				t.Errorf("%s with %s name %q:\n got %s\nwant %s", c.sql, c.what, name, pgErr.Message, goErr)
			}
		}
	}
}

func TestMigrateConcurrentlyOnFreshSchema(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.SchemaName(t)
	stores := []*postgres.Store{open(t, url, schema), open(t, url, schema), open(t, url, schema)}
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
		t.Errorf("migrate again: %v", err)
	}
	var applied, tables int
	err := stores[0].Pool().QueryRow(t.Context(), `
		SELECT (SELECT count(*) FROM prescient_migrations WHERE version_id > 0 AND is_applied),
			(SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'prescient\_%')`,
		schema).Scan(&applied, &tables)
	if err != nil {
		t.Fatalf("read migration state: %v", err)
	}
	files, err := fs.Glob(migrations.Postgres, "postgres/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(files) || tables != 10 {
		t.Errorf("after concurrent migrations: %d versions applied, %d prescient tables in the schema; want %d (one per migration) and 10 (nine tables and goose's)",
			applied, tables, len(files))
	}
	if _, err := stores[1].JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{
		Entity: "order", Key: "1", Check: "unshipped", At: time.Now().UTC(), Now: time.Now().UTC(),
	}}); err != nil {
		t.Errorf("schedule after migrating: %v", err)
	}
}

func TestTxTypeNamesWhatItGot(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	db := stdlib.OpenDBFromPool(s.Pool())
	defer db.Close()
	sqlTx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer sqlTx.Rollback()
	_, err = s.JobCancel(t.Context(), sqlTx, &driver.JobCancelParams{Entity: "order", Key: "1", By: "api"})
	if !errors.Is(err, prescient.ErrTxType) || !strings.Contains(err.Error(), "*sql.Tx") {
		t.Errorf("cancel with a *sql.Tx: %v, want ErrTxType naming *sql.Tx", err)
	}
}

// slotAt is a fixed slot for the processing tests.
var slotAt = time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)

// scheduleAt schedules jobs order/<key>/unshipped at slot s and returns their ids.
func scheduleAt(t *testing.T, s *postgres.Store, at time.Time, keys ...string) []int64 {
	t.Helper()
	var params []*driver.JobScheduleParams
	for _, k := range keys {
		params = append(params, &driver.JobScheduleParams{Entity: "order", Key: k, Check: "unshipped", At: at, Now: at})
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

func TestReslotSkipsJobsBeingProcessed(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	held := scheduleAt(t, s, slotAt, "held")
	scheduleAt(t, s, slotAt, "free")
	to := slotAt.Add(time.Hour)
	tx := begin(t, s)
	if jobs, err := tx.Claim(t.Context(), &driver.ClaimParams{IDs: held, Slot: slotAt}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %d jobs, %v; want 1", len(jobs), err)
	}
	n, err := s.JobsReslot(t.Context(), &driver.JobsReslotParams{Before: to, To: to, Now: slotAt})
	if err != nil || n != 1 {
		t.Errorf("reslot while one job is held: %d, %v; want 1, nil", n, err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]time.Time{"held": slotAt, "free": to} {
		j, err := s.JobGet(t.Context(), "order", key, "unshipped")
		if err != nil || !j.NextCheckAt.Equal(want) {
			t.Errorf("job %s: %+v, %v; want it at %v", key, j, err, want)
		}
	}
}

// begin starts a processing transaction, rolled back when the test ends.
func begin(t *testing.T, s *postgres.Store) driver.Tx {
	t.Helper()
	tx, err := s.Begin(t.Context(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// A check's query cut short (by its runtime guard, say) aborts the check's
// savepoint; rolling back to it revives the transaction: the other checks'
// writes and every decision still commit.
func TestSavepointRevivesACancelledQuery(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if _, err := s.Pool().Exec(t.Context(), `CREATE TABLE effects (job_id bigint PRIMARY KEY)`); err != nil {
		t.Fatalf("create table: %v", err)
	}
	ids := scheduleAt(t, s, slotAt, "1", "2")
	next := slotAt.Add(15 * time.Minute)
	ctx := t.Context()
	tx := begin(t, s)
	if jobs, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slotAt}); err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d jobs, %v; want 2", len(jobs), err)
	}
	// The first check writes, then its query overruns.
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, ids[0]); err != nil {
		t.Fatalf("write effect: %v", err)
	}
	qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := tx.Exec(qctx, `SELECT pg_sleep(30)`); err == nil {
		t.Fatal("a query past its deadline succeeded")
	}
	if !tx.Aborted() {
		t.Error("Aborted after a cancelled query: false, want true")
	}
	if err := tx.RollbackTo(ctx); err != nil {
		t.Fatalf("rollback to savepoint: %v", err)
	}
	// The second check runs and keeps its write.
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, ids[1]); err != nil {
		t.Fatalf("write effect after the rollback: %v", err)
	}
	if err := tx.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Apply(ctx, &driver.ApplyParams{Slot: slotAt, Now: slotAt, Server: "srv-1", Decisions: []driver.Decision{
		{ID: ids[0], Next: next, Err: "runtime exceeded"},
		{ID: ids[1], Outcome: history.Done, Checked: true},
	}}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	j, err := s.JobGet(ctx, "order", "1", "unshipped")
	if err != nil || !j.NextCheckAt.Equal(next) || j.FailureCount != 1 || j.LastError != "runtime exceeded" {
		t.Errorf("failed job: %+v, %v; want it at %v with one failure", j, err, next)
	}
	if _, err := s.JobGet(ctx, "order", "2", "unshipped"); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("done job still pending: %v", err)
	}
	var effects []int64
	rows, _ := s.Pool().Query(ctx, `SELECT job_id FROM effects`)
	effects, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(effects) != 1 || effects[0] != ids[1] {
		t.Errorf("effects: %v, %v; want only job %d's", effects, err, ids[1])
	}
}

// Claim skips jobs another transaction holds; with LockWait it waits for
// them, and reports ErrLockTimeout if they stay held.
func TestClaimLockWait(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ids := scheduleAt(t, s, slotAt, "1", "2")
	ctx := t.Context()
	holder := begin(t, s)
	if jobs, err := holder.Claim(ctx, &driver.ClaimParams{IDs: ids[:1], Slot: slotAt}); err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %d jobs, %v; want 1", len(jobs), err)
	}
	skip := begin(t, s)
	jobs, err := skip.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slotAt})
	if err != nil || len(jobs) != 1 || jobs[0].ID != ids[1] {
		t.Errorf("claim beside a holder: %v, %v; want only job %d", jobs, err, ids[1])
	}
	_ = skip.Rollback(ctx)
	wait := begin(t, s)
	_, err = wait.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slotAt, LockWait: 50 * time.Millisecond})
	if !errors.Is(err, driver.ErrLockTimeout) {
		t.Errorf("claim waiting for a holder: %v, want ErrLockTimeout", err)
	}
	if wait.Err() == nil {
		t.Error("Err after a lock timeout: nil, want the transaction reported unusable")
	}
}

// A transaction whose connection is lost reports it, and commits nothing.
func TestConnectionLostBreaksTheTransaction(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ids := scheduleAt(t, s, slotAt, "1")
	ctx := t.Context()
	tx := begin(t, s)
	if _, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slotAt}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Raw().(pgx.Tx).Conn().Close(ctx); err != nil {
		t.Fatalf("close the connection: %v", err)
	}
	if tx.Err() == nil {
		t.Error("Err after the connection closed: nil")
	}
	if _, err := tx.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("a statement after the connection closed: no error")
	}
	err := tx.Apply(ctx, &driver.ApplyParams{Slot: slotAt, Now: slotAt, Server: "srv-1",
		Decisions: []driver.Decision{{ID: ids[0], Outcome: history.Done, Checked: true}}})
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err == nil {
		t.Fatal("apply and commit after the connection closed: no error")
	}
	if j, err := s.JobGet(ctx, "order", "1", "unshipped"); err != nil || j.CheckCount != 0 {
		t.Errorf("job: %+v, %v; want it pending, unchecked", j, err)
	}
}

// A check's transaction refuses to be ended by the check.
func TestRawTransactionRefusesToEnd(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	tx := begin(t, s)
	raw := tx.Raw().(pgx.Tx)
	if err := raw.Commit(t.Context()); err == nil {
		t.Error("Commit of the raw transaction: no error")
	}
	if err := raw.Rollback(t.Context()); err == nil {
		t.Error("Rollback of the raw transaction: no error")
	}
	// A savepoint of the check's own still works.
	sp, err := raw.Begin(t.Context())
	if err != nil {
		t.Fatalf("savepoint of the check's own: %v", err)
	}
	if _, err := sp.Exec(t.Context(), `SELECT 1/0`); err == nil {
		t.Fatal("division by zero: no error")
	}
	if err := sp.Rollback(t.Context()); err != nil {
		t.Fatalf("roll back the check's savepoint: %v", err)
	}
	if tx.Aborted() || tx.Err() != nil {
		t.Errorf("after the check's own savepoint rolled back: aborted %v, err %v; want false, nil", tx.Aborted(), tx.Err())
	}
}

// A pool passed to New with pgx's default cancellation closes the connection
// on a cancelled query, and the group's transaction with it: the check that
// overran still counts a failure, recorded in a fresh transaction.
func TestEngineWithPgxDefaultCancellation(t *testing.T) {
	t.Parallel()
	// pgx's default: a cancelled query closes the connection and cancels the
	// server session asynchronously, so its locks may outlive the transaction
	// the engine sees die, and New must cope with such a pool.
	s, _ := storeOnPool(t, nil)
	scheduleAt(t, s, slotAt, "1")
	testOverrunOnAStatement(t, s)
}

// On the store's own pool, a cancelled query is cancelled on the server
// (SQLSTATE 57014) and the connection kept: the check that overran counts
// a failure that says so, not the server's "canceling statement due to user
// request".
func TestEngineCancelsAnOverrunningStatement(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	scheduleAt(t, s, slotAt, "1")
	testOverrunOnAStatement(t, s)
}

// testOverrunOnAStatement fires slotAt, whose one job's check sleeps in a
// statement past its runtime guard, and wants the overrun recorded.
func testOverrunOnAStatement(t *testing.T, s *postgres.Store) {
	reg := &checks.Registry{}
	if err := reg.Register("unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		_, err := j.Tx.Exec(ctx, `SELECT pg_sleep(1)`)
		return time.Time{}, err
	}, &checks.Opts{Guards: guards.Limits{Runtime: 50 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	c, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: 15 * time.Minute},
		Checks: reg, Now: func() time.Time { return slotAt }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.FireSlot(t.Context(), slotAt)
	if err != nil {
		t.Fatalf("fire: %v", err)
	}
	j, err := s.JobGet(t.Context(), "order", "1", "unshipped")
	if err != nil || j.FailureCount != 1 || !j.NextCheckAt.After(slotAt) || rec.Failures != 1 {
		t.Fatalf("job: %+v, %v, slot record %+v; want one failure recorded and the job moved on", j, err, rec)
	}
	if want := "check unshipped ran past its runtime guard of 50ms"; j.LastError != want {
		t.Errorf("the job's last error: %q, want %q", j.LastError, want)
	}
}

// A group on PostgreSQL runs at most MaxGroupSize checks in savepoints, the
// subtransactions one transaction can hold before PostgreSQL's cache of them
// overflows: NewClient refuses a larger GroupSize and names the cap.
func TestGroupSizeCapped(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for _, size := range []int{postgres.MaxGroupSize, postgres.MaxGroupSize + 1} {
		_, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: time.Minute},
			GroupSize: size, Logger: quietLogger()})
		switch {
		case size <= postgres.MaxGroupSize && err != nil:
			t.Errorf("group size %d: %v", size, err)
		case size > postgres.MaxGroupSize && (err == nil || !strings.Contains(err.Error(), "group_size 65 exceeds the store's cap of 64")):
			t.Errorf("group size %d: error %v, want the cap named", size, err)
		}
	}
}

// A store whose schema was never migrated says so, and how to fix it.
func TestNotMigrated(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	s, err := postgres.Open(t.Context(), url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.JobGet(t.Context(), "order", "1", "unshipped"); !errors.Is(err, prescient.ErrNotMigrated) {
		t.Fatalf("JobGet before Migrate = %v, want ErrNotMigrated", err)
	}
}

// prescient_schedule refuses times that are not a point in time, saying so.
func TestSQLScheduleRefusesNonFiniteTimes(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	if err := s.GridSave(t.Context(), slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	for _, at := range []string{"'infinity'", "'-infinity'", "NULL"} {
		_, err := s.Pool().Exec(t.Context(), `SELECT prescient_schedule('order', 'k', 'unshipped', `+at+`::timestamptz)`)
		if err == nil || !strings.Contains(err.Error(), "must be a finite time") {
			t.Errorf("prescient_schedule at %s: %v, want an error saying it must be a finite time", at, err)
		}
	}
}

// The SQL functions refuse the keys the Go client refuses, with its message,
// and a NULL key like an empty one (it would otherwise match nothing and
// return 0 as if all were well).
func TestSQLValidatesKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	c, err := prescient.NewClient(s, &prescient.Config{Server: "test", Grid: slots.Grid{Resolution: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	keys := []*string{
		nil, str(""), str("k"),
		str(strings.Repeat("k", prescient.KeyMax)), str(strings.Repeat("k", prescient.KeyMax+1)),
		// 170 and 171 characters of 3 bytes: the limit is in bytes.
		str(strings.Repeat("€", prescient.KeyMax/3)), str(strings.Repeat("€", prescient.KeyMax/3+1)),
	}
	for _, key := range keys {
		// What the Go client says about this key; NULL is "got NULL".
		want := fmt.Sprintf("entity order: key must be 1 to %d bytes, got NULL", prescient.KeyMax)
		if key != nil {
			want = ""
			if _, err := c.Cancel(ctx, "order", *key, ""); err != nil {
				want = strings.TrimPrefix(err.Error(), "prescient: cancel: ")
			}
		}
		for _, sql := range []string{
			`SELECT prescient_schedule('order', $1, 'unshipped', '2031-03-04T05:00:00Z')`,
			`SELECT prescient_cancel('order', $1)`,
			`SELECT prescient_cancel('order', $1, 'unshipped')`,
			`SELECT prescient_resolve('order', $1, 'paid')`,
		} {
			_, err := s.Pool().Exec(ctx, sql, key)
			name := "NULL"
			if key != nil {
				name = fmt.Sprintf("a key of %d bytes", len(*key))
			}
			if want == "" {
				if err != nil {
					t.Errorf("%s with %s: %v, want success as the Go client allows it", sql, name, err)
				}
				continue
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
				t.Errorf("%s with %s: %v, want SQLSTATE 22023", sql, name, err)
				continue
			}
			if pgErr.Message != want {
				t.Errorf("%s with %s:\n got %s\nwant %s", sql, name, pgErr.Message, want)
			}
		}
	}
}

// prescient_schedule refuses the payloads the Go client refuses, with its
// message.
func TestSQLSchedulePayloadLimit(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	c, err := prescient.NewClient(s, &prescient.Config{Server: "test", Grid: slots.Grid{Resolution: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	// A JSON string prints the same from jsonb as it was sent.
	for _, size := range []int{prescient.PayloadMax, prescient.PayloadMax + 1} {
		payload := `"` + strings.Repeat("x", size-2) + `"`
		var want string
		if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "go", Check: "unshipped", At: at, Payload: json.RawMessage(payload)}); err != nil {
			want = strings.TrimPrefix(err.Error(), "prescient: schedule: ")
		}
		_, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', 'sql', 'unshipped', $1, $2::jsonb)`, at, payload)
		if want == "" {
			if err != nil {
				t.Errorf("payload of %d bytes: %v, want success as the Go client allows it", size, err)
			}
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			t.Errorf("payload of %d bytes: %v, want SQLSTATE 22023", size, err)
			continue
		}
		if want = strings.Replace(want, "order/go/", "order/sql/", 1); pgErr.Message != want {
			t.Errorf("payload of %d bytes:\n got %s\nwant %s", size, pgErr.Message, want)
		}
	}
}

// prescient_schedule reads "now" at the start of the calling statement, not
// of its transaction: in a transaction that began slots ago, a time that has
// passed lands in the first slot after the statement, never in one already
// under way (and perhaps fired).
func TestSQLScheduleUsesStatementTime(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	g := slots.Grid{Resolution: 10 * time.Millisecond}
	if err := s.GridSave(ctx, g); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	// The server's clock passes slot boundaries while the transaction is open.
	if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
		t.Fatal(err)
	}
	var got, stmt, txStart time.Time
	if err := tx.QueryRow(ctx, `SELECT prescient_schedule('order', '1', 'unshipped', now()), statement_timestamp(), now()`).Scan(&got, &stmt, &txStart); err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if stmt.Sub(txStart) < 2*g.Resolution {
		t.Fatalf("the statement began %s after its transaction, want at least two slots", stmt.Sub(txStart))
	}
	if want := g.Next(stmt); !got.Equal(want) {
		t.Errorf("scheduled at the transaction's start %s, statement at %s: got slot %s, want %s",
			txStart.Format(time.RFC3339Nano), stmt.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
	var created, updated time.Time
	if err := tx.QueryRow(ctx, `SELECT created_at, updated_at FROM prescient_jobs WHERE entity_key = '1'`).Scan(&created, &updated); err != nil {
		t.Fatal(err)
	}
	if !created.Equal(stmt) || !updated.Equal(stmt) {
		t.Errorf("created_at %s, updated_at %s; want both the statement's time %s", created, updated, stmt)
	}
}

// quietLogger keeps the engine's expected warnings out of the test output.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// In a group with a savepoint per check, a statement the server cannot
// parse and an argument that cannot be encoded fail their checks alone,
// whatever way the pool's connections run statements (pgx's query exec
// modes differ in what a batch sends before it runs: the pipelined modes
// prepare or describe every statement first, the simple protocol parses the
// whole batch, QueryExecModeExec builds every argument first).
func TestSavepointBatchesInEveryExecMode(t *testing.T) {
	t.Parallel()
	modes := map[string]pgx.QueryExecMode{
		"cache_statement": pgx.QueryExecModeCacheStatement, "cache_describe": pgx.QueryExecModeCacheDescribe,
		"describe_exec": pgx.QueryExecModeDescribeExec, "exec": pgx.QueryExecModeExec, "simple_protocol": pgx.QueryExecModeSimpleProtocol,
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := storeOnPool(t, func(cfg *pgxpool.Config, _ string) { cfg.ConnConfig.DefaultQueryExecMode = mode })
			if _, err := pool.Exec(t.Context(), `CREATE TABLE alerts (order_id text PRIMARY KEY, n int2 NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			reg := &checks.Registry{}
			if err := reg.Register("unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
				var n any = 1
				switch j.Key {
				case "2":
					_, err := j.Tx.Exec(ctx, `INSERT INTO alerts (order_id, no_such_column) VALUES ($1, 1)`, j.Key)
					return time.Time{}, err
				case "4":
					n = 70_000 // out of int2's range
				case "6":
					n = struct{ C chan int }{}
				}
				_, err := j.Tx.Exec(ctx, `INSERT INTO alerts (order_id, n) VALUES ($1, $2)`, j.Key, n)
				return time.Time{}, err
			}, nil); err != nil {
				t.Fatal(err)
			}
			c, err := prescient.NewClient(s, &prescient.Config{Server: "srv-1", Grid: slots.Grid{Resolution: 15 * time.Minute},
				Checks: reg, Workers: 1, SavepointEveryCheck: true, Now: func() time.Time { return slotAt }, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			// Each bad check follows one that succeeded, whose RELEASE would
			// go in the bad one's batch.
			scheduleAt(t, s, slotAt, "1", "2", "3", "4", "5", "6", "7")
			rec, err := c.FireSlot(t.Context(), slotAt)
			if err != nil || rec.Failures != 3 || rec.Outcomes[history.Done] != 4 {
				t.Fatalf("fire: %+v, %v; want 4 done and 3 failures, no error", rec, err)
			}
			var alerts int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM alerts`).Scan(&alerts); err != nil || alerts != 4 {
				t.Errorf("alerts: %d, %v; want 4 (orders 1, 3, 5 and 7)", alerts, err)
			}
		})
	}
}

// storeOnPool opens a migrated store, with New, over a pool of its own on a
// schema of its own, its configuration adjusted by mod (which may be nil; it
// is given the schema's name).
func storeOnPool(t *testing.T, mod func(cfg *pgxpool.Config, schema string)) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	if mod != nil {
		mod(cfg, schema)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // the pool stays the caller's
	s := postgres.New(pool, &postgres.Opts{Schema: schema})
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s, pool
}
