package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// slotDiff compares every field of a ledger row.
func slotDiff(got, want *driver.SlotRecord) diff {
	var d diff
	d.time("Slot", got.Slot, want.Slot)
	d.val("Server", got.Server, want.Server)
	d.val("Kind", got.Kind, want.Kind)
	d.time("StartedAt", got.StartedAt, want.StartedAt)
	d.time("FinishedAt", got.FinishedAt, want.FinishedAt)
	d.val("Checked", got.Checked, want.Checked)
	d.val("Rescheduled", got.Rescheduled, want.Rescheduled)
	d.val("Failures", got.Failures, want.Failures)
	d.val("Unknown", got.Unknown, want.Unknown)
	if len(got.Outcomes) != 0 || len(want.Outcomes) != 0 {
		d.val("Outcomes", got.Outcomes, want.Outcomes)
	}
	d.val("MaxLateness", got.MaxLateness, want.MaxLateness)
	d.val("Took", got.Took, want.Took)
	return d
}

// slotList returns the whole ledger.
func slotList(t *testing.T, h *Harness, p *driver.SlotListParams) []*driver.SlotRecord {
	t.Helper()
	recs, err := h.Store.SlotList(t.Context(), p)
	if err != nil {
		t.Fatalf("list slots: %v", err)
	}
	return recs
}

func testLedger(t *testing.T, h *Harness) {
	start := &driver.SlotRecord{Slot: slot(1), Server: "srv-1", Kind: "fire", StartedAt: slot(1).Add(time.Millisecond)}
	if err := h.Store.SlotStart(t.Context(), start); err != nil {
		t.Fatalf("start slot: %v", err)
	}
	recs := slotList(t, h, &driver.SlotListParams{})
	if len(recs) != 1 {
		t.Fatalf("ledger after start: %d rows, want 1", len(recs))
	}
	slotDiff(recs[0], start).check(t, "started slot")
	if recs[0].Complete() {
		t.Errorf("started slot is complete")
	}

	fin := *start
	fin.FinishedAt = slot(1).Add(4 * time.Second)
	fin.Checked, fin.Rescheduled, fin.Failures, fin.Unknown = 7, 3, 2, 1
	fin.Outcomes = map[history.Outcome]int{history.Done: 2, history.Failed: 1}
	fin.MaxLateness = 1500 * time.Millisecond
	fin.Took = 3*time.Second + 250*time.Millisecond
	if err := h.Store.SlotFinish(t.Context(), &fin); err != nil {
		t.Fatalf("finish slot: %v", err)
	}
	recs = slotList(t, h, &driver.SlotListParams{})
	if len(recs) != 1 {
		t.Fatalf("ledger after finish: %d rows, want 1", len(recs))
	}
	slotDiff(recs[0], &fin).check(t, "finished slot")
	if !recs[0].Complete() {
		t.Errorf("finished slot is not complete")
	}

	// Fired again: the row keeps its start and counts, and is incomplete
	// until this firing finishes; the unknown jobs are this firing's to
	// count.
	restart := &driver.SlotRecord{Slot: slot(1), Server: "srv-1", Kind: "catchup", StartedAt: slot(3)}
	if err := h.Store.SlotStart(t.Context(), restart); err != nil {
		t.Fatalf("restart slot: %v", err)
	}
	recs = slotList(t, h, &driver.SlotListParams{})
	if len(recs) != 1 {
		t.Fatalf("ledger after restart: %d rows, want 1", len(recs))
	}
	want := fin
	want.Kind, want.FinishedAt, want.Unknown = "catchup", time.Time{}, 0
	slotDiff(recs[0], &want).check(t, "restarted slot")
	if recs[0].Complete() {
		t.Errorf("restarted slot is complete")
	}

	// Its finish adds what it did, its time included (not the span from
	// the first firing's start); unknown is its own, lateness the larger.
	fin2 := *restart
	fin2.FinishedAt = slot(3).Add(time.Second)
	fin2.Took = time.Second
	fin2.Checked, fin2.Rescheduled, fin2.Failures, fin2.Unknown = 5, 1, 0, 4
	fin2.Outcomes = map[history.Outcome]int{history.Done: 3, history.Resolved: 1}
	fin2.MaxLateness = 500 * time.Millisecond
	if err := h.Store.SlotFinish(t.Context(), &fin2); err != nil {
		t.Fatalf("finish slot again: %v", err)
	}
	want.FinishedAt = fin2.FinishedAt
	want.Checked, want.Rescheduled, want.Failures, want.Unknown = 12, 4, 2, 4
	want.Took = fin.Took + fin2.Took
	want.Outcomes = map[history.Outcome]int{history.Done: 5, history.Failed: 1, history.Resolved: 1}
	recs = slotList(t, h, &driver.SlotListParams{})
	slotDiff(recs[0], &want).check(t, "slot finished twice")
}

