package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// begin starts a processing transaction, failing the test on error; the
// transaction is rolled back when the test ends if nothing ended it.
func beginProcess(t *testing.T, h *Harness) driver.Tx {
	t.Helper()
	tx, err := h.Store.Begin(t.Context(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// claim claims ids in slot s, failing the test on error.
func claim(t *testing.T, tx driver.Tx, ids []int64, s time.Time) []*checks.Job {
	t.Helper()
	jobs, err := tx.Claim(t.Context(), &driver.ClaimParams{IDs: ids, Slot: s})
	if err != nil {
		t.Fatalf("claim %v in %s: %v", ids, s.Format(time.RFC3339), err)
	}
	return jobs
}

// finish applies ds in tx as of now and commits, failing the test on error.
func finish(t *testing.T, tx driver.Tx, s, now time.Time, server string, ds []driver.Decision) {
	t.Helper()
	if err := tx.Apply(t.Context(), &driver.ApplyParams{Slot: s, Now: now, Server: server, Decisions: ds}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// process claims ids in slot s, decides each claimed job with decide (a
// zero decision leaves it out: released), applies the decisions as of now
// with the lateness now-s, commits, and returns how many jobs were claimed.
func process(t *testing.T, h *Harness, ids []int64, s, now time.Time, server string, decide func(*checks.Job) driver.Decision) int {
	t.Helper()
	tx := beginProcess(t, h)
	jobs := claim(t, tx, ids, s)
	var ds []driver.Decision
	for _, j := range jobs {
		d := decide(j)
		if d.Released() {
			continue
		}
		d.ID, d.Lateness = j.ID, now.Sub(s)
		ds = append(ds, d)
	}
	finish(t, tx, s, now, server, ds)
	return len(jobs)
}

func testProcessNext(t *testing.T, h *Harness) {
	orig := schedule(t, h, "order", "1", "unshipped", slot(1), `{"sku": "x"}`)
	now := slot(1).Add(2*time.Second + 500*time.Microsecond)
	var seen []*checks.Job
	n := process(t, h, []int64{orig.ID}, slot(1), now, "srv-1", func(j *checks.Job) driver.Decision {
		seen = append(seen, j)
		return driver.Decision{Next: slot(3), Checked: true, Runtime: 1500 * time.Microsecond}
	})
	if n != 1 || len(seen) != 1 {
		t.Fatalf("claimed %d, decided %d jobs; want 1, 1", n, len(seen))
	}
	j := seen[0]
	var d diff
	d.val("ID", j.ID, orig.ID)
	d.val("Entity", j.Entity, "order")
	d.val("Key", j.Key, "1")
	d.val("Check", j.Check, "unshipped")
	d.time("FirstCheckAt", j.FirstCheckAt, slot(1))
	d.time("Slot", j.Slot, slot(1))
	d.val("CheckCount", j.CheckCount, 0)
	d.val("FailureCount", j.FailureCount, 0)
	d.val("LastError", j.LastError, "")
	d.json("Payload", j.Payload, []byte(`{"sku": "x"}`))
	d.time("CreatedAt", j.CreatedAt, orig.CreatedAt)
	d.check(t, "claimed job")

	want := *orig
	want.NextCheckAt = slot(3)
	want.LastCheckAt = slot(1)
	want.CheckCount = 1
	want.Runtime = 1500 * time.Microsecond
	want.Lateness = 2*time.Second + 500*time.Microsecond
	want.UpdatedAt = now
	jobDiff(get(t, h, "order", "1", "unshipped"), &want).check(t, "job after a check")
	if recs := historyOf(t, h, "order", "1"); len(recs) != 0 {
		t.Errorf("history of a job still pending: %d records, want 0", len(recs))
	}
}

func testProcessFailureThenSuccess(t *testing.T, h *Harness) {
	orig := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	process(t, h, []int64{orig.ID}, slot(1), slot(1).Add(time.Second), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Next: slot(2), Err: "boom", Runtime: time.Millisecond}
	})
	want := *orig
	want.NextCheckAt = slot(2)
	want.FailureCount = 1
	want.LastError = "boom"
	want.Runtime = time.Millisecond
	want.Lateness = time.Second
	want.UpdatedAt = slot(1).Add(time.Second)
	jobDiff(get(t, h, "order", "1", "unshipped"), &want).check(t, "job after a failure")

	var seen checks.Job
	process(t, h, []int64{orig.ID}, slot(2), slot(2).Add(3*time.Second), "srv-1", func(j *checks.Job) driver.Decision {
		seen = *j
		return driver.Decision{Next: slot(3), Err: "boom again", Runtime: time.Millisecond}
	})
	if seen.FailureCount != 1 || seen.LastError != "boom" {
		t.Errorf("job claimed after a failure: failures %d, last error %q; want 1, %q", seen.FailureCount, seen.LastError, "boom")
	}
	want.NextCheckAt = slot(3)
	want.FailureCount = 2
	want.LastError = "boom again"
	want.Runtime = 2 * time.Millisecond
	want.Lateness = 3 * time.Second
	want.UpdatedAt = slot(2).Add(3 * time.Second)
	jobDiff(get(t, h, "order", "1", "unshipped"), &want).check(t, "job after two failures")

	process(t, h, []int64{orig.ID}, slot(3), slot(3), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Next: slot(5), Checked: true, Runtime: time.Millisecond}
	})
	want.NextCheckAt = slot(5)
	want.LastCheckAt = slot(3)
	want.CheckCount = 1
	want.FailureCount = 0
	want.LastError = ""
	want.Runtime = 3 * time.Millisecond
	want.Lateness = 0
	want.UpdatedAt = slot(3)
	jobDiff(get(t, h, "order", "1", "unshipped"), &want).check(t, "job after a success")
}

func testProcessOutcomeChecked(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "1", "unshipped", slot(1), `{"a": 1}`)
	b := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	process(t, h, []int64{a.ID, b.ID}, slot(1), slot(1).Add(time.Second), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Next: slot(2), Checked: true, Runtime: time.Millisecond}
	})
	now := slot(2).Add(5 * time.Second)
	process(t, h, []int64{a.ID, b.ID}, slot(2), now, "srv-7", func(j *checks.Job) driver.Decision {
		d := driver.Decision{Outcome: history.Done, Next: slot(9), Checked: true, Runtime: 2 * time.Millisecond}
		if j.ID == b.ID {
			d.Outcome, d.Reason = history.GuardMaxChecks, "asked for check 3, more than max_checks 2"
		}
		return d
	})
	wantGone(t, h, "order", "1", "unshipped")
	wantGone(t, h, "order", "2", "unshipped")
	// A reason is recorded as the last error, without counting a failure.
	for _, x := range []struct {
		job     *driver.Job
		outcome history.Outcome
		reason  string
	}{{a, history.Done, ""}, {b, history.GuardMaxChecks, "asked for check 3, more than max_checks 2"}} {
		recs := historyOf(t, h, "order", x.job.Key)
		if len(recs) != 1 {
			t.Fatalf("history of %s: %d records, want 1", x.job.Key, len(recs))
		}
		want := *x.job
		want.LastCheckAt = slot(2)
		want.CheckCount = 2
		want.Runtime = 3 * time.Millisecond
		want.Lateness = 5 * time.Second
		want.LastError = x.reason
		recordDiff(recs[0], &want, x.outcome, now, "srv-7").check(t, "record of "+x.job.Key)
	}
}

