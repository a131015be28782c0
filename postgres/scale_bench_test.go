package postgres_test

// The figures of docs/scaling.md: how much one PostgreSQL primary holds and
// what retention costs. At full size both are heavy (a million pending jobs;
// ten million history rows, twice), so by default they run small (20,000
// jobs, 100,000 history rows: a check that they work) and full size only
// when asked for:
//
//	PRESCIENT_SCALE_BENCH=1 go test -run XXX -bench BenchmarkScale -benchtime 1x -timeout 60m -v ./postgres
//
// PRESCIENT_SCALE_JOBS and PRESCIENT_SCALE_HISTORY change the sizes. Each measurement runs once (it takes far longer
// than the benchmark time, so the framework does not repeat it) and is
// reported as a custom metric and, in words, in the log.
//
// BenchmarkScalePending works in a schema of its own in the test database
// (internal/pgtest). BenchmarkScaleHistoryPrune creates a database of its own,
// prescient_scaling_<random>, on the same server and drops it at the end.
// Neither changes a server setting.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// scaleEnv must be set for the scale benchmarks to run.
const scaleEnv = "PRESCIENT_SCALE_BENCH"

// scaleSize is the size named by the environment variable name, else full
// with scaleEnv set, else small.
func scaleSize(b *testing.B, name string, full, small int) int {
	b.Helper()
	if os.Getenv(scaleEnv) == "" {
		return envInt(b, name, small)
	}
	return envInt(b, name, full)
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// scaleClock is the engine's injected clock.
type scaleClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *scaleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *scaleClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// scaleGrid is the default grid: 15-minute slots.
var scaleGrid = slots.Grid{Resolution: 15 * time.Minute}

// scaleStart is where the injected clock starts: a day boundary.
var scaleStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// scaleClients returns two clients on store s sharing clk: one knows the
// check "scale" as a single-job check, the other as a batch check. Both
// checks do nothing and are done, so that what is measured is the engine and
// the database, not a check.
func scaleClients(b *testing.B, s *postgres.Store, clk *scaleClock) (single, batch *prescient.Client) {
	b.Helper()
	one, many := &checks.Registry{}, &checks.Registry{}
	if err := one.Register("scale", func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, nil
	}, nil); err != nil {
		b.Fatal(err)
	}
	if err := many.RegisterBatch("scale", func(_ context.Context, js []*checks.Job) ([]checks.Result, error) {
		return make([]checks.Result, len(js)), nil
	}, nil); err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(name string, reg *checks.Registry) *prescient.Client {
		c, err := prescient.NewClient(s, &prescient.Config{
			Server: name, Grid: scaleGrid, Checks: reg,
			SweepSchedule: "-", PruneSchedule: "-", Now: clk.Now, Logger: quiet,
		})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	return mk("scale-1", one), mk("scale-2", many)
}

// relSize is a table's size on disk, in bytes.
type relSize struct {
	heap, table, indexes, total int64
	perIndex                    []string // "name size", by name
}

// sizeOf measures table (resolved through the connection's search_path).
func sizeOf(ctx context.Context, b *testing.B, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, table string) relSize {
	b.Helper()
	var r relSize
	if err := q.QueryRow(ctx, `SELECT pg_relation_size($1::regclass), pg_table_size($1::regclass),
		pg_indexes_size($1::regclass), pg_total_relation_size($1::regclass)`, table).
		Scan(&r.heap, &r.table, &r.indexes, &r.total); err != nil {
		b.Fatalf("size of %s: %v", table, err)
	}
	// The indexes of a partitioned table are on its partitions: add them up
	// by the parent index's name.
	rows, err := q.Query(ctx, `
		WITH RECURSIVE t(oid) AS (
			SELECT $1::regclass::oid
			UNION ALL
			SELECT i.inhrelid FROM pg_inherits i JOIN t ON i.inhparent = t.oid
		)
		SELECT coalesce((SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
				WHERE h.inhrelid = x.indexrelid), c.relname) AS name,
			sum(pg_relation_size(x.indexrelid))::bigint
		FROM t JOIN pg_index x ON x.indrelid = t.oid JOIN pg_class c ON c.oid = x.indexrelid
		GROUP BY 1 ORDER BY 1`, table)
	if err != nil {
		b.Fatalf("index sizes of %s: %v", table, err)
	}
	var (
		name string
		size int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		r.perIndex = append(r.perIndex, fmt.Sprintf("%s %s", name, mb(size)))
		return nil
	}); err != nil {
		b.Fatalf("index sizes of %s: %v", table, err)
	}
	if r.indexes == 0 || r.total == 0 {
		// A partitioned parent holds nothing itself: add up its partitions.
		if err := q.QueryRow(ctx, `
			SELECT coalesce(sum(pg_relation_size(relid)), 0)::bigint, coalesce(sum(pg_table_size(relid)), 0)::bigint,
				coalesce(sum(pg_indexes_size(relid)), 0)::bigint, coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
			FROM pg_partition_tree($1::regclass) WHERE isleaf`, table).
			Scan(&r.heap, &r.table, &r.indexes, &r.total); err != nil {
			b.Fatalf("size of partitioned %s: %v", table, err)
		}
	}
	return r
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// report logs the sizes of a table holding rows rows, and reports them per
// million rows.
func (r relSize) report(b *testing.B, what string, rows int64) {
	b.Helper()
	per := func(n int64) float64 { return float64(n) / float64(rows) * 1e6 / (1 << 20) }
	b.Logf("%s: %d rows; heap %s, table (heap+toast+fsm+vm) %s, indexes %s, total %s; per row %.0f B total (%.0f B heap, %.0f B indexes); per million rows %.0f MB (%.0f MB table, %.0f MB indexes); indexes: %s",
		what, rows, mb(r.heap), mb(r.table), mb(r.indexes), mb(r.total),
		float64(r.total)/float64(rows), float64(r.heap)/float64(rows), float64(r.indexes)/float64(rows),
		per(r.total), per(r.table), per(r.indexes), strings.Join(r.perIndex, ", "))
	b.ReportMetric(per(r.total), what+"-MB/1M-rows")
	b.ReportMetric(float64(r.total)/float64(rows), what+"-B/row")
}

func exec(ctx context.Context, b *testing.B, p *pgxpool.Pool, sql string, args ...any) {
	b.Helper()
	if _, err := p.Exec(ctx, sql, args...); err != nil {
		b.Fatalf("%s: %v", sql, err)
	}
}

func count(ctx context.Context, b *testing.B, p *pgxpool.Pool, sql string, args ...any) int64 {
	b.Helper()
	var n int64
	if err := p.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		b.Fatalf("%s: %v", sql, err)
	}
	return n
}

