package prescient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// The processing protocol, written once for every store. A group of due jobs
// runs in one transaction of the store's driver:
//
//	Begin, Claim (the jobs still due that no other transaction holds)
//	for each check (one job, or one call of a batch check):
//	    Savepoint, run the check under its guards, then
//	    Release (keep its writes) or RollbackTo (undo them)
//	Apply (every job's new state, in one statement), Commit
//
// Optimistically, the savepoints are left out while checks succeed (they
// cost the group about 15% of its speed on PostgreSQL). The first check that
// fails then has no savepoint to undo its writes alone: the group's
// transaction is rolled back, and the group runs again with a savepoint per
// check, without the failed check, whose decisions hold. The checks before it
// run twice (their writes of the first run were rolled back: effects through
// job.Tx still happen once); after such a failure the client uses savepoints
// for a while (isolateAfterFailure), and Config.SavepointEveryCheck uses
// them always.
//
// The exactly-once rule: an effect is never recorded without its write, and
// a failed check's writes never commit.
//
//   - A check's writes through job.Tx and its job's new state commit
//     together, in one transaction, or not at all.
//   - A check that fails (returns an error, panics, overruns its runtime
//     guard, or goes on after one of its statements failed) has its own
//     writes undone by RollbackTo, and its failure is recorded; the other
//     checks of the group keep theirs.
//   - If the transaction dies (its connection is lost, the commit fails),
//     every write the checks kept dies with it: their jobs stay due,
//     untouched, and run again. The failures hold without their writes, so
//     recover records them in a fresh transaction.
//   - A check interrupted by shutdown is undone and its job left untouched,
//     as are the jobs of the group not yet run.

// isolateAfterFailure is how long, after a check failed in an optimistic
// group, new groups run with a savepoint per check: checks that fail now and
// then would otherwise keep making the checks before them run twice.
const isolateAfterFailure = time.Minute

// optimistic reports whether a new group may leave the savepoints out.
func (c *Client) optimistic() bool {
	return !c.cfg.SavepointEveryCheck && c.now().UnixNano() >= c.isolateUntil.Load()
}

// reclaimWait bounds how long recover waits for rows still locked, most
// likely by the transaction that just died while its server session ends.
const reclaimWait = 5 * time.Second

// unit is one call of a check: one job of a single-job check, or the jobs of
// a batch check's group.
type unit struct {
	check *checks.Check
	jobs  []*checks.Job
	// refused, when set, is why the check is not called for these jobs:
	// they fail with it (see wrongEntity).
	refused error
}

// ran is what became of one unit.
type ran struct {
	// decisions holds one decision per job; none when the unit was
	// interrupted and its jobs released.
	decisions []driver.Decision
	// basis is, per job, what of the job its decision was made from (see
	// stillHeld); set for a unit that failed or was refused, the only kinds held.
	basis map[int64]jobBasis
	// kept says the unit's writes were kept (it succeeded); otherwise they
	// were rolled back.
	kept bool
	// refused says the check was not called (see unit.refused): the unit
	// wrote nothing, so its failure holds whatever becomes of the
	// transaction, though it is kept (it needs no savepoint undone).
	refused bool
}

// runGroup runs a group: in one transaction, or, once a transaction has run
// for GroupDuration, in as many as it takes. It returns what committed.
func (c *Client) runGroup(work, hard context.Context, slot time.Time, g group) (*SlotRecord, error) {
	claimed := sync.OnceFunc(func() {
		if g.claimed != nil {
			close(g.claimed)
		}
	})
	defer claimed()
	total := &SlotRecord{}
	for ids := g.ids; len(ids) > 0 && work.Err() == nil; {
		t, rest, err := c.runTx(work, hard, slot, &g, ids, c.optimistic() && !g.settle, nil, 0, claimed)
		total.Add(t)
		if err != nil {
			c.storeError(StoreOpGroup, err)
			if g.batch != nil {
				return total, fmt.Errorf("%d job(s) of check %s: %w", len(ids), g.batch.Name, err)
			}
			return total, fmt.Errorf("group of %d job(s): %w", len(ids), err)
		}
		ids = rest
	}
	return total, nil
}

