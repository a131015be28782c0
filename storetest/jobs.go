package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

func testMigrateTwice(t *testing.T, h *Harness) {
	want := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	for i := range 2 {
		if err := h.Store.Migrate(t.Context()); err != nil {
			t.Fatalf("migrate again (%d): %v", i+1, err)
		}
	}
	jobDiff(get(t, h, "order", "1", "unshipped"), want).check(t, "job after migrating again")
}

func testGridSave(t *testing.T, h *Harness) {
	for _, g := range []slots.Grid{
		{Resolution: 15 * time.Minute},
		{Resolution: time.Minute, Offset: 30 * time.Second, Cycle: time.Hour},
	} {
		if err := h.Store.GridSave(t.Context(), g); err != nil {
			t.Errorf("GridSave(%v): %v", g, err)
		}
	}
	if err := h.Store.GridSave(t.Context(), slots.Grid{Resolution: time.Minute, Offset: time.Minute}); err == nil {
		t.Errorf("GridSave of an offset equal to the resolution: no error")
	}
}

func testScheduleInsert(t *testing.T, h *Harness) {
	now := at(-90 * time.Minute)
	res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{
		Entity: "order", Key: "42", Check: "unshipped", At: slot(2),
		Payload: json.RawMessage(`{"sku": "a-1", "qty": 3}`), Now: now,
	}})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if len(res) != 1 || !res[0].Inserted {
		t.Fatalf("schedule: got %+v, want one inserted result", res)
	}
	got := res[0].Job
	if got.ID <= 0 {
		t.Errorf("ID = %d, want > 0", got.ID)
	}
	want := &driver.Job{
		ID: got.ID, Entity: "order", Key: "42", Check: "unshipped",
		FirstCheckAt: slot(2), NextCheckAt: slot(2),
		Payload:   json.RawMessage(`{"qty": 3, "sku": "a-1"}`),
		CreatedAt: now, UpdatedAt: now,
	}
	jobDiff(got, want).check(t, "scheduled job")
	jobDiff(get(t, h, "order", "42", "unshipped"), want).check(t, "JobGet")
	_, err = h.Store.JobGet(t.Context(), "order", "42", "other")
	if !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("JobGet of a check never scheduled: %v, want ErrNotFound", err)
	}
}

// runOnce processes the job due in s with one decision, failing the test
// unless exactly that job was claimed.
func runOnce(t *testing.T, h *Harness, j *driver.Job, s, now time.Time, d driver.Decision) {
	t.Helper()
	if n := process(t, h, []int64{j.ID}, s, now, "srv-1", func(*checks.Job) driver.Decision { return d }); n != 1 {
		t.Fatalf("process job %d in %s: claimed %d, want 1", j.ID, s.Format(time.RFC3339), n)
	}
}

func testScheduleReplace(t *testing.T, h *Harness) {
	orig := schedule(t, h, "order", "7", "unshipped", slot(1), `{"v": 1}`)
	runOnce(t, h, orig, slot(1), at(15*time.Minute+time.Second), driver.Decision{Next: slot(2), Checked: true})
	runOnce(t, h, orig, slot(2), at(30*time.Minute+time.Second), driver.Decision{Next: slot(3), Err: "boom"})
	before := get(t, h, "order", "7", "unshipped")
	if before.FailureCount != 1 || before.CheckCount != 1 {
		t.Fatalf("before replacing: check count %d, failure count %d; want 1, 1", before.CheckCount, before.FailureCount)
	}

	now := at(2 * time.Hour)
	res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{
		Entity: "order", Key: "7", Check: "unshipped", At: slot(9), Now: now,
		OnConflict: driver.ConflictReplace,
	}})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	if res[0].Inserted {
		t.Errorf("replace: Inserted = true, want false")
	}
	want := *before
	want.NextCheckAt = slot(9)
	want.FailureCount = 0
	want.LastError = ""
	want.UpdatedAt = now
	jobDiff(res[0].Job, &want).check(t, "replaced without payload (payload kept)")
	jobDiff(get(t, h, "order", "7", "unshipped"), &want).check(t, "JobGet after replace")

	// The default rule is replace, and a new payload replaces the old one.
	now2 := at(3 * time.Hour)
	res, err = h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{
		Entity: "order", Key: "7", Check: "unshipped", At: slot(4), Now: now2,
		Payload: json.RawMessage(`{"v": 2}`),
	}})
	if err != nil {
		t.Fatalf("replace with payload: %v", err)
	}
	want.NextCheckAt = slot(4)
	want.Payload = json.RawMessage(`{"v": 2}`)
	want.UpdatedAt = now2
	jobDiff(res[0].Job, &want).check(t, "replaced with payload")
}