func testProcessOutcomeFailed(t *testing.T, h *Harness) {
	orig := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	process(t, h, []int64{orig.ID}, slot(1), slot(1), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Next: slot(2), Err: "e1", Runtime: time.Millisecond}
	})
	now := slot(2).Add(time.Minute)
	process(t, h, []int64{orig.ID}, slot(2), now, "srv-2", func(*checks.Job) driver.Decision {
		return driver.Decision{Outcome: history.Failed, Err: "e2", Runtime: time.Millisecond}
	})
	wantGone(t, h, "order", "1", "unshipped")
	recs := historyOf(t, h, "order", "1")
	if len(recs) != 1 {
		t.Fatalf("history: %d records, want 1", len(recs))
	}
	want := *orig
	want.FailureCount = 2
	want.LastError = "e2"
	want.Runtime = 2 * time.Millisecond
	want.Lateness = time.Minute
	recordDiff(recs[0], &want, history.Failed, now, "srv-2").check(t, "failed record")
}

func testProcessReleased(t *testing.T, h *Harness) {
	rel := schedule(t, h, "order", "1", "unknown_check", slot(1), `{"k": true}`)
	next := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	done := schedule(t, h, "order", "3", "unshipped", slot(1), "")
	n := process(t, h, []int64{done.ID, rel.ID, next.ID}, slot(1), slot(1).Add(time.Second), "srv-1", func(j *checks.Job) driver.Decision {
		switch j.ID {
		case next.ID:
			return driver.Decision{Next: slot(2), Checked: true}
		case done.ID:
			return driver.Decision{Outcome: history.Done, Checked: true}
		}
		return driver.Decision{}
	})
	if n != 3 {
		t.Errorf("claimed %d, want 3", n)
	}
	jobDiff(get(t, h, "order", "1", "unknown_check"), rel).check(t, "released job")
	if got := get(t, h, "order", "2", "unshipped"); !got.NextCheckAt.Equal(slot(2)) || got.CheckCount != 1 {
		t.Errorf("job with a next check: at %v with %d checks, want %v with 1", got.NextCheckAt, got.CheckCount, slot(2))
	}
	wantGone(t, h, "order", "3", "unshipped")
	// Released, it is still due in its slot for a server that knows it.
	due, err := h.Store.JobsDue(t.Context(), &driver.JobsDueParams{Slot: slot(1), Limit: 10})
	if err != nil || len(due) != 1 || due[0].ID != rel.ID {
		t.Errorf("due after release: %+v, %v; want only job %d", due, err, rel.ID)
	}
}