// runTx claims the jobs ids of group g still due in slot and runs their
// checks in one transaction: optimistically (no savepoints) or each in a
// savepoint. held are the decisions of checks that already failed in an
// optimistic run of the group: they are not run again, and their decisions
// are applied with the others'. runTx stops starting checks once the
// transaction has run for GroupDuration, returning the ids it did not get
// to, and when work or hard ends, leaving them due.
//
// attempt is the attempt the transaction ends (see unfinished.go): 0 to
// record a new one, that of the first run when the group runs again. claimed
// is called once the jobs are claimed.
//
// The transaction runs on a goroutine of its own, its checks called
// directly, while this one watches it for a check that outlives its guard
// (see watch.go).
func (c *Client) runTx(work, hard context.Context, slot time.Time, g *group, ids []int64, optimistic bool, held []ran, attempt int64, claimed func()) (*SlotRecord, []int64, error) {
	return c.watched(work, hard, slot, g, claimed, func(w *watch) (*SlotRecord, []int64, error) {
		return c.txRun(work, hard, slot, g, ids, optimistic, held, attempt, claimed, w)
	})
}

// watched runs f on a goroutine of its own under a watch, and returns what
// f returns, or, if the goroutine is left to a check, what the takeover of
// its transaction does.
func (c *Client) watched(work, hard context.Context, slot time.Time, g *group, claimed func(), f func(w *watch) (*SlotRecord, []int64, error)) (*SlotRecord, []int64, error) {
	w := newWatch(hard)
	defer w.stop()
	res := make(chan txResult, 1)
	go func() {
		t, rest, err := f(w)
		res <- txResult{t, rest, err}
	}()
	select {
	case r := <-res:
		if errors.Is(r.err, errLeft) {
			break // both were ready, and the select chose this one
		}
		return r.t, r.rest, r.err
	case <-w.leftCh:
	}
	return c.takeOver(work, hard, slot, g, w, claimed)
}

// txRun is runTx's transaction, on the goroutine w watches: it starts the
// attempt and the transaction, claims the jobs, and runs their checks
// (txChecks).
func (c *Client) txRun(work, hard context.Context, slot time.Time, g *group, ids []int64, optimistic bool, held []ran, attempt int64, claimed func(), w *watch) (_ *SlotRecord, _ []int64, err error) {
	if g.condemned != nil {
		defer claimed()
		return c.abandonTx(hard, slot, g, ids)
	}
	// cannotStart ends a transaction that failed to start or to claim: no
	// check ran in it, but the failures held from the group's earlier run
	// are still recorded, in a transaction of their own, and the slot fails
	// so that its jobs are taken again.
	cannotStart := func(err error) (*SlotRecord, []int64, error) {
		if len(held) == 0 {
			return nil, nil, err
		}
		t, rerr := c.recover(hard, slot, held, err)
		if rerr == nil {
			rerr = err
		}
		return t, nil, rerr
	}
	if attempt == 0 {
		if attempt, err = c.startAttempt(hard, slot, ids); err != nil {
			claimed()
			return cannotStart(err)
		}
	}
	// Nothing ran when the transaction is rolled back before a check
	// started: the attempt goes, once the failures held are recorded (it
	// counts a crash before then).
	tx, err := c.drv.Begin(hard, nil)
	if err != nil {
		claimed()
		defer c.endAttempt(hard, attempt, true)
		return cannotStart(err)
	}
	rollback := func() {
		ctx, cancel := finishCtx(hard)
		_ = tx.Rollback(ctx)
		cancel()
	}
	jobs, err := tx.Claim(hard, &driver.ClaimParams{IDs: ids, Slot: slot})
	claimed()
	if err != nil || len(jobs) == 0 {
		rollback() // before recover claims the jobs again
		defer c.endAttempt(hard, attempt, true)
		if err != nil {
			return cannotStart(err)
		}
		return nil, nil, nil
	}
	if len(jobs) < len(ids) {
		// The attempt names jobs the claim skipped: held by another
		// transaction (another server firing or sweeping the slot), or no
		// longer due. A crash of this group must not count against them,
		// so before a check starts, the attempt is narrowed to the jobs
		// claimed, beside the open transaction where the store can, and
		// otherwise (or if that fails) replaced by one naming them, the
		// transaction rolled back and the jobs claimed again. Uncommon:
		// when servers overlap on a slot, or a job was resolved,
		// cancelled, rescheduled or locked by an application's
		// transaction between the listing and the claim.
		ids = idsOf(jobs)
		if !c.narrowAttempt(hard, attempt, ids) {
			rollback()
			c.endAttempt(hard, attempt, true)
			return c.runTx(work, hard, slot, g, ids, optimistic, held, 0, claimed)
		}
	}
	held = stillHeld(held, jobs)
	st := &txState{tx: tx, ids: ids, held: held, units: c.units(g.batch, jobs), attempt: attempt, optimistic: optimistic, began: time.Now()}
	st.done = claimedOf(held, jobs)
	return c.txChecks(work, hard, slot, g, st, 0, claimed, w)
}

