package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// attemptsLeft lists the attempts not yet ended, failing the test on error.
func attemptsLeft(t *testing.T, h *Harness) []*driver.Attempt {
	t.Helper()
	left, err := h.Store.AttemptsLeft(t.Context())
	if err != nil {
		t.Fatalf("attempts left: %v", err)
	}
	return left
}

func startAttempt(t *testing.T, h *Harness, server string, s time.Time, ids ...int64) int64 {
	t.Helper()
	id, err := h.Store.AttemptStart(t.Context(), &driver.AttemptStartParams{Server: server, Slot: s, StartedAt: s.Add(time.Second), IDs: ids})
	if err != nil {
		t.Fatalf("start attempt: %v", err)
	}
	return id
}

// An attempt is committed when AttemptStart returns, listed with what it
// was given, deleted by the transaction that names it in Apply (once that
// commits) or by AttemptEnd; Settled takes jobs out of every attempt and
// deletes the attempts left empty; pruning deletes the attempts that name no
// pending job.
func testAttempts(t *testing.T, h *Harness) {
	a := schedule(t, h, "order", "a", "unshipped", slot(1), "")
	b := schedule(t, h, "order", "b", "unshipped", slot(1), "")
	c := schedule(t, h, "order", "c", "unshipped", slot(1), "")

	first := startAttempt(t, h, "srv-1", slot(1), a.ID, b.ID, c.ID)
	second := startAttempt(t, h, "srv-2", slot(1), b.ID)
	left := attemptsLeft(t, h)
	if len(left) != 2 || left[0].ID != first || left[1].ID != second {
		t.Fatalf("attempts left: %+v, want %d and %d in that order", left, first, second)
	}
	var d diff
	d.val("Server", left[0].Server, "srv-1")
	d.time("Slot", left[0].Slot, slot(1))
	d.time("StartedAt", left[0].StartedAt, slot(1).Add(time.Second))
	d.val("JobIDs", left[0].JobIDs, []int64{a.ID, b.ID, c.ID})
	d.check(t, "attempt")

	// AttemptNarrow leaves an attempt naming the jobs given, and the others
	// as they were; done here with no processing transaction open (the
	// engine calls it beside one where Features say NarrowAttempts).
	narrowed := startAttempt(t, h, "srv-1", slot(1), a.ID, b.ID, c.ID)
	if err := h.Store.AttemptNarrow(t.Context(), narrowed, []int64{a.ID, c.ID}); err != nil {
		t.Fatalf("narrow attempt: %v", err)
	}
	left = attemptsLeft(t, h)
	if len(left) != 3 || left[2].ID != narrowed || !slices.Equal(left[2].JobIDs, []int64{a.ID, c.ID}) ||
		!slices.Equal(left[0].JobIDs, []int64{a.ID, b.ID, c.ID}) || !slices.Equal(left[1].JobIDs, []int64{b.ID}) {
		t.Fatalf("after narrowing attempt %d to a and c: %+v", narrowed, left)
	}
	if err := h.Store.AttemptEnd(t.Context(), narrowed); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.AttemptNarrow(t.Context(), narrowed, []int64{a.ID}); err == nil {
		t.Errorf("narrowing attempt %d, ended: no error", narrowed)
	}

	// A transaction rolled back ends nothing. (An attempt is recorded
	// before the transaction begins: on SQLite it needs the write lock.)
	third := startAttempt(t, h, "srv-1", slot(1), b.ID)
	tx := beginProcess(t, h)
	claim(t, tx, []int64{b.ID}, slot(1))
	if err := tx.Apply(t.Context(), &driver.ApplyParams{Slot: slot(1), Now: slot(1), Server: "srv-1",
		Decisions: []driver.Decision{{ID: b.ID, Next: slot(2), Checked: true}}, Attempt: third, Settled: []int64{b.ID}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := attemptsLeft(t, h); len(left) != 3 {
		t.Fatalf("after a rollback: %d attempts left, want 3", len(left))
	}

	// Committed, the transaction deletes its attempt and takes b out of the
	// others: the second, naming b alone, goes.
	tx = beginProcess(t, h)
	claim(t, tx, []int64{b.ID}, slot(1))
	if err := tx.Apply(t.Context(), &driver.ApplyParams{Slot: slot(1), Now: slot(1), Server: "srv-1",
		Decisions: []driver.Decision{{ID: b.ID, Next: slot(2), Checked: true}}, Attempt: third, Settled: []int64{b.ID}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	left = attemptsLeft(t, h)
	if len(left) != 1 || left[0].ID != first || !slices.Equal(left[0].JobIDs, []int64{a.ID, c.ID}) {
		t.Fatalf("after settling b: %+v, want only attempt %d, naming a and c", left, first)
	}

	// AttemptEnd deletes one; a missing one is not an error.
	fourth := startAttempt(t, h, "srv-1", slot(1), a.ID)
	if err := h.Store.AttemptEnd(t.Context(), fourth); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.AttemptEnd(t.Context(), fourth); err != nil {
		t.Fatalf("end a missing attempt: %v", err)
	}
	if left := attemptsLeft(t, h); len(left) != 1 {
		t.Fatalf("after AttemptEnd: %d attempts left, want 1", len(left))
	}

	// Pruning keeps an attempt while a job it names is pending.
	process(t, h, []int64{a.ID}, slot(1), slot(1), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Outcome: history.Done, Checked: true}
	})
	if _, err := h.Store.HistoryPrune(t.Context(), slot(0)); err != nil {
		t.Fatal(err)
	}
	if left := attemptsLeft(t, h); len(left) != 1 {
		t.Fatalf("pruned an attempt naming a pending job: %d left, want 1", len(left))
	}
	process(t, h, []int64{c.ID}, slot(1), slot(1), "srv-1", func(*checks.Job) driver.Decision {
		return driver.Decision{Outcome: history.Done, Checked: true}
	})
	if _, err := h.Store.HistoryPrune(t.Context(), slot(0)); err != nil {
		t.Fatal(err)
	}
	if left := attemptsLeft(t, h); len(left) != 0 {
		t.Fatalf("after its jobs finished, pruning left %+v, want none", left)
	}
}
