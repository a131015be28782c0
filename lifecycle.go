package prescient

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/prescient-dev/prescient/slots"
)

// Start records the grid and the check catalog in the store, registers the
// server (heartbeating from then on, every Config.Heartbeat), fires the
// current slot if this server owns it and then every owned slot at its
// boundary until Stop, and runs the start-up sweep meanwhile (unless
// disabled; ending ctx cuts it short). The slot ticks run in a loop of
// their own (tickLoop); the scheduled sweep and pruning are driven by
// robfig/cron. Start returns once the start-up sweep
// is done; ctx bounds that sweep only: the client runs until Stop,
// whatever becomes of ctx.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isRunning() {
		return errors.New("prescient: start: already running")
	}
	if old, err := c.drv.GridGet(ctx); err == nil && (old.Resolution != c.cfg.Grid.Resolution || old.Offset != c.cfg.Grid.Offset) {
		c.log.Warn("the slot grid changed: jobs scheduled on the old grid are moved onto the new one by the sweep, and the SQL functions now round to the new grid",
			"was", slots.Grid{Resolution: old.Resolution, Offset: old.Offset}.String(), "now", c.cfg.Grid.String())
	}
	if err := c.drv.GridSave(ctx, c.cfg.Grid); err != nil {
		c.storeError(StoreOpStart, err)
		return startError{err} // the driver says "save grid"
	}
	if n := c.drv.Features().Conns; n > 0 && n <= c.cfg.Workers {
		// Each running group holds a connection for its transaction.
		c.log.Warn("the store's connection pool is no larger than workers: fewer groups of checks may run at once than workers says, "+
			"and a group whose claim skips jobs rolls back instead of narrowing its attempt; give the pool workers + 4 connections "+
			"(database.max_conns, postgres.Opts.MaxConns, pool_max_conns in the URL, or the MaxConns of a pool handed to postgres.New; "+
			"postgres.Open sizes it so by itself only up to postgres.PoolAutoMax, 50)",
			"pool", n, "workers", c.cfg.Workers)
	}
	if err := c.SyncCatalog(ctx); err != nil {
		c.storeError(StoreOpStart, err)
		return startError{err}
	}
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	hard, stopNow := context.WithCancel(context.WithoutCancel(ctx))
	c.runMu.Lock()
	c.workCtx, c.hardCtx, c.stopWork, c.stopNow = work, hard, stopWork, stopNow
	c.startedAt = c.now()
	c.runMu.Unlock()
	c.warnNameTaken(ctx)
	c.own.mu.Lock()
	c.own.healthErr, c.own.healthy = nil, false // not started, until the heartbeat: no longer ErrClosed
	c.own.mu.Unlock()
	if err := c.Heartbeat(ctx); err != nil {
		stopWork()
		stopNow()
		return startError{err}
	}
	// The start-up sweep takes the slots before the one in progress now,
	// and the ticks, which run meanwhile, every owned slot from that one
	// on: a server whose start-up sweep takes long fires its slots on time,
	// with the positions its heartbeats take (another's, a server having
	// died) meanwhile.
	//
	// The start-up sweep stops at the slot in progress by the database's
	// clock if it is behind this host's (see sweep), and the ticks begin
	// there: on a host ahead of the database, the slots between are this
	// server's ticks', each fired as the database's clock reaches it (see
	// tickLoop), rather than left to the next sweep. Reading the
	// database's clock also warns of a host whose clock is off it.
	now := c.begun(ctx, c.now())
	if !c.cfg.SweepOnStartDisabled {
		cut := c.cfg.Grid.Floor(now)
		c.tickMu.Lock()
		c.lastGood = c.cfg.Grid.Add(cut, -1)
		c.tickMu.Unlock()
	}
	c.cron = cron.New(cron.WithLocation(time.UTC), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if c.cfg.SweepSchedule != "-" {
		spec, _ := cron.ParseStandard(c.cfg.SweepSchedule) // validated with the config
		c.cron.Schedule(spec, c.job(func(work, hard context.Context) {
			_, _ = c.sweep(work, hard, c.cfg.SweepMode, SweepScheduled) // logged by sweepFinished
		}))
	}
	if c.cfg.PruneSchedule != "-" && c.cfg.HistoryRetention > 0 {
		spec, _ := cron.ParseStandard(c.cfg.PruneSchedule)
		c.cron.Schedule(spec, c.job(func(work, _ context.Context) {
			began := time.Now()
			n, err := c.Prune(work)
			took := time.Since(began)
			switch {
			case err != nil && work.Err() != nil:
				// Stopped by shutdown, not a failure (its store error is
				// not counted either): the next prune deletes the rest.
				c.log.Info("prune stopped by shutdown; the next prune deletes the rest", "records", n, "took", took)
			case err != nil:
				c.log.Error("prune history", "records", n, "took", took, "error", err)
			case n > 0:
				c.log.Info("pruned history", "records", n, "took", took)
			}
		}))
	}
	c.runMu.Lock()
	c.running = true
	c.wg.Add(3)
	c.runMu.Unlock()
	// Heartbeat from here on, through the start-up sweep however long it
	// runs: a server silent for ServerTimeout is taken for gone, its
	// positions by the others.
	go func() {
		defer c.wg.Done()
		c.heartbeatLoop(work)
	}()
	go func() {
		defer c.wg.Done()
		c.Tick(work) // the slot in progress at start-up
	}()
	go func() {
		defer c.wg.Done()
		c.tickLoop(work) // and every slot boundary from here on
	}()
	c.cron.Start()
	c.log.Info("started", "grid", c.cfg.Grid.String(), "auto_ownership", c.cfg.AutoOwnership, "positions", c.Positions())
	if len(c.cfg.Ownership) > 0 && len(c.Positions()) == 0 {
		c.log.Warn("this server is not in the static ownership map: it fires no slot (it still sweeps); check its name (server, PRESCIENT_SERVER)",
			"servers_in_map", c.cfg.Ownership.Servers()) // the logger names this server already
	}
	if !c.cfg.SweepOnStartDisabled {
		// Start's caller may give up (a signal during a long start-up sweep).
		sweepCtx, cancel := context.WithCancel(ctx)
		_, _ = c.sweep(sweepCtx, sweepCtx, c.cfg.SweepMode, SweepStartup) // logged by sweepFinished
		cancel()
		// And a tick after it, beside the next one at its boundary: a slot
		// a tick found busy meanwhile (the sweep firing it) is looked at
		// again now rather than at the next boundary.
		if work, _, ok := c.track(); ok {
			go func() {
				defer c.wg.Done()
				c.Tick(work)
			}()
		}
	}
	return nil
}