// txChecks runs the checks of st.units[from:] in st.tx, applies every
// decision and commits, on the goroutine w watches. It ends the attempt and
// the transaction, unless the goroutine is left to a check: the takeover
// then does.
func (c *Client) txChecks(work, hard context.Context, slot time.Time, g *group, st *txState, from int, claimed func(), w *watch) (_ *SlotRecord, _ []int64, err error) {
	w.mu.Lock()
	w.st = st
	w.mu.Unlock()
	tx, held, units := st.tx, st.held, st.units
	// The attempt stays in the database (its jobs become suspects) when the
	// transaction dies; nothing ran when it is rolled back on purpose before
	// a check started.
	defer func() {
		if !w.isLeft() && !st.rerun {
			c.endAttempt(hard, st.attempt, st.dropAttempt)
		}
	}()
	defer func() {
		if w.isLeft() {
			return
		}
		ctx, cancel := finishCtx(hard)
		defer cancel()
		_ = tx.Rollback(ctx) // after Commit, a no-op
	}()
	var rest []int64
	maxCalls := c.drv.Features().MaxGroupSize
	for i := from; i < len(units); i++ {
		u := units[i]
		// A batch check's group whose jobs failed before calls the check
		// once per job (see units): beyond the store's cap of savepoints
		// per transaction (PostgreSQL's 64 cached subtransactions), the
		// rest go to the next transaction, as those a long group does not
		// get to (found by a review: 99 writing subtransactions).
		capped := maxCalls > 0 && st.called >= maxCalls
		if i > 0 && (capped || work.Err() != nil || hard.Err() != nil || time.Since(st.began) >= c.cfg.GroupDuration) {
			if work.Err() == nil {
				rest = st.unrun(i)
			}
			break
		}
		if heldJob(held, u.jobs[0].ID) {
			continue
		}
		if u.refused == nil {
			st.called++
		}
		st.at = i // read only by a takeover, while the check runs
		r, err := c.runUnit(hard, tx, u, !st.optimistic, w)
		if errors.Is(err, errLeft) {
			return nil, nil, err // the transaction is the watcher's now
		}
		if st.optimistic && err == nil && !r.kept {
			// No savepoint to undo this check's writes alone: the group
			// starts again, each check in a savepoint, without this one.
			ctx, cancel := finishCtx(hard)
			_ = tx.Rollback(ctx)
			cancel()
			c.isolateUntil.Store(c.now().Add(isolateAfterFailure).UnixNano())
			if r.decisions == nil {
				st.dropAttempt = true
				return &SlotRecord{}, nil, nil // interrupted by shutdown: everything stays due
			}
			st.rerun = true
			return c.runTx(work, hard, slot, g, st.ids, false, append(held, r), st.attempt, claimed)
		}
		st.done = append(st.done, r)
		if err != nil {
			return c.txDied(hard, slot, st, i+1, err)
		}
	}
	ds := decisionsOf(st.done)
	ctx, cancel := finishCtx(hard)
	defer cancel()
	ap := &driver.ApplyParams{Slot: slot, Now: c.now(), Server: c.cfg.Server, Decisions: ds, Attempt: st.attempt}
	if g.settle {
		// The jobs whose checks finished: one interrupted by shutdown did
		// not, and the crashes it is charged with still count.
		ap.Settled = make([]int64, len(ds))
		for i, d := range ds {
			ap.Settled[i] = d.ID
		}
	}
	err = tx.Apply(ctx, ap)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		t, err := c.recover(hard, slot, st.done, err)
		return t, nil, err
	}
	return tallyOf(ds), rest, nil
}

