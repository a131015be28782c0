package prescient

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/history"
)

// firingTally is what a firing's groups did so far: dispatch adds to it as each
// group ends, and recordProgress reads it while the firing runs.
type firingTally struct {
	mu  sync.Mutex
	did SlotRecord
}

// snapshot returns a copy of what the groups did so far.
func (t *firingTally) snapshot() *SlotRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.did
	r.Outcomes = maps.Clone(t.did.Outcomes)
	return &r
}

// recordProgress adds to the firing's ledger row, every Config.Heartbeat
// while the firing runs, what its groups did since the last time (SlotFinish
// with no finish: the row stays unfinished), so that status readers see a
// long slot's progress, and the row of a firing whose server dies keeps what
// its groups committed up to its last record. base is the firing's ledger
// record (slot, server, kind, start). The returned function stops it and
// returns what it recorded, Took included, for the firing's SlotFinish to
// leave out. SlotFinish adds, so a record must not be made twice: on a
// store over the network (MultiHost), a record that fails is taken as made
// (its answer may have been lost after it was added: the row may then count
// less than the firing did, never more), and each gets stopTimeout, so
// that a server that does not answer holds the firing's end up no longer;
// on an in-process store (SQLite), a write that fails wrote nothing, and a
// record waits for the write lock of the group running (its busy timeout
// bounds it): what it held is added by the next record or the finish.
func (c *Client) recordProgress(ctx context.Context, base *SlotRecord, t *firingTally) (stop func() *SlotRecord) {
	recorded := &SlotRecord{}
	remote := c.drv.Features().MultiHost
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(c.cfg.Heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := t.snapshot()
			delta := minus(now, recorded)
			if delta.Checked == 0 && delta.Rescheduled == 0 && delta.Failures == 0 && len(delta.Outcomes) == 0 &&
				now.Unknown == recorded.Unknown && now.MaxLateness == recorded.MaxLateness {
				continue // nothing new: no statement for a slot waiting on a slow check
			}
			now.Took = max(c.now().Sub(base.StartedAt), 0)
			rec := &SlotRecord{Slot: base.Slot, Server: base.Server, Kind: base.Kind, StartedAt: base.StartedAt}
			rec.Add(delta)
			rec.Unknown = now.Unknown
			rec.Took = max(now.Took-recorded.Took, 0)
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if remote {
				rctx, cancel = context.WithTimeout(ctx, stopTimeout)
			}
			err := c.drv.SlotFinish(rctx, rec)
			cancel()
			if err != nil && ctx.Err() == nil {
				c.storeError(StoreOpLedger, err)
			}
			switch {
			case err == nil:
				recorded = now
			case remote:
				if ctx.Err() == nil {
					c.log.Warn("record a slot's progress in the ledger: its row may count less than the firing did", "slot", base.Slot, "error", err)
				}
				recorded = now
			}
		}
	}()
	return func() *SlotRecord {
		close(done)
		<-exited
		return recorded
	}
}

// minus returns what a did beyond b, b a record of part of the same firing:
// its counts and outcomes less b's, and a's worst lateness and unknown jobs
// (the ledger keeps the worst, and the latest count of unknown jobs).
func minus(a, b *SlotRecord) *SlotRecord {
	d := &SlotRecord{Checked: a.Checked - b.Checked, Rescheduled: a.Rescheduled - b.Rescheduled, Failures: a.Failures - b.Failures,
		Unknown: a.Unknown, MaxLateness: a.MaxLateness}
	for k, n := range a.Outcomes {
		if n -= b.Outcomes[k]; n != 0 {
			if d.Outcomes == nil {
				d.Outcomes = make(map[history.Outcome]int)
			}
			d.Outcomes[k] = n
		}
	}
	return d
}
