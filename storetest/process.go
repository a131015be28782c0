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

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// process runs JobsProcess with decide choosing each job's decision, and
// returns how many jobs were claimed.
func process(t *testing.T, h *Harness, ids []int64, s, now time.Time, server string, decide func(*checks.Job) prescient.Decision) int {
	t.Helper()
	n, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: ids, Slot: s, Now: now, Server: server},
		func(_ context.Context, _ checks.Tx, jobs []*checks.Job) *prescient.ProcessResult {
			res := &prescient.ProcessResult{}
			for _, j := range jobs {
				res.Decisions = append(res.Decisions, decide(j))
			}
			return res
		})
	if err != nil {
		t.Fatalf("process slot %s: %v", s.Format(time.RFC3339), err)
	}
	return n
}

func testProcessNext(t *testing.T, h *Harness) {
	orig := schedule(t, h, "order", "1", "unshipped", slot(1), `{"sku": "x"}`)
	now := slot(1).Add(2*time.Second + 500*time.Microsecond)
	var seen []*checks.Job
	n := process(t, h, []int64{orig.ID}, slot(1), now, "srv-1", func(j *checks.Job) prescient.Decision {
		seen = append(seen, j)
		return prescient.Decision{Next: slot(3), Checked: true, Runtime: 1500 * time.Microsecond}
	})
	if n != 1 || len(seen) != 1 {
		t.Fatalf("claimed %d, fn saw %d jobs; want 1, 1", n, len(seen))
	}
	j := seen[0]
	var d diff
	d.val("ID", j.ID, orig.ID)
	d.val("Entity", j.Entity, "order")
	d.val("Key", j.Key, "1")
	d.val("Check", j.Check, "unshipped")
	d.time("FirstCheckAt", j.FirstCheckAt, slot(1))
	d.time("Slot", j.Slot, slot(1))
	d.time("Now", j.Now, now)
	d.val("CheckCount", j.CheckCount, 0)
	d.val("FailureCount", j.FailureCount, 0)
	d.val("LastError", j.LastError, "")
	d.json("Payload", j.Payload, []byte(`{"sku": "x"}`))
	d.time("CreatedAt", j.CreatedAt, orig.CreatedAt)
	if j.Tx == nil {
		d = append(d, "Tx: nil")
	}
	d.check(t, "job handed to fn")

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
	process(t, h, []int64{orig.ID}, slot(1), slot(1).Add(time.Second), "srv-1", func(*checks.Job) prescient.Decision {
		return prescient.Decision{Next: slot(2), Err: "boom", Runtime: time.Millisecond}
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
	process(t, h, []int64{orig.ID}, slot(2), slot(2).Add(3*time.Second), "srv-1", func(j *checks.Job) prescient.Decision {
		seen = *j
		return prescient.Decision{Next: slot(3), Err: "boom again", Runtime: time.Millisecond}
	})
	if seen.FailureCount != 1 || seen.LastError != "boom" {
		t.Errorf("job handed to fn after a failure: failures %d, last error %q; want 1, %q", seen.FailureCount, seen.LastError, "boom")
	}
	want.NextCheckAt = slot(3)
	want.FailureCount = 2
	want.LastError = "boom again"
	want.Runtime = 2 * time.Millisecond
	want.Lateness = 3 * time.Second
	want.UpdatedAt = slot(2).Add(3 * time.Second)
	jobDiff(get(t, h, "order", "1", "unshipped"), &want).check(t, "job after two failures")

	process(t, h, []int64{orig.ID}, slot(3), slot(3), "srv-1", func(*checks.Job) prescient.Decision {
		return prescient.Decision{Next: slot(5), Checked: true, Runtime: time.Millisecond}
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
	process(t, h, []int64{a.ID, b.ID}, slot(1), slot(1).Add(time.Second), "srv-1", func(*checks.Job) prescient.Decision {
		return prescient.Decision{Next: slot(2), Checked: true, Runtime: time.Millisecond}
	})
	now := slot(2).Add(5 * time.Second)
	process(t, h, []int64{a.ID, b.ID}, slot(2), now, "srv-7", func(j *checks.Job) prescient.Decision {
		d := prescient.Decision{Outcome: history.Done, Next: slot(9), Checked: true, Runtime: 2 * time.Millisecond}
		if j.ID == b.ID {
			d.Outcome, d.Reason = history.GuardMaxChecks, "asked for check 3, more than max_checks 2"
		}
		return d
	})
	wantGone(t, h, "order", "1", "unshipped")
	wantGone(t, h, "order", "2", "unshipped")
	// A reason is recorded as the last error, without counting a failure.
	for _, x := range []struct {
		job     *prescient.Job
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
	process(t, h, []int64{orig.ID}, slot(1), slot(1), "srv-1", func(*checks.Job) prescient.Decision {
		return prescient.Decision{Next: slot(2), Err: "e1", Runtime: time.Millisecond}
	})
	now := slot(2).Add(time.Minute)
	process(t, h, []int64{orig.ID}, slot(2), now, "srv-2", func(*checks.Job) prescient.Decision {
		return prescient.Decision{Outcome: history.Failed, Err: "e2", Runtime: time.Millisecond}
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
	n := process(t, h, []int64{done.ID, rel.ID, next.ID}, slot(1), slot(1).Add(time.Second), "srv-1", func(j *checks.Job) prescient.Decision {
		switch j.ID {
		case next.ID:
			return prescient.Decision{Next: slot(2), Checked: true}
		case done.ID:
			return prescient.Decision{Outcome: history.Done, Checked: true}
		}
		return prescient.Decision{}
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
	due, err := h.Store.JobsDue(t.Context(), &prescient.JobsDueParams{Slot: slot(1), Limit: 10})
	if err != nil || len(due) != 1 || due[0].ID != rel.ID {
		t.Errorf("due after release: %+v, %v; want only job %d", due, err, rel.ID)
	}
}

func testProcessClaimsOnlyDue(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "a", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "b", "unshipped", slot(1), "")
	c := schedule(t, h, "order", "c", "unshipped", slot(2), "")
	var got []int64
	n := process(t, h, []int64{c.ID, b.ID, a.ID, b.ID + c.ID + 1000}, slot(1), slot(1), "srv-1", func(j *checks.Job) prescient.Decision {
		got = append(got, j.ID)
		return prescient.Decision{}
	})
	want := []int64{a.ID, b.ID}
	slices.Sort(want)
	if n != 2 || !slices.Equal(got, want) {
		t.Errorf("claimed %d jobs %v; want 2 jobs %v in id order", n, got, want)
	}
	called := false
	fn := func(context.Context, checks.Tx, []*checks.Job) *prescient.ProcessResult {
		called = true
		return &prescient.ProcessResult{}
	}
	for _, ids := range [][]int64{nil, {c.ID}} {
		n, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: ids, Slot: slot(1), Now: slot(1), Server: "srv-1"}, fn)
		if err != nil || n != 0 || called {
			t.Errorf("process %v in slot 1: claimed %d, err %v, fn called %v; want 0, nil, false", ids, n, err, called)
		}
	}
}

func testProcessBadResult(t *testing.T, h *Harness) {
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	k := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	for name, res := range map[string]*prescient.ProcessResult{
		"nil result":      nil,
		"one decision":    {Decisions: []prescient.Decision{{Outcome: history.Done}}},
		"unknown outcome": {Decisions: []prescient.Decision{{Outcome: history.Done}, {Outcome: "vanished"}}},
	} {
		_, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: []int64{j.ID, k.ID}, Slot: slot(1), Now: slot(1), Server: "srv-1"},
			func(context.Context, checks.Tx, []*checks.Job) *prescient.ProcessResult { return res })
		if err == nil {
			t.Errorf("%s for two jobs: no error", name)
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

// writeEffects processes jobs with each check writing its effect through the
// transaction, then deciding d.
func writeEffects(t *testing.T, h *Harness, ids []int64, s time.Time, discard bool, d prescient.Decision) {
	t.Helper()
	n, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: ids, Slot: s, Now: s, Server: "srv-1"},
		func(ctx context.Context, tx checks.Tx, jobs []*checks.Job) *prescient.ProcessResult {
			res := &prescient.ProcessResult{Discard: discard}
			for _, j := range jobs {
				if _, err := j.Tx.Exec(ctx, `INSERT INTO effects (job_id, note) VALUES ($1, $2)`, j.ID, j.IdempotencyKey()); err != nil {
					t.Errorf("write effect of job %d: %v", j.ID, err)
				}
				res.Decisions = append(res.Decisions, d)
			}
			return res
		})
	if err != nil || n != len(ids) {
		t.Fatalf("process: claimed %d, err %v; want %d, nil", n, err, len(ids))
	}
}

func testProcessWritesCommit(t *testing.T, h *Harness) {
	effectsTable(t, h)
	a := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	writeEffects(t, h, []int64{a.ID, b.ID}, slot(1), false, prescient.Decision{Outcome: history.Done, Checked: true})
	if n := effects(t, h); n != 2 {
		t.Errorf("effects after a kept batch: %d, want 2", n)
	}
	wantGone(t, h, "order", "1", "unshipped")
	wantGone(t, h, "order", "2", "unshipped")
}

func testProcessDiscard(t *testing.T, h *Harness) {
	effectsTable(t, h)
	a := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "2", "unshipped", slot(1), "")
	writeEffects(t, h, []int64{a.ID, b.ID}, slot(1), true, prescient.Decision{Next: slot(4), Err: "batch failed"})
	if n := effects(t, h); n != 0 {
		t.Errorf("effects after a discarded batch: %d, want 0", n)
	}
	for _, j := range []*prescient.Job{a, b} {
		got := get(t, h, j.Entity, j.Key, j.Check)
		if !got.NextCheckAt.Equal(slot(4)) || got.FailureCount != 1 || got.LastError != "batch failed" {
			t.Errorf("job %s after a discarded batch: at %v, %d failures, last error %q; want %v, 1, %q",
				j.Key, got.NextCheckAt, got.FailureCount, got.LastError, slot(4), "batch failed")
		}
	}
	// The retry, kept this time, writes again with the same idempotency key.
	writeEffects(t, h, []int64{a.ID, b.ID}, slot(4), false, prescient.Decision{Outcome: history.Done, Checked: true})
	if n := effects(t, h); n != 2 {
		t.Errorf("effects after the kept retry: %d, want 2", n)
	}
}

func testProcessTxReads(t *testing.T, h *Harness) {
	effectsTable(t, h)
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	_, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: []int64{j.ID}, Slot: slot(1), Now: slot(1), Server: "srv-1"},
		func(ctx context.Context, tx checks.Tx, jobs []*checks.Job) *prescient.ProcessResult {
			var note string
			err := tx.QueryRow(ctx, `SELECT note FROM effects WHERE job_id = $1`, 1).Scan(&note)
			if !errors.Is(err, prescient.ErrNotFound) {
				t.Errorf("QueryRow with no row: Scan = %v, want ErrNotFound", err)
			}
			for i := 1; i <= 3; i++ {
				if n, err := tx.Exec(ctx, `INSERT INTO effects (job_id, note) VALUES ($1, $2)`, i, fmt.Sprint("n", i)); err != nil || n != 1 {
					t.Errorf("insert %d: %d rows, %v; want 1, nil", i, n, err)
				}
			}
			if err := tx.QueryRow(ctx, `SELECT note FROM effects WHERE job_id = $1`, 2).Scan(&note); err != nil || note != "n2" {
				t.Errorf("QueryRow of a written row: %q, %v; want n2, nil", note, err)
			}
			rows, err := tx.Query(ctx, `SELECT job_id, note FROM effects ORDER BY job_id`)
			if err != nil {
				t.Errorf("Query: %v", err)
			} else {
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
			}
			if n, err := tx.Exec(ctx, `UPDATE effects SET note = 'x' WHERE job_id >= $1`, 2); err != nil || n != 2 {
				t.Errorf("update: %d rows, %v; want 2, nil", n, err)
			}
			if tx.Driver() == nil {
				t.Errorf("Driver() = nil")
			}
			if _, err := tx.Exec(ctx, `INSERT INTO no_such_table VALUES (1)`); err == nil {
				t.Errorf("insert into a missing table: no error")
			}
			return &prescient.ProcessResult{Decisions: make([]prescient.Decision, len(jobs)), Discard: true}
		})
	if err != nil {
		t.Fatalf("process: %v", err)
	}
	if n := effects(t, h); n != 0 {
		t.Errorf("effects after discard: %d, want 0", n)
	}
}

func testProcessTxConcurrentUse(t *testing.T, h *Harness) {
	effectsTable(t, h)
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	const workers = 16
	_, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: []int64{j.ID}, Slot: slot(1), Now: slot(1), Server: "srv-1"},
		func(ctx context.Context, tx checks.Tx, jobs []*checks.Job) *prescient.ProcessResult {
			var wg sync.WaitGroup
			errs := make(chan error, 2*workers)
			for i := range workers {
				wg.Go(func() {
					if _, err := tx.Exec(ctx, `INSERT INTO effects (job_id, note) VALUES ($1, 'w')`, i); err != nil {
						errs <- err
					}
					var n int64
					if err := tx.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("concurrent use of the check transaction: %v", err)
			}
			return &prescient.ProcessResult{Decisions: []prescient.Decision{{Outcome: history.Done, Checked: true}}}
		})
	if err != nil {
		t.Fatalf("process: %v", err)
	}
	if n := effects(t, h); n != workers {
		t.Errorf("effects: %d, want %d", n, workers)
	}
}

func testProcessTxAfterReturn(t *testing.T, h *Harness) {
	effectsTable(t, h)
	j := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	var kept checks.Tx
	_, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{IDs: []int64{j.ID}, Slot: slot(1), Now: slot(1), Server: "srv-1"},
		func(_ context.Context, tx checks.Tx, jobs []*checks.Job) *prescient.ProcessResult {
			kept = jobs[0].Tx
			return &prescient.ProcessResult{Decisions: []prescient.Decision{{Next: slot(2), Checked: true}}}
		})
	if err != nil {
		t.Fatalf("process: %v", err)
	}
	if _, err := kept.Exec(t.Context(), `INSERT INTO effects (job_id, note) VALUES (1, 'late')`); err == nil {
		t.Errorf("Exec after the checks returned: no error")
	}
	var n int64
	if err := kept.QueryRow(t.Context(), `SELECT count(*) FROM effects`).Scan(&n); err == nil {
		t.Errorf("QueryRow after the checks returned: no error")
	}
	if n := effects(t, h); n != 0 {
		t.Errorf("effects: %d, want 0", n)
	}
	if got := get(t, h, "order", "1", "unshipped"); !got.NextCheckAt.Equal(slot(2)) {
		t.Errorf("job at %v, want %v", got.NextCheckAt, slot(2))
	}
}

func testProcessConcurrentClaimers(t *testing.T, h *Harness) {
	const jobs, claimers = 300, 6
	var params []*prescient.JobScheduleParams
	for i := range jobs {
		params = append(params, &prescient.JobScheduleParams{
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
				n, err := h.Store.JobsProcess(t.Context(), &prescient.JobsProcessParams{
					IDs: batch, Slot: slot(1), Now: slot(1), Server: fmt.Sprint("srv-", c),
				}, func(_ context.Context, _ checks.Tx, js []*checks.Job) *prescient.ProcessResult {
					r := &prescient.ProcessResult{}
					mu.Lock()
					for _, j := range js {
						seen[j.ID]++
						d := prescient.Decision{Outcome: history.Done, Checked: true}
						if j.ID%2 == 1 {
							d = prescient.Decision{Next: slot(5), Checked: true}
						}
						r.Decisions = append(r.Decisions, d)
					}
					mu.Unlock()
					return r
				})
				if err != nil {
					t.Errorf("claimer %d: %v", c, err)
					return
				}
				mu.Lock()
				claimed += n
				mu.Unlock()
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
	st, err := h.Store.JobStats(t.Context(), &prescient.JobStatsParams{Current: slot(1), Upcoming: 10})
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
