package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// Defaults and limits of `prescient bench`.
const (
	benchJobsDefault          = 10_000
	benchJobsMax              = 10_000_000
	benchSlotsDefault         = 10
	benchScheduleBatchDefault = 1000
	benchScheduleBatchMax     = 100_000
	benchWorkersMax           = 1000
)

// benchResolution is the grid of the benchmark. Its length does not matter:
// the engine's clock is injected and jumps from slot to slot.
const benchResolution = time.Minute

// Names of the benchmark's checks: the single-job one, the batch one, and the
// name the pure-SQL reference's jobs carry (no check runs them).
const (
	benchCheck      = "bench_unshipped"
	benchBatchCheck = "bench_unshipped_batch"
	benchSQLCheck   = "bench_pure_sql"
	benchSQLHistory = "bench_sql_history"
)

// benchSQLChunk is how many jobs one statement of the pure-SQL reference
// handles.
const benchSQLChunk = 10_000

// benchDDL creates the tables the benchmark's check reads and writes.
const benchDDL = `CREATE TABLE bench_orders (id text PRIMARY KEY, status text NOT NULL);
CREATE TABLE bench_alerts (order_id text PRIMARY KEY, stage text NOT NULL)`

// benchOpts are the flags of `prescient bench`.
type benchOpts struct {
	jobs          int
	slots         int
	scheduleBatch int
	workers       int
	json          bool
}

// Validate checks the counts, naming the flag that is wrong.
func (o *benchOpts) Validate() error {
	var errs []error
	if o.jobs < 1 || o.jobs > benchJobsMax {
		errs = append(errs, fmt.Errorf("--jobs %d must be between 1 and %d", o.jobs, benchJobsMax))
	}
	if o.slots < 1 {
		errs = append(errs, fmt.Errorf("--slots %d must be at least 1", o.slots))
	} else if o.jobs >= 1 && o.slots > o.jobs {
		errs = append(errs, fmt.Errorf("--slots %d must not exceed --jobs %d: every slot needs at least one job", o.slots, o.jobs))
	}
	if o.scheduleBatch < 1 || o.scheduleBatch > benchScheduleBatchMax {
		errs = append(errs, fmt.Errorf("--schedule-batch %d must be between 1 and %d", o.scheduleBatch, benchScheduleBatchMax))
	}
	if o.workers < 1 || o.workers > benchWorkersMax {
		errs = append(errs, fmt.Errorf("--workers %d must be between 1 and %d", o.workers, benchWorkersMax))
	}
	return errors.Join(errs...)
}