func testScheduleKeep(t *testing.T, h *Harness) {
	orig := schedule(t, h, "user", "u1", "unverified", slot(3), `{"email": "a@example.com"}`)
	res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{
		{Entity: "user", Key: "u1", Check: "unverified", At: slot(8), Now: at(time.Hour),
			Payload: json.RawMessage(`{"email": "b@example.com"}`), OnConflict: driver.ConflictKeep},
		{Entity: "user", Key: "u2", Check: "unverified", At: slot(8), Now: at(time.Hour),
			OnConflict: driver.ConflictKeep},
	})
	if err != nil {
		t.Fatalf("schedule keep: %v", err)
	}
	if len(res) != 2 {
		t.Fatalf("schedule keep: %d results, want 2", len(res))
	}
	if res[0].Inserted || !res[1].Inserted {
		t.Errorf("Inserted = %v, %v; want false, true", res[0].Inserted, res[1].Inserted)
	}
	jobDiff(res[0].Job, orig).check(t, "kept job as returned")
	jobDiff(get(t, h, "user", "u1", "unverified"), orig).check(t, "kept job as stored")
	if got := res[1].Job; got.Key != "u2" || !got.NextCheckAt.Equal(slot(8)) {
		t.Errorf("new job under keep: key %q next %v; want u2 at %v", got.Key, got.NextCheckAt, slot(8))
	}
}

func testScheduleBulk(t *testing.T, h *Harness) {
	if res, err := h.Store.JobSchedule(t.Context(), nil, nil); err != nil || len(res) != 0 {
		t.Fatalf("schedule nothing: %v, %v; want no results, no error", res, err)
	}
	existing := schedule(t, h, "order", "0", "unshipped", slot(1), "")
	kept := schedule(t, h, "order", "0", "unpaid", slot(1), "")

	const n = 1500
	var params []*driver.JobScheduleParams
	for i := range n {
		params = append(params, &driver.JobScheduleParams{
			Entity: "order", Key: fmt.Sprint(i + 1), Check: "unshipped", At: slot(1 + i%4), Now: at(0),
		})
	}
	params = append(params,
		&driver.JobScheduleParams{Entity: "order", Key: "0", Check: "unshipped", At: slot(6), Now: at(0)},
		&driver.JobScheduleParams{Entity: "order", Key: "0", Check: "unpaid", At: slot(6), Now: at(0), OnConflict: driver.ConflictKeep},
		// The same job twice: applied in order, as two calls would be.
		&driver.JobScheduleParams{Entity: "order", Key: "dup", Check: "unshipped", At: slot(5), Now: at(0)},
		&driver.JobScheduleParams{Entity: "order", Key: "dup", Check: "unshipped", At: slot(7), Now: at(0)},
		&driver.JobScheduleParams{Entity: "order", Key: "dup", Check: "unshipped", At: slot(2), Now: at(0), OnConflict: driver.ConflictKeep},
	)
	res, err := h.Store.JobSchedule(t.Context(), nil, params)
	if err != nil {
		t.Fatalf("bulk schedule: %v", err)
	}
	if len(res) != len(params) {
		t.Fatalf("bulk schedule: %d results for %d params", len(res), len(params))
	}
	ids := make(map[int64]bool)
	for i, r := range res[:n] {
		p := params[i]
		if r.Job.Key != p.Key || r.Job.Check != p.Check || !r.Job.NextCheckAt.Equal(p.At) || !r.Inserted {
			t.Fatalf("result %d: %s/%s at %v inserted %v; want %s/%s at %v inserted",
				i, r.Job.Key, r.Job.Check, r.Job.NextCheckAt, r.Inserted, p.Key, p.Check, p.At)
		}
		ids[r.Job.ID] = true
	}
	if len(ids) != n {
		t.Errorf("bulk schedule: %d distinct ids for %d new jobs", len(ids), n)
	}
	// Each job as returned is the job as stored (a store may fill new jobs
	// in from their params rather than read them back).
	for i := 0; i < n; i += 97 {
		jobDiff(res[i].Job, get(t, h, "order", params[i].Key, "unshipped")).check(t, fmt.Sprintf("bulk result %d", i))
	}
	tail := res[n:]
	jobDiff(tail[0].Job, get(t, h, "order", "0", "unshipped")).check(t, "bulk result replacing a job")
	jobDiff(tail[1].Job, get(t, h, "order", "0", "unpaid")).check(t, "bulk result keeping a job")
	if tail[0].Inserted || tail[0].Job.ID != existing.ID || !tail[0].Job.NextCheckAt.Equal(slot(6)) {
		t.Errorf("replace in bulk: id %d next %v inserted %v; want id %d, %v, false",
			tail[0].Job.ID, tail[0].Job.NextCheckAt, tail[0].Inserted, existing.ID, slot(6))
	}
	if tail[1].Inserted || tail[1].Job.ID != kept.ID || !tail[1].Job.NextCheckAt.Equal(slot(1)) {
		t.Errorf("keep in bulk: id %d next %v inserted %v; want id %d, %v, false",
			tail[1].Job.ID, tail[1].Job.NextCheckAt, tail[1].Inserted, kept.ID, slot(1))
	}
	wantDup := []struct {
		next     time.Time
		inserted bool
	}{{slot(5), true}, {slot(7), false}, {slot(7), false}}
	for i, w := range wantDup {
		r := tail[2+i]
		if !r.Job.NextCheckAt.Equal(w.next) || r.Inserted != w.inserted || r.Job.ID != tail[2].Job.ID {
			t.Errorf("duplicate %d: id %d next %v inserted %v; want id %d, %v, %v",
				i, r.Job.ID, r.Job.NextCheckAt, r.Inserted, tail[2].Job.ID, w.next, w.inserted)
		}
	}
	if got := get(t, h, "order", "dup", "unshipped"); !got.NextCheckAt.Equal(slot(7)) {
		t.Errorf("duplicate stored at %v, want %v", got.NextCheckAt, slot(7))
	}
	st, err := h.Store.JobStats(t.Context(), &driver.JobStatsParams{Current: slot(0), Upcoming: 10})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.Pending != n+3 {
		t.Errorf("pending after bulk schedule: %d, want %d", st.Pending, n+3)
	}
}