func testProcessClaimsOnlyDue(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "a", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "b", "unshipped", slot(1), "")
	c := schedule(t, h, "order", "c", "unshipped", slot(2), "")
	var got []int64
	n := process(t, h, []int64{c.ID, b.ID, a.ID, b.ID + c.ID + 1000}, slot(1), slot(1), "srv-1", func(j *checks.Job) driver.Decision {
		got = append(got, j.ID)
		return driver.Decision{}
	})
	want := []int64{a.ID, b.ID}
	slices.Sort(want)
	if n != 2 || !slices.Equal(got, want) {
		t.Errorf("claimed %d jobs %v; want 2 jobs %v in id order", n, got, want)
	}
	for _, ids := range [][]int64{nil, {c.ID}} {
		tx := beginProcess(t, h)
		if jobs := claim(t, tx, ids, slot(1)); len(jobs) != 0 {
			t.Errorf("claim %v in slot 1: %d jobs, want none", ids, len(jobs))
		}
		if err := tx.Rollback(t.Context()); err != nil {
			t.Errorf("rollback: %v", err)
		}
	}
}

func testProcessBadDecisions(t *testing.T, h *Harness) {
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	k := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	for name, ds := range map[string][]driver.Decision{
		"released":        {{ID: j.ID, Outcome: history.Done, Checked: true}, {ID: k.ID}},
		"unknown outcome": {{ID: j.ID, Outcome: history.Done}, {ID: k.ID, Outcome: "vanished"}},
		"twice":           {{ID: j.ID, Outcome: history.Done}, {ID: j.ID, Next: slot(2)}},
	} {
		tx := beginProcess(t, h)
		claim(t, tx, []int64{j.ID, k.ID}, slot(1))
		if err := tx.Apply(t.Context(), &driver.ApplyParams{Slot: slot(1), Now: slot(1), Server: "srv-1", Decisions: ds}); err == nil {
			t.Errorf("%s: apply: no error", name)
		}
		// Nothing of a refused apply is written, even if the caller commits.
		if err := tx.Commit(t.Context()); err != nil {
			t.Errorf("%s: commit after a refused apply: %v", name, err)
		}
		jobDiff(get(t, h, "order", "1", "unshipped"), j).check(t, name+": first job")
		jobDiff(get(t, h, "order", "2", "unshipped"), k).check(t, name+": second job")
	}
}

