package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// historyDiff compares every stored field of a history record.
func historyDiff(got, want *history.Record) diff {
	var d diff
	d.val("ID", got.ID, want.ID)
	d.val("Entity", got.Entity, want.Entity)
	d.val("Key", got.Key, want.Key)
	d.val("Check", got.Check, want.Check)
	d.val("Outcome", got.Outcome, want.Outcome)
	d.time("FirstCheckAt", got.FirstCheckAt, want.FirstCheckAt)
	d.time("LastCheckAt", got.LastCheckAt, want.LastCheckAt)
	d.val("CheckCount", got.CheckCount, want.CheckCount)
	d.val("FailureCount", got.FailureCount, want.FailureCount)
	d.val("Runtime", got.Runtime, want.Runtime)
	d.val("Lateness", got.Lateness, want.Lateness)
	d.val("LastError", got.LastError, want.LastError)
	d.json("Payload", got.Payload, want.Payload)
	d.time("CreatedAt", got.CreatedAt, want.CreatedAt)
	d.time("FinishedAt", got.FinishedAt, want.FinishedAt)
	d.val("FinishedBy", got.FinishedBy, want.FinishedBy)
	return d
}

// importJobs are pending jobs as another store exported them, given out of id
// order: every field set to a value no store would choose by itself, and one
// job with every optional field empty (stored as NULL).
func importJobs() []*driver.Job {
	return []*driver.Job{
		{
			ID: 1000, Entity: "order", Key: "42", Check: "order_unshipped",
			FirstCheckAt: slot(-8), NextCheckAt: slot(12), LastCheckAt: slot(4),
			CheckCount: 3, FailureCount: 2, LastError: "carrier API: 503",
			Runtime: 2*time.Second + 345*time.Microsecond, Lateness: 1500 * time.Millisecond,
			Payload:   json.RawMessage(`{"sku": "x-1", "amount": 12.5, "tags": ["a", "b"]}`),
			CreatedAt: at(-3*time.Hour + 7*time.Microsecond), UpdatedAt: at(time.Hour + 11*time.Microsecond),
		},
		{
			ID: 3, Entity: "user", Key: "ü-7", Check: "signup_unverified",
			FirstCheckAt: slot(2), NextCheckAt: slot(2),
			CreatedAt: at(-time.Hour), UpdatedAt: at(-time.Hour),
		},
		{
			ID: 7, Entity: "payout", Key: "p:9", Check: "payout_unconfirmed",
			FirstCheckAt: slot(-1), NextCheckAt: slot(96), LastCheckAt: slot(-1),
			CheckCount: 1, Runtime: 800 * time.Microsecond, Lateness: 3 * time.Second,
			Payload:   json.RawMessage(`[1, 2, 3]`),
			CreatedAt: at(-2 * time.Hour), UpdatedAt: at(-15 * time.Minute),
		},
	}
}

// importRecords are history records as another store exported them, out of
// id order, one per outcome, with every field set, and one with every
// optional field empty.
func importRecords() []*history.Record {
	var recs []*history.Record
	for i, o := range history.Outcomes {
		recs = append(recs, &history.Record{
			ID: int64(2000 - 10*i), Entity: "order", Key: strings.Repeat("k", i+1), Check: "order_unshipped",
			Outcome: o, FirstCheckAt: slot(-20 + i), LastCheckAt: slot(-10 + i),
			CheckCount: i + 1, FailureCount: i, Runtime: time.Duration(i+1) * 1234 * time.Microsecond,
			Lateness: time.Duration(i) * time.Second, LastError: "boom " + string(o),
			Payload:    json.RawMessage(`{"n": ` + string(rune('0'+i)) + `}`),
			CreatedAt:  at(-48*time.Hour + time.Duration(i)*time.Microsecond),
			FinishedAt: at(-time.Duration(i)*time.Hour + 3*time.Microsecond), FinishedBy: "srv-" + string(o),
		})
	}
	return append(recs, &history.Record{
		ID: 11, Entity: "user", Key: "1", Check: "signup_unverified", Outcome: history.Cancelled,
		FirstCheckAt: slot(1), CreatedAt: at(-time.Hour), FinishedAt: at(-time.Minute), FinishedBy: "api",
	})
}

