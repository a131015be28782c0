package prescient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// SweepResult says what a sweep did.
type SweepResult struct {
	Mode SweepMode `json:"mode"`
	// Slots counts the overdue slots fired (run mode).
	Slots int `json:"slots"`
	// Jobs counts the jobs checked (run mode) or moved (reslot mode).
	Jobs int `json:"jobs"`
	// To is the slot jobs were moved to (reslot mode): the last, when
	// the sweep's batches ran past a slot boundary.
	To time.Time `json:"to,omitzero"`
}

// Sweep takes the overdue jobs, those due before the slot in progress that
// nobody processed, in the given mode: SweepRun fires their slots now,
// oldest first, up to 4 at once; SweepReslot moves them to the next slot.
// A client sweeps one sweep at a time: a call waits for a sweep running
// (not when made by one of the client's own checks).
func (c *Client) Sweep(ctx context.Context, mode SweepMode) (*SweepResult, error) {
	if _, err := ParseSweepMode(string(mode)); err != nil {
		return nil, fmt.Errorf("prescient: sweep: %w", err)
	}
	return c.sweep(ctx, ctx, mode, SweepCall)
}

// sweepBatch is how many overdue slots a run-mode sweep lists at a time.
const sweepBatch = 100

// reslotBatch is how many overdue jobs one transaction of a reslot-mode
// sweep moves.
const reslotBatch = 10_000

// sweepParallel is how many overdue slots a run-mode sweep fires at once:
// up to 4, and no more than Workers (its groups share them).
func (c *Client) sweepParallel() int {
	return max(1, min(4, c.cfg.Workers))
}

