package prescient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// countingDriver counts what the engine asks of a store while it fires.
type countingDriver struct {
	driver.Driver
	begins, claims, applies, commits, statements, dues atomic.Int64
}

func (d *countingDriver) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	d.begins.Add(1)
	tx, err := d.Driver.Begin(ctx, p)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, d: d}, nil
}

func (d *countingDriver) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	d.dues.Add(1)
	return d.Driver.JobsDue(ctx, p)
}

type countingTx struct {
	driver.Tx
	d *countingDriver
}

func (t *countingTx) Claim(ctx context.Context, p *driver.ClaimParams) ([]*checks.Job, error) {
	t.d.claims.Add(1)
	return t.Tx.Claim(ctx, p)
}

func (t *countingTx) Apply(ctx context.Context, p *driver.ApplyParams) error {
	t.d.applies.Add(1)
	return t.Tx.Apply(ctx, p)
}

func (t *countingTx) Commit(ctx context.Context) error {
	t.d.commits.Add(1)
	return t.Tx.Commit(ctx)
}

func (t *countingTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	t.d.statements.Add(1)
	return t.Tx.Exec(ctx, sql, args...)
}

func (t *countingTx) QueryRow(ctx context.Context, sql string, args ...any) driver.Row {
	t.d.statements.Add(1)
	return t.Tx.QueryRow(ctx, sql, args...)
}

// A slot of single-job checks costs one claim, one decision statement and one
// commit per group of GroupSize jobs, not one of each per job: the checks'
// own statements are the only per-job work left.
func TestChecksCommitInGroups(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		const jobs, groupSize, workers = 400, 50, 4
		counter := &countingDriver{Driver: h.store.Driver()}
		h.store = wrappedStore{h.store, counter}
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "c", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			return time.Time{}, writeAlert(ctx, j)
		}, nil), func(c *prescient.Config) { c.Workers, c.GroupSize = workers, groupSize })
		ps := benchParams("c", 0, jobs, ts("2026-03-10T10:15:00Z"))
		if _, err := c.ScheduleMany(context.Background(), ps); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Outcomes[history.Done] != jobs {
			t.Fatalf("slot record %+v, want %d done", rec, jobs)
		}
		// One claim, one decision statement and one commit per transaction,
		// and about GroupSize jobs per transaction: the first page of a slot
		// and its last are small, and spread over the workers.
		txs := counter.begins.Load()
		for name, got := range map[string]int64{
			"claims": counter.claims.Load(), "decision statements": counter.applies.Load(), "commits": counter.commits.Load(),
		} {
			if got != txs {
				t.Errorf("%s: %d in %d transactions, want one per transaction", name, got, txs)
			}
		}
		if limit := int64(jobs/groupSize + 2*workers); txs > limit {
			t.Errorf("%d transactions for %d jobs, want at most %d (groups of %d, the first and last pages spread over %d workers)",
				txs, jobs, limit, groupSize, workers)
		}
		if got := counter.statements.Load(); got != jobs {
			t.Errorf("checks' statements: %d, want %d (one per check)", got, jobs)
		}
		if got, limit := counter.dues.Load(), int64(jobs/(workers*groupSize)+3); got > limit {
			t.Errorf("due list reads: %d, want at most %d (a page of 100, then pages of Workers × GroupSize, and the empty page)", got, limit)
		}
		if n := h.count("SELECT * FROM alerts"); n != jobs {
			t.Errorf("%d alerts, want %d", n, jobs)
		}
	})
}