// txDied settles a transaction that can no longer commit (err) after its
// checks up to st.units[next:] ran: the failures are recorded anew
// (recover), and the jobs not yet checked stay due.
func (c *Client) txDied(hard context.Context, slot time.Time, st *txState, next int, err error) (*SlotRecord, []int64, error) {
	// The dead transaction may still hold the rows recover claims
	// again: end it first.
	ctx, cancel := finishCtx(hard)
	_ = st.tx.Rollback(ctx)
	cancel()
	t, rerr := c.recover(hard, slot, st.done, err)
	if left := len(st.unrun(next)); left > 0 {
		// The jobs not yet checked stay due, and the slot fails so
		// that they are taken again: with every check run so far
		// failed (its failure applied again), the group ended
		// with no error and the slot complete, its other jobs
		// left due (found by a review).
		if rerr == nil {
			rerr = err
		}
		rerr = fmt.Errorf("%w (and %d job(s) not yet checked stay due)", rerr, left)
	}
	return t, nil, rerr
}

// narrowAttempt makes attempt name only ids, beside the transaction that
// claimed them, where the store can; it reports whether it did.
func (c *Client) narrowAttempt(ctx context.Context, attempt int64, ids []int64) bool {
	if !c.drv.Features().NarrowAttempts {
		return false
	}
	if err := c.drv.AttemptNarrow(ctx, attempt, ids); err != nil {
		c.log.Debug("could not narrow an attempt; claiming again", "attempt", attempt, "error", err)
		return false
	}
	return true
}

// abandonTx ends the condemned jobs ids of g still due in slot as failed,
// without running their checks, and settles their attempts.
func (c *Client) abandonTx(hard context.Context, slot time.Time, g *group, ids []int64) (*SlotRecord, []int64, error) {
	tx, err := c.drv.Begin(hard, nil)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := finishCtx(hard)
	defer cancel()
	defer tx.Rollback(ctx) // after Commit, a no-op
	jobs, err := tx.Claim(hard, &driver.ClaimParams{IDs: ids, Slot: slot})
	if err != nil || len(jobs) == 0 {
		return nil, nil, err
	}
	p := c.policy()
	now := c.now()
	ds := make([]driver.Decision, len(jobs))
	for i, j := range jobs {
		j.Now = now // its lateness: how late in the slot it ended, as for a job that ran
		ds[i] = p.abandon(j, g.condemned[j.ID])
		c.log.Error("job failed for good: its check started and never finished too many times", "entity", j.Entity, "key", j.Key,
			"check", j.Check, "attempts", g.condemned[j.ID], "max_unfinished", c.cfg.MaxUnfinished)
	}
	err = tx.Apply(ctx, &driver.ApplyParams{Slot: slot, Now: now, Server: c.cfg.Server, Decisions: ds, Settled: idsOf(jobs)})
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	return tallyOf(ds), nil, nil
}