func testReschedule(t *testing.T, h *Harness) {
	orig := schedule(t, h, "payout", "p1", "unconfirmed", slot(2), "")
	now := at(time.Hour)
	got, err := h.Store.JobReschedule(t.Context(), nil, &driver.JobRescheduleParams{
		Entity: "payout", Key: "p1", Check: "unconfirmed", At: slot(10), Now: now,
	})
	if err != nil {
		t.Fatalf("reschedule: %v", err)
	}
	want := *orig
	want.FirstCheckAt = slot(10) // it has never run: its first check moves too
	want.NextCheckAt = slot(10)
	want.UpdatedAt = now
	jobDiff(got, &want).check(t, "rescheduled job")
	jobDiff(get(t, h, "payout", "p1", "unconfirmed"), &want).check(t, "JobGet after reschedule")

	_, err = h.Store.JobReschedule(t.Context(), nil, &driver.JobRescheduleParams{
		Entity: "payout", Key: "p2", Check: "unconfirmed", At: slot(10), Now: now,
	})
	if !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("reschedule of a missing job: %v, want ErrNotFound", err)
	}
}

// testFirstCheckMoves: a job that no check has run to a result yet
// (last_check_at NULL) moves its first check with its next one, whether
// replaced by JobSchedule (alone or among kept jobs) or moved by
// JobReschedule, later or earlier; a job that has run keeps its first check.
// Either way its history record has first <= last.
func testFirstCheckMoves(t *testing.T, h *Harness) {
	wantSlots := func(what string, j *driver.Job, first, next time.Time) {
		t.Helper()
		var d diff
		d.time("FirstCheckAt", j.FirstCheckAt, first)
		d.time("NextCheckAt", j.NextCheckAt, next)
		d.check(t, what)
	}
	replace := func(key string, s time.Time, rule driver.ConflictRule) *driver.Job {
		t.Helper()
		res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{
			{Entity: "order", Key: key, Check: "unshipped", At: s, Now: at(0), OnConflict: rule},
		})
		if err != nil {
			t.Fatalf("schedule %s at %v (%s): %v", key, s, rule, err)
		}
		return res[0].Job
	}
	reschedule := func(key string, s time.Time) *driver.Job {
		t.Helper()
		j, err := h.Store.JobReschedule(t.Context(), nil, &driver.JobRescheduleParams{
			Entity: "order", Key: key, Check: "unshipped", At: s, Now: at(0),
		})
		if err != nil {
			t.Fatalf("reschedule %s to %v: %v", key, s, err)
		}
		return j
	}

	// Never run: every move takes the first check along; keep moves nothing.
	fresh := schedule(t, h, "order", "fresh", "unshipped", slot(40), "")
	wantSlots("never run, replaced earlier", replace("fresh", slot(2), driver.ConflictReplace), slot(2), slot(2))
	wantSlots("never run, replaced later", replace("fresh", slot(30), ""), slot(30), slot(30))
	wantSlots("never run, kept", replace("fresh", slot(5), driver.ConflictKeep), slot(30), slot(30))
	wantSlots("never run, rescheduled earlier", reschedule("fresh", slot(3)), slot(3), slot(3))
	wantSlots("never run, rescheduled later", reschedule("fresh", slot(20)), slot(20), slot(20))
	wantSlots("never run, rescheduled earlier again", reschedule("fresh", slot(4)), slot(4), slot(4))

	// A check that failed did not run to a result: the job still moves.
	failed := schedule(t, h, "order", "failed", "unshipped", slot(1), "")
	runOnce(t, h, failed, slot(1), at(15*time.Minute+time.Second), driver.Decision{Next: slot(2), Err: "boom"})
	wantSlots("failed once, rescheduled", reschedule("failed", slot(6)), slot(6), slot(6))

	// Run: the first check stays, whatever moves the next one.
	ran := schedule(t, h, "order", "ran", "unshipped", slot(1), "")
	runOnce(t, h, ran, slot(1), at(15*time.Minute+time.Second), driver.Decision{Next: slot(3), Checked: true})
	wantSlots("run, replaced", replace("ran", slot(8), driver.ConflictReplace), slot(1), slot(8))
	wantSlots("run, rescheduled earlier", reschedule("ran", slot(5)), slot(1), slot(5))
	wantSlots("run, rescheduled later", reschedule("ran", slot(9)), slot(1), slot(9))

	// Replaced in a call that also keeps other jobs, in either order.
	schedule(t, h, "order", "mixed", "unshipped", slot(12), "")
	res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{
		{Entity: "order", Key: "ran", Check: "unshipped", At: slot(2), Now: at(0), OnConflict: driver.ConflictKeep},
		{Entity: "order", Key: "mixed", Check: "unshipped", At: slot(7), Now: at(0), OnConflict: driver.ConflictReplace},
		{Entity: "order", Key: "ran", Check: "unshipped", At: slot(10), Now: at(0), OnConflict: driver.ConflictReplace},
		{Entity: "order", Key: "new", Check: "unshipped", At: slot(11), Now: at(0), OnConflict: driver.ConflictKeep},
		{Entity: "order", Key: "fresh", Check: "unshipped", At: slot(13), Now: at(0), OnConflict: driver.ConflictKeep},
	})
	if err != nil {
		t.Fatalf("schedule replacing and keeping: %v", err)
	}
	wantSlots("run, kept in a mixed call", res[0].Job, slot(1), slot(9))
	wantSlots("never run, replaced in a mixed call", res[1].Job, slot(7), slot(7))
	wantSlots("run, replaced in a mixed call", res[2].Job, slot(1), slot(10))
	wantSlots("new in a mixed call", res[3].Job, slot(11), slot(11))
	wantSlots("never run, kept in a mixed call", res[4].Job, slot(4), slot(4))
	if res[1].Inserted || res[2].Inserted || !res[3].Inserted || res[4].Inserted {
		t.Errorf("mixed call: Inserted = %v, %v, %v, %v; want false, false, true, false",
			res[1].Inserted, res[2].Inserted, res[3].Inserted, res[4].Inserted)
	}
	wantSlots("JobGet of the job replaced in a mixed call", get(t, h, "order", "mixed", "unshipped"), slot(7), slot(7))

	// History: the moved job's first check is its only one; the job that ran
	// keeps its first, before its last.
	runOnce(t, h, fresh, slot(4), at(time.Hour+time.Second), driver.Decision{Outcome: history.Done, Checked: true})
	runOnce(t, h, ran, slot(10), at(150*time.Minute+time.Second), driver.Decision{Outcome: history.Done, Checked: true})
	for key, want := range map[string][2]time.Time{"fresh": {slot(4), slot(4)}, "ran": {slot(1), slot(10)}} {
		recs := historyOf(t, h, "order", key)
		if len(recs) != 1 {
			t.Fatalf("history of %s: %d records, want 1", key, len(recs))
		}
		var d diff
		d.time("FirstCheckAt", recs[0].FirstCheckAt, want[0])
		d.time("LastCheckAt", recs[0].LastCheckAt, want[1])
		d.check(t, "history of "+key)
	}
}