func (e *env) benchCommand() *cobra.Command {
	o := &benchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure scheduling and firing speed and memory on a throwaway database",
		Long: `bench measures the engine on a throwaway database, as the demo uses: a fresh
SQLite file in a temporary directory by default, or, with database.url (or
PRESCIENT_DATABASE_URL) set, a schema named prescient_bench_<random> in that
PostgreSQL database. Both are removed at the end, also when a signal
(Ctrl-C, SIGTERM, SIGHUP) interrupts it.

It creates one order row per job, then:

  schedule   schedules --jobs jobs spread evenly over --slots slots, in
             ScheduleMany calls of --schedule-batch jobs;
  due query  lists the jobs due in each slot, page by page as the engine
             does, with every job still pending;
  fire       fires the slots one after the other with FireSlot, on an
             injected clock (no waiting for slot boundaries). The check looks
             its order up and writes an alert row through the engine's
             transaction, and is done.
  fire batch the same on fresh jobs in the next slots, with a batch check:
             one query looks a batch's orders up, one statement writes
             their alerts.
  pure SQL   the same work on fresh jobs with no engine: per slot, one
             set-based statement per 10,000 jobs writes their alerts and
             deletes them (no history, no per-job decisions), the reference
             the two fire phases are measured against ("vs pure SQL").
  SQL with history
             pure SQL plus what the engine writes for each job whatever its
             check does: the claim's row locks (PostgreSQL) and a history
             row. No engine that records every finished job can beat it, so
             the fire phases are measured against it too.

It prints the time and rate of each phase, the median (p50) and p99 time to
fire one slot, the bytes and allocations per job (from runtime.MemStats: the
whole process, so with SQLite they include the embedded database engine), and
exact counts of the jobs checked, alerts written and jobs left pending.
--json prints the same for scripts, with durations in nanoseconds. When
stderr is a terminal, a progress line there says which phase runs and how
far it got (it costs a few allocations per redraw, ten times a second at
most, next to the phases it measures).

Timings depend on the machine and on what else runs on it: compare runs
on one machine. For the per-operation Go benchmarks, see bench_test.go
(go test -run XXX -bench . .).`,
		Example: `  prescient bench
  prescient bench --jobs 100000 --slots 100 --workers 20
  PRESCIENT_DATABASE_URL=postgres://me@localhost:5432/scratch prescient bench --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("slots") {
				// A handful of jobs needs no flag: one slot each.
				o.slots = max(min(o.slots, o.jobs), 1)
			}
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			prog := newProgress(cmd.ErrOrStderr(), "bench")
			e.progress = prog
			ctx, stop := untilSignal(cmd.Context())
			defer stop()
			res, err := runBench(ctx, cfg.Database.URL, o, e.logger(cfg), prog)
			if err != nil {
				prog.clear()
				return interrupted(ctx, "bench", err)
			}
			prog.done("done")
			return printBench(cmd.OutOrStdout(), res, o.json)
		},
	}
	cmd.Flags().IntVar(&o.jobs, "jobs", benchJobsDefault, "schedule and fire `N` jobs")
	cmd.Flags().IntVar(&o.slots, "slots", benchSlotsDefault, "spread the jobs evenly over `N` slots (at most --jobs; by default no more slots than jobs)")
	cmd.Flags().IntVar(&o.scheduleBatch, "schedule-batch", benchScheduleBatchDefault, "schedule `N` jobs per ScheduleMany call")
	cmd.Flags().IntVar(&o.workers, "workers", prescient.WorkersDefault, "run at most `N` checks at once (the engine's workers; the PostgreSQL pool gets N + 4 connections, at most 50)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON for scripts")
	return cmd
}

// benchResult is what `prescient bench` measured.
type benchResult struct {
	// Store is "sqlite" or "postgres"; Database says which one, for people.
	Store    string `json:"store"`
	Database string `json:"database"`

	Jobs          int `json:"jobs"`
	Slots         int `json:"slots"`
	ScheduleBatch int `json:"schedule_batch"`
	Workers       int `json:"workers"`

	Schedule benchPhase `json:"schedule"`
	DueQuery benchDue   `json:"due_query"`
	Fire     benchPhase `json:"fire"`
	// FireBatch fires the same jobs again, checked by a batch check (one
	// query and one insert per batch).
	FireBatch benchPhase `json:"fire_batch"`
	// PureSQL does the same work with no engine: per slot, one set-based
	// statement per benchSQLChunk jobs writes their alerts and deletes them
	// (no history, no decisions). Fire and FireBatch are measured against it.
	PureSQL benchPhase `json:"pure_sql"`
	// SQLHistory is PureSQL plus what the engine's guarantees write for
	// each job whatever runs it: the claim's row lock and a history row.
	// It is the floor of any engine that records every finished job, so
	// FireBatch is measured against it too.
	SQLHistory benchPhase `json:"sql_with_history"`
	// SlotP50 and SlotP99 are percentiles (nearest rank) of the time to fire
	// one slot.
	SlotP50 time.Duration `json:"slot_fire_p50_ns"`
	SlotP99 time.Duration `json:"slot_fire_p99_ns"`

	// Checked, Done and Failures add up the slot records of the fire phase.
	Checked  int `json:"checked"`
	Done     int `json:"done"`
	Failures int `json:"failures"`
	// Alerts counts the alert rows the single-job checks wrote, BatchAlerts
	// the batch check's and SQLAlerts the pure-SQL reference's; Pending
	// counts the jobs still pending afterwards.
	Alerts      int `json:"alerts"`
	BatchAlerts int `json:"batch_alerts"`
	SQLAlerts   int `json:"sql_alerts"`
	// SQLHistoryRows counts the history rows the SQLHistory phase wrote.
	SQLHistoryRows int `json:"sql_history_rows"`
	Pending        int `json:"pending"`
}

// benchPhase is the cost of one phase over all jobs.
type benchPhase struct {
	Time         time.Duration `json:"time_ns"`
	JobsPerSec   float64       `json:"jobs_per_sec"`
	BytesPerJob  float64       `json:"alloc_bytes_per_job"`
	AllocsPerJob float64       `json:"allocs_per_job"`
}

// benchDue is the cost of listing the due jobs of every slot.
type benchDue struct {
	Queries   int           `json:"queries"`
	Time      time.Duration `json:"time_ns"`
	PerSlot   time.Duration `json:"per_slot_ns"`
	PerDueJob time.Duration `json:"per_due_job_ns"`
}

// benchClock is the engine's injected clock: it stands wherever it is set.
type benchClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *benchClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *benchClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// meter measures the wall time and the allocations of one phase.
type meter struct {
	start time.Time
	mem   runtime.MemStats
}

func startMeter() *meter {
	m := &meter{}
	runtime.ReadMemStats(&m.mem)
	m.start = time.Now()
	return m
}

// stop returns the phase's cost, spread over jobs.
func (m *meter) stop(jobs int) benchPhase {
	d := time.Since(m.start)
	var end runtime.MemStats
	runtime.ReadMemStats(&end)
	p := benchPhase{
		Time:         d,
		BytesPerJob:  float64(end.TotalAlloc-m.mem.TotalAlloc) / float64(jobs),
		AllocsPerJob: float64(end.Mallocs-m.mem.Mallocs) / float64(jobs),
	}
	if d > 0 {
		p.JobsPerSec = float64(jobs) / d.Seconds()
	}
	return p
}

// runBench runs the benchmark on a throwaway database (see openScratchDB),
// which it removes at the end.
// prog, which may be nil, says which phase runs.
func runBench(ctx context.Context, dbURL string, o *benchOpts, log *slog.Logger, prog *progress) (res *benchResult, err error) {
	db, err := openScratchDB(ctx, dbURL, "bench", o.workers)
	if err != nil {
		return nil, err
	}
	defer func() {
		if what, rerr := db.remove(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: %s: %w", what, rerr))
		}
	}()
	res = &benchResult{
		Store: "sqlite", Database: strings.TrimPrefix(db.what, "a fresh "),
		Jobs: o.jobs, Slots: o.slots, ScheduleBatch: o.scheduleBatch, Workers: o.workers,
	}
	if dbURL != "" {
		res.Store = "postgres"
	}
	if err := db.store.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("bench: migrate: %w", err)
	}
	if err := db.exec(ctx, benchDDL); err != nil {
		return nil, fmt.Errorf("bench: create the bench tables: %w", err)
	}
	prog.set("inserting %d orders", o.jobs)
	if err := benchOrders(ctx, db, o.jobs); err != nil {
		return nil, err
	}

	reg := &checks.Registry{}
	if err := reg.Register(benchCheck, benchAlert, nil); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := reg.RegisterBatch(benchBatchCheck, benchAlertBatch, nil); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	grid := slots.Grid{Resolution: benchResolution}
	clk := &benchClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	client, err := prescient.NewClient(db.store, &prescient.Config{
		Server:        "bench",
		Grid:          grid,
		Checks:        reg,
		Workers:       o.workers,
		SweepSchedule: "-",
		PruneSchedule: "-",
		Now:           clk.Now,
		Logger:        log,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}

	// Job i goes to slot i mod slots: the slots hold jobs/slots jobs each,
	// give or take one.
	slotAt := make([]time.Time, o.slots)
	for i := range slotAt {
		slotAt[i] = grid.Add(clk.Now(), i+1)
	}
	params := make([]prescient.ScheduleParams, o.jobs)
	for i := range params {
		params[i] = prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(i), Check: benchCheck, At: slotAt[i%o.slots]}
	}
	m := startMeter()
	scheduled := 0
	for batch := range slices.Chunk(params, o.scheduleBatch) {
		prog.set("schedule: %d of %d jobs", scheduled, o.jobs)
		if _, err := client.ScheduleMany(ctx, batch); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		scheduled += len(batch)
	}
	res.Schedule = m.stop(o.jobs)

	prog.set("due query: %d slots", o.slots)
	if res.DueQuery, err = benchDueQuery(ctx, client, slotAt); err != nil {
		return nil, err
	}

	perSlot := make([]time.Duration, 0, o.slots)
	m = startMeter()
	for i, slot := range slotAt {
		prog.set("fire: slot %d of %d", i+1, o.slots)
		clk.set(slot)
		start := time.Now()
		rec, err := client.FireSlot(ctx, slot)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		perSlot = append(perSlot, time.Since(start))
		res.Checked += rec.Checked
		res.Done += rec.Outcomes[history.Done]
		res.Failures += rec.Failures
	}
	res.Fire = m.stop(o.jobs)
	res.SlotP50, res.SlotP99 = percentile(perSlot, 0.50), percentile(perSlot, 0.99)
	if res.Alerts, err = countRows(ctx, db, "bench_alerts"); err != nil {
		return nil, err
	}

	// The same work by a batch check, then by plain SQL, on fresh jobs in
	// the slots after: scheduling them is not measured.
	next := func(check string) ([]time.Time, error) {
		if err := db.exec(ctx, "DELETE FROM bench_alerts"); err != nil {
			return nil, fmt.Errorf("bench: empty bench_alerts: %w", err)
		}
		last := slotAt[len(slotAt)-1]
		for i := range slotAt {
			slotAt[i] = grid.Add(last, i+1)
		}
		for i := range params {
			params[i].Check, params[i].At = check, slotAt[i%o.slots]
		}
		for batch := range slices.Chunk(params, o.scheduleBatch) {
			if _, err := client.ScheduleMany(ctx, batch); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
		}
		return slotAt, nil
	}
	prog.set("fire batch: scheduling %d jobs", o.jobs)
	if _, err := next(benchBatchCheck); err != nil {
		return nil, err
	}
	m = startMeter()
	for i, slot := range slotAt {
		prog.set("fire batch: slot %d of %d", i+1, o.slots)
		clk.set(slot)
		if _, err := client.FireSlot(ctx, slot); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	res.FireBatch = m.stop(o.jobs)
	if res.BatchAlerts, err = countRows(ctx, db, "bench_alerts"); err != nil {
		return nil, err
	}
	// The same work in plain SQL, then with what the engine must write
	// besides, each on fresh jobs, one statement per benchSQLChunk jobs.
	sqlPhase := func(name, check string, run func(context.Context, *demoDB, string, time.Time) error) (benchPhase, error) {
		prog.set("%s: scheduling %d jobs", name, o.jobs)
		if _, err := next(check); err != nil {
			return benchPhase{}, err
		}
		m := startMeter()
		for i, slot := range slotAt {
			prog.set("%s: slot %d of %d", name, i+1, o.slots)
			for range (o.jobs/o.slots + 1 + benchSQLChunk - 1) / benchSQLChunk {
				if err := run(ctx, db, res.Store, slot); err != nil {
					return benchPhase{}, err
				}
			}
		}
		return m.stop(o.jobs), nil
	}
	if res.PureSQL, err = sqlPhase("pure SQL", benchSQLCheck, benchPureSQL); err != nil {
		return nil, err
	}
	if res.SQLAlerts, err = countRows(ctx, db, "bench_alerts"); err != nil {
		return nil, err
	}
	if res.SQLHistory, err = sqlPhase("SQL with history", benchSQLHistory, benchSQLWithHistory); err != nil {
		return nil, err
	}
	if res.SQLHistoryRows, err = countRows(ctx, db, "prescient_history WHERE check_name = '"+benchSQLHistory+"'"); err != nil {
		return nil, err
	}

	stats, err := db.store.Driver().JobStats(ctx, &driver.JobStatsParams{Current: clk.Now(), Upcoming: 1})
	if err != nil {
		return nil, fmt.Errorf("bench: count pending jobs: %w", err)
	}
	res.Pending = stats.Pending
	return res, nil
}

// benchOrders inserts the orders the check looks up: one per job, keys 0 to
// n-1. Not measured.
func benchOrders(ctx context.Context, db *demoDB, n int) error {
	const rows = 1000
	var q strings.Builder
	for first := 0; first < n; first += rows {
		q.Reset()
		q.WriteString("INSERT INTO bench_orders (id, status) VALUES ")
		for i := first; i < min(first+rows, n); i++ {
			if i > first {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "('%d', 'placed')", i)
		}
		if err := db.exec(ctx, q.String()); err != nil {
			return fmt.Errorf("bench: insert orders: %w", err)
		}
	}
	return nil
}

// benchAlert is the benchmark's check: it looks the order up, writes an
// alert through the engine's transaction when it is not shipped, and is done.
func benchAlert(ctx context.Context, j *checks.Job) (time.Time, error) {
	var status string
	if err := j.Tx.QueryRow(ctx, "SELECT status FROM bench_orders WHERE id = $1", j.Key).Scan(&status); err != nil {
		return time.Time{}, fmt.Errorf("look up order %s: %w", j.Key, err)
	}
	if status == "shipped" {
		return time.Time{}, nil
	}
	_, err := j.Tx.Exec(ctx, "INSERT INTO bench_alerts (order_id, stage) VALUES ($1, 'unshipped')", j.Key)
	return time.Time{}, err
}

// benchAlertBatch is benchAlert as a batch check: one query looks the
// batch's orders up, one statement writes the alerts of those not shipped.
// Its SQL runs on both stores: a placeholder per order.
func benchAlertBatch(ctx context.Context, js []*checks.Job) ([]checks.Result, error) {
	var q strings.Builder
	args := make([]any, len(js))
	q.WriteString("SELECT id FROM bench_orders WHERE status <> 'shipped' AND id IN (")
	for i, j := range js {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "$%d", i+1)
		args[i] = j.Key
	}
	q.WriteString(")")
	rows, err := js[0].Tx.Query(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("look up %d orders: %w", len(js), err)
	}
	var unshipped []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		unshipped = append(unshipped, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(unshipped) > 0 {
		q.Reset()
		q.WriteString("INSERT INTO bench_alerts (order_id, stage) VALUES ")
		for i := range unshipped {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "($%d, 'unshipped')", i+1)
		}
		if _, err := js[0].Tx.Exec(ctx, q.String(), unshipped...); err != nil {
			return nil, fmt.Errorf("raise %d alerts: %w", len(unshipped), err)
		}
	}
	return make([]checks.Result, len(js)), nil
}

// benchPureSQL does, in plain SQL with no engine, what the checks do for up
// to benchSQLChunk jobs due in slot: write the alerts of the orders not
// shipped and delete the jobs, in one statement on PostgreSQL (two, in one
// transaction, on SQLite, which has no DELETE in a WITH).
func benchPureSQL(ctx context.Context, db *demoDB, store string, slot time.Time) error {
	if store == "postgres" {
		err := db.exec(ctx, fmt.Sprintf(`
			WITH due AS (SELECT id FROM prescient_jobs WHERE next_check_at = '%s' ORDER BY id LIMIT %d),
			gone AS (DELETE FROM prescient_jobs j USING due WHERE j.id = due.id RETURNING j.entity_key)
			INSERT INTO bench_alerts (order_id, stage)
			SELECT g.entity_key, 'unshipped' FROM gone g JOIN bench_orders o ON o.id = g.entity_key WHERE o.status <> 'shipped'`,
			slot.Format(time.RFC3339Nano), benchSQLChunk))
		if err != nil {
			return fmt.Errorf("bench: pure SQL: %w", err)
		}
		return nil
	}
	due := fmt.Sprintf(`SELECT id, entity_key FROM prescient_jobs WHERE next_check_at = %d ORDER BY id LIMIT %d`, slot.UnixMicro(), benchSQLChunk)
	err := db.inTx(ctx, func(tx any) error {
		t := tx.(*sql.Tx)
		if _, err := t.ExecContext(ctx, `INSERT INTO bench_alerts (order_id, stage)
			SELECT d.entity_key, 'unshipped' FROM (`+due+`) d JOIN bench_orders o ON o.id = d.entity_key WHERE o.status <> 'shipped'`); err != nil {
			return err
		}
		_, err := t.ExecContext(ctx, `DELETE FROM prescient_jobs WHERE id IN (SELECT id FROM (`+due+`))`)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: pure SQL: %w", err)
	}
	return nil
}

// benchHistoryColumns are the columns of a history row, in the order
// benchSQLWithHistory's SELECT lists them.
const benchHistoryColumns = `id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
	check_count, failure_count, runtime_us, lateness_us, last_error, payload, created_at, finished_at, finished_by`

// benchSQLWithHistory is benchPureSQL plus what the engine writes for every
// job whatever its check: the claim locks the jobs (FOR UPDATE, on
// PostgreSQL; SQLite's one writer needs none) and each job leaves a history
// row, "done", as the engine's apply writes it. One statement per up to
// benchSQLChunk jobs on PostgreSQL; three in one transaction on SQLite.
func benchSQLWithHistory(ctx context.Context, db *demoDB, store string, slot time.Time) error {
	if store == "postgres" {
		err := db.exec(ctx, fmt.Sprintf(`
			WITH due AS (SELECT id FROM prescient_jobs WHERE next_check_at = '%[1]s' ORDER BY id LIMIT %[2]d FOR UPDATE),
			gone AS (DELETE FROM prescient_jobs j USING due WHERE j.id = due.id RETURNING j.*),
			alerts AS (INSERT INTO bench_alerts (order_id, stage)
				SELECT g.entity_key, 'unshipped' FROM gone g JOIN bench_orders o ON o.id = g.entity_key WHERE o.status <> 'shipped')
			INSERT INTO prescient_history (%[3]s)
			SELECT id, entity, entity_key, check_name, 'done', first_check_at, '%[1]s', check_count + 1, 0,
				runtime_us, lateness_us, NULL, payload, created_at, now(), 'bench' FROM gone`,
			slot.Format(time.RFC3339Nano), benchSQLChunk, benchHistoryColumns))
		if err != nil {
			return fmt.Errorf("bench: SQL with history: %w", err)
		}
		return nil
	}
	due := fmt.Sprintf(`SELECT id, entity_key FROM prescient_jobs WHERE next_check_at = %d ORDER BY id LIMIT %d`, slot.UnixMicro(), benchSQLChunk)
	err := db.inTx(ctx, func(tx any) error {
		t := tx.(*sql.Tx)
		if _, err := t.ExecContext(ctx, `INSERT INTO bench_alerts (order_id, stage)
			SELECT d.entity_key, 'unshipped' FROM (`+due+`) d JOIN bench_orders o ON o.id = d.entity_key WHERE o.status <> 'shipped'`); err != nil {
			return err
		}
		if _, err := t.ExecContext(ctx, fmt.Sprintf(`INSERT INTO prescient_history (%s)
			SELECT id, entity, entity_key, check_name, 'done', first_check_at, %d, check_count + 1, 0,
				runtime_us, lateness_us, NULL, payload, created_at, %d, 'bench'
			FROM prescient_jobs WHERE id IN (SELECT id FROM (%s))`, benchHistoryColumns, slot.UnixMicro(), time.Now().UnixMicro(), due)); err != nil {
			return err
		}
		_, err := t.ExecContext(ctx, `DELETE FROM prescient_jobs WHERE id IN (SELECT id FROM (`+due+`))`)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: SQL with history: %w", err)
	}
	return nil
}

// benchDueQuery lists the jobs due in every slot the way FireSlot does (pages
// of the engine's batch size, until an empty page) and times it.
func benchDueQuery(ctx context.Context, c *prescient.Client, slotAt []time.Time) (benchDue, error) {
	var d benchDue
	limit := c.Config().BatchSize
	jobs := 0
	start := time.Now()
	for _, slot := range slotAt {
		p := &driver.JobsDueParams{Slot: slot, Limit: limit}
		for {
			due, err := c.Store().Driver().JobsDue(ctx, p)
			if err != nil {
				return d, fmt.Errorf("bench: due query: %w", err)
			}
			d.Queries++
			if len(due) == 0 {
				break
			}
			jobs += len(due)
			p.AfterID = due[len(due)-1].ID
		}
	}
	d.Time = time.Since(start)
	d.PerSlot = d.Time / time.Duration(len(slotAt))
	if jobs > 0 {
		d.PerDueJob = d.Time / time.Duration(jobs)
	}
	return d, nil
}

// countRows counts the rows of table.
func countRows(ctx context.Context, db *demoDB, table string) (int, error) {
	rows, err := db.query(ctx, "SELECT count(*) FROM "+table)
	if err != nil {
		return 0, fmt.Errorf("bench: count %s: %w", table, err)
	}
	defer rows.Close()
	var n int
	if rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, fmt.Errorf("bench: count %s: %w", table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("bench: count %s: %w", table, err)
	}
	return n, nil
}

// percentile returns the nearest-rank p-th percentile of ds (0 < p <= 1).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// printBench writes res as a table for people, or as JSON.
func printBench(out io.Writer, res *benchResult, asJSON bool) error {
	if asJSON {
		return writeJSON(out, res)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("store", "%s (%s)", res.Store, res.Database)
	row("jobs", "%d in %d slots, scheduled %d per call, %d workers", res.Jobs, res.Slots, res.ScheduleBatch, res.Workers)
	row("schedule", "%s  %.0f jobs/s  %s/job  %.0f allocs/job",
		fmtDur(res.Schedule.Time), res.Schedule.JobsPerSec, fmtBytes(res.Schedule.BytesPerJob), res.Schedule.AllocsPerJob)
	row("due query", "%s per slot  %s per due job  (%d queries, %d jobs pending)",
		fmtDur(res.DueQuery.PerSlot), fmtDur(res.DueQuery.PerDueJob), res.DueQuery.Queries, res.Jobs)
	row("fire", "%s  %.0f jobs/s  %s/job  %.0f allocs/job",
		fmtDur(res.Fire.Time), res.Fire.JobsPerSec, fmtBytes(res.Fire.BytesPerJob), res.Fire.AllocsPerJob)
	row("fire batch", "%s  %.0f jobs/s  %s/job  %.0f allocs/job",
		fmtDur(res.FireBatch.Time), res.FireBatch.JobsPerSec, fmtBytes(res.FireBatch.BytesPerJob), res.FireBatch.AllocsPerJob)
	row("pure SQL", "%s  %.0f jobs/s  (one statement per up to %d jobs, no engine, no history)",
		fmtDur(res.PureSQL.Time), res.PureSQL.JobsPerSec, benchSQLChunk)
	if res.PureSQL.JobsPerSec > 0 {
		row("vs pure SQL", "single-job checks %.0f%%, batch checks %.0f%%",
			100*res.Fire.JobsPerSec/res.PureSQL.JobsPerSec, 100*res.FireBatch.JobsPerSec/res.PureSQL.JobsPerSec)
	}
	what := "pure SQL plus a history row per job"
	if res.Store == "postgres" {
		what = "pure SQL plus the claim's row locks and a history row per job"
	}
	row("SQL with history", "%s  %.0f jobs/s  (%s)", fmtDur(res.SQLHistory.Time), res.SQLHistory.JobsPerSec, what)
	if res.SQLHistory.JobsPerSec > 0 {
		row("vs SQL with history", "single-job checks %.0f%%, batch checks %.0f%%",
			100*res.Fire.JobsPerSec/res.SQLHistory.JobsPerSec, 100*res.FireBatch.JobsPerSec/res.SQLHistory.JobsPerSec)
	}
	row("slot fire p50", "%s", fmtDur(res.SlotP50))
	row("slot fire p99", "%s", fmtDur(res.SlotP99))
	row("checked", "%d (done %d, failures %d)", res.Checked, res.Done, res.Failures)
	row("alerts", "%d (batch %d, pure SQL %d)", res.Alerts, res.BatchAlerts, res.SQLAlerts)
	row("history rows", "%d (SQL with history)", res.SQLHistoryRows)
	row("pending after", "%d", res.Pending)
	return tw.Flush()
}

// fmtDur rounds d to at most four significant digits.
func fmtDur(d time.Duration) string {
	unit := time.Duration(1)
	for d/unit >= 10_000 {
		unit *= 10
	}
	return d.Round(unit).String()
}

// fmtBytes writes b bytes for people.
func fmtBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
