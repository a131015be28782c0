package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

func testTimesUTC(t *testing.T, h *Harness) {
	zone := time.FixedZone("IST", 5*3600+30*60)
	// Stores keep microseconds: these times must come back exactly.
	when := time.Date(2031, time.March, 4, 15, 17, 9, 123456000, zone)
	now := time.Date(2031, time.March, 4, 11, 0, 1, 999999000, time.FixedZone("EST", -5*3600))
	res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{{
		Entity: "order", Key: "tz", Check: "unshipped", At: when, Now: now,
	}})
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	stored := get(t, h, "order", "tz", "unshipped")
	for _, j := range []*driver.Job{res[0].Job, stored} {
		for name, x := range map[string][2]time.Time{
			"NextCheckAt":  {j.NextCheckAt, when},
			"FirstCheckAt": {j.FirstCheckAt, when},
			"CreatedAt":    {j.CreatedAt, now},
			"UpdatedAt":    {j.UpdatedAt, now},
		} {
			if !x[0].Equal(x[1]) || x[0].Location() != time.UTC {
				t.Errorf("%s = %s, want %s in UTC", name, x[0].Format(time.RFC3339Nano), x[1].UTC().Format(time.RFC3339Nano))
			}
		}
	}
	finished := when.Add(time.Second + time.Microsecond)
	process(t, h, []int64{stored.ID}, when, finished, "srv-1", func(j *checks.Job) driver.Decision {
		if !j.Slot.Equal(when) || !j.FirstCheckAt.Equal(when) || j.FirstCheckAt.Location() != time.UTC {
			t.Errorf("job handed to fn: slot %v, first check %v; want %v in UTC", j.Slot, j.FirstCheckAt, when.UTC())
		}
		return driver.Decision{Outcome: history.Done, Checked: true}
	})
	recs := historyOf(t, h, "order", "tz")
	if len(recs) != 1 {
		t.Fatalf("history: %d records, want 1", len(recs))
	}
	r := recs[0]
	if !r.FinishedAt.Equal(finished) || r.FinishedAt.Location() != time.UTC || !r.LastCheckAt.Equal(when) || r.LastCheckAt.Location() != time.UTC {
		t.Errorf("record: finished %v, last check %v; want %v and %v in UTC", r.FinishedAt, r.LastCheckAt, finished.UTC(), when.UTC())
	}
	if r.Lateness != time.Second+time.Microsecond {
		t.Errorf("record lateness %v, want %v", r.Lateness, time.Second+time.Microsecond)
	}
}

// begin starts a caller's transaction, failing the test on error.
func begin(t *testing.T, h *Harness) *Tx {
	t.Helper()
	tx, err := h.BeginTx(t.Context())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	return tx
}

