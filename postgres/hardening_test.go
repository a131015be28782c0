package postgres_test

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/migrations"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// prescient_schedule refuses the times the Go client refuses, those outside
// [slots.MinTime, slots.MaxTime) or rounding up to a slot outside it, saying
// the range; it used to store year 9999 (rounded into year 10000), which the
// engine could neither judge nor print.
func TestSQLScheduleRefusesTimesOutsideTheRange(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	grid := slots.Grid{Resolution: 15 * time.Minute}
	if err := s.GridSave(ctx, grid); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	c, err := prescient.NewClient(s, &prescient.Config{Server: "test", Grid: grid})
	if err != nil {
		t.Fatal(err)
	}
	const rng = "[1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)"
	tests := []struct {
		at   time.Time
		want string // in the error; "" for success
	}{
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), "the check time 9999-12-31T23:59:59Z is outside the supported range " + rng},
		{slots.MaxTime, "the check time 2200-01-01T00:00:00Z is outside the supported range " + rng},
		{time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC), "is outside the supported range " + rng},
		{time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC), "the check time 1969-12-31T23:59:59.999999Z is outside the supported range " + rng},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), "is outside the supported range " + rng},
		{time.Date(2199, 12, 31, 23, 59, 0, 0, time.UTC),
			"the check time 2199-12-31T23:59:00Z rounds up to the slot 2200-01-01T00:00:00Z, outside the supported range " + rng},
		// 2199-12-31T23:30:00Z, in the range.
		{time.Date(2200, 1, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)), ""},
		{time.Date(2199, 12, 31, 23, 45, 0, 0, time.UTC), ""},
		{slots.MinTime, ""},
	}
	for i, tt := range tests {
		key := string(rune('a' + i))
		got, err := sqlSchedule(t, s, key, tt.at)
		_, goErr := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "go-" + key, Check: "unshipped", At: tt.at})
		if (err == nil) != (goErr == nil) {
			t.Errorf("at %s: SQL says %v, the Go client %v; want the same verdict", tt.at, err, goErr)
		}
		if tt.want == "" {
			if err != nil {
				t.Errorf("prescient_schedule at %s: %v, want success", tt.at, err)
			} else if !grid.IsBoundary(got) || got.Before(tt.at) || !got.Before(slots.MaxTime) {
				t.Errorf("prescient_schedule at %s = %s, want a slot at or after it, before %s", tt.at, got, slots.MaxTime)
			}
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, tt.want) {
			t.Errorf("prescient_schedule at %s: %v, want SQLSTATE 22023 saying %q", tt.at, err, tt.want)
		}
		if _, err := s.JobGet(ctx, "order", key, "unshipped"); !errors.Is(err, prescient.ErrNotFound) {
			t.Errorf("prescient_schedule at %s stored a job (%v)", tt.at, err)
		}
	}
}

