package prescient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// RetryParams selects jobs that ended failed, to run again. Zero fields do
// not filter.
type RetryParams struct {
	Entity string
	// Key needs Entity.
	Key   string
	Check string
	// Since keeps the jobs that failed at or after it.
	Since time.Time
	// At is when to check them again (rounded up to the grid, as in
	// Schedule); zero means the next slot.
	At time.Time
	// Limit caps the failed history records read, newest first: default 100,
	// at most history.LimitMax.
	Limit int
	// DryRun reports what would be retried without scheduling anything.
	DryRun bool
}

// RetryResult says what Retry did with each failed job it found.
type RetryResult struct {
	// Retried lists the jobs scheduled again (with DryRun, the records that
	// would have been).
	Retried []*RetriedJob `json:"retried"`
	// Skipped lists the failed records left alone, and why.
	Skipped []*RetriedJob `json:"skipped"`
}

// RetriedJob is one failed history record Retry considered.
type RetriedJob struct {
	// Failed is the history record the job ended with.
	Failed *history.Record `json:"failed"`
	// Job is the pending job scheduled from it; nil when skipped or in a
	// dry run.
	Job *Job `json:"job,omitempty"`
	// Skipped says why the record was not retried: the job is pending again,
	// or it finished again after it failed.
	Skipped string `json:"skipped,omitempty"`
}

// Retry schedules again the jobs that ended failed (history outcome
// failed), from their history records: same entity, key, check and payload,
// due at p.At. Only a job's latest end counts: a failed record is skipped
// when the job is pending again (retried already, or scheduled anew) or has
// finished again since, so running Retry twice does not run a job twice.
func (c *Client) Retry(ctx context.Context, p RetryParams) (*RetryResult, error) {
	f := history.Filter{Entity: p.Entity, Key: p.Key, Check: p.Check, Since: p.Since,
		Outcomes: []history.Outcome{history.Failed}, Limit: p.Limit}
	if err := c.checkRetry(p, f); err != nil {
		return nil, fmt.Errorf("prescient: retry: %w", err)
	}
	failed, err := c.History(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("prescient: retry: %w", err)
	}
	at := p.At
	if at.IsZero() {
		at = c.now() // Schedule moves it to the next slot
	}
	res := &RetryResult{Retried: []*RetriedJob{}, Skipped: []*RetriedJob{}}
	// One record per job: retrySkip moves to the job's latest end, whatever
	// the finish times the records were listed by.
	type identity struct{ entity, key, check string }
	seen := map[identity]bool{}
	for _, rec := range failed {
		id := identity{rec.Entity, rec.Key, rec.Check}
		if seen[id] {
			continue
		}
		seen[id] = true
		r := &RetriedJob{Failed: rec}
		if err := c.retryable(rec); err != nil {
			// One record that cannot be scheduled (a name or key an older
			// version stored, a check now registered for another entity)
			// must not keep the others from their retry.
			r.Skipped = "cannot schedule: " + err.Error()
			res.Skipped = append(res.Skipped, r)
			continue
		}
		if rec, r.Skipped, err = c.retrySkip(ctx, rec); err != nil {
			return res, fmt.Errorf("prescient: retry %s/%s/%s: %w", r.Failed.Entity, r.Failed.Key, r.Failed.Check, err)
		}
		r.Failed = rec
		if r.Skipped != "" {
			res.Skipped = append(res.Skipped, r)
			continue
		}
		if !p.DryRun {
			sp := ScheduleParams{Entity: rec.Entity, Key: rec.Key, Check: rec.Check, At: at, OnConflict: ConflictKeep}
			if len(rec.Payload) > 0 {
				sp.Payload = rec.Payload
			}
			job, err := c.Schedule(ctx, sp)
			if err != nil {
				return res, fmt.Errorf("prescient: retry %s/%s/%s: %w", rec.Entity, rec.Key, rec.Check, err)
			}
			if !job.Inserted {
				// Scheduled by another writer (another retry, the
				// application) since retrySkip looked: kept as it is.
				r.Skipped = "pending (scheduled meanwhile)"
				res.Skipped = append(res.Skipped, r)
				continue
			}
			r.Job = job
		}
		res.Retried = append(res.Retried, r)
	}
	return res, nil
}

// retryable reports what keeps rec's job from being scheduled again before
// any database is asked: its names, key and payload as Schedule checks them,
// and a check registered for another entity.
func (c *Client) retryable(rec *history.Record) error {
	if err := checks.ValidateName("entity", rec.Entity); err != nil {
		return err
	}
	if err := checks.ValidateKey(rec.Entity, rec.Key); err != nil {
		return err
	}
	if err := checks.ValidateName("check", rec.Check); err != nil {
		return err
	}
	if len(rec.Payload) > 0 {
		if err := checks.ValidatePayload(rec.Payload); err != nil {
			return err
		}
	}
	return c.wrongEntity(rec.Entity, rec.Key, rec.Check)
}

// checkRetry refuses parameters Retry cannot use, before any database is
// asked.
func (c *Client) checkRetry(p RetryParams, f history.Filter) error {
	if p.Entity != "" {
		if err := checks.ValidateName("entity", p.Entity); err != nil {
			return err
		}
	}
	if p.Key != "" {
		if err := checks.ValidateKey(p.Entity, p.Key); err != nil {
			return err
		}
	}
	if p.Check != "" {
		if err := checks.ValidateName("check", p.Check); err != nil {
			return err
		}
	}
	if p.Limit < 0 || p.Limit > history.LimitMax {
		return fmt.Errorf("limit %d is out of range [1, %d] (0 means %d)", p.Limit, history.LimitMax, history.LimitDefault)
	}
	if !p.At.IsZero() {
		if _, err := c.slotInRange(p.At, c.now()); err != nil {
			return err
		}
	}
	return f.Validate()
}

// retrySkip says why a failed record's job must not be retried, or "". The
// job's latest end is the record to retry from: a later end has a higher
// id (its job was scheduled after this one ended), whatever the clocks
// that wrote the finish times, by which the records were listed. A later
// failure is retried instead; any other later end skips the job.
func (c *Client) retrySkip(ctx context.Context, rec *history.Record) (*history.Record, string, error) {
	_, err := c.drv.JobGet(ctx, rec.Entity, rec.Key, rec.Check)
	switch {
	case err == nil:
		return rec, "pending", nil
	case !errors.Is(err, ErrNotFound):
		return rec, "", err
	}
	latest, err := c.drv.HistoryLatest(ctx, rec.Entity, rec.Key, rec.Check)
	switch {
	case err != nil:
		return rec, "", err
	case latest.ID <= rec.ID:
		return rec, "", nil
	case latest.Outcome == history.Failed:
		if err := c.retryable(latest); err != nil {
			return latest, "cannot schedule: " + err.Error(), nil
		}
		return latest, "", nil
	}
	return rec, "finished again since (" + string(latest.Outcome) + ")", nil
}
