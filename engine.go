package prescient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// catchupMax bounds how many missed slots one tick fires; older ones are left
// to the sweep, so a server waking from a long pause does not walk slot by
// slot through days of empty ones.
const catchupMax = 1000

// Start records the grid and the check catalog in the store, runs the
// start-up sweep (unless disabled; ending ctx cuts it short), fires the
// current slot if this server owns it, and then fires every owned slot at
// its boundary until Stop. Slot ticks, the scheduled sweep and pruning are
// driven by robfig/cron. Start returns once the start-up work is done.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isRunning() {
		return errors.New("prescient: start: already running")
	}
	if old, err := c.store.GridGet(ctx); err == nil && (old.Resolution != c.cfg.Grid.Resolution || old.Offset != c.cfg.Grid.Offset) {
		c.log.Warn("the slot grid changed: jobs scheduled on the old grid are moved onto the new one by the sweep, and the SQL functions now round to the new grid",
			"was", slots.Grid{Resolution: old.Resolution, Offset: old.Offset}.String(), "now", c.cfg.Grid.String())
	}
	if err := c.store.GridSave(ctx, c.cfg.Grid); err != nil {
		return fmt.Errorf("prescient: start: save grid: %w", err)
	}
	if err := c.SyncCatalog(ctx); err != nil {
		return fmt.Errorf("prescient: start: %w", err)
	}
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	hard, stopNow := context.WithCancel(context.WithoutCancel(ctx))
	c.runMu.Lock()
	c.workCtx, c.hardCtx, c.stopWork, c.stopNow = work, hard, stopWork, stopNow
	c.runMu.Unlock()
	c.startedAt = c.now()
	if err := c.Heartbeat(ctx); err != nil {
		stopWork()
		stopNow()
		return fmt.Errorf("prescient: start: %w", err)
	}

	if !c.cfg.SweepOnStartDisabled {
		// Start's caller may give up (a signal during a long start-up sweep).
		sweepCtx, cancel := context.WithCancel(ctx)
		res, err := c.sweep(sweepCtx, sweepCtx, c.cfg.SweepMode)
		cancel()
		if err != nil {
			c.log.Error("start-up sweep", "error", err)
		} else if res.Jobs > 0 || res.Slots > 0 {
			c.log.Info("start-up sweep", "mode", res.Mode, "slots", res.Slots, "jobs", res.Jobs)
		}
	}

	c.cron = cron.New(cron.WithLocation(time.UTC), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	c.cron.Schedule(c.cfg.Grid, c.job(func(work, _ context.Context) { c.Tick(work) }))
	if c.cfg.SweepSchedule != "-" {
		spec, _ := cron.ParseStandard(c.cfg.SweepSchedule) // validated with the config
		c.cron.Schedule(spec, c.job(func(work, hard context.Context) {
			if _, err := c.sweep(work, hard, c.cfg.SweepMode); err != nil {
				c.log.Error("scheduled sweep", "error", err)
			}
		}))
	}
	if c.cfg.PruneSchedule != "-" && c.cfg.HistoryRetention > 0 {
		spec, _ := cron.ParseStandard(c.cfg.PruneSchedule)
		c.cron.Schedule(spec, c.job(func(work, _ context.Context) {
			if n, err := c.Prune(work); err != nil {
				c.log.Error("prune history", "error", err)
			} else if n > 0 {
				c.log.Info("pruned history", "records", n)
			}
		}))
	}
	c.runMu.Lock()
	c.running = true
	c.wg.Add(2)
	c.runMu.Unlock()
	go func() {
		defer c.wg.Done()
		c.Tick(work) // the slot in progress at start-up
	}()
	go func() {
		defer c.wg.Done()
		c.heartbeatLoop(work)
	}()
	c.cron.Start()
	c.log.Info("started", "grid", c.cfg.Grid.String(), "auto_ownership", c.cfg.AutoOwnership, "positions", c.Positions())
	if len(c.cfg.Ownership) > 0 && len(c.Positions()) == 0 {
		c.log.Warn("this server is not in the static ownership map: it fires no slot (it still sweeps); check its name (server, PRESCIENT_SERVER)",
			"server", c.cfg.Server, "servers_in_map", c.cfg.Ownership.Servers())
	}
	return nil
}

