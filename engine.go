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
// start-up sweep (unless disabled), fires the current slot if this server
// owns it, and then fires every owned slot at its boundary until Stop. Slot
// ticks, the scheduled sweep and pruning are driven by robfig/cron. Start
// returns once the start-up work is done.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return errors.New("prescient: start: already running")
	}
	if err := c.store.GridSave(ctx, c.cfg.Grid); err != nil {
		return fmt.Errorf("prescient: start: save grid: %w", err)
	}
	if err := c.SyncCatalog(ctx); err != nil {
		return fmt.Errorf("prescient: start: %w", err)
	}
	c.workCtx, c.stopWork = context.WithCancel(context.WithoutCancel(ctx))
	c.hardCtx, c.stopNow = context.WithCancel(context.WithoutCancel(ctx))
	c.startedAt = c.now()
	if err := c.Heartbeat(ctx); err != nil {
		c.stopWork()
		c.stopNow()
		return fmt.Errorf("prescient: start: %w", err)
	}

	if !c.cfg.SweepOnStartDisabled {
		res, err := c.sweep(c.workCtx, c.hardCtx, c.cfg.SweepMode)
		if err != nil {
			c.log.Error("start-up sweep", "error", err)
		} else if res.Jobs > 0 || res.Slots > 0 {
			c.log.Info("start-up sweep", "mode", res.Mode, "slots", res.Slots, "jobs", res.Jobs)
		}
	}

	c.cron = cron.New(cron.WithLocation(time.UTC), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	c.cron.Schedule(c.cfg.Grid, c.job(func(ctx context.Context) { c.Tick(ctx) }))
	if c.cfg.SweepSchedule != "-" {
		spec, _ := cron.ParseStandard(c.cfg.SweepSchedule) // validated with the config
		c.cron.Schedule(spec, c.job(func(context.Context) {
			if _, err := c.sweep(c.workCtx, c.hardCtx, c.cfg.SweepMode); err != nil {
				c.log.Error("scheduled sweep", "error", err)
			}
		}))
	}
	if c.cfg.PruneSchedule != "-" && c.cfg.HistoryRetention > 0 {
		spec, _ := cron.ParseStandard(c.cfg.PruneSchedule)
		c.cron.Schedule(spec, c.job(func(ctx context.Context) {
			if n, err := c.Prune(ctx); err != nil {
				c.log.Error("prune history", "error", err)
			} else if n > 0 {
				c.log.Info("pruned history", "records", n)
			}
		}))
	}
	c.running = true
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.Tick(c.workCtx) // the slot in progress at start-up
	}()
	go func() {
		defer c.wg.Done()
		c.heartbeatLoop(c.workCtx)
	}()
	c.cron.Start()
	c.log.Info("started", "grid", c.cfg.Grid.String(), "auto_ownership", c.cfg.AutoOwnership, "positions", c.Positions())
	if len(c.cfg.Ownership) > 0 && len(c.Positions()) == 0 {
		c.log.Warn("this server is not in the static ownership map: it fires no slot (it still sweeps); check its name (server, PRESCIENT_SERVER)",
			"server", c.cfg.Server, "servers_in_map", c.cfg.Ownership.Servers())
	}
	return nil
}

// job wraps fn as a cron job tracked by Stop.
func (c *Client) job(fn func(context.Context)) cron.Job {
	return cron.FuncJob(func() {
		if c.workCtx.Err() != nil {
			return
		}
		c.wg.Add(1)
		defer c.wg.Done()
		fn(c.workCtx)
	})
}

// Stop stops firing: no new slot or job is started, in-flight checks get
// until ctx ends or the configured ShutdownGrace (whichever is first) to
// finish, and checks still running then are interrupted and their jobs
// released untouched (they stay due, for the sweep). Stop is idempotent.
func (c *Client) Stop(ctx context.Context) error {
	// Flip running under the lock, then wait without it: work still in
	// flight may call back into the client (a recovery starts a sweep, which
	// checks running under the same lock) and must not wait for Stop.
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return nil
	}
	c.running = false
	cronDone := c.cron.Stop()
	c.stopWork()
	c.mu.Unlock()

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
	if err := c.store.ServerDelete(context.WithoutCancel(ctx), c.cfg.Server); err != nil {
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
	for s := from; !s.After(cur) && ctx.Err() == nil; s = g.Add(s, 1) {
		if !c.owns(g.Position(s)) || complete[s] {
			continue
		}
		kind := KindFire
		if s.Before(cur) {
			kind = KindCatchup
		}
		if _, err := c.fireSlot(ctx, c.hardCtxOr(ctx), s, kind); err != nil {
			// Leave lastGood where it is: the next tick retries from here.
			c.setHealth(err)
			return
		}
	}
	if err := c.fireLeftovers(ctx, g.Add(cur, -1)); err != nil {
		c.setHealth(err)
		return
	}
	if ctx.Err() == nil {
		c.lastGood = cur
		c.setHealth(nil)
	}
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
	if c.hardCtx != nil {
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
	fired := make(map[time.Time]bool)
	for workCtx.Err() == nil {
		overdue, err := c.store.JobsOverdueSlots(workCtx, cur, sweepBatch)
		if err != nil {
			return res, fmt.Errorf("prescient: sweep: %w", err)
		}
		progress := false
		for _, s := range overdue {
			// A slot whose jobs are all of unknown checks stays overdue; fire
			// each slot once per sweep so such jobs cannot stall it.
			if fired[s] {
				continue
			}
			fired[s], progress = true, true
			rec, err := c.fireSlot(workCtx, hardCtx, s, KindSweep)
			if err != nil {
				return res, fmt.Errorf("prescient: sweep: %w", err)
			}
			res.Slots++
			res.Jobs += rec.Checked
		}
		if !progress {
			break
		}
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
