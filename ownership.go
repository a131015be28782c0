package prescient

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// ownership tracks which positions this server fires and whether its store
// answers.
type ownership struct {
	mu        sync.RWMutex
	auto      slots.Ownership // the last assignment, with AutoOwnership
	healthErr error
	healthy   bool
	// seen is, per other server, its last heartbeat time read and when
	// this server's clock first read it (zero: it was stale then).
	seen map[string]peerSeen
}

// peerSeen is what one server last saw of another's heartbeat.
type peerSeen struct {
	heartbeat time.Time // as the other server wrote it, by its clock
	at        time.Time // when this server read it new, by its own clock
}

// owns reports whether this server fires position p.
func (c *Client) owns(p int) bool {
	if !c.cfg.AutoOwnership {
		return c.cfg.Ownership.Owns(c.cfg.Server, p)
	}
	c.own.mu.RLock()
	defer c.own.mu.RUnlock()
	return slices.Contains(c.own.auto[c.cfg.Server], p)
}

// Positions returns the positions this server fires now, ascending. With
// automatic ownership it is empty until the first heartbeat.
func (c *Client) Positions() []int {
	var out []int
	for p := range c.cfg.Grid.Positions() {
		if c.owns(p) {
			out = append(out, p)
		}
	}
	return out
}

// Heartbeat records in the store that this server is alive, with the
// positions it fires. With automatic ownership it first reads the live
// servers (those whose last heartbeat is within ServerTimeout, and itself)
// and takes the positions slots.Assign gives it. A running client calls it
// every Config.Heartbeat; tests and simulations call it after moving the
// clock. Its error is also what Ready reports.
func (c *Client) Heartbeat(ctx context.Context) error {
	// On a database server, a heartbeat that takes half the server timeout
	// is a failure: a database that hangs (a stuck disk, a paused
	// primary, a partition without a reset) must make the server say it is
	// not ready, and its connection be dropped so that the next one can
	// reach a new primary, rather than stop every later heartbeat behind
	// it. Not on a store of one writer (SQLite): there the heartbeat waits
	// for the write lock a group holds while its checks run, up to the
	// runtime guard, and its busy timeout bounds the wait.
	stopping := ctx
	if c.drv.Features().MultiHost {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ServerTimeout/2)
		defer cancel()
	}
	now := c.now()
	if c.cfg.AutoOwnership {
		servers, err := c.drv.ServerList(ctx)
		if err != nil {
			if stopping.Err() != nil {
				return err // stopping: the store did not fail
			}
			c.storeError(StoreOpHeartbeat, err)
			return c.setHealth(fmt.Errorf("prescient: heartbeat: %w", err)) // the driver says "list servers"
		}
		c.own.mu.Lock()
		live := c.own.live(c.cfg.Server, servers, now, c.cfg.ServerTimeout)
		next, others := assignAuto(c.cfg.Server, live, servers, c.cfg.Grid.Positions())
		// A standby (no position before) that takes positions over sweeps
		// too; only the first assignment, at start-up, does not.
		assigned, before := c.own.auto != nil, c.own.auto[c.cfg.Server]
		c.own.auto = next
		c.own.mu.Unlock()
		if !slices.Equal(before, next[c.cfg.Server]) {
			attrs := []any{"live_servers", len(slices.Compact(slices.Sorted(slices.Values(live)))), "from", before, "to", next[c.cfg.Server]}
			if len(others) > 0 {
				attrs = append(attrs, "positions_fired_by_static_servers", others)
			}
			c.log.Info("positions changed", attrs...)
			// Taking over positions may mean a server died mid-slot: its
			// rolled-back jobs are overdue in slots the ledger may already
			// call complete. Sweep now rather than on the schedule.
			if assigned && slices.ContainsFunc(next[c.cfg.Server], func(p int) bool { return !slices.Contains(before, p) }) {
				c.sweepSoon("took over positions")
				// A server stopped mid-slot (frozen, its host suspended)
				// still holds the jobs its transactions claimed, which the
				// sweep now passes by, until the database ends those
				// transactions (Begin's idle bound): sweep again by then,
				// rather than at the schedule's next run.
				if b, ok := c.drv.(*boundedDriver); ok {
					c.sweepAfter(b.waitLimit(), "took over positions (the jobs a stopped server held)")
				}
			}
		}
	}
	err := c.drv.ServerHeartbeat(ctx, &driver.Server{Name: c.cfg.Server, StartedAt: c.startedAt, HeartbeatAt: now, Positions: c.Positions(),
		Firing: c.heldSlots(), Timeout: c.cfg.ServerTimeout, Checks: c.checkNames(), Ownership: c.ownershipMode()})
	if err != nil {
		if stopping.Err() != nil {
			return err // stopping: the store did not fail
		}
		c.storeError(StoreOpHeartbeat, err)
		return c.setHealth(fmt.Errorf("prescient: %w", err)) // the driver says "heartbeat of server ..."
	}
	return c.setHealth(nil)
}

// ownershipMode says how this server owns positions, for its heartbeat.
func (c *Client) ownershipMode() string {
	switch {
	case c.cfg.AutoOwnership:
		return driver.OwnershipAuto
	case len(c.cfg.Ownership) == 0:
		return driver.OwnershipEvery
	}
	return driver.OwnershipStatic
}