// historyOf returns the history records of one entity, newest first.
func historyOf(t *testing.T, h *Harness, entity, key string) []*history.Record {
	t.Helper()
	recs, err := h.Store.HistoryList(t.Context(), history.Filter{Entity: entity, Key: key})
	if err != nil {
		t.Fatalf("history of %s/%s: %v", entity, key, err)
	}
	return recs
}

// recordDiff compares a history record with the job it came from and how it
// finished, for jobs that left without a further check.
func recordDiff(r *history.Record, j *driver.Job, outcome history.Outcome, finishedAt time.Time, by string) diff {
	var d diff
	d.val("ID", r.ID, j.ID)
	d.val("Entity", r.Entity, j.Entity)
	d.val("Key", r.Key, j.Key)
	d.val("Check", r.Check, j.Check)
	d.val("Outcome", r.Outcome, outcome)
	d.time("FirstCheckAt", r.FirstCheckAt, j.FirstCheckAt)
	d.time("LastCheckAt", r.LastCheckAt, j.LastCheckAt)
	d.val("CheckCount", r.CheckCount, j.CheckCount)
	d.val("FailureCount", r.FailureCount, j.FailureCount)
	d.val("Runtime", r.Runtime, j.Runtime)
	d.val("Lateness", r.Lateness, j.Lateness)
	d.val("LastError", r.LastError, j.LastError)
	d.json("Payload", r.Payload, j.Payload)
	d.time("CreatedAt", r.CreatedAt, j.CreatedAt)
	d.time("FinishedAt", r.FinishedAt, finishedAt)
	d.val("FinishedBy", r.FinishedBy, by)
	return d
}

