package prescient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// JobsLimitMax caps the jobs one call of Jobs returns.
const JobsLimitMax = 10_000

// JobsParams selects pending jobs for Jobs. Zero fields do not filter.
type JobsParams struct {
	Entity string
	// Key needs Entity.
	Key   string
	Check string
	// Slot keeps the jobs due exactly in this slot; it must lie on the grid.
	Slot time.Time
	// Overdue keeps the jobs due before the current slot: the ones a server
	// should have checked already.
	Overdue bool
	// After continues a listing after its last job (the last one a previous
	// call returned).
	After *Job
	// Limit caps the jobs returned: default 100, at most JobsLimitMax.
	Limit int
}

// Jobs lists pending jobs, soonest due first (then by id). Its cost follows
// the jobs it returns, not the pending table, as long as the filters match
// jobs near the front of the index it walks; a check or entity with few
// pending jobs among many others costs a longer walk. Page with
// JobsParams.After.
func (c *Client) Jobs(ctx context.Context, p JobsParams) ([]*Job, error) {
	q, err := c.jobListParams(p)
	if err != nil {
		return nil, fmt.Errorf("prescient: list jobs: %w", err)
	}
	jobs, err := c.drv.JobList(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("prescient: %w", err) // the driver says "list jobs"
	}
	for _, j := range jobs {
		readJob(j)
	}
	return jobs, nil
}

// jobListParams checks p and turns it into the driver's terms.
func (c *Client) jobListParams(p JobsParams) (*driver.JobListParams, error) {
	q := &driver.JobListParams{Entity: p.Entity, Key: p.Key, Check: p.Check, Limit: p.Limit}
	switch {
	case p.Key != "" && p.Entity == "":
		return nil, errors.New("a key needs an entity")
	case p.Limit < 0 || p.Limit > JobsLimitMax:
		return nil, fmt.Errorf("limit %d is out of range [1, %d] (0 means 100)", p.Limit, JobsLimitMax)
	case p.Limit == 0:
		q.Limit = 100
	}
	if p.Entity != "" {
		if err := checks.ValidateName("entity", p.Entity); err != nil {
			return nil, err
		}
	}
	if p.Key != "" {
		if err := checks.ValidateKey(p.Entity, p.Key); err != nil {
			return nil, err
		}
	}
	if p.Check != "" {
		if err := checks.ValidateName("check", p.Check); err != nil {
			return nil, err
		}
	}
	if !p.Slot.IsZero() {
		slot := p.Slot.UTC()
		if !c.cfg.Grid.Floor(slot).Equal(slot) {
			return nil, fmt.Errorf("slot %s is not on the grid %s (the slots around it are %s and %s)",
				slot.Format(time.RFC3339Nano), c.cfg.Grid, c.cfg.Grid.Floor(slot).Format(time.RFC3339), c.cfg.Grid.Ceil(slot).Format(time.RFC3339))
		}
		q.Slot = slot
	}
	if p.Overdue {
		q.Before = c.cfg.Grid.Floor(c.now())
	}
	if p.After != nil {
		q.AfterAt, q.AfterID = p.After.NextCheckAt, p.After.ID
	}
	return q, nil
}