// effectsTable creates the user table checks write their effects to.
func effectsTable(t *testing.T, h *Harness) {
	t.Helper()
	if err := h.Exec(t.Context(), `CREATE TABLE effects (job_id bigint PRIMARY KEY, note text NOT NULL)`); err != nil {
		t.Fatalf("create effects table: %v", err)
	}
}

// effects counts the rows of the effects table.
func effects(t *testing.T, h *Harness) int64 {
	t.Helper()
	n, err := h.QueryInt(t.Context(), `SELECT count(*) FROM effects`)
	if err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return n
}

// writeEffect runs one check of job j in its own savepoint of tx: it writes
// the job's effect, then keeps or undoes it.
func writeEffect(t *testing.T, tx driver.Tx, j *checks.Job, keep bool) {
	t.Helper()
	ctx := t.Context()
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatalf("savepoint: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (job_id, note) VALUES ($1, $2)`, j.ID, j.IdempotencyKey()); err != nil {
		t.Fatalf("write effect of job %d: %v", j.ID, err)
	}
	end := tx.Release
	if !keep {
		end = tx.RollbackTo
	}
	if err := end(ctx); err != nil {
		t.Fatalf("end savepoint: %v", err)
	}
}

func testProcessWritesCommit(t *testing.T, h *Harness) {
	effectsTable(t, h)
	a := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	tx := beginProcess(t, h)
	var ds []driver.Decision
	for _, j := range claim(t, tx, []int64{a.ID, b.ID}, slot(1)) {
		writeEffect(t, tx, j, true)
		ds = append(ds, driver.Decision{ID: j.ID, Outcome: history.Done, Checked: true})
	}
	finish(t, tx, slot(1), slot(1), "srv-1", ds)
	if n := effects(t, h); n != 2 {
		t.Errorf("effects after two kept checks: %d, want 2", n)
	}
	wantGone(t, h, "order", "1", "unshipped")
	wantGone(t, h, "order", "2", "unshipped")
}

// testProcessSavepoints runs three checks in one transaction: the first and
// third keep their writes, the second writes, fails a statement and is
// rolled back. Only its effect is missing, and its failure is recorded.
func testProcessSavepoints(t *testing.T, h *Harness) {
	effectsTable(t, h)
	var ids []int64
	for _, k := range []string{"1", "2", "3"} {
		ids = append(ids, schedule(t, h, "order", k, "unshipped", slot(1), "").ID)
	}
	tx := beginProcess(t, h)
	jobs := claim(t, tx, ids, slot(1))
	if len(jobs) != 3 {
		t.Fatalf("claimed %d, want 3", len(jobs))
	}
	ctx := t.Context()
	writeEffect(t, tx, jobs[0], true)
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO effects (job_id, note) VALUES ($1, 'failed')`, jobs[1].ID); err != nil {
		t.Fatalf("write effect: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`); err == nil {
		t.Fatal("insert into a missing table: no error")
	}
	if err := tx.RollbackTo(ctx); err != nil {
		t.Fatalf("rollback to savepoint: %v", err)
	}
	// The savepoint's rollback revives the transaction for the next check.
	writeEffect(t, tx, jobs[2], true)
	if err := tx.Err(); err != nil {
		t.Fatalf("Err after a rolled back check: %v", err)
	}
	finish(t, tx, slot(1), slot(1), "srv-1", []driver.Decision{
		{ID: jobs[0].ID, Outcome: history.Done, Checked: true},
		{ID: jobs[1].ID, Next: slot(4), Err: "no such table"},
		{ID: jobs[2].ID, Outcome: history.Done, Checked: true},
	})
	n, err := h.QueryInt(ctx, `SELECT count(*) FROM effects WHERE job_id IN ($1, $2)`, jobs[0].ID, jobs[2].ID)
	if err != nil || n != 2 || effects(t, h) != 2 {
		t.Errorf("effects: %d of the kept checks (%v), %d in all; want 2, 2", n, err, effects(t, h))
	}
	if got := get(t, h, "order", "2", "unshipped"); !got.NextCheckAt.Equal(slot(4)) || got.FailureCount != 1 {
		t.Errorf("rolled back check's job: at %v with %d failures; want %v with 1", got.NextCheckAt, got.FailureCount, slot(4))
	}
}