func testCancel(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "1", "unshipped", slot(1), `{"n": 1}`)
	runOnce(t, h, a, slot(1), at(15*time.Minute+3*time.Second), driver.Decision{Next: slot(3), Err: "timeout", Runtime: 2 * time.Millisecond})
	a = get(t, h, "order", "1", "unshipped")
	b := schedule(t, h, "order", "1", "unpaid", slot(2), "")
	c := schedule(t, h, "order", "1", "unreviewed", slot(2), "")
	other := schedule(t, h, "order", "2", "unshipped", slot(1), "")

	now := at(time.Hour)
	n, err := h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{
		Entity: "order", Key: "1", Check: "unshipped", Now: now, By: "api",
	})
	if err != nil || n != 1 {
		t.Fatalf("cancel one check: %d, %v; want 1, nil", n, err)
	}
	wantGone(t, h, "order", "1", "unshipped")
	recs := historyOf(t, h, "order", "1")
	if len(recs) != 1 {
		t.Fatalf("history after cancelling one: %d records, want 1", len(recs))
	}
	recordDiff(recs[0], a, history.Cancelled, now, "api").check(t, "cancelled record")

	now2 := at(2 * time.Hour)
	n, err = h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{
		Entity: "order", Key: "1", Now: now2, By: "srv-9",
	})
	if err != nil || n != 2 {
		t.Fatalf("cancel every check of the entity: %d, %v; want 2, nil", n, err)
	}
	wantGone(t, h, "order", "1", "unpaid")
	wantGone(t, h, "order", "1", "unreviewed")
	recs = historyOf(t, h, "order", "1")
	if len(recs) != 3 {
		t.Fatalf("history after cancelling all: %d records, want 3", len(recs))
	}
	for _, r := range recs[:2] {
		want := b
		if r.ID == c.ID {
			want = c
		}
		recordDiff(r, want, history.Cancelled, now2, "srv-9").check(t, "cancelled record "+r.Check)
	}

	n, err = h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{
		Entity: "order", Key: "1", Now: now2, By: "api",
	})
	if err != nil || n != 0 {
		t.Errorf("cancel with nothing pending: %d, %v; want 0, nil", n, err)
	}
	jobDiff(get(t, h, "order", "2", "unshipped"), other).check(t, "other entity's job")
}