// sweep sweeps in mode; trigger says why, for the log and the observer.
// One sweep runs at a time: a scheduled sweep is skipped while another
// runs (beside a long start-up sweep, the scheduled sweeps fired the same
// slots again, and each counted them; found by a trial of catch-up after
// downtime), the running one taking the slots overdue when it began and
// the ticks and the next scheduled sweep those after. Any other waits for
// the one running, then looks afresh: positions taken over, or a store
// back, since the running one passed their slots.
func (c *Client) sweep(workCtx, hardCtx context.Context, mode SweepMode, trigger string) (res *SweepResult, err error) {
	switch {
	case workCtx.Value(inGroupKey{c}) != nil:
		// A check of this client's sweeping (see lockAlone): the sweep that
		// may be running it holds the turn, and would wait for it; it runs
		// beside, as before there were turns (found by a review).
	case trigger == SweepScheduled:
		select {
		case c.sweeping <- struct{}{}:
		default:
			c.log.Debug("sweep skipped: another sweep is running", "trigger", trigger)
			return &SweepResult{Mode: mode}, nil
		}
		defer func() { <-c.sweeping }()
	default:
		select {
		case c.sweeping <- struct{}{}:
		case <-workCtx.Done():
			return nil, fmt.Errorf("prescient: sweep: waiting for the sweep running: %w", workCtx.Err())
		}
		defer func() { <-c.sweeping }()
	}
	began := time.Now()
	defer func() { c.sweepFinished(trigger, mode, res, time.Since(began), err) }()
	now := c.now()
	// The slots before the one in progress, by this host's clock or the
	// database's, the earlier: a sweep from a host whose clock ran ahead
	// fired every server's slots before they began (see clock.go).
	cur := c.cfg.Grid.Floor(c.begun(workCtx, now))
	res = &SweepResult{Mode: mode}
	if mode == SweepReslot {
		// In batches, each its own transaction, the next slot taken
		// afresh for each: one statement over every overdue job locked
		// them all until it ended (600,000 jobs: 10 s, an application's
		// cancel of one of them waiting as long) and moved them into the
		// slot that was next when it began, fired meanwhile (found by a
		// trial of pending jobs at scale). The jobs moved are those
		// overdue when the sweep began: moved, a job is due after that, and
		// is not moved again. Jobs of a slot the client is firing stay:
		// that firing has them listed, and takes them.
		for workCtx.Err() == nil {
			now := c.now()
			to := c.cfg.Grid.Next(now)
			n, err := c.drv.JobsReslot(workCtx, &driver.JobsReslotParams{Before: cur, To: to, Now: now,
				Except: c.heldSlots(), Limit: reslotBatch})
			if err != nil {
				c.storeError(StoreOpSweep, err)
				return res, fmt.Errorf("prescient: sweep: reslot (%d job(s) moved before): %w", res.Jobs, err)
			}
			res.Jobs += n
			if n > 0 || res.To.IsZero() {
				res.To = to
			}
			if n < reslotBatch {
				return res, nil
			}
		}
		return res, fmt.Errorf("prescient: sweep: reslot cut short after %d job(s): %w", res.Jobs, context.Cause(workCtx))
	}
	// Page through the overdue slots oldest first, firing up to
	// sweepParallel of them at once (their groups share the Workers): a
	// slot's firing costs a few round trips and commits besides its checks,
	// so one slot at a time left the workers idle through a catch-up of many
	// small slots (96 slots of 200 jobs: half the rate of one slot of as
	// many; 20,000 slots of one job: 200 jobs/s; found by a trial of
	// catch-up after downtime). A job run alone still runs with no other
	// group of the client's (see runAlone). A slot that fails (or whose
	// jobs are of checks this server does not know) stays overdue; the
	// cursor moves past it so that it cannot stall the slots after it.
	var (
		after time.Time
		errs  []error
		done  bool // every overdue slot listed was gone through
		mu    sync.Mutex
		wg    sync.WaitGroup
	)
	inFlight := make(chan struct{}, c.sweepParallel())
	fire := func(s time.Time) {
		defer func() { <-inFlight }()
		rec, err := c.fireSlot(workCtx, hardCtx, s, KindSweep, false)
		mu.Lock()
		defer mu.Unlock()
		if errors.Is(err, errSlotBusy) {
			// Still running past its boundary (a large slot, or one
			// caught up late): that firing takes its jobs.
			c.log.Debug("sweep: slot left to the firing of it in progress", "slot", s)
			return
		}
		if rec != nil {
			res.Jobs += rec.Checked // those of a slot that failed partway too
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		res.Slots++
	}
pages:
	for workCtx.Err() == nil {
		overdue, err := c.drv.JobsOverdueSlots(workCtx, after, cur, sweepBatch)
		if err != nil {
			c.storeError(StoreOpSweep, err)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			break
		}
		if len(overdue) == 0 {
			done = true
			break
		}
		for _, s := range overdue {
			if workCtx.Err() != nil {
				break
			}
			after = s
			if !c.cfg.Grid.IsBoundary(s) {
				// Scheduled on a grid since changed: move this slot's jobs
				// onto the new one, and only them (the jobs of an earlier
				// slot this pass left, being fired or failed or of a check
				// unknown here, stay in their slot). Its new slot is later
				// than every slot fired so far.
				to := c.cfg.Grid.Ceil(s)
				n, err := c.drv.JobsReslot(workCtx, &driver.JobsReslotParams{From: s, Before: s.Add(time.Microsecond), To: to, Now: now})
				if err != nil {
					c.storeError(StoreOpSweep, err)
					mu.Lock()
					errs = append(errs, fmt.Errorf("move jobs of off-grid slot %s: %w", s.Format(time.RFC3339Nano), err))
					mu.Unlock()
					continue
				}
				c.log.Info("moved jobs scheduled on an old grid onto the current one", "from", s, "to", to, "jobs", n)
				continue
			}
			select {
			case inFlight <- struct{}{}:
			case <-workCtx.Done():
				break pages
			}
			wg.Go(func() { fire(s) })
		}
		wg.Wait() // the page's slots, before the next page is listed
	}
	wg.Wait()
	if !done && len(errs) == 0 && workCtx.Err() != nil {
		// Stopped between two slots (a signal, a deadline): slots may still
		// be overdue, which the caller must not read as caught up.
		errs = append(errs, fmt.Errorf("cut short before every overdue slot was fired: %w", context.Cause(workCtx)))
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("prescient: sweep: %w", err)
	}
	return res, nil
}

// Prune deletes history records (and ledger rows) older than the configured
// retention and returns how many records went, also when it fails or ctx
// ends partway: it deletes in batches, each committed. With retention -1 it
// does nothing.
func (c *Client) Prune(ctx context.Context) (int, error) {
	if c.cfg.HistoryRetention < 0 {
		return 0, nil
	}
	n, err := c.drv.HistoryPrune(ctx, c.now().Add(-c.cfg.HistoryRetention))
	if err != nil {
		c.storeError(StoreOpPrune, err)
		return n, fmt.Errorf("prescient: prune history: %w", err)
	}
	return n, nil
}