// startError is an error of Start: "prescient: start: " and the error,
// without the "prescient: " it may begin with, so that each context appears
// once.
type startError struct{ err error }

func (e startError) Error() string {
	return "prescient: start: " + strings.TrimPrefix(e.err.Error(), "prescient: ")
}

func (e startError) Unwrap() error { return e.err }

// warnNameTaken warns when a live server is registered under this client's
// name already: two processes sharing a name share one registration, one
// row of the ledger per slot and one name in history, and automatic
// ownership counts them as one (found by a new user's trial of the library).
// It may be this server's own run before, ended less than ServerTimeout ago
// without Stop (a crash).
func (c *Client) warnNameTaken(ctx context.Context) {
	servers, err := c.drv.ServerList(ctx)
	if err != nil {
		return // the heartbeat that follows says what is wrong
	}
	now := c.now()
	var older []string
	for _, s := range servers {
		if s.Name == c.cfg.Server && s.Live(now, c.cfg.ServerTimeout) {
			c.log.Warn("a live server is registered under this server's name already: another process with the same name "+
				"(give each its own: Config.Server, PRESCIENT_SERVER), or this server's own run before, ended without Stop less than server_timeout ago",
				"registered_at", s.StartedAt, "last_heartbeat", s.HeartbeatAt)
			return
		}
		if s.Name != c.cfg.Server && s.Ownership == "" && s.Live(now, c.cfg.ServerTimeout) {
			older = append(older, s.Name)
		}
	}
	if len(older) > 0 && len(c.cfg.Ownership) > 0 && !c.cfg.AutoOwnership {
		// An older prescient does not record how it owns positions: with
		// automatic ownership it counts this server among its own kind and
		// leaves it positions this server does not fire, which wait for a
		// sweep (found by a trial of a rolling upgrade).
		c.log.Warn("live servers of an older prescient do not say how they own positions: if they own them automatically, "+
			"they count this static server as automatic and leave it positions it does not fire, whose jobs wait for the sweep; "+
			"upgrade them before starting servers with static ownership", "servers", older)
	}
}

// isRunning reports whether the client is started.
// started returns when Start last started the client; zero if it never
// did (a client that only schedules, or fires slots by FireSlot).
func (c *Client) started() time.Time {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.startedAt
}

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
	// Not ready from here on (/readyz, prescient_ready): a stopping server
	// takes no new work. Nothing the store answers meanwhile changes that.
	c.own.mu.Lock()
	c.own.healthErr, c.own.healthy = ErrClosed, false
	c.own.mu.Unlock()
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
	// server's positions at once rather than after ServerTimeout; not the
	// registration of a new process of the same name started meanwhile (a
	// rolling restart), which would otherwise look gone until its next
	// heartbeat.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := c.drv.ServerDelete(dctx, c.cfg.Server, c.startedAt); err != nil {
		c.storeError(StoreOpHeartbeat, err)
		c.log.Warn("deregister", "error", err)
	}
	c.log.Info("stopped")
	return nil
}
func (c *Client) hardCtxOr(ctx context.Context) context.Context {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.running {
		return c.hardCtx
	}
	return ctx
}