// testCancelCheck: JobCancelCheck cancels the jobs of one check, of one
// entity when given, at most Limit a call; CatalogDelete removes the check's
// catalog entry once.
func testCancelCheck(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "1", "retired", slot(1), `{"n": 1}`)
	b := schedule(t, h, "order", "2", "retired", slot(2), "")
	c := schedule(t, h, "invoice", "1", "retired", slot(1), "")
	kept := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	var last driver.JobRef // of the latest cancel
	cancelAfter := func(entity string, after driver.JobRef, limit int, now time.Time) int {
		t.Helper()
		r, err := h.Store.JobCancelCheck(t.Context(), &driver.JobCancelCheckParams{Check: "retired", Entity: entity,
			After: after, Limit: limit, Now: now, By: "retire"})
		if err != nil {
			t.Fatalf("cancel check retired (entity %q, after %v, limit %d): %v", entity, after, limit, err)
		}
		last = r.Last
		return r.Cancelled
	}
	cancel := func(entity string, limit int, now time.Time) int {
		t.Helper()
		return cancelAfter(entity, driver.JobRef{}, limit, now)
	}
	if n := cancel("invoice", 10, at(time.Hour)); n != 1 {
		t.Fatalf("cancel the invoices' jobs of check retired: %d, want 1", n)
	}
	wantGone(t, h, "invoice", "1", "retired")
	recs := historyOf(t, h, "invoice", "1")
	if len(recs) != 1 {
		t.Fatalf("history of invoice 1: %d records, want 1", len(recs))
	}
	recordDiff(recs[0], c, history.Cancelled, at(time.Hour), "retire").check(t, "cancelled record of invoice 1")

	// In identity order: order 1, then order 2; each call after the last.
	if n := cancel("", 1, at(2*time.Hour)); n != 1 || last != (driver.JobRef{Entity: "order", Key: "1"}) {
		t.Fatalf("cancel one job of check retired: %d, last %v; want 1, order 1", n, last)
	}
	wantGone(t, h, "order", "1", "retired")
	late := schedule(t, h, "order", "0", "retired", slot(3), "") // scheduled behind the batches
	if n := cancelAfter("", last, 10, at(2*time.Hour)); n != 1 || last != (driver.JobRef{Entity: "order", Key: "2"}) {
		t.Fatalf("cancel the rest of check retired after order 1: %d, last %v; want 1, order 2 (not order 0, before it)", n, last)
	}
	jobDiff(get(t, h, "order", "0", "retired"), late).check(t, "a job before the batch's start")
	if n := cancelAfter("", last, 10, at(3*time.Hour)); n != 0 || last != (driver.JobRef{}) {
		t.Fatalf("cancel check retired after its last job: %d, last %v; want 0 and no last", n, last)
	}
	if n := cancel("", 10, at(3*time.Hour)); n != 1 || last != (driver.JobRef{Entity: "order", Key: "0"}) {
		t.Fatalf("cancel check retired from the first again: %d, last %v; want 1, order 0", n, last)
	}
	if n := cancel("", 10, at(3*time.Hour)); n != 0 {
		t.Fatalf("cancel check retired with none left: %d, want 0", n)
	}
	for _, j := range []*driver.Job{a, b} {
		wantGone(t, h, j.Entity, j.Key, "retired")
		recs := historyOf(t, h, j.Entity, j.Key)
		if len(recs) != 1 {
			t.Fatalf("history of %s %s: %d records, want 1", j.Entity, j.Key, len(recs))
		}
		recordDiff(recs[0], j, history.Cancelled, at(2*time.Hour), "retire").check(t, "cancelled record of "+j.Entity+" "+j.Key)
	}
	jobDiff(get(t, h, "order", "1", "unshipped"), kept).check(t, "another check's job")

	if err := h.Store.CatalogSave(t.Context(), []driver.CatalogEntry{{Check: "retired", Awaits: []string{"shipped"}}, {Check: "unshipped"}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if removed, err := h.Store.CatalogDelete(t.Context(), "retired"); err != nil || removed != want {
			t.Errorf("catalog delete #%d: %v, %v; want %v, nil", i+1, removed, err, want)
		}
	}
	if cat, err := h.Store.CatalogList(t.Context()); err != nil || len(cat) != 1 || cat[0].Check != "unshipped" {
		t.Errorf("catalog after deleting retired: %+v, %v; want unshipped alone", cat, err)
	}
}

func testResolve(t *testing.T, h *Harness) {
	err := h.Store.CatalogSave(t.Context(), []driver.CatalogEntry{
		{Check: "unshipped", Awaits: []string{"shipped"}},
		{Check: "unpaid", Awaits: []string{"paid"}},
		{Check: "unsettled", Awaits: []string{"paid", "shipped"}},
		{Check: "silent"},
	})
	if err != nil {
		t.Fatalf("save catalog: %v", err)
	}
	unshipped := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	schedule(t, h, "order", "1", "unpaid", slot(1), "")
	unsettled := schedule(t, h, "order", "1", "unsettled", slot(2), "")
	schedule(t, h, "order", "1", "silent", slot(2), "")
	schedule(t, h, "order", "1", "uncatalogued", slot(2), "")
	schedule(t, h, "order", "2", "unshipped", slot(1), "")

	now := at(time.Hour)
	n, err := h.Store.JobResolve(t.Context(), nil, &driver.JobResolveParams{
		Entity: "order", Key: "1", Event: "shipped", Now: now, By: "api",
	})
	if err != nil || n != 2 {
		t.Fatalf("resolve shipped: %d, %v; want 2, nil", n, err)
	}
	wantGone(t, h, "order", "1", "unshipped")
	wantGone(t, h, "order", "1", "unsettled")
	for _, c := range []string{"unpaid", "silent", "uncatalogued"} {
		get(t, h, "order", "1", c)
	}
	get(t, h, "order", "2", "unshipped")
	recs := historyOf(t, h, "order", "1")
	if len(recs) != 2 {
		t.Fatalf("history after resolve: %d records, want 2", len(recs))
	}
	for _, r := range recs {
		want := unshipped
		if r.ID == unsettled.ID {
			want = unsettled
		}
		recordDiff(r, want, history.Resolved, now, "api").check(t, "resolved record "+r.Check)
	}

	// A later entry replaces the earlier one of the same check.
	if err := h.Store.CatalogSave(t.Context(), []driver.CatalogEntry{{Check: "unpaid", Awaits: []string{"refunded"}}}); err != nil {
		t.Fatalf("save catalog again: %v", err)
	}
	n, err = h.Store.JobResolve(t.Context(), nil, &driver.JobResolveParams{Entity: "order", Key: "1", Event: "paid", Now: now, By: "api"})
	if err != nil || n != 0 {
		t.Errorf("resolve paid after unpaid stopped awaiting it: %d, %v; want 0, nil", n, err)
	}
	n, err = h.Store.JobResolve(t.Context(), nil, &driver.JobResolveParams{Entity: "order", Key: "1", Event: "refunded", Now: now, By: "api"})
	if err != nil || n != 1 {
		t.Errorf("resolve refunded: %d, %v; want 1, nil", n, err)
	}
	n, err = h.Store.JobResolve(t.Context(), nil, &driver.JobResolveParams{Entity: "order", Key: "1", Event: "nobody-awaits", Now: now, By: "api"})
	if err != nil || n != 0 {
		t.Errorf("resolve an event no check awaits: %d, %v; want 0, nil", n, err)
	}
}