// exportAll pages through an export with the given page size and checks
// that the pages come in ascending id order.
func exportAll[T any](t *testing.T, what string, limit int, export func(after int64, limit int) ([]T, error), id func(T) int64) []T {
	t.Helper()
	var (
		all   []T
		after int64
	)
	for {
		page, err := export(after, limit)
		if err != nil {
			t.Fatalf("export %s after %d: %v", what, after, err)
		}
		if len(page) > limit {
			t.Fatalf("export %s after %d, limit %d: got %d", what, after, limit, len(page))
		}
		for _, v := range page {
			if id(v) <= after {
				t.Fatalf("export %s: id %d after id %d, want ascending ids", what, id(v), after)
			}
			after = id(v)
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
	}
}

// exportAllJobs pages through JobsExport (see exportAll).
func exportAllJobs(t *testing.T, h *Harness, limit int) []*driver.Job {
	t.Helper()
	return exportAll(t, "jobs", limit, func(after int64, limit int) ([]*driver.Job, error) {
		return h.Store.JobsExport(t.Context(), after, limit)
	}, func(j *driver.Job) int64 { return j.ID })
}

// exportAllHistory pages through HistoryExport (see exportAll).
func exportAllHistory(t *testing.T, h *Harness, limit int) []*history.Record {
	t.Helper()
	return exportAll(t, "history", limit, func(after int64, limit int) ([]*history.Record, error) {
		return h.Store.HistoryExport(t.Context(), after, limit)
	}, func(r *history.Record) int64 { return r.ID })
}

// byID indexes jobs or records by id.
func jobsByID(jobs []*driver.Job) map[int64]*driver.Job {
	m := make(map[int64]*driver.Job, len(jobs))
	for _, j := range jobs {
		m[j.ID] = j
	}
	return m
}

func testCopyGridAndCatalog(t *testing.T, h *Harness) {
	ctx := t.Context()
	if g, err := h.Store.GridGet(ctx); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("grid before any save: %v, %v; want ErrNotFound", g, err)
	}
	want := slots.Grid{Resolution: 10 * time.Minute, Offset: 90 * time.Second}
	if err := h.Store.GridSave(ctx, want); err != nil {
		t.Fatal(err)
	}
	if g, err := h.Store.GridGet(ctx); err != nil || g != want {
		t.Errorf("grid: %v, %v; want %v", g, err, want)
	}

	if cat, err := h.Store.CatalogList(ctx); err != nil || len(cat) != 0 {
		t.Errorf("empty catalog: %v, %v; want no entries", cat, err)
	}
	if err := h.Store.CatalogSave(ctx, []driver.CatalogEntry{
		{Check: "order_unshipped", Awaits: []string{"shipped", "cancelled"}, Entity: "order"},
		{Check: "a_plain_check"},
		{Check: "Payout", Awaits: []string{"paid"}},
	}); err != nil {
		t.Fatal(err)
	}
	cat, err := h.Store.CatalogList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantCat := []driver.CatalogEntry{
		{Check: "Payout", Awaits: []string{"paid"}},
		{Check: "a_plain_check"},
		{Check: "order_unshipped", Awaits: []string{"shipped", "cancelled"}, Entity: "order"},
	}
	if len(cat) != len(wantCat) {
		t.Fatalf("catalog: %+v, want %+v", cat, wantCat)
	}
	for i := range cat {
		if cat[i].Check != wantCat[i].Check || cat[i].Entity != wantCat[i].Entity || len(cat[i].Awaits) != len(wantCat[i].Awaits) ||
			(len(wantCat[i].Awaits) > 0 && !reflect.DeepEqual(cat[i].Awaits, wantCat[i].Awaits)) {
			t.Errorf("catalog[%d]: %+v, want %+v", i, cat[i], wantCat[i])
		}
	}
	// Saved again, an entry's entity is the new one's.
	if err := h.Store.CatalogSave(ctx, []driver.CatalogEntry{{Check: "order_unshipped", Awaits: []string{"shipped"}}}); err != nil {
		t.Fatal(err)
	}
	if cat, err := h.Store.CatalogList(ctx); err != nil || len(cat) != 3 || cat[2].Entity != "" {
		t.Errorf("catalog saved again without an entity: %+v, %v; want order_unshipped's entity empty", cat, err)
	}
}

