package prescient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// A firing's ledger row said nothing of it until the firing ended: a long
// slot showed 0 checked on the status page while it ran, and the row of a
// firing whose server died kept none of the jobs its groups had committed.
// The firing records its progress every Heartbeat: the last check here
// waits until the row counts the two groups before it, and the row ends
// with each job counted once. PostgreSQL only: on SQLite a record waits for
// the write lock the waiting check's group holds (it is recorded between
// groups there).
func TestFiringRecordsItsProgress(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	var failed error // the check's, read once the firing returned
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key != "3" {
			return time.Time{}, nil
		}
		clk.Set("2026-03-10T10:15:01Z") // the firing's time, on the client's clock
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			recs, err := h.store.Driver().SlotList(ctx, &driver.SlotListParams{})
			if err == nil && len(recs) == 1 && recs[0].Checked == 2 && !recs[0].Complete() &&
				recs[0].Outcomes[history.Done] == 2 {
				return time.Time{}, nil
			}
			if time.Now().After(deadline) {
				failed = fmt.Errorf("10s into the firing, after two of its three groups, the ledger says %v, %v; want 2 checked, done 2, unfinished", rows(recs), err)
				return time.Time{}, failed
			}
		}
	}
	c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) {
		c.Workers, c.GroupSize, c.Heartbeat, c.ServerTimeout = 1, 1, 10*time.Millisecond, time.Minute // the bound on statements is not the point
	})
	for _, key := range []string{"1", "2", "3"} {
		schedule(t, c, key, "c", "2026-03-10T10:15:00Z")
	}
	clk.Set("2026-03-10T10:15:00Z")
	did := fire(t, c, "2026-03-10T10:15:00Z")
	if failed != nil {
		t.Fatal(failed)
	}
	if did.Checked != 3 {
		t.Errorf("FireSlot's record: %d checked, want 3", did.Checked)
	}
	recs, err := h.store.Driver().SlotList(ctx, &driver.SlotListParams{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("ledger: %+v, %v; want one row", recs, err)
	}
	if r := recs[0]; r.Checked != 3 || r.Outcomes[history.Done] != 3 || !r.Complete() || r.Took != time.Second {
		t.Errorf("ledger row after the firing: %+v; want 3 checked, done 3, finished, having taken 1s (each counted once)", *r)
	}
}

func rows(recs []*prescient.SlotRecord) []prescient.SlotRecord {
	out := make([]prescient.SlotRecord, len(recs))
	for i, r := range recs {
		out[i] = *r
	}
	return out
}

// On SQLite a progress record waits for the write lock of the group
// running, however long its checks take: records were cut off after 5s and
// then taken as made, and the row lost the groups they held (found by a
// review: a check of 6s left the row at 1 checked of 2). An in-process
// store's failed write wrote nothing; its records are not cut short.
func TestProgressBehindASlowCheckOnSQLite(t *testing.T) {
	t.Parallel()
	h := openSQLite(t)
	clk := newClock("2026-03-10T10:00:00Z")
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key == "2" {
			time.Sleep(6 * time.Second) // longer than a record over the network gets
		}
		return time.Time{}, nil
	}
	c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) {
		c.Workers, c.GroupSize, c.Heartbeat, c.ServerTimeout = 1, 1, 10*time.Millisecond, time.Minute
	})
	for _, key := range []string{"1", "2"} {
		schedule(t, c, key, "c", "2026-03-10T10:15:00Z")
	}
	clk.Set("2026-03-10T10:15:00Z")
	if did := fire(t, c, "2026-03-10T10:15:00Z"); did.Checked != 2 {
		t.Fatalf("FireSlot's record: %d checked, want 2", did.Checked)
	}
	recs, err := h.store.Driver().SlotList(context.Background(), &driver.SlotListParams{})
	if err != nil || len(recs) != 1 || recs[0].Checked != 2 || recs[0].Outcomes[history.Done] != 2 {
		t.Fatalf("ledger: %v, %v; want one row, 2 checked, done 2", rows(recs), err)
	}
}