func testJobsDuePaging(t *testing.T, h *Harness) {
	var want []int64
	checkOf := make(map[int64]string)
	for i := range 7 {
		j := schedule(t, h, "order", fmt.Sprint(i), fmt.Sprintf("check_%d", i%2), slot(1), "")
		want = append(want, j.ID)
		checkOf[j.ID] = j.Check
	}
	other := schedule(t, h, "order", "x", "check_0", slot(2), "").ID
	schedule(t, h, "order", "y", "check_0", slot(0), "")
	slices.Sort(want)

	var got []int64
	after := int64(0)
	for page := 0; ; page++ {
		due, err := h.Store.JobsDue(t.Context(), &driver.JobsDueParams{Slot: slot(1), AfterID: after, Limit: 3})
		if err != nil {
			t.Fatalf("due page %d: %v", page, err)
		}
		if len(due) > 3 {
			t.Fatalf("due page %d: %d jobs, limit 3", page, len(due))
		}
		if len(due) == 0 {
			break
		}
		for _, d := range due {
			if d.Check != checkOf[d.ID] {
				t.Errorf("due job %d: check %q, want %q", d.ID, d.Check, checkOf[d.ID])
			}
			got = append(got, d.ID)
		}
		after = due[len(due)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Errorf("due in slot 1: %v, want %v (ascending, exactly that slot)", got, want)
	}
	due, err := h.Store.JobsDue(t.Context(), &driver.JobsDueParams{Slot: slot(2), Limit: 100})
	if err != nil || len(due) != 1 || due[0].ID != other {
		t.Errorf("due in slot 2: %+v, %v; want only job %d", due, err, other)
	}
	due, err = h.Store.JobsDue(t.Context(), &driver.JobsDueParams{Slot: slot(1).Add(time.Minute), Limit: 100})
	if err != nil || len(due) != 0 {
		t.Errorf("due a minute after slot 1: %+v, %v; want none", due, err)
	}
}

func testOverdueSlots(t *testing.T, h *Harness) {
	for i, s := range []int{0, 0, 2, 4, 6} {
		schedule(t, h, "order", fmt.Sprint(i), "unshipped", slot(s), "")
	}
	cases := []struct {
		after, before time.Time
		limit         int
		want          []time.Time
	}{
		{time.Time{}, slot(5), 10, []time.Time{slot(0), slot(2), slot(4)}},
		{time.Time{}, slot(5), 2, []time.Time{slot(0), slot(2)}},
		{time.Time{}, slot(4), 10, []time.Time{slot(0), slot(2)}},
		{time.Time{}, slot(0), 10, nil},
		{time.Time{}, slot(9), 10, []time.Time{slot(0), slot(2), slot(4), slot(6)}},
		// Paging on from the last slot returned.
		{slot(2), slot(9), 10, []time.Time{slot(4), slot(6)}},
		{slot(2), slot(9), 1, []time.Time{slot(4)}},
		{slot(1), slot(4), 10, []time.Time{slot(2)}},
		{slot(6), slot(9), 10, nil},
	}
	for _, c := range cases {
		got, err := h.Store.JobsOverdueSlots(t.Context(), c.after, c.before, c.limit)
		if err != nil {
			t.Fatalf("overdue in (%v, %v): %v", c.after, c.before, err)
		}
		if !slices.EqualFunc(got, c.want, time.Time.Equal) {
			t.Errorf("overdue in (%v, %v) limit %d: %v, want %v", c.after, c.before, c.limit, got, c.want)
		}
	}
}

func testReslot(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "a", "unshipped", slot(0), "")
	b := schedule(t, h, "order", "b", "unshipped", slot(1), "")
	c := schedule(t, h, "order", "c", "unshipped", slot(3), "")
	now := at(2*time.Hour + time.Second)
	n, err := h.Store.JobsReslot(t.Context(), &driver.JobsReslotParams{Before: slot(2), To: slot(8), Now: now})
	if err != nil || n != 2 {
		t.Fatalf("reslot: %d, %v; want 2, nil", n, err)
	}
	for _, j := range []*driver.Job{a, b} {
		want := *j
		want.NextCheckAt = slot(8)
		want.UpdatedAt = now
		jobDiff(get(t, h, j.Entity, j.Key, j.Check), &want).check(t, "reslotted job "+j.Key)
	}
	jobDiff(get(t, h, "order", "c", "unshipped"), c).check(t, "job not overdue")
	n, err = h.Store.JobsReslot(t.Context(), &driver.JobsReslotParams{Before: slot(2), To: slot(8), Now: now})
	if err != nil || n != 0 {
		t.Errorf("reslot again: %d, %v; want 0, nil", n, err)
	}

	// Jobs of the slots in Except stay.
	d := schedule(t, h, "order", "d", "unshipped", slot(4), "")
	e := schedule(t, h, "order", "e", "unshipped", slot(5), "")
	f := schedule(t, h, "order", "f", "unshipped", slot(6), "")
	n, err = h.Store.JobsReslot(t.Context(), &driver.JobsReslotParams{Before: slot(7), To: slot(8), Now: now,
		Except: []time.Time{slot(4), slot(6)}})
	if err != nil || n != 2 {
		t.Fatalf("reslot except slots 4 and 6: %d, %v; want 2 (c and e), nil", n, err)
	}
	for _, j := range []*driver.Job{c, e} {
		if got := get(t, h, j.Entity, j.Key, j.Check); !got.NextCheckAt.Equal(slot(8)) {
			t.Errorf("job %s in %v, want moved to %v", j.Key, got.NextCheckAt, slot(8))
		}
	}
	for _, j := range []*driver.Job{d, f} {
		jobDiff(get(t, h, j.Entity, j.Key, j.Check), j).check(t, "job of an excepted slot "+j.Key)
	}

	// With From, jobs due before it stay: only [From, Before) moves.
	n, err = h.Store.JobsReslot(t.Context(), &driver.JobsReslotParams{From: slot(6), Before: slot(7), To: slot(9), Now: now})
	if err != nil || n != 1 {
		t.Fatalf("reslot from slot 6: %d, %v; want 1 (f), nil", n, err)
	}
	if got := get(t, h, "order", "f", "unshipped"); !got.NextCheckAt.Equal(slot(9)) {
		t.Errorf("job f in %v, want moved to %v", got.NextCheckAt, slot(9))
	}
	jobDiff(get(t, h, "order", "d", "unshipped"), d).check(t, "job due before From")

	// With Limit, at most that many move, the soonest due first.
	schedule(t, h, "order", "g", "unshipped", slot(10), "")
	k := schedule(t, h, "order", "k", "unshipped", slot(11), "")
	n, err = h.Store.JobsReslot(t.Context(), &driver.JobsReslotParams{From: slot(10), Before: slot(12), To: slot(13), Now: now, Limit: 1})
	if err != nil || n != 1 {
		t.Fatalf("reslot with limit 1: %d, %v; want 1 (g), nil", n, err)
	}
	if got := get(t, h, "order", "g", "unshipped"); !got.NextCheckAt.Equal(slot(13)) {
		t.Errorf("job g in %v, want moved to %v (the soonest due)", got.NextCheckAt, slot(13))
	}
	jobDiff(get(t, h, "order", "k", "unshipped"), k).check(t, "job past the limit")
}

