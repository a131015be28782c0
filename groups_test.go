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

func (d *countingDriver) Begin(ctx context.Context) (driver.Tx, error) {
	d.begins.Add(1)
	tx, err := d.Driver.Begin(ctx)
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
		counter := &countingDriver{Driver: h.store.Driver()}
		h.store = wrappedStore{h.store, counter}
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "c", func(ctx context.Context, j *checks.Job) (time.Time, error) {
			return time.Time{}, writeAlert(ctx, j)
		}, nil), func(c *prescient.Config) { c.Workers, c.GroupSize = 4, 50 })
		const jobs, groupSize = 400, 50
		ps := benchParams("c", 0, jobs, ts("2026-03-10T10:15:00Z"))
		if _, err := c.ScheduleMany(context.Background(), ps); err != nil {
			t.Fatal(err)
		}
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Outcomes[history.Done] != jobs {
			t.Fatalf("slot record %+v, want %d done", rec, jobs)
		}
		groups := int64(jobs / groupSize)
		for name, got := range map[string]int64{
			"transactions": counter.begins.Load(), "claims": counter.claims.Load(),
			"decision statements": counter.applies.Load(), "commits": counter.commits.Load(),
		} {
			if got != groups {
				t.Errorf("%s: %d for %d jobs, want %d (one per group of %d)", name, got, jobs, groups, groupSize)
			}
		}
		if got := counter.statements.Load(); got != jobs {
			t.Errorf("checks' statements: %d, want %d (one per check)", got, jobs)
		}
		// The due list is read a page at a time (Workers × GroupSize), plus
		// the empty page that ends it.
		if got := counter.dues.Load(); got != 3 {
			t.Errorf("due list reads: %d, want 3 (two pages of 200 and the empty page)", got)
		}
		if n := h.count("SELECT * FROM alerts"); n != jobs {
			t.Errorf("%d alerts, want %d", n, jobs)
		}
	})
}