// assignAuto shares n positions among the live servers of automatic
// ownership (self, and those whose heartbeat says so or says nothing: an
// older prescient's), leaving out the positions the live servers of static
// ownership, or of every position, fire: those it returns, ascending. A
// static server counted among the others was given positions it never
// fired, and one of its own went unfired until the sweep, when an operator
// moved servers from static to automatic ownership one at a time.
func assignAuto(self string, live []string, servers []*driver.Server, n int) (slots.Ownership, []int) {
	byName := make(map[string]*driver.Server, len(servers))
	for _, s := range servers {
		byName[s.Name] = s
	}
	fixed := make([]bool, n)
	var auto []string
	for _, name := range live {
		s := byName[name]
		if name == self || s == nil || s.Ownership == "" || s.Ownership == driver.OwnershipAuto {
			auto = append(auto, name)
			continue
		}
		for _, p := range s.Positions {
			if p >= 0 && p < n {
				fixed[p] = true
			}
		}
	}
	var free, taken []int
	for p, f := range fixed {
		if f {
			taken = append(taken, p)
		} else {
			free = append(free, p)
		}
	}
	return slots.AssignPositions(auto, free), taken
}

// live returns self and the servers whose heartbeat moved within timeout
// of now, both read on this server's clock: another server's heartbeat
// times are compared only with each other, never with this clock, so that
// servers whose clocks disagree still agree on who is live (comparing
// clocks, a server 40s ahead of another took it for dead while a third did
// not, and a position could fall to nobody in every view). A server seen
// for the first time is judged by its heartbeat against this clock: it
// cannot be judged otherwise yet. The caller holds o.mu.
func (o *ownership) live(self string, servers []*driver.Server, now time.Time, timeout time.Duration) []string {
	seen := make(map[string]peerSeen, len(servers))
	live := []string{self}
	for _, s := range servers {
		if s.Name == self {
			continue
		}
		p, ok := o.seen[s.Name]
		switch {
		case ok && p.heartbeat.Equal(s.HeartbeatAt):
		case ok:
			p = peerSeen{heartbeat: s.HeartbeatAt, at: now}
		case now.Sub(s.HeartbeatAt) <= timeout:
			// First seen, fresh: it moved when it says, by this clock at
			// the latest; taking it as moving now would hold a server that
			// just died for live a whole timeout longer than the servers
			// that saw it stop, and positions would fall to nobody.
			p = peerSeen{heartbeat: s.HeartbeatAt, at: s.HeartbeatAt}
			if p.at.After(now) {
				p.at = now
			}
		default: // stale when first seen: dead until it moves
			p = peerSeen{heartbeat: s.HeartbeatAt}
		}
		seen[s.Name] = p
		if !p.at.IsZero() && now.Sub(p.at) <= timeout {
			live = append(live, s.Name)
		}
	}
	o.seen = seen
	return live
}

// Ready returns nil when the server's last use of the store succeeded, and
// the error that failed otherwise. A server that is not ready keeps running
// and retrying; once the store answers again it catches up the slots it
// missed and sweeps overdue jobs.
func (c *Client) Ready() error {
	c.own.mu.RLock()
	defer c.own.mu.RUnlock()
	if !c.own.healthy && c.own.healthErr == nil {
		return fmt.Errorf("prescient: %w", ErrNotStarted)
	}
	return c.own.healthErr
}

// setHealth records the outcome of a use of the store and returns err. A
// recovery (an error followed by success) starts a catch-up sweep.
func (c *Client) setHealth(err error) error {
	c.own.mu.Lock()
	if c.own.healthErr == ErrClosed { // stopping or stopped: Start clears it
		c.own.mu.Unlock()
		return err
	}
	recovered := err == nil && c.own.healthErr != nil
	wasHealthy := c.own.healthy
	c.own.healthErr, c.own.healthy = err, err == nil
	c.own.mu.Unlock()
	switch {
	case err != nil && wasHealthy:
		c.log.Error("store unavailable: not ready, retrying", "error", err)
	case recovered:
		c.log.Info("store available again: ready, catching up")
		c.sweepSoon("store recovered")
	}
	return err
}

// sweepSoon sweeps in the background, so that jobs overdue because of an
// outage or a dead server run without waiting for the schedule. It does
// nothing unless the client is running.
func (c *Client) sweepSoon(reason string) {
	work, hard, ok := c.track()
	if !ok {
		return
	}
	go func() {
		defer c.wg.Done()
		_, _ = c.sweep(work, hard, c.cfg.SweepMode, reason) // logged by sweepFinished
	}()
}

// sweepAfter is sweepSoon once d has passed, unless the client stops first.
func (c *Client) sweepAfter(d time.Duration, reason string) {
	work, hard, ok := c.track()
	if !ok {
		return
	}
	go func() {
		defer c.wg.Done()
		if sleepCtx(work, d) {
			_, _ = c.sweep(work, hard, c.cfg.SweepMode, reason) // logged by sweepFinished
		}
	}()
}

// heartbeatLoop heartbeats every Config.Heartbeat until ctx ends, and soon
// after a firing of a past slot begins (Client.beatSoon).
func (c *Client) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.beatSoon:
			// A sweep firing many past slots one after the other asks
			// for one each: at most one every beatSoonGap.
			if d := beatSoonGap - time.Since(last); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
		last = time.Now()
		_ = c.Heartbeat(ctx) // logged by setHealth; Ready reports it
	}
}

// beatSoonGap is the least time between a heartbeat and one asked for by a
// firing of a past slot (Client.beatSoon).
const beatSoonGap = 100 * time.Millisecond

// checkNames returns the names of the checks the client runs, sorted (as
// Registry.All returns them); never nil.
func (c *Client) checkNames() []string {
	names := []string{}
	if c.cfg.Checks != nil {
		for _, ch := range c.cfg.Checks.All() {
			names = append(names, ch.Name)
		}
	}
	return names
}