func testCopyJobsRoundTrip(t *testing.T, h *Harness) {
	ctx := t.Context()
	// A job the store made itself, with a failure recorded, is exported as
	// JobGet reads it.
	own := schedule(t, h, "order", "1", "order_unshipped", slot(1), `{"k": 1}`)
	process(t, h, []int64{own.ID}, slot(1), at(15*time.Minute+2*time.Second), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Next: slot(3), Err: "timeout", Runtime: 5 * time.Millisecond}
	})
	own = get(t, h, "order", "1", "order_unshipped")

	want := importJobs()
	if err := h.Store.JobsImport(ctx, nil, want); err != nil {
		t.Fatalf("import: %v", err)
	}
	for _, j := range want {
		jobDiff(get(t, h, j.Entity, j.Key, j.Check), j).check(t, "JobGet after import of "+j.Entity+"/"+j.Key)
	}
	want = append(want, own)
	for _, limit := range []int{1, 2, 100} {
		got := jobsByID(exportAllJobs(t, h, limit))
		if len(got) != len(want) {
			t.Errorf("export, limit %d: %d jobs, want %d", limit, len(got), len(want))
		}
		for _, w := range want {
			g, ok := got[w.ID]
			if !ok {
				t.Errorf("export, limit %d: job %d missing", limit, w.ID)
				continue
			}
			jobDiff(g, w).check(t, "export of job "+w.Entity+"/"+w.Key)
		}
	}
	if _, err := h.Store.JobsExport(ctx, 0, 0); err == nil {
		t.Error("export with limit 0: no error")
	}
}

func testCopyHistoryRoundTrip(t *testing.T, h *Harness) {
	ctx := t.Context()
	own := schedule(t, h, "order", "9", "order_unshipped", slot(1), `{"k": 9}`)
	if _, err := h.Store.JobCancel(ctx, nil, &driver.JobCancelParams{Entity: "order", Key: "9", Now: at(time.Hour), By: "api"}); err != nil {
		t.Fatal(err)
	}
	ownRecs := historyOf(t, h, "order", "9")
	if len(ownRecs) != 1 || ownRecs[0].ID != own.ID {
		t.Fatalf("history of the cancelled job: %+v", ownRecs)
	}

	want := importRecords()
	if err := h.Store.HistoryImport(ctx, nil, want); err != nil {
		t.Fatalf("import: %v", err)
	}
	want = append(want, ownRecs[0])
	for _, limit := range []int{1, 3, 100} {
		got := make(map[int64]*history.Record)
		for _, r := range exportAllHistory(t, h, limit) {
			got[r.ID] = r
		}
		if len(got) != len(want) {
			t.Errorf("export, limit %d: %d records, want %d", limit, len(got), len(want))
		}
		for _, w := range want {
			g, ok := got[w.ID]
			if !ok {
				t.Errorf("export, limit %d: record %d missing", limit, w.ID)
				continue
			}
			historyDiff(g, w).check(t, "export of record "+w.Entity+"/"+w.Key)
		}
	}
	// The imported records are ordinary history: queries find them.
	listed, err := h.Store.HistoryList(ctx, history.Filter{Outcomes: []history.Outcome{history.GuardHorizon}})
	if err != nil || len(listed) != 1 || listed[0].ID != 1960 {
		t.Errorf("history of outcome guard_horizon: %+v, %v; want the imported record 1960", listed, err)
	} else {
		historyDiff(listed[0], want[4]).check(t, "HistoryList of an imported record")
	}
	if _, err := h.Store.HistoryExport(ctx, 0, -1); err == nil {
		t.Error("export with limit -1: no error")
	}
}