// idsOf returns the jobs' ids.
func idsOf(jobs []*checks.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// jobBasis is what a decision about a job depends on besides its check's
// result: the counts decide retry or failed, the payload what the check saw.
type jobBasis struct {
	checks, failures int
	payload          string
}

func basisOf(j *checks.Job) jobBasis {
	return jobBasis{checks: j.CheckCount, failures: j.FailureCount, payload: string(j.Payload)}
}

// stillHeld drops from held the decisions of the units of which a job
// claimed again changed since their check failed: between the rollback of
// an optimistic group (or the death of a group's transaction, see recover)
// and the claim again, the application may have rescheduled a job
// (replace resets its failures, may change its payload), and a failure
// decided from the old row would overwrite what the application was told.
// Such a job runs again, as part of the group, with its new state; so does
// every job of its unit, since a batch check's call decides for all its
// jobs at once (keeping the others' held failures would leave the changed
// job without a call, or call the batch again beside them).
func stillHeld(held []ran, jobs []*checks.Job) []ran {
	if len(held) == 0 {
		return held
	}
	now := make(map[int64]jobBasis, len(jobs))
	for _, j := range jobs {
		now[j.ID] = basisOf(j)
	}
	var out []ran
	for _, r := range held {
		changed := false
		for _, d := range r.decisions {
			if b, claimed := now[d.ID]; claimed && r.basis != nil && b != r.basis[d.ID] {
				changed = true
				break
			}
		}
		if !changed {
			out = append(out, r)
		}
	}
	return out
}

// heldJob reports whether job id has a held decision.
func heldJob(held []ran, id int64) bool {
	for _, r := range held {
		for _, d := range r.decisions {
			if d.ID == id {
				return true
			}
		}
	}
	return false
}

// claimedOf returns the held decisions of the jobs claimed again (another
// server may have taken the others meanwhile), as not kept: failures, whose
// writes were undone.
func claimedOf(held []ran, jobs []*checks.Job) []ran {
	if len(held) == 0 {
		return nil
	}
	claimed := make(map[int64]bool, len(jobs))
	for _, j := range jobs {
		claimed[j.ID] = true
	}
	var out []ran
	for _, r := range held {
		var ds []driver.Decision
		for _, d := range r.decisions {
			if claimed[d.ID] {
				ds = append(ds, d)
			}
		}
		if len(ds) > 0 {
			out = append(out, ran{decisions: ds, basis: r.basis})
		}
	}
	return out
}

// finishCtx returns the context to end a transaction in: hard's, or, once
// hard has ended (shutdown), a short one of its own, so that the checks that
// finished still commit and the ones cut off still roll back.
func finishCtx(hard context.Context) (context.Context, context.CancelFunc) {
	if hard.Err() == nil {
		return context.WithCancel(hard)
	}
	return context.WithTimeout(context.WithoutCancel(hard), stopTimeout)
}

// units splits claimed jobs into calls: one for a batch check's jobs, one per
// job for single-job checks.
func (c *Client) units(batch *checks.Check, jobs []*checks.Job) []unit {
	us := make([]unit, 0, len(jobs))
	if batch != nil {
		run := jobs
		if batch.Opts.Entity != "" {
			run = make([]*checks.Job, 0, len(jobs))
			for _, j := range jobs {
				if err := wrongEntity(batch, j); err != nil {
					us = append(us, unit{check: batch, jobs: []*checks.Job{j}, refused: err})
				} else {
					run = append(run, j)
				}
			}
		}
		// A job that failed before runs in a call of its own: its batch
		// failed as one (a query run past its guard, a panic, an error for
		// the batch), and run again together the job that made it fail
		// would fail the others again, at every retry until they all end
		// failed (found by a trial of declared checks: one slow key).
		fresh := run[:0:0]
		for _, j := range run {
			if j.FailureCount > 0 {
				us = append(us, unit{check: batch, jobs: []*checks.Job{j}})
			} else {
				fresh = append(fresh, j)
			}
		}
		if len(fresh) > 0 {
			us = append(us, unit{check: batch, jobs: fresh})
		}
		return us
	}
	for _, j := range jobs {
		// plan looked every check up; one that vanished leaves its job due.
		if ch, ok := c.cfg.Checks.Lookup(j.Check); ok {
			us = append(us, unit{check: ch, jobs: []*checks.Job{j}, refused: wrongEntity(ch, j)})
		}
	}
	return us
}

// wrongEntity is the failure of a job of another entity than the one its
// check watches (checks.Opts.Entity): the check is not called with it, as it
// would look the job's key up in the wrong place. Clients that know the
// check refuse to schedule such a job (ErrWrongEntity), and so does the SQL
// API; one that does not know it (an application's client with no checks
// registered) cannot, so the job fails here, saying why.
//
// No retry can mend it: the failure is permanent (checks.Permanent), and the
// job ends failed at once (it was retried max_failures times, hours on a
// 15-minute grid; found by a review).
func wrongEntity(ch *checks.Check, j *checks.Job) error {
	if ch.Opts.Entity == "" || ch.Opts.Entity == j.Entity {
		return nil
	}
	return checks.Permanent(fmt.Errorf("%w: check %s watches entity %s only, and this job is of entity %s; it was not called (schedule the job for entity %s)",
		ErrWrongEntity, ch.Name, ch.Opts.Entity, j.Entity, ch.Opts.Entity))
}

// errAbortedStatement marks a check that returned no error after one of its
// statements failed and aborted its savepoint.
var errAbortedStatement = errors.New("a statement failed in the check's transaction and the database aborted it, " +
	"but the check went on and returned no error; return the statement's error, or handle it in a savepoint " +
	"of the check's own (job.Tx.Driver())")

// runUnit runs one call of a check in tx, in a savepoint of its own when
// isolate is set, and keeps or undoes its writes. Without a savepoint a
// failure's writes are still in tx: the caller must roll it back. An error
// means tx can no longer commit.
func (c *Client) runUnit(hard context.Context, tx driver.Tx, u unit, isolate bool, w *watch) (ran, error) {
	now := c.now()
	for _, j := range u.jobs {
		j.Now = now
	}
	if u.refused != nil {
		// The check is not called: nothing was written to undo, so the
		// failure goes with the others' writes, as a kept unit.
		limits := c.cfg.Guards.Override(u.check.Opts.Guards)
		r := ran{decisions: c.decideUnit(limits, u, nil, u.refused, 0), kept: true, refused: true,
			basis: make(map[int64]jobBasis, len(u.jobs))}
		for _, j := range u.jobs {
			r.basis[j.ID] = basisOf(j)
		}
		return r, nil
	}
	if isolate {
		if err := tx.Savepoint(hard); err != nil {
			return ran{}, err
		}
	}
	limits := c.cfg.Guards.Override(u.check.Opts.Guards)
	runCtx, cancelRun := context.WithTimeout(hard, limits.Runtime)
	ct := newCheckTx(tx, runCtx)
	ob := newOutbox(ct, u.check)
	for _, j := range u.jobs {
		j.Tx, j.Outbox, j.Horizon = ct, ob, limits.Horizon
	}
	if c.log.Enabled(hard, slog.LevelDebug) {
		// The last such line before a crash names the culprit.
		for _, j := range u.jobs {
			c.log.Debug("running check", "id", j.ID, "entity", j.Entity, "key", j.Key, "check", j.Check, "slot", j.Slot)
		}
	}
	start := time.Now()
	w.begin(u, ct, limits, start, cancelRun)
	results, err := call(hard, runCtx, u, limits, w)
	elapsed := time.Since(start)
	cancelRun()
	if lerr := w.end(); lerr != nil {
		return ran{}, lerr
	}
	ct.close()
	if err == nil && tx.Aborted() {
		err = fmt.Errorf("check %s: %w", u.check.Name, errAbortedStatement)
	}
	r := ran{kept: err == nil}
	if !errors.Is(err, errInterrupted) {
		r.decisions = c.decideUnit(limits, u, results, err, elapsed)
		if !r.kept {
			// Only a failure's decisions are ever held (see stillHeld).
			r.basis = make(map[int64]jobBasis, len(u.jobs))
			for _, j := range u.jobs {
				r.basis[j.ID] = basisOf(j)
			}
		}
	}
	if terr := tx.Err(); terr != nil {
		return r, terr
	}
	if !isolate {
		return r, nil
	}
	// Shutdown may have ended hard while the check ran: its savepoint
	// still ends, in a context of its own.
	ctx, cancel := finishCtx(hard)
	defer cancel()
	if r.kept {
		return r, tx.Release(ctx)
	}
	return r, tx.RollbackTo(ctx)
}

// decideUnit decides every job of a unit: err, when set, is the whole call's
// failure; otherwise results holds one result per job.
func (c *Client) decideUnit(limits guards.Limits, u unit, results []checks.Result, err error, elapsed time.Duration) []driver.Decision {
	p := c.policy()
	per := elapsed / time.Duration(len(u.jobs))
	ds := make([]driver.Decision, len(u.jobs))
	for i, j := range u.jobs {
		r := checks.Result{Err: err}
		if err == nil {
			r = results[i]
		}
		d := p.decide(limits, j, r)
		d.Runtime = per
		c.checkFinished(j.Check, j.Slot, d, r.Err)
		switch {
		case d.Outcome == history.Failed:
			c.log.Error("job failed for good", "entity", j.Entity, "key", j.Key, "check", j.Check, "failures", j.FailureCount+1, "error", d.Err)
		case d.Err != "":
			c.log.Warn("check failed, will retry", "entity", j.Entity, "key", j.Key, "check", j.Check, "failures", j.FailureCount+1, "retry_at", d.Next, "error", d.Err)
		case d.Reason != "":
			c.log.Warn("guard ended job", "entity", j.Entity, "key", j.Key, "check", j.Check, "outcome", d.Outcome, "reason", d.Reason)
		}
		ds[i] = d
	}
	return ds
}

// recover settles a group whose transaction failed (cause) after some of its
// checks ran. Every write the checks kept died with the transaction, so
// their jobs stay due, untouched, and run again: recording their results
// would claim effects that never committed. The checks that failed had their
// writes undone anyway, so their decisions hold: they are applied in a fresh
// transaction, to the jobs still due in slot, so that a failure is always
// counted. The error says what was lost.
func (c *Client) recover(hard context.Context, slot time.Time, done []ran, cause error) (*SlotRecord, error) {
	var held []ran
	lost := 0
	for _, r := range done {
		switch {
		case r.kept && !r.refused:
			lost += len(r.decisions)
		default:
			held = append(held, r)
		}
	}
	ctx, cancel := finishCtx(hard)
	defer cancel()
	applied, err := c.reapply(ctx, slot, held)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w; then in a new transaction: %v", cause, err)
	case lost > 0:
		return tallyOf(applied), fmt.Errorf("the transaction failed with the writes of %d checked job(s), which are lost; those jobs stay due: %w", lost, cause)
	}
	return tallyOf(applied), nil
}

