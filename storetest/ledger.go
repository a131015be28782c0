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

	// Its finish adds what it did; unknown is its own, lateness the larger.
	fin2 := *restart
	fin2.FinishedAt = slot(3).Add(time.Second)
	fin2.Checked, fin2.Rescheduled, fin2.Failures, fin2.Unknown = 5, 1, 0, 4
	fin2.Outcomes = map[history.Outcome]int{history.Done: 3, history.Resolved: 1}
	fin2.MaxLateness = 500 * time.Millisecond
	if err := h.Store.SlotFinish(t.Context(), &fin2); err != nil {
		t.Fatalf("finish slot again: %v", err)
	}
	want.FinishedAt = fin2.FinishedAt
	want.Checked, want.Rescheduled, want.Failures, want.Unknown = 12, 4, 2, 4
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
			errs <- h.Store.SlotFinish(t.Context(), &r)
		}()
	}
	for range firings {
		if err := <-errs; err != nil {
			t.Fatalf("finish slot: %v", err)
		}
	}
	recs := slotList(t, h, &driver.SlotListParams{})
	if len(recs) != 1 || recs[0].Checked != 36 || recs[0].Outcomes[history.Done] != 36 {
		t.Fatalf("ledger after %d firings finished at once (1 to %d jobs each): %+v, want 36 checked and done", firings, firings, recs)
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