// median runs fn n times and returns the median duration.
func median(n int, fn func()) time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		t := time.Now()
		fn()
		ds[i] = time.Since(t)
	}
	slices.Sort(ds)
	return ds[n/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// unit makes a metric's unit of words: lower case, no spaces or commas.
func unit(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '/' || r == '-')
	}), "-")
}

// BenchmarkScalePending loads PRESCIENT_SCALE_JOBS pending jobs (default
// 1,000,000) through ScheduleMany, 10,000 per 15-minute slot, and measures:
// scheduling, the pending table's size, the reads that see the whole table
// (status), listing and firing slots with the table full against the same
// slots with a table holding only them, the fixed cost of a slot, and the
// history table's size once every job has finished (through prescient_apply,
// the engine's decision statement).
//
// Two layouts: "interleaved" schedules job i into slot i mod the number of
// slots (100 by default), so that a slot's jobs are spread over the whole
// table (the bench command's layout, and the worst case for the cache);
// "clustered" schedules consecutive jobs into the same slot, as an
// application scheduling "now + 3h" does, so that a slot's jobs share pages.
// Only the first measures the slot's fixed cost and history.
func BenchmarkScalePending(b *testing.B) {
	b.Run("interleaved", func(b *testing.B) { scalePending(b, false) })
	b.Run("clustered", func(b *testing.B) { scalePending(b, true) })
}

