package prescient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
)

// A transaction's checks run one after the other on the goroutine that runs
// the transaction, called directly: handing each check to a goroutine of its
// own and waiting for it cost the per-entity path a few percent of its
// checks a second (two goroutine switches and a channel per check, measured
// on the benchmarks of bench_test.go and the peer bench). The runtime guard
// still holds for a check that ignores its context, because that goroutine
// is not the group's: runTx starts it and watches it. When a check's guard
// ends (or shutdown interrupts it) before it returned, the goroutine is left
// to it, and the watching goroutine takes the transaction over (see
// takeOver), doing what the goroutine would have done for a check that
// failed so: the check's checks.Tx is closed, its writes undone, and the
// transaction goes on without it. The goroutine left behind ends when the
// check returns, if ever, touching nothing. A check that watches its context
// may return at that moment too: whichever of the two sees it first
// records the same failure.

// errLeft is what the calls of a goroutine left to its check return once
// the check does: the transaction is no longer theirs.
var errLeft = errors.New("left to a check that outlived its guard")

// txState is a transaction and what the goroutine running it has done, as
// of the check it runs now: what the watching goroutine needs to take over.
// Only the goroutine running the transaction changes it, and only between
// checks.
type txState struct {
	tx          driver.Tx
	ids         []int64 // the jobs claimed
	held        []ran   // failures of an earlier run of the group, still held
	units       []unit
	done        []ran // held failures of the jobs claimed, then the units run
	at          int   // the unit running, or last run
	called      int   // units whose check was called
	began       time.Time
	attempt     int64
	optimistic  bool
	dropAttempt bool
	rerun       bool // a rerun took the attempt over
}

// unrun returns the jobs of units[i:] without a held failure: those the
// transaction did not get to.
func (st *txState) unrun(i int) []int64 {
	var ids []int64
	for _, u := range st.units[i:] {
		for _, j := range u.jobs { // a batch check's unit has several
			if !heldJob(st.held, j.ID) {
				ids = append(ids, j.ID)
			}
		}
	}
	return ids
}

// watch oversees the checks of one transaction.
type watch struct {
	mu    sync.Mutex
	st    *txState
	timer *time.Timer // fires when the check running may have overrun
	armed time.Time   // when timer fires; zero when it is not armed
	// The check running now: running between begin and end.
	running  bool
	deadline time.Time // its guard's end, or shutdown's
	unit     unit
	ct       *checkTx
	cancel   context.CancelFunc // ends the check's context
	limits   guards.Limits
	start    time.Time
	// halted is when hard ended (shutdown), zero before.
	halted   time.Time
	stopHalt func() bool
	// left is set, and leftCh closed, once the goroutine is left to the
	// check running; why is the check's failure, or errInterrupted.
	left   bool
	why    error
	leftCh chan struct{}
}

func newWatch(hard context.Context) *watch {
	w := &watch{leftCh: make(chan struct{})}
	w.stopHalt = context.AfterFunc(hard, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.halted = time.Now()
		if w.running {
			w.deadline = w.halted
			w.arm(w.halted)
		}
	})
	return w
}

// stop releases the watch's timer and its hook on shutdown.
func (w *watch) stop() {
	w.stopHalt()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// arm makes the timer fire at t at the latest. w.mu is held.
func (w *watch) arm(t time.Time) {
	if !w.armed.IsZero() && !t.Before(w.armed) {
		return // it fires earlier, and fire arms it again
	}
	w.armed = t
	d := time.Until(t)
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
		return
	}
	w.timer.Reset(d)
}

// begin records that the check of u starts now under limits, writing
// through ct. Most checks find the timer armed for a later time and cost no
// timer operation.
func (w *watch) begin(u unit, ct *checkTx, limits guards.Limits, start time.Time, cancel context.CancelFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running, w.unit, w.ct, w.limits, w.start, w.cancel = true, u, ct, limits, start, cancel
	w.deadline = start.Add(limits.Runtime)
	if !w.halted.IsZero() {
		w.deadline = w.halted
	}
	w.arm(w.deadline)
}

// end records that the check returned; errLeft if it returned too late.
func (w *watch) end() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.left {
		return errLeft
	}
	w.running = false
	w.unit, w.ct, w.cancel = unit{}, nil, nil
	return nil
}