// isRunning reports whether the client is started.
func (c *Client) isRunning() bool {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.running
}

// track registers one piece of background work with Stop and returns the
// contexts it runs under, or ok false when the client is not running (Stop
// has begun): it must then not start.
func (c *Client) track() (work, hard context.Context, ok bool) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if !c.running {
		return nil, nil, false
	}
	c.wg.Add(1)
	return c.workCtx, c.hardCtx, true
}

// job wraps fn as a cron job tracked by Stop.
func (c *Client) job(fn func(work, hard context.Context)) cron.Job {
	return cron.FuncJob(func() {
		work, hard, ok := c.track()
		if !ok {
			return
		}
		defer c.wg.Done()
		fn(work, hard)
	})
}

// stopTimeout bounds the store calls Stop and a cut-short slot still make
// after their context ended (deregistering, recording the ledger), so that a
// database that does not answer cannot hold shutdown up.
const stopTimeout = 5 * time.Second

// Stop stops firing: no new slot or job is started, in-flight checks get
// until ctx ends or the configured ShutdownGrace (whichever is first) to
// finish, and checks still running then are interrupted and their jobs
// released untouched (they stay due, for the sweep). Stop is idempotent.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runMu.Lock()
	if !c.running {
		c.runMu.Unlock()
		return nil
	}
	c.running = false // no work is tracked from here on
	c.runMu.Unlock()
	cronDone := c.cron.Stop()
	c.stopWork()

	grace := time.NewTimer(c.cfg.ShutdownGrace)
	defer grace.Stop()
	done := make(chan struct{})
	go func() {
		<-cronDone.Done()
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-grace.C:
		c.log.Warn("shutdown grace over: interrupting in-flight checks", "grace", c.cfg.ShutdownGrace)
	case <-ctx.Done():
		c.log.Warn("shutdown cut short: interrupting in-flight checks")
	}
	c.stopNow()
	<-done
	// Deregister so that, with automatic ownership, the others take this
	// server's positions at once rather than after ServerTimeout.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := c.store.ServerDelete(dctx, c.cfg.Server); err != nil {
		c.log.Warn("deregister", "error", err)
	}
	c.log.Info("stopped")
	return nil
}

// Tick fires the slots this server owns that are due and not yet fired: the
// slot in progress now, and past slots that are incomplete in the ledger
// back to the last slot up to which every owned slot fired (after a missed
// tick, a store outage or a pause). With automatic ownership it also looks
// back ServerTimeout, to catch up slots of positions it has just taken over
// from a server that died. The engine calls it at every slot boundary; tests
// and simulations call it after moving the clock. Ticks never overlap.
func (c *Client) Tick(ctx context.Context) {
	c.tickMu.Lock()
	defer c.tickMu.Unlock()
	g := c.cfg.Grid
	cur := g.Floor(c.now())
	from := cur
	if !c.lastGood.IsZero() {
		from = g.Add(c.lastGood, 1)
	}
	if c.cfg.AutoOwnership {
		back := g.Floor(cur.Add(-c.cfg.ServerTimeout - g.Resolution))
		if back.Before(from) {
			from = back
		}
	}
	if int(cur.Sub(from)/g.Resolution) >= catchupMax {
		from = g.Add(cur, -(catchupMax - 1))
	}
	var complete map[time.Time]bool
	if from.Before(cur) {
		var err error
		if complete, err = c.completeSlots(ctx, from, cur); err != nil {
			c.setHealth(fmt.Errorf("prescient: tick: read ledger: %w", err))
			return
		}
	}
	// A slot that fails does not hold up the ones after it; the next tick
	// starts again from the first that failed (later ones that succeeded are
	// complete in the ledger by then, and skipped).
	var failed time.Time
	var errs []error
	for s := from; !s.After(cur) && ctx.Err() == nil; s = g.Add(s, 1) {
		if !c.owns(g.Position(s)) || complete[s] {
			continue
		}
		kind := KindFire
		if s.Before(cur) {
			kind = KindCatchup
		}
		if _, err := c.fireSlot(ctx, c.hardCtxOr(ctx), s, kind); err != nil {
			if failed.IsZero() {
				failed = s
			}
			errs = append(errs, err)
		}
	}
	if err := c.fireLeftovers(ctx, g.Add(cur, -1)); err != nil {
		errs = append(errs, err)
	}
	if ctx.Err() != nil {
		return
	}
	switch {
	case !failed.IsZero():
		c.lastGood = g.Add(failed, -1)
	case len(errs) == 0:
		c.lastGood = cur
	}
	c.setHealth(errors.Join(errs...))
}

