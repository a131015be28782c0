package prescient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// TestDeadTransactionFailsTheSlotWithItsUncheckedJobsDue: a group's
// transaction dies in its first check (the backend is terminated), which
// so fails. Its failure held, the group ended with no error: the slot was
// recorded complete with the group's other four jobs never checked and left
// due, for a sweep to find (found by a review). Now the firing fails saying
// so, the ledger row stays open, and the next firing checks them.
func TestDeadTransactionFailsTheSlotWithItsUncheckedJobsDue(t *testing.T) {
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	var kills atomic.Int32
	reg := register(t, "c", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key == "a-killer" && kills.Add(1) == 1 {
			_, err := j.Tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return time.Time{}, err
		}
		_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key)
		return time.Time{}, err
	}, nil)
	c := h.client(clk, reg, func(c *prescient.Config) { c.Workers, c.GroupSize = 1, 10 })
	keys := []string{"a-killer", "b", "c", "d", "e"}
	for _, k := range keys {
		schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
	}
	clk.Set("2026-03-10T10:15:00Z")
	_, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
	if err == nil || !strings.Contains(err.Error(), "4 job(s) not yet checked stay due") {
		t.Fatalf("firing: error %v; want the slot failed with 4 jobs not yet checked", err)
	}
	if n := h.count("SELECT * FROM prescient_jobs WHERE next_check_at = '2026-03-10T10:15:00Z'"); n != 4 {
		t.Errorf("%d job(s) due in the slot; want the 4 not checked", n)
	}
	if n := h.count("SELECT * FROM prescient_slots WHERE slot = '2026-03-10T10:15:00Z' AND finished_at IS NOT NULL"); n != 0 {
		t.Errorf("the slot's ledger row is finished with jobs of it never checked")
	}
	// The killer's failure is counted and it is retried later; the others
	// are checked when the slot is fired again.
	if j, err := c.Job(context.Background(), "order", "a-killer", "c"); err != nil || j.FailureCount != 1 {
		t.Errorf("a-killer: %+v, %v; want pending with its failure counted", j, err)
	}
	fire(t, c, "2026-03-10T10:15:00Z")
	for _, k := range keys[1:] {
		if recs := historyOf(t, c, k); len(recs) != 1 || recs[0].Outcome != history.Done {
			t.Errorf("%s: history %v; want done once", k, recs)
		}
	}
	if n := h.count("SELECT * FROM alerts"); n != 4 {
		t.Errorf("%d alerts; want one for each of the 4 jobs checked", n)
	}
}

// TestBatchRetryKeepsSubtransactionsUnderTheCap: a batch check's jobs that
// failed before are called one at a time (a key that breaks its batch
// fails alone), and when one fails again the group runs each call again in a
// savepoint: a group of 100 ran 99 writing subtransactions in one
// transaction, past the 64 PostgreSQL caches per transaction (found by a
// review). The calls beyond the store's cap go to the next transaction.
func TestBatchRetryKeepsSubtransactionsUnderTheCap(t *testing.T) {
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	var failAll atomic.Bool
	failAll.Store(true)
	reg := &checks.Registry{}
	err := reg.RegisterBatch("b", func(ctx context.Context, jobs []*checks.Job) ([]checks.Result, error) {
		if failAll.Load() {
			return nil, errors.New("transient: the lookup timed out")
		}
		for _, j := range jobs {
			if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, pg_current_xact_id()::text)", j.Key); err != nil {
				return nil, err
			}
			if j.Key == "k000" {
				return nil, errors.New("this one fails again")
			}
		}
		return make([]checks.Result, len(jobs)), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := h.client(clk, reg, func(c *prescient.Config) { c.Workers = 1 })
	for i := range 100 {
		schedule(t, c, fmt.Sprintf("k%03d", i), "b", "2026-03-10T10:15:00Z")
	}
	clk.Set("2026-03-10T10:15:00Z")
	if rec := fire(t, c, "2026-03-10T10:15:00Z"); rec.Failures != 100 {
		t.Fatalf("first firing: %+v; want the batch's 100 jobs failed", rec)
	}
	failAll.Store(false)
	clk.Set("2026-03-10T10:30:00Z")
	var retry time.Time
	if j, err := c.Job(context.Background(), "order", "k000", "b"); err != nil {
		t.Fatal(err)
	} else {
		retry = j.NextCheckAt
	}
	clk.Set(retry.Format(time.RFC3339))
	fire(t, c, retry.Format(time.RFC3339))
	// stage holds the top-level transaction's id; xmin, the subtransaction
	// that wrote the row.
	if n := h.count("SELECT stage FROM alerts GROUP BY stage HAVING count(DISTINCT xmin::text) > 64"); n != 0 {
		t.Errorf("%d transaction(s) committed more than 64 writing subtransactions, past what PostgreSQL caches", n)
	}
	if n := h.count("SELECT DISTINCT xmin::text FROM alerts"); n < 50 {
		t.Errorf("%d subtransactions wrote the alerts; want more than 50: the calls ran in savepoints, which this test is about", n)
	}
	if n := h.count("SELECT * FROM alerts"); n != 99 {
		t.Errorf("%d alerts; want one for each of the 99 jobs whose call succeeded", n)
	}
	if n := h.count("SELECT * FROM prescient_history WHERE outcome = 'done'"); n != 99 {
		t.Errorf("%d jobs done; want 99 (k000 failed again and waits for its retry)", n)
	}
}
