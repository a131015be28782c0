package prescient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// catchupMax bounds how many missed slots one tick fires; older ones are left
// to the sweep, so a server waking from a long pause does not walk slot by
// slot through days of empty ones.
const catchupMax = 1000

// tickWindow returns the slots a tick at now fires, from the first to cur,
// the slot in progress: the slots after lastGood (the last slot up to which
// every owned slot fired; zero before the first tick), and, with a positive
// lookBack (automatic ownership: the server timeout), the slots of the last
// lookBack plus one slot, whose positions may have just come from a server
// that died. It never reaches back more than catchupMax slots.
func tickWindow(g slots.Grid, now, lastGood time.Time, lookBack time.Duration) (from, cur time.Time) {
	cur = g.Floor(now)
	from = cur
	if !lastGood.IsZero() {
		from = g.Add(lastGood, 1)
	}
	if lookBack > 0 {
		if back := g.Floor(cur.Add(-lookBack - g.Resolution)); back.Before(from) {
			from = back
		}
	}
	if int(cur.Sub(from)/g.Resolution) >= catchupMax {
		from = g.Add(cur, -(catchupMax - 1))
	}
	return from, cur
}

// Tick fires the slots this server owns that are due and not yet fired: the
// slot in progress now, and past slots that are incomplete in the ledger
// back to the last slot up to which every owned slot fired (after a missed
// tick, a store outage or a pause). With automatic ownership it also looks
// back ServerTimeout, to catch up slots of positions it has just taken over
// from a server that died. The engine's ticks (tickLoop) do the same at
// every slot boundary; tests and simulations call Tick after moving the
// clock. Ticks never overlap.
//
// A slot is in progress when it has begun by the client's clock and, on
// the host's clock, by the database's too if that is behind (see begun).
func (c *Client) Tick(ctx context.Context) {
	c.tickMu.Lock()
	defer c.tickMu.Unlock()
	c.tick(ctx, c.tickBegun(ctx, c.now()))
}

// clockWait bounds a tick's read of the database's clock: a read that
// waits longer (for a pool connection, while a slot takes them all) leaves
// the tick to the latest reading and the time since it (see begun).
const clockWait = 250 * time.Millisecond

// tickBegun is begun for a tick, within clockWait. Every tick reads the
// database's clock: going by a kept reading for 30 s between readings was
// tried, and the first check of a slot came 26 and 32 ms after its
// boundary in the peer bench, against 4 to 6 ms reading at every tick.
func (c *Client) tickBegun(ctx context.Context, now time.Time) time.Time {
	ctx, cancel := context.WithTimeout(ctx, clockWait)
	defer cancel()
	return c.begun(ctx, now)
}

// tickLoop ticks at every slot boundary until work ends. On a host whose
// clock runs ahead of the database's, a tick at the host's boundary found
// that slot not begun by the database's clock, and fired it early by as
// much (a server 10 minutes ahead ran checks 10 minutes before their time;
// noted by the trial of time and warned of since). The ticks are timed by
// the database's clock instead, read at each tick (see tickAt): the loop
// sleeps from the end of one tick to the next boundary by that clock, for
// a duration, so that a step of the host's clock (NTP setting right a host
// that was ahead) moves no tick; ticks armed on the host's wall clock with
// the difference added were late by the step, and ticks that waited for
// the database's boundary inside a cron job took that wait from the slot's
// firing (found by two reviews). (Moving the client's whole clock to the
// database's was tried before: a tick armed on one clock and judged on the
// other fired each slot most of a slot late.) On an injected clock
// (Config.Now) the ticks keep the host's boundaries, as before; a host
// behind the database's clock fires its slots late by as much.
//
// Ticks never overlap. A tick that ran past the next boundary is followed
// at once by the tick of that boundary, rather than at the one after.
func (c *Client) tickLoop(work context.Context) {
	g := c.cfg.Grid
	at := time.Now()
	if c.host != nil {
		at = c.tickBegun(work, c.now())
	}
	for {
		next := g.Next(at)
		if !sleepCtx(work, next.Sub(at)) {
			return
		}
		for {
			end := c.tickAt(work, next)
			if work.Err() != nil {
				return
			}
			if passed := g.Floor(end); passed.After(next) {
				next = passed // a boundary passed while it ran
				continue
			}
			at = end
			break
		}
	}
}

