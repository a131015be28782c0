package prescient

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// Slot ledger kinds.
const (
	KindFire    = "fire"
	KindCatchup = "catchup"
	KindSweep   = "sweep"
)

// FireSlot processes exactly the jobs due in slot (next_check_at = slot),
// records the firing in the slot ledger and returns the record. It fires the
// slot whether or not this server owns it: ownership decides when the engine
// calls FireSlot, not what FireSlot does. Jobs another server is processing
// are skipped. slot must lie on the grid.
func (c *Client) FireSlot(ctx context.Context, slot time.Time) (*SlotRecord, error) {
	return c.fireSlot(ctx, ctx, slot, KindFire)
}

// fireSlot stops dispatching new jobs when workCtx ends, and interrupts
// running checks (releasing their jobs untouched) when hardCtx ends.
func (c *Client) fireSlot(workCtx, hardCtx context.Context, slot time.Time, kind string) (*SlotRecord, error) {
	slot = slot.UTC()
	if !c.cfg.Grid.IsBoundary(slot) {
		return nil, fmt.Errorf("prescient: fire slot %s: not on the grid (%s)", slot.Format(time.RFC3339Nano), c.cfg.Grid)
	}
	rec := &SlotRecord{Slot: slot, Server: c.cfg.Server, Kind: kind, StartedAt: c.now()}
	// A slot fired again (a sweep, a restart) adds to what the ledger says of
	// it, so the record keeps every job the slot checked.
	prev, err := c.store.SlotList(hardCtx, &SlotListParams{Since: slot, Until: slot.Add(time.Microsecond), Limit: 100})
	if err != nil {
		return nil, fmt.Errorf("prescient: fire slot %s: read ledger: %w", slot.Format(time.RFC3339), err)
	}
	for _, p := range prev {
		if p.Server == c.cfg.Server {
			rec.add(p)
			rec.StartedAt = p.StartedAt
		}
	}
	// Unknown counts the jobs the latest firing left pending, not a sum
	// over firings (each would count the same jobs again).
	rec.Unknown = 0
	if err := c.store.SlotStart(hardCtx, rec); err != nil {
		return nil, fmt.Errorf("prescient: fire slot %s: %w", slot.Format(time.RFC3339), err)
	}

	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		errs  []error
		after int64
	)
	tally := func(t *SlotRecord, err error) {
		mu.Lock()
		defer mu.Unlock()
		rec.add(t)
		if err != nil {
			errs = append(errs, err)
		}
	}
	unknown := make(map[string]int)
dispatch:
	for workCtx.Err() == nil {
		due, err := c.store.JobsDue(workCtx, &JobsDueParams{Slot: slot, AfterID: after, Limit: c.cfg.BatchSize})
		if err != nil {
			tally(nil, fmt.Errorf("list due jobs: %w", err))
			break
		}
		if len(due) == 0 {
			break
		}
		after = due[len(due)-1].ID
		for _, g := range groupByCheck(due) {
			check, ok := c.cfg.Checks.Lookup(g.check)
			if !ok {
				unknown[g.check] += len(g.ids)
				continue
			}
			size := 1
			if check.Batch != nil {
				size = c.cfg.BatchSize
				if check.Opts.BatchSize > 0 {
					size = check.Opts.BatchSize
				}
			}
			for ids := range chunk(g.ids, size) {
				select {
				case c.sem <- struct{}{}:
				case <-workCtx.Done():
					break dispatch
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-c.sem }()
					tally(c.process(hardCtx, check, slot, ids))
				}()
			}
		}
	}
	wg.Wait()

	for name, n := range unknown {
		rec.Unknown += n
		c.log.Warn("jobs left pending: no check registered under this name", "check", name, "jobs", n, "slot", slot)
	}
	c.noteUnknown(unknown)
	cut := errors.Join(errs...)
	if cut == nil && workCtx.Err() != nil {
		cut = fmt.Errorf("stopped: %w", workCtx.Err())
	}
	if cut != nil {
		// The slot stays incomplete in the ledger, with what it did: the
		// rest is still due, and catch-up or the sweep will take it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(hardCtx), stopTimeout)
		defer cancel()
		if err := c.store.SlotFinish(lctx, rec); err != nil {
			cut = errors.Join(cut, err)
		}
		return rec, fmt.Errorf("prescient: fire slot %s: %w", slot.Format(time.RFC3339), cut)
	}
	rec.FinishedAt = c.now()
	if err := c.store.SlotFinish(hardCtx, rec); err != nil {
		return rec, fmt.Errorf("prescient: fire slot %s: %w", slot.Format(time.RFC3339), err)
	}
	return rec, nil
}