// prescient_cancel with a NULL check is an error, as every other NULL
// argument is; it used to cancel every check of the entity. The two-argument
// call still cancels them all, and so does Client.Cancel with no check.
func TestSQLCancelRefusesANullCheck(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	grid := slots.Grid{Resolution: 15 * time.Minute}
	if err := s.GridSave(ctx, grid); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	at := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	for _, k := range []string{"1", "2"} {
		for _, ch := range []string{"unshipped", "unpaid"} {
			if _, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', $1, $2, $3)`, k, ch, at); err != nil {
				t.Fatalf("schedule: %v", err)
			}
		}
	}
	pending := func(key string) int {
		t.Helper()
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM prescient_jobs WHERE entity_key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, sql := range []string{
		`SELECT prescient_cancel('order', '1', NULL)`,
		`SELECT prescient_cancel('order', '1', NULL::text)`,
		`SELECT prescient_cancel(p_entity => 'order', p_key => '1', p_check => NULL)`,
	} {
		_, err := s.Pool().Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "prescient_cancel(entity, key)") {
			t.Errorf("%s: %v, want SQLSTATE 22023 pointing to prescient_cancel(entity, key)", sql, err)
		}
	}
	var nullParam *string
	if _, err := s.Pool().Exec(ctx, `SELECT prescient_cancel('order', '1', $1)`, nullParam); err == nil {
		t.Error("prescient_cancel with a NULL parameter as the check: no error")
	}
	if n := pending("1"); n != 2 {
		t.Fatalf("%d jobs of order 1 pending after cancelling with a NULL check, want both", n)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT prescient_cancel('order', '1')`).Scan(&n); err != nil || n != 2 {
		t.Errorf("prescient_cancel('order', '1') = %d, %v; want every check of the entity cancelled (2)", n, err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT prescient_cancel(p_entity => 'order', p_key => '1')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("prescient_cancel with named arguments = %d, %v; want 0", n, err)
	}
	c, err := prescient.NewClient(s, &prescient.Config{Server: "test", Grid: grid})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Cancel(ctx, "order", "2", ""); err != nil || n != 2 {
		t.Errorf("Client.Cancel with no check = %d, %v; want every check of the entity cancelled (2)", n, err)
	}
}

// Migration 00004 replaces prescient_cancel(text, text, text) to drop its
// default; the privileges on it carry over to both new functions, so a
// database that revoked EXECUTE from PUBLIC and granted it to the
// application's roles keeps working. Down restores the old function.
func TestMigrationKeepsCancelPrivileges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, provider := migratedTo(t, 3)
	// pg_monitor stands for the application's role: a predefined role, so
	// the test creates none in the shared cluster.
	for _, sql := range []string{
		`REVOKE EXECUTE ON FUNCTION prescient_cancel(text, text, text) FROM PUBLIC`,
		`GRANT EXECUTE ON FUNCTION prescient_cancel(text, text, text) TO pg_monitor`,
	} {
		if _, err := s.Pool().Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	can := func(role, fn string) bool {
		t.Helper()
		var ok bool
		if err := s.Pool().QueryRow(ctx, `SELECT has_function_privilege($1, $2::regprocedure, 'EXECUTE')`, role, fn).Scan(&ok); err != nil {
			t.Fatalf("privilege of %s on %s: %v", role, fn, err)
		}
		return ok
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	for _, fn := range []string{"prescient_cancel(text, text, text)", "prescient_cancel(text, text)"} {
		if !can("pg_monitor", fn) {
			t.Errorf("after migrating, pg_monitor may not execute %s; it was granted the old function", fn)
		}
		if can("pg_write_server_files", fn) {
			t.Errorf("after migrating, everyone may execute %s; EXECUTE was revoked from PUBLIC on the old function", fn)
		}
	}
	var leftovers int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname IN ('prescient_copy_acl', 'prescient_cancel_00001')`).Scan(&leftovers); err != nil || leftovers != 0 {
		t.Errorf("%d helper functions left behind (%v)", leftovers, err)
	}

	if _, err := provider.DownTo(ctx, 3); err != nil {
		t.Fatalf("migrate down to 3: %v", err)
	}
	if !can("pg_monitor", "prescient_cancel(text, text, text)") {
		t.Error("after migrating down, pg_monitor lost its privilege")
	}
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT prescient_cancel('order', '1')`).Scan(&n); err != nil || n != 0 {
		t.Errorf("two-argument prescient_cancel after migrating down: %d, %v", n, err)
	}
	if _, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', '1', 'unshipped', '9999-12-31T23:59:59Z')`); err != nil {
		t.Errorf("prescient_schedule of 00001 after migrating down: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
}

// migrationsProvider returns a store over a fresh schema that nothing has
// migrated yet, and a goose provider of prescient's migrations over it, for
// tests that migrate up or down to a given version.
func migrationsProvider(t *testing.T) (*postgres.Store, *goose.Provider) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	s := open(t, url, schema)
	return s, providerOf(t, s)
}