// exited leaves the goroutine to a check that ended it (runtime.Goexit)
// instead of returning: the goroutine runs only deferred calls from now on.
// Once shutdown has interrupted the check, that is all it is, as when a
// check returns then.
func (w *watch) exited(name string, interrupted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if interrupted || !w.halted.IsZero() {
		w.leave(errInterrupted)
		return
	}
	w.leave(fmt.Errorf("check %s: %w", name, errCheckExited))
}

// fire leaves the goroutine to the check running if it overran, and arms
// the timer again otherwise.
func (w *watch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = time.Time{}
	if !w.running || w.left {
		return
	}
	if now := time.Now(); now.Before(w.deadline) {
		w.arm(w.deadline)
		return
	}
	if !w.halted.IsZero() {
		w.leave(errInterrupted)
		return
	}
	w.leave(fmt.Errorf("check %s ran past its runtime guard of %s", w.unit.check.Name, w.limits.Runtime))
}

// leave leaves the goroutine to the check running. w.mu is held.
func (w *watch) leave(why error) {
	if w.left {
		return
	}
	w.left, w.why = true, why
	close(w.leftCh)
}

// isLeft reports whether the goroutine was left to a check. Once a check
// has returned in time it cannot change, so the goroutine reads it to skip
// what its transaction's end would do.
func (w *watch) isLeft() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.left
}

// txResult is what a transaction's goroutine returns.
type txResult struct {
	t    *SlotRecord
	rest []int64
	err  error
}

// takeOver ends the check of a goroutine left to it, and goes on with its
// transaction: the check can no longer write (its checks.Tx is closed,
// waiting for a statement it has under way, which its context already
// cancelled) and fails, or, interrupted by shutdown, leaves its job
// untouched, as when a check returns. In a savepoint, its writes are undone
// and the transaction goes on with the next check, on a goroutine of its
// own. Optimistically, the transaction is rolled back and the group runs
// again, each check in a savepoint, without it, as after any failure.
func (c *Client) takeOver(work, hard context.Context, slot time.Time, g *group, w *watch, claimed func()) (*SlotRecord, []int64, error) {
	// w.left was set under w.mu, after which the goroutine left changes
	// nothing.
	w.mu.Lock()
	st, u, ct, limits, start, why, stop := w.st, w.unit, w.ct, w.limits, w.start, w.why, w.cancel
	w.mu.Unlock()
	stop() // a check that exited has its statements under way cut short too
	ct.close()
	var r ran // interrupted by shutdown: no decision, the job untouched
	if errors.Is(why, errInterrupted) {
		c.log.Warn("a check did not return when shutdown interrupted it; its job stays due", "check", u.check.Name)
	} else {
		r.decisions = c.decideUnit(limits, u, nil, why, time.Since(start))
		r.basis = make(map[int64]jobBasis, len(u.jobs))
		for _, j := range u.jobs {
			r.basis[j.ID] = basisOf(j)
		}
	}
	ctx, cancel := finishCtx(hard)
	defer cancel()
	// A statement of the check cut short may have taken the transaction
	// with it (pgx's default cancellation closes the connection), its locks
	// outliving it a moment on the server: as when a check returns so, the
	// failures are recorded in a transaction of their own that waits for
	// those locks (recover), and the others' writes are lost.
	err := st.tx.Err()
	if err == nil && !st.optimistic {
		err = st.tx.RollbackTo(ctx)
	}
	if err != nil {
		st.done = append(st.done, r)
		t, rest, err := c.txDied(hard, slot, st, st.at+1, err)
		c.endAttempt(hard, st.attempt, false)
		return t, rest, err
	}
	if !st.optimistic {
		st.done = append(st.done, r)
		return c.watched(work, hard, slot, g, claimed, func(w *watch) (*SlotRecord, []int64, error) {
			return c.txChecks(work, hard, slot, g, st, st.at+1, claimed, w)
		})
	}
	_ = st.tx.Rollback(ctx)
	if r.decisions == nil {
		c.endAttempt(hard, st.attempt, true)
		return &SlotRecord{}, nil, nil // everything stays due
	}
	c.isolateUntil.Store(c.now().Add(isolateAfterFailure).UnixNano())
	return c.runTx(work, hard, slot, g, st.ids, false, append(slices.Clip(st.held), r), st.attempt, claimed)
}