// add adds the counts of o to r.
func (r *SlotRecord) add(o *SlotRecord) {
	if o == nil {
		return
	}
	r.Checked += o.Checked
	r.Rescheduled += o.Rescheduled
	r.Failures += o.Failures
	r.Unknown += o.Unknown
	for k, v := range o.Outcomes {
		if r.Outcomes == nil {
			r.Outcomes = make(map[history.Outcome]int)
		}
		r.Outcomes[k] += v
	}
	r.MaxLateness = max(r.MaxLateness, o.MaxLateness)
}

type checkGroup struct {
	check string
	ids   []int64
}

// groupByCheck groups due jobs by check name, keeping the first-seen order.
func groupByCheck(due []*DueJob) []checkGroup {
	var out []checkGroup
	idx := make(map[string]int)
	for _, d := range due {
		i, ok := idx[d.Check]
		if !ok {
			i = len(out)
			idx[d.Check] = i
			out = append(out, checkGroup{check: d.Check})
		}
		out[i].ids = append(out[i].ids, d.ID)
	}
	return out
}

func chunk(ids []int64, size int) func(func([]int64) bool) {
	return func(yield func([]int64) bool) {
		for len(ids) > 0 {
			n := min(size, len(ids))
			if !yield(ids[:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}

// process claims and runs one group of jobs of one check (a single job for a
// plain check) and returns what happened to them.
func (c *Client) process(ctx context.Context, check *checks.Check, slot time.Time, ids []int64) (*SlotRecord, error) {
	t := &SlotRecord{}
	now := c.now()
	limits := c.cfg.Guards.Override(check.Opts.Guards)
	_, err := c.store.JobsProcess(ctx, &JobsProcessParams{IDs: ids, Slot: slot, Now: now, Server: c.cfg.Server},
		func(ctx context.Context, tx checks.Tx, jobs []*checks.Job) *ProcessResult {
			for _, j := range jobs {
				j.Tx = tx
			}
			res := c.runCheck(ctx, check, limits, slot, now, jobs)
			// Count here, not from the caller's view: only claimed jobs ran.
			for i, d := range res.Decisions {
				if d.Released() {
					continue
				}
				t.Checked++
				t.MaxLateness = max(t.MaxLateness, jobs[i].Lateness())
				switch {
				case d.Outcome != "":
					if t.Outcomes == nil {
						t.Outcomes = make(map[history.Outcome]int)
					}
					t.Outcomes[d.Outcome]++
				case d.Err == "":
					t.Rescheduled++
				}
				if d.Err != "" {
					t.Failures++
				}
			}
			return res
		})
	if err != nil {
		// Nothing the store could not commit is lost: the jobs keep their
		// next_check_at and become overdue for the sweep.
		return &SlotRecord{}, fmt.Errorf("process %d job(s) of check %s: %w", len(ids), check.Name, err)
	}
	return t, nil
}

// errInterrupted marks a check stopped by shutdown rather than by its own fault.
var errInterrupted = errors.New("interrupted by shutdown")

// runCheck runs a check over its claimed jobs under the runtime guard and
// turns what it returned into decisions.
func (c *Client) runCheck(ctx context.Context, check *checks.Check, limits guards.Limits, slot, now time.Time, jobs []*checks.Job) *ProcessResult {
	start := time.Now()
	var (
		results []checks.Result
		err     error
	)
	if check.Batch != nil {
		err = c.guarded(ctx, limits.Runtime, check.Name, func(ctx context.Context) error {
			r, err := check.Batch(ctx, jobs)
			if err == nil && len(r) != len(jobs) {
				err = fmt.Errorf("batch check returned %d results for %d jobs", len(r), len(jobs))
			}
			results = r
			return err
		})
	} else {
		err = c.guarded(ctx, limits.Runtime, check.Name, func(ctx context.Context) error {
			next, err := check.Func(ctx, jobs[0])
			results = []checks.Result{{Next: next}}
			return err
		})
	}
	elapsed := time.Since(start)
	if err == nil {
		// A check that swallowed a statement's error may have left its
		// transaction aborted (PostgreSQL): its writes cannot commit, so it
		// failed.
		if ab, ok := jobs[0].Tx.(interface{ Aborted() error }); ok {
			if aerr := ab.Aborted(); aerr != nil {
				err = fmt.Errorf("check %s: %w", check.Name, aerr)
			}
		}
	}
	res := &ProcessResult{Decisions: make([]Decision, len(jobs))}
	if errors.Is(err, errInterrupted) {
		// Shutdown cut the check off: leave the jobs exactly as they were.
		res.Discard = true
		return res
	}
	// A failed check's writes never commit. A batch check's per-job error
	// leaves the other jobs' writes alone.
	res.Discard = err != nil
	perJob := elapsed / time.Duration(len(jobs))
	for i, j := range jobs {
		r := checks.Result{Err: err}
		if err == nil {
			r = results[i]
		}
		d := c.decide(limits, slot, now, j, r)
		d.Runtime = perJob
		res.Decisions[i] = d
	}
	return res
}

// decide turns one job's result into its new state.
func (c *Client) decide(limits guards.Limits, slot, now time.Time, j *checks.Job, r checks.Result) Decision {
	if r.Err != nil {
		failures := j.FailureCount + 1
		d := Decision{Err: r.Err.Error()}
		if failures >= c.cfg.MaxFailures {
			d.Outcome = history.Failed
			c.log.Warn("job failed for good", "entity", j.Entity, "key", j.Key, "check", j.Check, "failures", failures, "error", r.Err)
			return d
		}
		d.Next = c.retrySlot(now, failures)
		c.log.Info("check failed, will retry", "entity", j.Entity, "key", j.Key, "check", j.Check, "failures", failures, "retry_at", d.Next, "error", r.Err)
		return d
	}
	if r.Next.IsZero() {
		return Decision{Outcome: history.Done, Checked: true}
	}
	next := c.cfg.Grid.Ceil(r.Next)
	if v := limits.Judge(j.CheckCount+1, slot, next); !v.OK() {
		c.log.Warn("guard ended job", "entity", j.Entity, "key", j.Key, "check", j.Check, "outcome", v.Outcome, "reason", v.Reason)
		return Decision{Outcome: v.Outcome, Checked: true, Reason: v.Reason}
	}
	if !next.After(now) {
		// A check run late (catch-up, a sweep) may ask for a time that has
		// passed meanwhile. Its slot may have fired already, so, as when
		// scheduling, it lands in the first slot after now: "not before X".
		next = c.cfg.Grid.Next(now)
	}
	return Decision{Next: next, Checked: true}
}

// retrySlot is when a job that has failed `failures` times in a row runs
// again: 1, 2, 4, … slots from now, capped at RetryBackoffMax (never less
// than one slot).
func (c *Client) retrySlot(now time.Time, failures int) time.Time {
	res := c.cfg.Grid.Resolution
	delay := res
	for i := 1; i < failures && delay < c.cfg.RetryBackoffMax; i++ {
		delay *= 2
	}
	delay = max(min(delay, c.cfg.RetryBackoffMax), res)
	return c.cfg.Grid.Ceil(now.Add(delay))
}

// guarded runs fn with a deadline of limit. A panic becomes an error with its
// stack; overrunning the deadline is an error even if fn ignores its context
// (fn is then abandoned, and the store makes sure it can no longer write). If
// ctx itself ends first, the error is errInterrupted.
func (c *Client) guarded(ctx context.Context, limit time.Duration, name string, fn func(context.Context) error) error {
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("check %s panicked: %v\n%s", name, p, debug.Stack())
			}
		}()
		done <- fn(runCtx)
	}()
	select {
	case err := <-done:
		if ctx.Err() != nil {
			return errInterrupted
		}
		if runCtx.Err() != nil && err != nil && errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("check %s ran past its runtime guard of %s", name, limit)
		}
		return err
	case <-runCtx.Done():
		if ctx.Err() != nil {
			return errInterrupted
		}
		return fmt.Errorf("check %s ran past its runtime guard of %s", name, limit)
	}
}

func (c *Client) noteUnknown(m map[string]int) {
	if len(m) == 0 {
		return
	}
	c.unknownMu.Lock()
	defer c.unknownMu.Unlock()
	for k, v := range m {
		c.unknown[k] = v
	}
}

// UnknownChecks returns the check names this server found due jobs for but
// has no check registered under, with the jobs seen in the last slot that
// had them. Those jobs stay pending.
func (c *Client) UnknownChecks() map[string]int {
	c.unknownMu.Lock()
	defer c.unknownMu.Unlock()
	out := make(map[string]int, len(c.unknown))
	for k, v := range c.unknown {
		out[k] = v
	}
	return out
}
