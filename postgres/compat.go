package postgres

import (
	"context"
	"fmt"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
)

// JobsProcess claims the jobs among p.IDs still due in p.Slot, hands them to
// fn, applies fn's decisions (one per job, in their order; a zero Decision
// leaves its job as it was) and commits, in one transaction. fn gets no
// transaction (tx is nil).
//
// Deprecated: the engine owns processing and runs it through Begin; this
// remains so that code written against the earlier store API, such as the
// peer benchmark's flat command, still builds and measures the same claim.
func (s *Store) JobsProcess(ctx context.Context, p *prescient.JobsProcessParams, fn prescient.ProcessFunc) (int, error) {
	tx, err := s.Begin(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	jobs, err := tx.Claim(ctx, &driver.ClaimParams{IDs: p.IDs, Slot: p.Slot})
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	for _, j := range jobs {
		j.Now = p.Now.UTC()
	}
	res := fn(ctx, nil, jobs)
	if res == nil || len(res.Decisions) != len(jobs) {
		return 0, fmt.Errorf("process slot %s: want one decision per claimed job (%d)", p.Slot, len(jobs))
	}
	var ds []driver.Decision
	for i, d := range res.Decisions {
		if d.Released() {
			continue
		}
		d.ID, d.Lateness = jobs[i].ID, p.Now.Sub(p.Slot)
		ds = append(ds, d)
	}
	if err := tx.Apply(ctx, &driver.ApplyParams{Slot: p.Slot, Now: p.Now, Server: p.Server, Decisions: ds}); err != nil {
		return 0, err
	}
	return len(jobs), tx.Commit(ctx)
}