func testProcessDiscardThenRetry(t *testing.T, h *Harness) {
	effectsTable(t, h)
	a := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	run := func(s time.Time, keep bool, d driver.Decision) {
		t.Helper()
		tx := beginProcess(t, h)
		var ds []driver.Decision
		for _, j := range claim(t, tx, []int64{a.ID, b.ID}, s) {
			writeEffect(t, tx, j, keep)
			d.ID = j.ID
			ds = append(ds, d)
		}
		if len(ds) != 2 {
			t.Fatalf("claimed %d in %s, want 2", len(ds), s.Format(time.RFC3339))
		}
		finish(t, tx, s, s, "srv-1", ds)
	}
	run(slot(1), false, driver.Decision{Next: slot(4), Err: "batch failed"})
	if n := effects(t, h); n != 0 {
		t.Errorf("effects after undone checks: %d, want 0", n)
	}
	for _, j := range []*driver.Job{a, b} {
		got := get(t, h, j.Entity, j.Key, j.Check)
		if !got.NextCheckAt.Equal(slot(4)) || got.FailureCount != 1 || got.LastError != "batch failed" {
			t.Errorf("job %s after undone checks: at %v, %d failures, last error %q; want %v, 1, %q",
				j.Key, got.NextCheckAt, got.FailureCount, got.LastError, slot(4), "batch failed")
		}
	}
	// The retry, kept this time, writes again with the same idempotency key.
	run(slot(4), true, driver.Decision{Outcome: history.Done, Checked: true})
	if n := effects(t, h); n != 2 {
		t.Errorf("effects after the kept retry: %d, want 2", n)
	}
}

// testProcessEmptySavepoints: savepoints around checks that run no
// statement cost nothing and change nothing, whatever ends them.
func testProcessEmptySavepoints(t *testing.T, h *Harness) {
	effectsTable(t, h)
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	tx := beginProcess(t, h)
	jobs := claim(t, tx, []int64{j.ID}, slot(1))
	ctx := t.Context()
	for _, end := range []func(context.Context) error{tx.Release, tx.RollbackTo, tx.Release} {
		if err := tx.Savepoint(ctx); err != nil {
			t.Fatal(err)
		}
		if err := end(ctx); err != nil {
			t.Fatalf("end an empty savepoint: %v", err)
		}
	}
	writeEffect(t, tx, jobs[0], true)
	if err := tx.Savepoint(ctx); err == nil {
		if err := tx.Savepoint(ctx); err == nil {
			t.Error("a savepoint inside an open one: no error (savepoints do not nest)")
		}
		_ = tx.Release(ctx)
	}
	finish(t, tx, slot(1), slot(1), "srv-1", []driver.Decision{{ID: j.ID, Outcome: history.Done, Checked: true}})
	if n := effects(t, h); n != 1 {
		t.Errorf("effects: %d, want 1", n)
	}
}

func testProcessTxReads(t *testing.T, h *Harness) {
	effectsTable(t, h)
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	tx := beginProcess(t, h)
	claim(t, tx, []int64{j.ID}, slot(1))
	ctx := t.Context()
	if err := tx.Savepoint(ctx); err != nil {
		t.Fatal(err)
	}
	var note string
	row := tx.QueryRow(ctx, `SELECT note FROM effects WHERE job_id = $1`, 1)
	if err := row.Scan(&note); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("QueryRow with no row: Scan = %v, want ErrNotFound", err)
	}
	row.Close()
	for i := 1; i <= 3; i++ {
		if n, err := tx.Exec(ctx, `INSERT INTO effects (job_id, note) VALUES ($1, $2)`, i, fmt.Sprint("n", i)); err != nil || n != 1 {
			t.Errorf("insert %d: %d rows, %v; want 1, nil", i, n, err)
		}
	}
	row = tx.QueryRow(ctx, `SELECT note FROM effects WHERE job_id = $1`, 2)
	if err := row.Scan(&note); err != nil || note != "n2" {
		t.Errorf("QueryRow of a written row: %q, %v; want n2, nil", note, err)
	}
	row.Close()
	rows, err := tx.Query(ctx, `SELECT job_id, note FROM effects ORDER BY job_id`)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, &note); err != nil {
			t.Errorf("Scan: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Errorf("rows: %v", err)
	}
	rows.Close()
	if !slices.Equal(ids, []int64{1, 2, 3}) {
		t.Errorf("Query read ids %v, want [1 2 3]", ids)
	}
	if n, err := tx.Exec(ctx, `UPDATE effects SET note = 'x' WHERE job_id >= $1`, 2); err != nil || n != 2 {
		t.Errorf("update: %d rows, %v; want 2, nil", n, err)
	}
	if tx.Raw() == nil {
		t.Errorf("Raw() = nil")
	}
	if err := tx.RollbackTo(ctx); err != nil {
		t.Fatalf("rollback to savepoint: %v", err)
	}
	finish(t, tx, slot(1), slot(1), "srv-1", []driver.Decision{{ID: j.ID, Next: slot(2), Err: "undone"}})
	if n := effects(t, h); n != 0 {
		t.Errorf("effects after rollback to the savepoint: %d, want 0", n)
	}
}