// testCopyIDSequence: jobs scheduled after an import never take an imported
// id, of a pending job or of a history record (which a job keeps when it
// finishes).
func testCopyIDSequence(t *testing.T, h *Harness) {
	ctx := t.Context()
	if err := h.Store.JobsImport(ctx, nil, []*driver.Job{importJobs()[2]}); err != nil { // id 7
		t.Fatal(err)
	}
	j := schedule(t, h, "order", "a", "c", slot(1), "")
	if j.ID <= 7 {
		t.Errorf("job scheduled after importing job 7: id %d, want > 7", j.ID)
	}
	recs := importRecords() // ids up to 2000
	if err := h.Store.HistoryImport(ctx, nil, recs); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		j := schedule(t, h, "order", "b", "c"+string(rune('0'+i)), slot(1), "")
		if j.ID <= 2000 {
			t.Errorf("job scheduled after importing history id 2000: id %d, want > 2000", j.ID)
		}
		// It finishes into history beside the imported records.
		if _, err := h.Store.JobCancel(ctx, nil, &driver.JobCancelParams{Entity: "order", Key: "b", Check: j.Check, Now: at(time.Hour), By: "api"}); err != nil {
			t.Fatalf("cancel a job scheduled after the import: %v", err)
		}
	}
	// A lower import leaves the sequence where it is.
	if err := h.Store.HistoryImport(ctx, nil, []*history.Record{{ID: 5, Entity: "x", Key: "1", Check: "c",
		Outcome: history.Done, FirstCheckAt: slot(1), CreatedAt: at(0), FinishedAt: at(0), FinishedBy: "s"}}); err != nil {
		t.Fatal(err)
	}
	if j := schedule(t, h, "order", "z", "c", slot(1), ""); j.ID <= 2003 {
		t.Errorf("job scheduled after a lower import: id %d, want > 2003", j.ID)
	}
}