func testCallerTxRollback(t *testing.T, h *Harness) {
	if err := h.Store.CatalogSave(t.Context(), []driver.CatalogEntry{{Check: "unpaid", Awaits: []string{"paid"}}}); err != nil {
		t.Fatalf("save catalog: %v", err)
	}
	cancelMe := schedule(t, h, "order", "1", "unshipped", slot(1), "")
	resolveMe := schedule(t, h, "order", "1", "unpaid", slot(1), "")
	moveMe := schedule(t, h, "order", "1", "unreviewed", slot(1), "")

	tx := begin(t, h)
	if _, err := h.Store.JobSchedule(t.Context(), tx.Tx, []*driver.JobScheduleParams{{Entity: "order", Key: "2", Check: "unshipped", At: slot(2), Now: at(0)}}); err != nil {
		t.Fatalf("schedule in tx: %v", err)
	}
	// The caller's transaction sees its own writes.
	if n, err := h.Store.JobCancel(t.Context(), tx.Tx, &driver.JobCancelParams{Entity: "order", Key: "2", Check: "unshipped", Now: at(0), By: "api"}); err != nil || n != 1 {
		t.Fatalf("cancel in tx what the tx scheduled: %d, %v; want 1, nil", n, err)
	}
	if n, err := h.Store.JobCancel(t.Context(), tx.Tx, &driver.JobCancelParams{Entity: "order", Key: "1", Check: "unshipped", Now: at(0), By: "api"}); err != nil || n != 1 {
		t.Fatalf("cancel in tx: %d, %v; want 1, nil", n, err)
	}
	if n, err := h.Store.JobResolve(t.Context(), tx.Tx, &driver.JobResolveParams{Entity: "order", Key: "1", Event: "paid", Now: at(0), By: "api"}); err != nil || n != 1 {
		t.Fatalf("resolve in tx: %d, %v; want 1, nil", n, err)
	}
	if _, err := h.Store.JobReschedule(t.Context(), tx.Tx, &driver.JobRescheduleParams{Entity: "order", Key: "1", Check: "unreviewed", At: slot(9), Now: at(0)}); err != nil {
		t.Fatalf("reschedule in tx: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}

	wantGone(t, h, "order", "2", "unshipped")
	jobDiff(get(t, h, "order", "1", "unshipped"), cancelMe).check(t, "job cancelled in a rolled back tx")
	jobDiff(get(t, h, "order", "1", "unpaid"), resolveMe).check(t, "job resolved in a rolled back tx")
	jobDiff(get(t, h, "order", "1", "unreviewed"), moveMe).check(t, "job rescheduled in a rolled back tx")
	recs, err := h.Store.HistoryList(t.Context(), history.Filter{})
	if err != nil || len(recs) != 0 {
		t.Errorf("history after rollback: %d records, %v; want none", len(recs), err)
	}
}

func testCallerTxCommit(t *testing.T, h *Harness) {
	if err := h.Store.CatalogSave(t.Context(), []driver.CatalogEntry{{Check: "unpaid", Awaits: []string{"paid"}}}); err != nil {
		t.Fatalf("save catalog: %v", err)
	}
	schedule(t, h, "order", "1", "unshipped", slot(1), "")
	schedule(t, h, "order", "1", "unpaid", slot(1), "")

	tx := begin(t, h)
	if _, err := h.Store.JobSchedule(t.Context(), tx.Tx, []*driver.JobScheduleParams{{Entity: "order", Key: "2", Check: "unshipped", At: slot(2), Now: at(0)}}); err != nil {
		t.Fatalf("schedule in tx: %v", err)
	}
	if n, err := h.Store.JobCancel(t.Context(), tx.Tx, &driver.JobCancelParams{Entity: "order", Key: "1", Check: "unshipped", Now: at(0), By: "api"}); err != nil || n != 1 {
		t.Fatalf("cancel in tx: %d, %v; want 1, nil", n, err)
	}
	if n, err := h.Store.JobResolve(t.Context(), tx.Tx, &driver.JobResolveParams{Entity: "order", Key: "1", Event: "paid", Now: at(0), By: "api"}); err != nil || n != 1 {
		t.Fatalf("resolve in tx: %d, %v; want 1, nil", n, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	get(t, h, "order", "2", "unshipped")
	wantGone(t, h, "order", "1", "unshipped")
	wantGone(t, h, "order", "1", "unpaid")
	if recs := historyOf(t, h, "order", "1"); len(recs) != 2 {
		t.Errorf("history after commit: %d records, want 2", len(recs))
	}
}

func testTxType(t *testing.T, h *Harness) {
	schedule(t, h, "order", "1", "unshipped", slot(1), "")
	bad := struct{ name string }{"not a transaction"}
	errs := map[string]error{}
	_, errs["JobSchedule"] = h.Store.JobSchedule(t.Context(), bad, []*driver.JobScheduleParams{{Entity: "order", Key: "2", Check: "unshipped", At: slot(1), Now: at(0)}})
	_, errs["JobReschedule"] = h.Store.JobReschedule(t.Context(), bad, &driver.JobRescheduleParams{Entity: "order", Key: "1", Check: "unshipped", At: slot(2), Now: at(0)})
	_, errs["JobCancel"] = h.Store.JobCancel(t.Context(), bad, &driver.JobCancelParams{Entity: "order", Key: "1", Now: at(0), By: "api"})
	_, errs["JobResolve"] = h.Store.JobResolve(t.Context(), bad, &driver.JobResolveParams{Entity: "order", Key: "1", Event: "shipped", Now: at(0), By: "api"})
	for name, err := range errs {
		if !errors.Is(err, driver.ErrTxType) {
			t.Errorf("%s with a %T as tx: %v, want ErrTxType", name, bad, err)
		}
	}
	wantGone(t, h, "order", "2", "unshipped")
	if got := get(t, h, "order", "1", "unshipped"); !got.NextCheckAt.Equal(slot(1)) {
		t.Errorf("job moved by a call that failed: at %v, want %v", got.NextCheckAt, slot(1))
	}
}