// fireLeftovers fires an owned slot again if jobs of known checks are still
// due in it after it fired: jobs another server held and then released
// (it died, its transaction aborted), or jobs scheduled into the slot by a
// client whose clock runs behind this server's.
func (c *Client) fireLeftovers(ctx context.Context, slot time.Time) error {
	if !c.owns(c.cfg.Grid.Position(slot)) {
		return nil
	}
	due, err := c.store.JobsDue(ctx, &JobsDueParams{Slot: slot, Limit: c.cfg.BatchSize})
	if err != nil {
		return fmt.Errorf("prescient: tick: %w", err)
	}
	for _, d := range due {
		if _, ok := c.cfg.Checks.Lookup(d.Check); ok {
			_, err := c.fireSlot(ctx, c.hardCtxOr(ctx), slot, KindCatchup)
			return err
		}
	}
	return nil
}

// completeSlots returns the slots in [from, until) that some server finished
// firing.
func (c *Client) completeSlots(ctx context.Context, from, until time.Time) (map[time.Time]bool, error) {
	recs, err := c.store.SlotList(ctx, &SlotListParams{Since: from, Until: until, Limit: catchupMax * 4})
	if err != nil {
		return nil, err
	}
	out := make(map[time.Time]bool)
	for _, r := range recs {
		if r.Complete() {
			out[r.Slot.UTC()] = true
		}
	}
	return out, nil
}

func (c *Client) hardCtxOr(ctx context.Context) context.Context {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.running {
		return c.hardCtx
	}
	return ctx
}

// SweepResult says what a sweep did.
type SweepResult struct {
	Mode SweepMode `json:"mode"`
	// Slots counts the overdue slots fired (run mode).
	Slots int `json:"slots"`
	// Jobs counts the jobs checked (run mode) or moved (reslot mode).
	Jobs int `json:"jobs"`
	// To is the slot jobs were moved to (reslot mode).
	To time.Time `json:"to,omitzero"`
}

// Sweep takes the overdue jobs, those due before the slot in progress that
// nobody processed, in the given mode: SweepRun fires their slots now,
// oldest first; SweepReslot moves them to the next slot.
func (c *Client) Sweep(ctx context.Context, mode SweepMode) (*SweepResult, error) {
	if _, err := ParseSweepMode(string(mode)); err != nil {
		return nil, fmt.Errorf("prescient: sweep: %w", err)
	}
	return c.sweep(ctx, ctx, mode)
}

// sweepBatch is how many overdue slots a run-mode sweep lists at a time.
const sweepBatch = 100