func testCopyImportConflicts(t *testing.T, h *Harness) {
	ctx := t.Context()
	pending := schedule(t, h, "order", "1", "a", slot(1), "")
	gone := schedule(t, h, "order", "2", "a", slot(1), "")
	if _, err := h.Store.JobCancel(ctx, nil, &driver.JobCancelParams{Entity: "order", Key: "2", Now: at(0), By: "api"}); err != nil {
		t.Fatal(err)
	}
	fresh := func(id int64, key string) *driver.Job {
		return &driver.Job{ID: id, Entity: "order", Key: key, Check: "a", FirstCheckAt: slot(2), NextCheckAt: slot(2),
			CreatedAt: at(0), UpdatedAt: at(0)}
	}
	record := func(id int64, o history.Outcome) *history.Record {
		return &history.Record{ID: id, Entity: "order", Key: "r", Check: "a", Outcome: o, FirstCheckAt: slot(1),
			CreatedAt: at(0), FinishedAt: at(0), FinishedBy: "s"}
	}
	idStr := func(id int64) string { return "id " + jsonString(id) }
	jobCases := []struct {
		name string
		jobs []*driver.Job
		want []string
	}{
		{"identity already pending", []*driver.Job{fresh(500, "new"), fresh(501, "1")}, []string{"order/1/a", "already pending"}},
		{"id of a pending job", []*driver.Job{fresh(500, "new"), fresh(pending.ID, "other")}, []string{idStr(pending.ID), "pending job"}},
		{"id of a history record", []*driver.Job{fresh(500, "new"), fresh(gone.ID, "other")}, []string{idStr(gone.ID), "history record"}},
		{"identity twice", []*driver.Job{fresh(500, "new"), fresh(501, "new")}, []string{"order/new/a", "twice"}},
		{"id twice", []*driver.Job{fresh(500, "new"), fresh(500, "other")}, []string{"id 500", "twice"}},
		{"id not positive", []*driver.Job{fresh(0, "new")}, []string{"order/new/a", "positive"}},
	}
	for _, c := range jobCases {
		err := h.Store.JobsImport(ctx, nil, c.jobs)
		if err == nil {
			t.Errorf("jobs import, %s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("jobs import, %s: error %q does not contain %q", c.name, err, w)
			}
		}
		// Nothing half-written: the job before the bad one is not pending.
		wantGone(t, h, "order", "new", "a")
	}
	recCases := []struct {
		name string
		recs []*history.Record
		want []string
	}{
		{"id of a history record", []*history.Record{record(600, history.Done), record(gone.ID, history.Done)}, []string{idStr(gone.ID), "history record"}},
		{"id of a pending job", []*history.Record{record(600, history.Done), record(pending.ID, history.Done)}, []string{idStr(pending.ID), "pending job"}},
		{"id twice", []*history.Record{record(600, history.Done), record(600, history.Failed)}, []string{"id 600", "twice"}},
		{"unknown outcome", []*history.Record{record(600, history.Done), record(601, "lost")}, []string{"601", `"lost"`}},
		{"id not positive", []*history.Record{record(-1, history.Done)}, []string{"-1", "positive"}},
	}
	for _, c := range recCases {
		err := h.Store.HistoryImport(ctx, nil, c.recs)
		if err == nil {
			t.Errorf("history import, %s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("history import, %s: error %q does not contain %q", c.name, err, w)
			}
		}
		if recs := exportAllHistory(t, h, 100); len(recs) != 1 || recs[0].ID != gone.ID {
			t.Errorf("history import, %s: history holds %d record(s), want only %d", c.name, len(recs), gone.ID)
		}
	}
	if jobs := exportAllJobs(t, h, 100); len(jobs) != 1 || jobs[0].ID != pending.ID {
		t.Errorf("after refused imports: %d pending job(s), want only %d", len(jobs), pending.ID)
	}
	// Pending jobs are untouched by a refused import.
	jobDiff(get(t, h, "order", "1", "a"), pending).check(t, "pending job after refused imports")
}

func testCopyImportCallerTx(t *testing.T, h *Harness) {
	ctx := t.Context()
	jobs, recs := importJobs(), importRecords()

	tx := begin(t, h)
	if err := h.Store.JobsImport(ctx, tx.Tx, jobs); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.HistoryImport(ctx, tx.Tx, recs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := len(exportAllJobs(t, h, 100)) + len(exportAllHistory(t, h, 100)); n != 0 {
		t.Fatalf("after rollback: %d rows, want none", n)
	}

	tx = begin(t, h)
	if err := h.Store.JobsImport(ctx, tx.Tx, jobs); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.HistoryImport(ctx, tx.Tx, recs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, m := len(exportAllJobs(t, h, 100)), len(exportAllHistory(t, h, 100)); n != len(jobs) || m != len(recs) {
		t.Errorf("after commit: %d jobs and %d records, want %d and %d", n, m, len(jobs), len(recs))
	}

	for _, err := range []error{
		h.Store.JobsImport(ctx, "not a tx", importJobs()),
		h.Store.HistoryImport(ctx, "not a tx", importRecords()),
		h.Store.JobsImport(ctx, "not a tx", nil),
		h.Store.HistoryImport(ctx, "not a tx", nil),
	} {
		if !errors.Is(err, driver.ErrTxType) {
			t.Errorf("import with a string for tx: %v, want ErrTxType", err)
		}
	}
}