// Two firings of one slot under one server name that finish at once both
// count: each adds what it did.
func testLedgerConcurrentFinishes(t *testing.T, h *Harness) {
	start := &driver.SlotRecord{Slot: slot(2), Server: "srv-1", Kind: "fire", StartedAt: slot(2)}
	if err := h.Store.SlotStart(t.Context(), start); err != nil {
		t.Fatalf("start slot: %v", err)
	}
	const firings = 8
	errs := make(chan error, firings)
	for i := range firings {
		go func() {
			r := *start
			r.FinishedAt = slot(2).Add(time.Duration(i+1) * time.Second)
			r.Checked, r.Outcomes = i+1, map[history.Outcome]int{history.Done: i + 1}
			r.Took = time.Duration(i+1) * time.Millisecond
			errs <- h.Store.SlotFinish(t.Context(), &r)
		}()
	}
	for range firings {
		if err := <-errs; err != nil {
			t.Fatalf("finish slot: %v", err)
		}
	}
	recs := slotList(t, h, &driver.SlotListParams{})
	if len(recs) != 1 || recs[0].Checked != 36 || recs[0].Outcomes[history.Done] != 36 || recs[0].Took != 36*time.Millisecond {
		t.Fatalf("ledger after %d firings finished at once (1 to %d jobs and ms each): %+v, want 36 checked and done in 36ms", firings, firings, recs)
	}
}