// providerOf returns a goose provider of prescient's migrations over s's
// schema.
func providerOf(t *testing.T, s *postgres.Store) *goose.Provider {
	t.Helper()
	fsys, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(s.Pool())
	t.Cleanup(func() { db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithTableName("prescient_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return provider
}

// migratedTo returns a store on a schema of its own migrated up to version,
// and the provider that migrates it further or back.
func migratedTo(t *testing.T, version int64) (*postgres.Store, *goose.Provider) {
	t.Helper()
	s, provider := migrationsProvider(t)
	if _, err := provider.UpTo(t.Context(), version); err != nil {
		t.Fatalf("migrate up to %d: %v", version, err)
	}
	return s, provider
}

// Migration 00009 makes the engine's one-table functions keep one plan per
// session (plan_cache_mode), which the plan cache otherwise rebuilt on every
// call of a statement over arrays of ids, and prescient_apply, which joins,
// plan every call (see TestApplyPlannedOnAnEmptyTable); Down gives them back
// the cache's choice.
func TestEngineFunctionsPlanOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, provider := migratedTo(t, 9)
	generic := func() []string {
		t.Helper()
		rows, err := s.Pool().Query(ctx, `
			SELECT p.proname || ' ' || c FROM pg_proc p, unnest(p.proconfig) c
			WHERE p.pronamespace = current_schema()::regnamespace AND c LIKE 'plan_cache_mode=%'
			ORDER BY 1`)
		if err != nil {
			t.Fatalf("read function settings: %v", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("read function settings: %v", err)
		}
		return names
	}
	want := []string{
		"prescient_apply plan_cache_mode=force_custom_plan",
		"prescient_attempt_start plan_cache_mode=force_generic_plan",
		"prescient_claim plan_cache_mode=force_generic_plan",
		"prescient_jobs_due plan_cache_mode=force_generic_plan",
	}
	if got := generic(); !slices.Equal(got, want) {
		t.Errorf("plan cache modes: %v, want %v", got, want)
	}
	// Migration 00010 bounds every shape of prescient_apply's plan (primary
	// key lookups of its ids, hash joins) and makes it plan once too.
	if _, err := provider.UpTo(ctx, 10); err != nil {
		t.Fatalf("migrate up to 10: %v", err)
	}
	want10 := append([]string{"prescient_apply plan_cache_mode=force_generic_plan"}, want[1:]...)
	if got := generic(); !slices.Equal(got, want10) {
		t.Errorf("plan cache modes after 00010: %v, want %v", got, want10)
	}
	if _, err := provider.DownTo(ctx, 9); err != nil {
		t.Fatalf("migrate down to 9: %v", err)
	}
	if got := generic(); !slices.Equal(got, want) {
		t.Errorf("plan cache modes after migrating down to 9: %v, want %v", got, want)
	}
	if _, err := provider.DownTo(ctx, 8); err != nil {
		t.Fatalf("migrate down to 8: %v", err)
	}
	if got := generic(); len(got) != 0 {
		t.Errorf("after migrating down, plan cache modes: %v, want none", got)
	}
}

// prescient_apply reaches each job by primary key. A session that first
// applied decisions while the table was empty must still reach each job
// through the index once the table is full, not scan the whole table (a
// generic plan of 00003's join, made on the empty table, did: 40 s for 2,000
// decisions among 50,000 jobs). Counted in index entries read, within one
// transaction.
func TestApplyPlannedOnAnEmptyTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t)
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	const apply = `SELECT prescient_apply($1, $2, $3, $4, $5, $6, $7, $8, now(), now(), 'srv')`
	one := func(ids []int64) []any {
		n := len(ids)
		return []any{ids, slices.Repeat([]string{"done"}, n), make([]*time.Time, n), slices.Repeat([]bool{true}, n),
			slices.Repeat([]string{""}, n), slices.Repeat([]int64{1}, n), slices.Repeat([]string{""}, n), make([]int64, n)}
	}
	// An empty table that was vacuumed (all its jobs finished) looks as
	// small as it is.
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE prescient_jobs`); err != nil {
		t.Fatal(err)
	}
	for range 8 { // past the plan cache's first five custom plans
		if _, err := conn.Exec(ctx, apply, one([]int64{1})...); err != nil {
			t.Fatalf("apply on the empty table: %v", err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
		SELECT 'order', g::text, 'c', now(), now(), now(), now() FROM generate_series(1, 20000) g`); err != nil {
		t.Fatalf("fill the table: %v", err)
	}
	var ids []int64
	rows, _ := conn.Query(ctx, `SELECT id FROM prescient_jobs ORDER BY id LIMIT 2000`)
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatalf("read ids: %v", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, apply, one(ids)...); err != nil {
		t.Fatalf("apply 2,000 decisions: %v", err)
	}
	var read int64
	if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_returned('prescient_jobs_pkey'::regclass)`).Scan(&read); err != nil {
		t.Fatalf("read index statistics: %v", err)
	}
	if read > 3*int64(len(ids)) {
		t.Errorf("applying %d decisions read %d primary-key entries of the 20,000 pending jobs, want about one per decision", len(ids), read)
	}
}

// Changing a column's type (migration 00011 changes the key columns'
// collation) drops the planner's statistics for it, and history, which only
// grows, may wait long for autovacuum to analyse it again; without them a
// rare entity's jobs and history were looked up by walking the due and the
// finished index. The migration analyses the columns again, both ways.
func TestKeyCollationKeepsStatistics(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, provider := migratedTo(t, 10)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
		SELECT 'e' || (i % 7), i::text, 'c' || (i % 3), now(), now(), now(), now() FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at, check_count,
			failure_count, runtime_us, lateness_us, created_at, finished_at, finished_by)
		SELECT id, entity, entity_key, check_name, 'done', now(), 1, 0, 0, 0, now(), now(), 'srv' FROM prescient_jobs`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE prescient_jobs; ANALYZE prescient_history`); err != nil {
		t.Fatal(err)
	}
	stats := func() int {
		t.Helper()
		var n int
		if err := s.Pool().QueryRow(ctx, `
			SELECT count(*) FROM pg_stats WHERE schemaname = current_schema()
				AND tablename IN ('prescient_jobs', 'prescient_history')
				AND attname IN ('entity', 'entity_key', 'check_name')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := stats(); n != 6 {
		t.Fatalf("before 00011: statistics for %d of the 6 key columns", n)
	}
	if _, err := provider.UpTo(ctx, 11); err != nil {
		t.Fatalf("migrate up to 11: %v", err)
	}
	if n := stats(); n != 6 {
		t.Errorf("after 00011: statistics for %d of the 6 key columns, want 6", n)
	}
	if _, err := provider.DownTo(ctx, 10); err != nil {
		t.Fatalf("migrate down to 10: %v", err)
	}
	if n := stats(); n != 6 {
		t.Errorf("after migrating down from 00011: statistics for %d of the 6 key columns, want 6", n)
	}
}

// Migration 00013 adds the ledger's took_us. A slot an install finished
// before it reads as the span from its start to its finish; Down drops the
// column, and Up again brings it back.
func TestLedgerTookMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, provider := migratedTo(t, 12)
	start := time.Date(2031, 3, 4, 10, 0, 1, 0, time.UTC)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO prescient_slots (slot, server, kind, started_at, finished_at, checked)
		VALUES ($1, 'web-1', 'fire', $2, $3, 3), ($1, 'web-2', 'fire', $2, NULL, 0)`,
		start.Truncate(time.Minute), start, start.Add(2500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := provider.UpTo(ctx, 13); err != nil {
		t.Fatalf("migrate up to 13: %v", err)
	}
	recs, err := s.SlotList(ctx, &driver.SlotListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Took != 2500*time.Millisecond || recs[1].Took != 0 {
		t.Fatalf("ledger after 00013: %+v; want web-1's finished row to take 2.5s and web-2's unfinished one none", recs)
	}
	if _, err := provider.DownTo(ctx, 12); err != nil {
		t.Fatalf("migrate down to 12: %v", err)
	}
	if _, err := provider.UpTo(ctx, 13); err != nil {
		t.Fatalf("migrate up to 13 again: %v", err)
	}
}