func (c *Client) sweep(workCtx, hardCtx context.Context, mode SweepMode) (*SweepResult, error) {
	now := c.now()
	cur := c.cfg.Grid.Floor(now)
	res := &SweepResult{Mode: mode}
	if mode == SweepReslot {
		to := c.cfg.Grid.Next(now)
		n, err := c.store.JobsReslot(workCtx, &JobsReslotParams{Before: cur, To: to, Now: now})
		if err != nil {
			return nil, fmt.Errorf("prescient: sweep: reslot: %w", err)
		}
		res.Jobs, res.To = n, to
		return res, nil
	}
	// Page through the overdue slots oldest first. A slot that fails (or
	// whose jobs are of checks this server does not know) stays overdue; the
	// cursor moves past it so that it cannot stall the slots after it.
	var (
		after time.Time
		errs  []error
	)
	for workCtx.Err() == nil {
		overdue, err := c.store.JobsOverdueSlots(workCtx, after, cur, sweepBatch)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if len(overdue) == 0 {
			break
		}
		for _, s := range overdue {
			if workCtx.Err() != nil {
				break
			}
			after = s
			if !c.cfg.Grid.IsBoundary(s) {
				// Scheduled on a grid since changed: move the jobs onto the
				// new one. Slots before s were taken already in this pass.
				to := c.cfg.Grid.Ceil(s)
				n, err := c.store.JobsReslot(workCtx, &JobsReslotParams{Before: s.Add(time.Microsecond), To: to, Now: now})
				if err != nil {
					errs = append(errs, fmt.Errorf("move jobs of off-grid slot %s: %w", s.Format(time.RFC3339Nano), err))
					continue
				}
				c.log.Info("moved jobs scheduled on an old grid onto the current one", "from", s, "to", to, "jobs", n)
				continue
			}
			rec, err := c.fireSlot(workCtx, hardCtx, s, KindSweep)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			res.Slots++
			res.Jobs += rec.Checked
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("prescient: sweep: %w", err)
	}
	return res, nil
}

// Prune deletes history records (and ledger rows) older than the configured
// retention and returns how many records went. With retention -1 it does
// nothing.
func (c *Client) Prune(ctx context.Context) (int, error) {
	if c.cfg.HistoryRetention < 0 {
		return 0, nil
	}
	n, err := c.store.HistoryPrune(ctx, c.now().Add(-c.cfg.HistoryRetention))
	if err != nil {
		return 0, fmt.Errorf("prescient: prune history: %w", err)
	}
	return n, nil
}

// Status is a snapshot for operators: what is pending and when, what is
// overdue, how recent slots went and how jobs finished.
type Status struct {
	Server  string     `json:"server"`
	Now     time.Time  `json:"now"`
	Current time.Time  `json:"current_slot"`
	Grid    slots.Grid `json:"grid"`
	Jobs    *JobStats  `json:"jobs"`
	// Recent lists the latest ledger rows, newest slot first.
	Recent []*SlotRecord `json:"recent_slots"`
	// Outcomes counts history records per outcome over the last day.
	Outcomes map[history.Outcome]int `json:"outcomes_24h"`
	Servers  []*Server               `json:"servers"`
}

// StatusOpts tunes Status. Zero values take defaults.
type StatusOpts struct {
	// Upcoming caps the upcoming slots listed (default 10).
	Upcoming int
	// Recent caps the ledger rows listed (default 10).
	Recent int
}

// Status reads a snapshot of the pending table, the ledger and history.
func (c *Client) Status(ctx context.Context, opts *StatusOpts) (*Status, error) {
	o := StatusOpts{Upcoming: 10, Recent: 10}
	if opts != nil {
		if opts.Upcoming > 0 {
			o.Upcoming = opts.Upcoming
		}
		if opts.Recent > 0 {
			o.Recent = opts.Recent
		}
	}
	now := c.now()
	st := &Status{Server: c.cfg.Server, Now: now, Current: c.cfg.Grid.Floor(now), Grid: c.cfg.Grid}
	var err error
	if st.Jobs, err = c.store.JobStats(ctx, &JobStatsParams{Current: st.Current, Upcoming: o.Upcoming}); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	if st.Recent, err = c.store.SlotList(ctx, &SlotListParams{Limit: o.Recent}); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	if st.Outcomes, err = c.store.HistoryCounts(ctx, now.Add(-24*time.Hour)); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	if st.Servers, err = c.store.ServerList(ctx); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	return st, nil
}