func testProcessConcurrentClaimers(t *testing.T, h *Harness) {
	const jobs, claimers = 300, 6
	var params []*driver.JobScheduleParams
	for i := range jobs {
		params = append(params, &driver.JobScheduleParams{
			Entity: "order", Key: fmt.Sprint(i), Check: "unshipped", At: slot(1), Now: at(0),
			Payload: json.RawMessage(`{}`),
		})
	}
	res, err := h.Store.JobSchedule(t.Context(), nil, params)
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}

	var (
		mu      sync.Mutex
		seen    = make(map[int64]int)
		claimed int
		wg      sync.WaitGroup
	)
	for c := range claimers {
		wg.Go(func() {
			// Each claimer walks the ids from a different starting point, so
			// that they collide in the middle of their batches.
			order := append(slices.Clone(ids[c*jobs/claimers:]), ids[:c*jobs/claimers]...)
			for len(order) > 0 {
				batch := order[:min(50, len(order))]
				order = order[len(batch):]
				if err := claimAndDecide(t.Context(), h, batch, fmt.Sprint("srv-", c), func(js []*checks.Job) {
					mu.Lock()
					defer mu.Unlock()
					for _, j := range js {
						seen[j.ID]++
					}
					claimed += len(js)
				}); err != nil {
					t.Errorf("claimer %d: %v", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if claimed != jobs {
		t.Errorf("claimed %d jobs in all, want %d", claimed, jobs)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("job %d processed %d times, want once", id, seen[id])
		}
	}
	counts, err := h.Store.HistoryCounts(t.Context(), time.Time{})
	if err != nil {
		t.Fatalf("history counts: %v", err)
	}
	st, err := h.Store.JobStats(t.Context(), &driver.JobStatsParams{Current: slot(1), Upcoming: 10})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	var odd int
	for _, id := range ids {
		odd += int(id % 2)
	}
	if counts[history.Done] != jobs-odd || st.Pending != odd {
		t.Errorf("after processing: %d done, %d pending; want %d, %d", counts[history.Done], st.Pending, jobs-odd, odd)
	}
	if len(st.Upcoming) != min(odd, 1) || (odd > 0 && !st.Upcoming[0].Slot.Equal(slot(5))) {
		t.Errorf("upcoming after processing: %v, want %d jobs in %v", st.Upcoming, odd, slot(5))
	}
}

// claimAndDecide is one claimer of testProcessConcurrentClaimers: it claims
// ids in slot 1, reports what it got, finishes the even ids and moves the odd
// ones to slot 5.
func claimAndDecide(ctx context.Context, h *Harness, ids []int64, server string, got func([]*checks.Job)) error {
	tx, err := h.Store.Begin(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	js, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slot(1)})
	if err != nil {
		return err
	}
	got(js)
	var ds []driver.Decision
	for _, j := range js {
		d := driver.Decision{ID: j.ID, Outcome: history.Done, Checked: true}
		if j.ID%2 == 1 {
			d = driver.Decision{ID: j.ID, Next: slot(5), Checked: true}
		}
		ds = append(ds, d)
	}
	if err := tx.Apply(ctx, &driver.ApplyParams{Slot: slot(1), Now: slot(1), Server: server, Decisions: ds}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