// A row an older prescient finished kept no time of its own (took_us NULL,
// before the column, or written by such a server during a rolling
// upgrade): it reads as the span from its start to its finish, and a later
// firing adds its own time to that span.
func testLedgerRowOfAnOlderPrescient(t *testing.T, h *Harness) {
	fin := &driver.SlotRecord{Slot: slot(4), Server: "srv-1", Kind: "fire", StartedAt: slot(4).Add(time.Second),
		FinishedAt: slot(4).Add(3500 * time.Millisecond), Checked: 2, Took: 100 * time.Millisecond}
	if err := h.Store.SlotStart(t.Context(), &driver.SlotRecord{Slot: fin.Slot, Server: fin.Server, Kind: fin.Kind, StartedAt: fin.StartedAt}); err != nil {
		t.Fatalf("start slot: %v", err)
	}
	if err := h.Store.SlotFinish(t.Context(), fin); err != nil {
		t.Fatalf("finish slot: %v", err)
	}
	if err := h.Exec(t.Context(), `UPDATE prescient_slots SET took_us = NULL`); err != nil {
		t.Fatalf("forget the row's time, as an older prescient kept none: %v", err)
	}
	want := *fin
	want.Took = 2500 * time.Millisecond
	slotDiff(slotList(t, h, &driver.SlotListParams{})[0], &want).check(t, "finished row with no time kept")

	again := &driver.SlotRecord{Slot: slot(4), Server: "srv-1", Kind: "sweep", StartedAt: slot(9)}
	if err := h.Store.SlotStart(t.Context(), again); err != nil {
		t.Fatalf("start slot again: %v", err)
	}
	want.Kind, want.FinishedAt = "sweep", time.Time{}
	slotDiff(slotList(t, h, &driver.SlotListParams{})[0], &want).check(t, "the row fired again, in progress")
	again.FinishedAt, again.Took, again.Checked = slot(9).Add(time.Second), 700*time.Millisecond, 1
	if err := h.Store.SlotFinish(t.Context(), again); err != nil {
		t.Fatalf("finish slot again: %v", err)
	}
	want.FinishedAt, want.Took, want.Checked = again.FinishedAt, 3200*time.Millisecond, 3
	slotDiff(slotList(t, h, &driver.SlotListParams{})[0], &want).check(t, "the row fired again, finished")

	// An unfinished row of an older prescient has no span: it reads as no
	// time, and its firing by this one adds its own.
	if err := h.Store.SlotStart(t.Context(), &driver.SlotRecord{Slot: slot(5), Server: "srv-1", Kind: "fire", StartedAt: slot(5)}); err != nil {
		t.Fatalf("start slot: %v", err)
	}
	if err := h.Exec(t.Context(), `UPDATE prescient_slots SET took_us = NULL`); err != nil {
		t.Fatalf("forget the rows' time: %v", err)
	}
	recs := slotList(t, h, &driver.SlotListParams{})
	if recs[0].Took != 0 {
		t.Errorf("an unfinished row with no time kept took %v, want 0", recs[0].Took)
	}
	fin5 := &driver.SlotRecord{Slot: slot(5), Server: "srv-1", Kind: "catchup", StartedAt: slot(6), FinishedAt: slot(6).Add(time.Second), Took: time.Second}
	if err := h.Store.SlotFinish(t.Context(), fin5); err != nil {
		t.Fatalf("finish slot: %v", err)
	}
	if recs := slotList(t, h, &driver.SlotListParams{}); recs[0].Took != time.Second {
		t.Errorf("an older prescient's unfinished row, finished by this one in 1s: took %v, want 1s", recs[0].Took)
	}

	// A row an older prescient is still firing, fired beside it by this
	// one (a sweep under the same server name), keeps no time: the older
	// one's finish, which sets no time, then still reads as a span.
	if err := h.Store.SlotStart(t.Context(), &driver.SlotRecord{Slot: slot(7), Server: "srv-1", Kind: "fire", StartedAt: slot(7)}); err != nil {
		t.Fatalf("start slot: %v", err)
	}
	if err := h.Exec(t.Context(), `UPDATE prescient_slots SET took_us = NULL`); err != nil {
		t.Fatalf("forget the rows' time: %v", err)
	}
	if err := h.Store.SlotStart(t.Context(), &driver.SlotRecord{Slot: slot(7), Server: "srv-1", Kind: "sweep", StartedAt: slot(7).Add(time.Second)}); err != nil {
		t.Fatalf("start slot again: %v", err)
	}
	if n, err := h.QueryInt(t.Context(), `SELECT count(*) FROM prescient_slots WHERE took_us IS NULL`); err != nil || n != 3 {
		t.Errorf("rows with no time kept after firing beside an older prescient: %d, %v; want 3 (slots 4, 5 and 7: it is still firing 7)", n, err)
	}
}

func testLedgerList(t *testing.T, h *Harness) {
	for n := range 5 {
		for _, srv := range []string{"srv-b", "srv-a"} {
			r := &driver.SlotRecord{Slot: slot(n), Server: srv, Kind: "fire", StartedAt: slot(n)}
			if err := h.Store.SlotStart(t.Context(), r); err != nil {
				t.Fatalf("start slot: %v", err)
			}
		}
	}
	// Newest slot first; within a slot, by server.
	key := func(r *driver.SlotRecord) string { return r.Slot.Format(time.RFC3339) + " " + r.Server }
	check := func(name string, p *driver.SlotListParams, want []string) {
		t.Helper()
		recs := slotList(t, h, p)
		var got []string
		for _, r := range recs {
			got = append(got, key(r))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	k := func(n int, srv string) string { return slot(n).Format(time.RFC3339) + " " + srv }
	check("all", &driver.SlotListParams{}, []string{
		k(4, "srv-a"), k(4, "srv-b"), k(3, "srv-a"), k(3, "srv-b"), k(2, "srv-a"), k(2, "srv-b"),
		k(1, "srv-a"), k(1, "srv-b"), k(0, "srv-a"), k(0, "srv-b"),
	})
	check("since", &driver.SlotListParams{Since: slot(3)}, []string{k(4, "srv-a"), k(4, "srv-b"), k(3, "srv-a"), k(3, "srv-b")})
	check("until", &driver.SlotListParams{Until: slot(1)}, []string{k(0, "srv-a"), k(0, "srv-b")})
	check("range and limit", &driver.SlotListParams{Since: slot(1), Until: slot(4), Limit: 3}, []string{k(3, "srv-a"), k(3, "srv-b"), k(2, "srv-a")})
}