// reapply applies the decisions held in a transaction of its own to the
// jobs still due in slot and unchanged since (see stillHeld), and returns
// the decisions it applied. It first waits up to reclaimWait for their
// locks, since a transaction that just died may hold them a little longer;
// if some stay held (another server is processing them), it applies the
// decisions of the others only.
func (c *Client) reapply(ctx context.Context, slot time.Time, held []ran) ([]driver.Decision, error) {
	if len(held) == 0 {
		return nil, nil
	}
	applied, err := c.applyAfresh(ctx, slot, held, reclaimWait)
	if errors.Is(err, driver.ErrLockTimeout) {
		applied, err = c.applyAfresh(ctx, slot, held, 0)
	}
	return applied, err
}

func (c *Client) applyAfresh(ctx context.Context, slot time.Time, held []ran, wait time.Duration) ([]driver.Decision, error) {
	tx, err := c.drv.Begin(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	var ids []int64
	for _, d := range decisionsOf(held) {
		ids = append(ids, d.ID)
	}
	jobs, err := tx.Claim(ctx, &driver.ClaimParams{IDs: ids, Slot: slot, LockWait: wait})
	if err != nil {
		return nil, err
	}
	claimed := make(map[int64]bool, len(jobs))
	for _, j := range jobs {
		claimed[j.ID] = true
	}
	var ds []driver.Decision
	for _, d := range decisionsOf(stillHeld(held, jobs)) {
		if claimed[d.ID] {
			ds = append(ds, d)
		}
	}
	if len(ds) == 0 {
		return nil, nil
	}
	if err := tx.Apply(ctx, &driver.ApplyParams{Slot: slot, Now: c.now(), Server: c.cfg.Server, Decisions: ds}); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return ds, nil
}

// decisionsOf gathers the decisions of ran units (a released unit has none).
func decisionsOf(done []ran) []driver.Decision {
	n := 0
	for _, r := range done {
		n += len(r.decisions)
	}
	ds := make([]driver.Decision, 0, n)
	for _, r := range done {
		ds = append(ds, r.decisions...)
	}
	return ds
}

// tallyOf counts committed decisions the way the ledger does.
func tallyOf(ds []driver.Decision) *SlotRecord {
	t := &SlotRecord{}
	for _, d := range ds {
		t.Checked++
		t.MaxLateness = max(t.MaxLateness, d.Lateness)
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
	return t
}

// errInterrupted marks a check stopped by shutdown rather than by its own fault.
var errInterrupted = errors.New("interrupted by shutdown")

// call runs one unit's check in runCtx, which ends with ctx and after the
// check's runtime guard: the results, one per job, are read only when the
// error is nil. w watches the check (see watch.go).
func call(ctx, runCtx context.Context, u unit, limits guards.Limits, w *watch) ([]checks.Result, error) {
	var results []checks.Result
	err := guarded(ctx, runCtx, limits.Runtime, u.check.Name, w, func(ctx context.Context) error {
		if u.check.Batch != nil {
			r, err := u.check.Batch(ctx, u.jobs)
			if err == nil && len(r) != len(u.jobs) {
				err = fmt.Errorf("batch check returned %d results for %d jobs", len(r), len(u.jobs))
			}
			results = r
			return err
		}
		next, err := u.check.Func(ctx, u.jobs[0])
		results = []checks.Result{{Next: next}}
		return err
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// errCheckExited is the failure of a check that ended its goroutine
// (runtime.Goexit) instead of returning.
var errCheckExited = errors.New("the check exited its goroutine (runtime.Goexit, such as t.FailNow) without returning")

// guarded runs fn in runCtx, which ends with ctx or after limit. A panic
// becomes an error with its stack; overrunning the deadline is an error. fn
// that ignores its context past its guard, or ends the goroutine
// (runtime.Goexit), has the goroutine left to it by w, whose watcher takes
// the transaction over. If ctx itself ends first, the error is
// errInterrupted.
func guarded(ctx, runCtx context.Context, limit time.Duration, name string, w *watch, fn func(context.Context) error) (err error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("check %s panicked: %v\n%s", name, p, debug.Stack())
			if ctx.Err() != nil {
				err = errInterrupted
			}
		} else if !returned {
			// runtime.Goexit (t.FailNow in a test's check): the
			// goroutine is ending; its watcher takes over now rather
			// than when the check's guard runs out.
			w.exited(name, ctx.Err() != nil)
		}
	}()
	err = fn(runCtx)
	returned = true
	if ctx.Err() != nil {
		return errInterrupted
	}
	if runCtx.Err() != nil {
		// Returned after its guard ended, whatever it returned (its
		// statements since then failed): before its watch left it.
		return fmt.Errorf("check %s ran past its runtime guard of %s", name, limit)
	}
	return err
}