func scalePending(b *testing.B, clustered bool) {
	ctx := context.Background()
	n := scaleSize(b, "PRESCIENT_SCALE_JOBS", 1_000_000, 20_000)
	const perSlot = 10_000
	nslots := max(n/perSlot, 10)
	s := newStoreConns(b, 12)
	pool := s.Pool()
	clk := &scaleClock{t: scaleStart}
	single, batch := scaleClients(b, s, clk)
	slotAt := func(i int) time.Time { return scaleGrid.Add(scaleStart, i+1) }

	// Scheduling, 1,000 jobs a call as the bench command does.
	params := make([]prescient.ScheduleParams, n)
	for i := range params {
		slot := i % nslots
		if clustered {
			slot = i / (n / nslots)
		}
		params[i] = prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(i), Check: "scale", At: slotAt(min(slot, nslots-1))}
	}
	t := time.Now()
	for chunk := range slices.Chunk(params, 1000) {
		if _, err := single.ScheduleMany(ctx, chunk); err != nil {
			b.Fatal(err)
		}
	}
	took := time.Since(t)
	b.Logf("schedule: %d jobs over %d slots in %s: %.0f jobs/s (ScheduleMany, 1,000 a call)", n, nslots, took.Round(time.Millisecond), float64(n)/took.Seconds())
	b.ReportMetric(float64(n)/took.Seconds(), "schedule-jobs/s")

	exec(ctx, b, pool, `VACUUM (ANALYZE) prescient_jobs`)
	pending := count(ctx, b, pool, `SELECT count(*) FROM prescient_jobs`)
	sizeOf(ctx, b, pool, "prescient_jobs").report(b, "pending", pending)
	var width float64
	if err := pool.QueryRow(ctx, `SELECT avg(pg_column_size(j.*)) FROM prescient_jobs j`).Scan(&width); err != nil {
		b.Fatal(err)
	}
	b.Logf("pending: average row %.0f B as stored (no payload; a payload adds its own size, TOASTed past about 2 kB)", width)

	// The reads that see the whole pending table: status's JobStats, and the
	// sweep's list of overdue slots (every slot overdue).
	clk.Set(slotAt(nslots))
	d := median(3, func() {
		if _, err := s.JobStats(ctx, &driver.JobStatsParams{Current: slotAt(0), Upcoming: 10}); err != nil {
			b.Fatal(err)
		}
	})
	b.Logf("status JobStats over %d pending jobs: %.1f ms (median of 3; counts the whole table)", pending, ms(d))
	b.ReportMetric(ms(d), "jobstats-ms")
	d = median(3, func() {
		got, err := s.JobsOverdueSlots(ctx, time.Time{}, slotAt(nslots), 100)
		if err != nil || len(got) != min(nslots, 100) {
			b.Fatalf("overdue slots: %d, %v", len(got), err)
		}
	})
	b.Logf("sweep JobsOverdueSlots, %d overdue slots listed out of %d pending jobs: %.2f ms (median of 3)", min(nslots, 100), pending, ms(d))
	b.ReportMetric(ms(d), "overdue-slots-ms")
	// Listing and firing: reps slots with each kind of check, alternately
	// (slots 0, 2, 4… by the single-job check, 1, 3, 5… by the batch check),
	// first with the table full, then in a table holding only those slots.
	const reps = 5
	measure := func(what string, s *postgres.Store, clk *scaleClock, single, batch *prescient.Client) {
		pending := count(ctx, b, s.Pool(), `SELECT count(*) FROM prescient_jobs`)
		jobs := 0
		d := median(3, func() {
			var after int64
			jobs = 0
			for {
				due, err := s.JobsDue(ctx, &driver.JobsDueParams{Slot: slotAt(0), AfterID: after, Limit: 500})
				if err != nil {
					b.Fatal(err)
				}
				if len(due) == 0 {
					return
				}
				jobs += len(due)
				after = due[len(due)-1].ID
			}
		})
		b.Logf("%s: JobsDue, pages of 500 (as dispatch lists): the %d jobs of one slot in %.1f ms (median of 3), %d jobs pending",
			what, jobs, ms(d), pending)
		b.ReportMetric(ms(d), what+"-due-list-ms")
		rates := map[string][]float64{}
		for i := range 2 * reps {
			c, kind := single, "entity"
			if i%2 == 1 {
				c, kind = batch, "batch"
			}
			clk.Set(slotAt(i))
			t := time.Now()
			rec, err := c.FireSlot(ctx, slotAt(i))
			if err != nil {
				b.Fatal(err)
			}
			rates[kind] = append(rates[kind], float64(rec.Checked)/time.Since(t).Seconds())
		}
		for _, kind := range []string{"entity", "batch"} {
			r := rates[kind]
			slices.Sort(r)
			b.Logf("%s: fire, %s check doing nothing: %d slots of %d jobs, %.0f jobs/s (median; %.0f to %.0f)",
				what, kind, reps, perSlot, r[reps/2], r[0], r[reps-1])
			b.ReportMetric(r[reps/2], what+"-fire-"+kind+"-jobs/s")
		}
	}
	measure("full", s, clk, single, batch)
	{
		small := newStoreConns(b, 12)
		sclk := &scaleClock{t: scaleStart}
		ssingle, sbatch := scaleClients(b, small, sclk)
		var ps []prescient.ScheduleParams
		for _, p := range params {
			if p.At.Before(slotAt(2 * reps)) {
				ps = append(ps, p)
			}
		}
		for chunk := range slices.Chunk(ps, 1000) {
			if _, err := ssingle.ScheduleMany(ctx, chunk); err != nil {
				b.Fatal(err)
			}
		}
		exec(ctx, b, small.Pool(), `VACUUM (ANALYZE) prescient_jobs`)
		measure("small", small, sclk, ssingle, sbatch)
	}

	if clustered {
		return
	}

	// The fixed cost of a slot: slots of one job, then empty slots, after
	// the loaded ones, on the full table.
	const few = 300
	var one []prescient.ScheduleParams
	for i := range few {
		one = append(one, prescient.ScheduleParams{Entity: "tick", Key: strconv.Itoa(i), Check: "scale", At: slotAt(nslots + i)})
	}
	if _, err := single.ScheduleMany(ctx, one); err != nil {
		b.Fatal(err)
	}
	fireRun := func(from int, what string) {
		t := time.Now()
		for i := from; i < from+few; i++ {
			clk.Set(slotAt(i))
			if _, err := single.FireSlot(ctx, slotAt(i)); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(t)
		b.Logf("%d %s slots fired one after the other in %s: %.0f slots/s, %.2f ms a slot", few, what, took.Round(time.Millisecond),
			float64(few)/took.Seconds(), ms(took)/few)
		b.ReportMetric(float64(few)/took.Seconds(), what+"-slots/s")
	}
	fireRun(nslots, "one-job")
	fireRun(nslots+few, "empty")
	ledger := count(ctx, b, pool, `SELECT count(*) FROM prescient_slots`)
	sizeOf(ctx, b, pool, "prescient_slots").report(b, "ledger", ledger)

	// Every other job finishes through prescient_apply (outcome done, one
	// check run), 10,000 decisions a call: the history table is then as
	// the engine writes it.
	t = time.Now()
	moved := 0
	for i := 2 * reps; i < nslots; i++ {
		slot := slotAt(i)
		rows, err := pool.Query(ctx, `SELECT id FROM prescient_jobs WHERE next_check_at = $1 ORDER BY id`, slot)
		if err != nil {
			b.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			b.Fatal(err)
		}
		for chunk := range slices.Chunk(ids, 10_000) {
			k := len(chunk)
			outcomes, nexts, checked := make([]string, k), make([]time.Time, k), make([]bool, k)
			errs, adds, reasons, late := make([]string, k), make([]int64, k), make([]string, k), make([]int64, k)
			for j := range chunk {
				outcomes[j], nexts[j], checked[j], adds[j], late[j] = "done", slot, true, 1200, 35_000
			}
			exec(ctx, b, pool, `SELECT prescient_apply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				chunk, outcomes, nexts, checked, errs, adds, reasons, late, slot, slot.Add(35*time.Millisecond), "scale-1")
			moved += k
		}
	}
	took = time.Since(t)
	b.Logf("prescient_apply: %d jobs moved to history, 10,000 decisions a call, in %s: %.0f jobs/s (no checks run)", moved, took.Round(time.Millisecond), float64(moved)/took.Seconds())
	b.ReportMetric(float64(moved)/took.Seconds(), "apply-done-jobs/s")
	exec(ctx, b, pool, `VACUUM (ANALYZE) prescient_history`)
	exec(ctx, b, pool, `VACUUM (ANALYZE) prescient_jobs`)
	hist := count(ctx, b, pool, `SELECT count(*) FROM prescient_history`)
	sizeOf(ctx, b, pool, "prescient_history").report(b, "history", hist)
	if err := pool.QueryRow(ctx, `SELECT avg(pg_column_size(h.*)) FROM prescient_history h`).Scan(&width); err != nil {
		b.Fatal(err)
	}
	b.Logf("history: average row %.0f B as stored", width)
	left := count(ctx, b, pool, `SELECT count(*) FROM prescient_jobs`)
	after := sizeOf(ctx, b, pool, "prescient_jobs")
	b.Logf("pending table with %d jobs left, after VACUUM: heap %s, indexes %s, total %s",
		left, mb(after.heap), mb(after.indexes), mb(after.total))
}

// BenchmarkScaleHistoryPrune loads PRESCIENT_SCALE_HISTORY history rows
// (default 10,000,000) spread evenly over 30 days into a database of its own,
// and measures the engine's prune (postgres.Store.HistoryPrune: one DELETE
// by finished_at) of one day and of one hour, with the VACUUM each needs,
// against dropping a day's partition of the same rows partitioned by day;
// the history reads on both shapes; and the engine writing its history into
// the partitioned table unchanged.
func BenchmarkScaleHistoryPrune(b *testing.B) {
	ctx := context.Background()
	rows := scaleSize(b, "PRESCIENT_SCALE_HISTORY", 10_000_000, 100_000)
	const days = 30
	day := 24 * time.Hour

	// A database of its own.
	base, err := url.Parse(pgtest.URL())
	if err != nil || base.Scheme == "" {
		b.Fatalf("%s must be a postgres:// URL for this benchmark, got %q", pgtest.URLEnv, pgtest.URL())
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		b.Fatal(err)
	}
	dbname := "prescient_scaling_" + hex.EncodeToString(rnd[:])
	admin, err := pgx.Connect(ctx, base.String())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+dbname); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+dbname+` WITH (FORCE)`); err != nil {
			b.Errorf("drop database %s: %v", dbname, err)
		}
		admin.Close(context.Background())
	})
	u := *base
	u.Path = "/" + dbname
	dbURL := u.String()
	open := func() *postgres.Store {
		s, err := postgres.Open(ctx, dbURL, &postgres.Opts{MaxConns: 4})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		return s
	}
	s := open()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	pool := s.Pool()
	b.Logf("database %s", dbname)

	// wal returns the server's WAL insert position: differences count every
	// session's WAL, so on a shared server they are upper bounds.
	wal := func() string {
		var lsn string
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	walSince := func(from string) int64 {
		return count(ctx, b, pool, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, from)
	}

	// The rows, as the engine writes them: ids in finishing order, one
	// entity key each, mostly done, some resolved or cancelled, 1% failed.
	// Loaded without the secondary indexes, which are built afterwards.
	rowsSQL := `
		SELECT g, 'order', g::text, 'order_unshipped',
			CASE WHEN g % 100 = 0 THEN 'failed' WHEN g % 10 = 1 THEN 'resolved' WHEN g % 10 = 2 THEN 'cancelled' ELSE 'done' END,
			f - interval '3 hours',
			CASE WHEN g % 10 IN (1, 2) THEN NULL ELSE f - interval '3 hours' END,
			CASE WHEN g % 10 IN (1, 2) THEN 0 ELSE 1 END,
			CASE WHEN g % 100 = 0 THEN 3 ELSE 0 END,
			1200, 35000,
			CASE WHEN g % 100 = 0 THEN 'look up order ' || g || ': context deadline exceeded' END,
			NULL::jsonb, f - interval '6 hours', f, 'web-' || (g % 3 + 1)
		FROM (SELECT g, $3::timestamptz + (g - 1) * ($4::float8 / $5::float8) * interval '1 second' AS f
			FROM generate_series($1::bigint, $2::bigint) g) s`
	cols := `(id, entity, entity_key, check_name, outcome, first_check_at, last_check_at, check_count,
		failure_count, runtime_us, lateness_us, last_error, payload, created_at, finished_at, finished_by)`
	idxRows, err := pool.Query(ctx, `SELECT c.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x
		JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = 'prescient_history'::regclass AND NOT x.indisprimary ORDER BY 1`)
	if err != nil {
		b.Fatal(err)
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(idxRows, func(r pgx.CollectableRow) (index, error) {
		var i index
		return i, r.Scan(&i.name, &i.def)
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, i := range indexes {
		exec(ctx, b, pool, `DROP INDEX `+i.name)
	}
	t := time.Now()
	const chunk = 1_000_000
	for first := 1; first <= rows; first += chunk {
		exec(ctx, b, pool, `INSERT INTO prescient_history `+cols+rowsSQL,
			first, min(first+chunk-1, rows), scaleStart, float64(days*24*3600), float64(rows))
	}
	for _, i := range indexes {
		exec(ctx, b, pool, i.def)
	}
	exec(ctx, b, pool, `VACUUM (ANALYZE) prescient_history`)
	b.Logf("plain history: %d rows over %d days loaded, indexed and vacuumed in %s", rows, days, time.Since(t).Round(time.Second))

	// The same rows partitioned by day, with the same indexes; the primary
	// key must hold the partition key.
	t = time.Now()
	exec(ctx, b, pool, `CREATE TABLE prescient_history_part (LIKE prescient_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
		PARTITION BY RANGE (finished_at)`)
	part := func(d int) string {
		return "prescient_history_" + scaleStart.Add(time.Duration(d)*day).Format("20060102")
	}
	for d := range days + 1 {
		exec(ctx, b, pool, fmt.Sprintf(`CREATE TABLE %s PARTITION OF prescient_history_part FOR VALUES FROM ('%s') TO ('%s')`,
			part(d), scaleStart.Add(time.Duration(d)*day).Format(time.RFC3339), scaleStart.Add(time.Duration(d+1)*day).Format(time.RFC3339)))
	}
	exec(ctx, b, pool, `INSERT INTO prescient_history_part SELECT * FROM prescient_history`)
	exec(ctx, b, pool, `ALTER TABLE prescient_history_part ADD PRIMARY KEY (id, finished_at)`)
	for _, i := range indexes {
		if !strings.Contains(i.def, " ON public.prescient_history ") {
			b.Fatalf("unexpected index definition: %s", i.def)
		}
		exec(ctx, b, pool, strings.Replace(strings.Replace(i.def, " ON public.prescient_history ", " ON public.prescient_history_part ", 1),
			"INDEX "+i.name+" ", "INDEX "+i.name+"_part ", 1))
	}
	exec(ctx, b, pool, `VACUUM (ANALYZE) prescient_history_part`)
	b.Logf("partitioned history: %d daily partitions loaded from it, indexed and vacuumed in %s", days+1, time.Since(t).Round(time.Second))

	plain := sizeOf(ctx, b, pool, "prescient_history")
	plain.report(b, "history-plain", int64(rows))
	sizeOf(ctx, b, pool, "prescient_history_part").report(b, "history-partitioned", int64(rows))
	var width float64
	if err := pool.QueryRow(ctx, `SELECT avg(pg_column_size(h.*)) FROM prescient_history h WHERE id <= 100000`).Scan(&width); err != nil {
		b.Fatal(err)
	}
	b.Logf("history: average row %.0f B as stored (first 100,000 rows)", width)

	// The reads of history and status, through the store.
	reads := func(s *postgres.Store, what string) {
		now := scaleStart.Add(days * day)
		for _, r := range []struct {
			name string
			f    history.Filter
		}{
			{"newest 100", history.Filter{Limit: 100}},
			{"one entity", history.Filter{Entity: "order", Key: strconv.Itoa(rows / 2)}},
			{"failed, newest 100", history.Filter{Outcomes: []history.Outcome{history.Failed}, Limit: 100}},
			{"one check, last hour", history.Filter{Check: "order_unshipped", Since: now.Add(-time.Hour), Limit: 100}},
		} {
			d := median(5, func() {
				got, err := s.HistoryList(ctx, r.f)
				if err != nil || len(got) == 0 {
					b.Fatalf("history %s: %d records, %v", r.name, len(got), err)
				}
			})
			b.Logf("%s: history list, %s: %.2f ms (median of 5)", what, r.name, ms(d))
		}
		d := median(5, func() {
			if _, err := s.HistoryCounts(ctx, now.Add(-24*time.Hour)); err != nil {
				b.Fatal(err)
			}
		})
		b.Logf("%s: status's history counts over the last 24 hours: %.1f ms (median of 5)", what, ms(d))
		b.ReportMetric(ms(d), what+"-counts24h-ms")
	}
	reads(s, "plain")

	// Pruning the plain table: the engine's own call, then the exact same
	// statements under EXPLAIN (ANALYZE, WAL), each followed by the VACUUM
	// that makes the space reusable.
	vacuum := func(table, what string) {
		cfg, err := pgx.ParseConfig(dbURL)
		if err != nil {
			b.Fatal(err)
		}
		var report []string
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if !strings.Contains(n.Message, "pg_toast") { // the empty TOAST table's report says nothing
				report = append(report, n.Message)
			}
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(ctx)
		t := time.Now()
		if _, err := conn.Exec(ctx, `VACUUM (VERBOSE) `+table); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t)
		b.Logf("VACUUM %s after %s: %s; VERBOSE says:\n\t%s", table, what, took.Round(time.Millisecond),
			strings.ReplaceAll(strings.Join(report, "\n"), "\n", "\n\t"))
		b.ReportMetric(ms(took), unit("vacuum-after-"+what+"-ms"))
	}
	prune := func(before time.Time, what string) {
		w := wal()
		t := time.Now()
		n, err := s.HistoryPrune(ctx, before)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(t)
		b.Logf("HistoryPrune (DELETE) of %s: %d rows in %s, WAL %s (server-wide)", what, n, took.Round(time.Millisecond), mb(walSince(w)))
		b.ReportMetric(ms(took), unit("prune-delete-"+what+"-ms"))
	}
	explainPrune := func(before time.Time, what string) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var plan []string
		t := time.Now()
		r, err := tx.Query(ctx, `EXPLAIN (ANALYZE, WAL, BUFFERS, TIMING OFF, COSTS OFF) DELETE FROM prescient_history WHERE finished_at < $1`, before)
		if err != nil {
			b.Fatal(err)
		}
		if plan, err = pgx.CollectRows(r, pgx.RowTo[string]); err != nil {
			b.Fatal(err)
		}
		for _, q := range []string{`DELETE FROM prescient_slots WHERE slot < $1`,
			`DELETE FROM prescient_attempts a WHERE NOT EXISTS (SELECT 1 FROM prescient_jobs j WHERE j.id = ANY (a.job_ids))`} {
			args := []any{before}
			if !strings.Contains(q, "$1") {
				args = nil
			}
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t)
		b.Logf("the same prune's statements, DELETE under EXPLAIN (ANALYZE, WAL, BUFFERS), %s: %s:\n\t%s", what, took.Round(time.Millisecond), strings.Join(plan, "\n\t"))
	}
	prune(scaleStart.Add(day), "one day")
	vacuum("prescient_history", "one day")
	explainPrune(scaleStart.Add(2*day), "the next day")
	vacuum("prescient_history", "the next day")
	prune(scaleStart.Add(2*day+time.Hour), "one hour")
	vacuum("prescient_history", "one hour")
	explainPrune(scaleStart.Add(2*day+2*time.Hour), "the next hour")

	// The partitioned table takes history's place: a fresh store, so that
	// no session keeps plans made for the plain table.
	exec(ctx, b, pool, `ALTER TABLE prescient_history RENAME TO prescient_history_plain`)
	exec(ctx, b, pool, `ALTER TABLE prescient_history_part RENAME TO prescient_history`)
	s = open()
	pool = s.Pool()
	reads(s, "partitioned")
	dropPart := func(d int, how string, stmts ...string) {
		n := count(ctx, b, pool, `SELECT count(*) FROM `+part(d))
		w := wal()
		t := time.Now()
		for _, q := range stmts {
			exec(ctx, b, pool, q)
		}
		took := time.Since(t)
		b.Logf("%s of a day's partition (%d rows): %s, WAL %s (server-wide)", how, n, took.Round(time.Millisecond), mb(walSince(w)))
		b.ReportMetric(ms(took), unit("prune-"+how+"-ms"))
	}
	dropPart(0, "DETACH and DROP", `BEGIN; ALTER TABLE prescient_history DETACH PARTITION `+part(0)+`; DROP TABLE `+part(0)+`; COMMIT`)
	dropPart(1, "DROP TABLE", `DROP TABLE `+part(1))
	dropPart(2, "DETACH CONCURRENTLY and DROP", `ALTER TABLE prescient_history DETACH PARTITION `+part(2)+` CONCURRENTLY`, `DROP TABLE `+part(2))
	prune(scaleStart.Add(3*day+time.Hour), "one hour, partitioned")
	vacuum(part(3), "one hour, partitioned")

	// The engine writes its history into the partitioned table unchanged.
	clk := &scaleClock{t: scaleStart.Add(days*day - 2*time.Hour)}
	single, _ := scaleClients(b, s, clk)
	slot := scaleGrid.Next(clk.Now())
	var ps []prescient.ScheduleParams
	for i := range 1000 {
		ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: "p" + strconv.Itoa(i), Check: "scale", At: slot})
	}
	if _, err := single.ScheduleMany(ctx, ps); err != nil {
		b.Fatal(err)
	}
	clk.Set(slot)
	rec, err := single.FireSlot(ctx, slot)
	if err != nil || rec.Checked != 1000 {
		b.Fatalf("fire into the partitioned history: %d checked, %v", rec.Checked, err)
	}
	got := count(ctx, b, pool, `SELECT count(*) FROM `+part(days-1)+` WHERE finished_by = 'scale-1'`)
	b.Logf("the engine fired a slot of 1000 jobs with history partitioned: %d history rows landed in partition %s", got, part(days-1))
	if got != 1000 {
		b.Fatalf("want 1000 history rows in %s, got %d", part(days-1), got)
	}
}