func testStats(t *testing.T, h *Harness) {
	st, err := h.Store.JobStats(t.Context(), &driver.JobStatsParams{Current: slot(1), Upcoming: 5})
	if err != nil {
		t.Fatalf("stats of an empty store: %v", err)
	}
	if st.Pending != 0 || st.Overdue != 0 || !st.OldestOverdue.IsZero() || len(st.Upcoming) != 0 || len(st.ByCheck) != 0 {
		t.Errorf("stats of an empty store: %+v, want all zero", st)
	}
	for i, x := range []struct {
		slot  int
		check string
	}{{-1, "a"}, {0, "a"}, {0, "a"}, {1, "b"}, {3, "a"}, {3, "a"}, {3, "b"}, {4, "b"}} {
		schedule(t, h, "order", fmt.Sprint(i), x.check, slot(x.slot), "")
	}
	st, err = h.Store.JobStats(t.Context(), &driver.JobStatsParams{Current: slot(1), Upcoming: 2})
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	var d diff
	d.val("Pending", st.Pending, 8)
	d.val("Overdue", st.Overdue, 3)
	d.time("OldestOverdue", st.OldestOverdue, slot(-1))
	d.val("ByCheck", st.ByCheck, map[string]int{"a": 5, "b": 3})
	want := []driver.SlotLoad{{Slot: slot(1), Jobs: 1}, {Slot: slot(3), Jobs: 3}}
	if !slices.EqualFunc(st.Upcoming, want, func(a, b driver.SlotLoad) bool {
		return a.Slot.Equal(b.Slot) && a.Jobs == b.Jobs
	}) {
		d = append(d, fmt.Sprintf("Upcoming: got %v, want %v", st.Upcoming, want))
	}
	d.check(t, "stats")
}