// tickAt is the tick of the boundary slot, and returns when it ended, on
// the clock the loop runs on: the database's (see begun), or, on an
// injected clock, the host's.
func (c *Client) tickAt(ctx context.Context, slot time.Time) (end time.Time) {
	c.tickMu.Lock()
	defer c.tickMu.Unlock()
	if c.host == nil {
		c.tick(ctx, c.now())
		return time.Now()
	}
	at := c.tickBegun(ctx, c.now())
	if wait := slot.Sub(at); wait > 0 && wait < c.cfg.Grid.Resolution/2 {
		// Early by the database's clock (the difference moved since the
		// last reading): wait for the boundary. Early by more (the
		// database's clock stepped back), this tick fires what has
		// begun, and the loop times the next one anew.
		if !sleepCtx(ctx, wait) {
			return at
		}
		at = slot
	}
	began := time.Now()
	c.tick(ctx, at)
	return at.Add(time.Since(began))
}

// sleepCtx sleeps for d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// tick fires the slots in progress at now and those missed before (see
// Tick). Its caller holds tickMu, and reads the clock once it has: a tick
// that waited for the one before with the time it had read before it (the
// tick after a start-up sweep, behind the first tick, whose check moved an
// injected clock on) fired none of the slots that passed meanwhile.
func (c *Client) tick(ctx context.Context, now time.Time) {
	g := c.cfg.Grid
	var lookBack time.Duration
	if c.cfg.AutoOwnership {
		lookBack = c.cfg.ServerTimeout
	}
	from, cur := tickWindow(g, now, c.lastGood, lookBack)
	var complete map[time.Time]bool
	if from.Before(cur) {
		var err error
		if complete, err = c.completeSlots(ctx, from, cur); err != nil {
			if ctx.Err() != nil {
				return // stopping: the store did not fail
			}
			c.storeError(StoreOpLedger, err)
			c.setHealth(fmt.Errorf("prescient: tick: read ledger: %w", err))
			return
		}
	}
	// A slot that fails does not hold up the ones after it; the next tick
	// starts again from the first that failed (later ones that succeeded are
	// complete in the ledger by then, and skipped). The next tick also starts
	// from a slot the client is firing already (a sweep or a FireSlot call
	// has it; ticks never overlap), which is skipped without an error: by
	// then the ledger shows it complete, or that firing was cut short and
	// the tick fires what it left.
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
		_, err := c.fireSlot(ctx, c.hardCtxOr(ctx), s, kind, false)
		if err != nil && failed.IsZero() {
			failed = s
		}
		switch {
		case errors.Is(err, errSlotBusy):
			c.log.Debug("slot left to the firing of it in progress", "slot", s)
		case err != nil:
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
	p := &driver.JobsDueParams{Slot: slot, Limit: c.pageSize()}
	for {
		due, err := c.drv.JobsDue(ctx, p)
		if err != nil {
			c.storeError(StoreOpJobsDue, err)
			return fmt.Errorf("prescient: tick: %w", err)
		}
		if len(due) == 0 {
			return nil
		}
		for _, d := range due {
			if _, ok := c.cfg.Checks.Lookup(d.Check); ok {
				_, err := c.fireSlot(ctx, c.hardCtxOr(ctx), slot, KindCatchup, false)
				if errors.Is(err, errSlotBusy) {
					return nil // another firing of the slot (a sweep, FireSlot) has them
				}
				return err
			}
		}
		// A page of checks other servers run: the server's own may be
		// behind it.
		p.AfterID = due[len(due)-1].ID
	}
}

// completeSlots returns the slots in [from, until) that some server finished
// firing.
func (c *Client) completeSlots(ctx context.Context, from, until time.Time) (map[time.Time]bool, error) {
	recs, err := c.drv.SlotList(ctx, &driver.SlotListParams{Since: from, Until: until, Limit: catchupMax * 4})
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
