package prescient

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// Checks that never finish. A check that kills its server (os.Exit, an
// out-of-memory kill, a fatal runtime error) leaves no failure behind: its
// transaction dies with the process, its job stays due, and every restart
// would run it again. So before a group's transaction runs its checks, the
// engine records an attempt naming the group's jobs (driver.AttemptStart,
// one row committed at once), and the transaction deletes it with its
// decisions. An attempt that outlives its transaction says its checks
// started and never finished. It names only jobs its transaction claimed: a
// claim that skipped some (held by another server's transaction, or no
// longer due) narrows or replaces the attempt before any check starts (see
// runTx), so a crash never counts against a job that was running elsewhere.
// The attempts are counted when a slot starts, and again before a job runs
// alone or ends failed.
//
// A job named by such attempts is a suspect: it shared a group with the
// culprit, or is the culprit. A suspect runs in a transaction of its own,
// under an attempt of its own, and once it finishes it is cleared from every
// attempt (ApplyParams.Settled). The jobs that merely shared the culprit's
// group so clear themselves on the next run, while the culprit gathers one
// attempt per crash; once Config.MaxUnfinished attempts name a job, it ends
// failed without running.
//
// A crash also names the suspects running beside the culprit. So a suspect
// that one more crash would condemn runs alone: one at a time, with no other
// group of the slot running, so that a crash then names it and nothing else.
// The others (after a first crash, with the default of 3, every suspect) run
// side by side, up to Workers at once: a server killed with hundreds of
// checks in flight does not make the next one run them one after the other.

// leftBehind counts, per job, the attempts left behind that name it: all of
// them, and those surely left behind, which are not possibly a group
// another live server is still running (see mayRun).
type leftBehind struct {
	all, sure map[int64]int
}

// unfinished returns, per job, how many attempts left behind name it, and
// the ids of the attempts it counted. With among set, it counts only the
// attempts among those (and still left behind): so a second count during a
// slot drops the attempts that ended since the first, and adds none that
// other servers' groups (most likely still running) recorded meanwhile.
// The client's own attempts still running are not left behind; another
// live server's may be, or may be its groups at work: they count in all,
// and not in sure.
func (c *Client) unfinished(ctx context.Context, among map[int64]bool) (leftBehind, map[int64]bool, error) {
	left, err := c.drv.AttemptsLeft(ctx)
	if err != nil || len(left) == 0 {
		return leftBehind{}, nil, err
	}
	var servers []*driver.Server
	started := c.started()
	if slices.ContainsFunc(left, func(a *driver.Attempt) bool { return a.Server != c.cfg.Server || started.IsZero() }) {
		if servers, err = c.drv.ServerList(ctx); err != nil {
			return leftBehind{}, nil, err
		}
	}
	now := c.now()
	lb := leftBehind{all: make(map[int64]int), sure: make(map[int64]int)}
	counted := make(map[int64]bool)
	for _, a := range left {
		if _, running := c.attempts.Load(a.ID); running {
			continue
		}
		if among != nil && !among[a.ID] {
			continue
		}
		counted[a.ID] = true
		sure := !c.mayRun(a, servers, now, started)
		for _, id := range a.JobIDs {
			lb.all[id]++
			if sure {
				lb.sure[id]++
			}
		}
	}
	return lb, counted, nil
}

// mayRun reports whether attempt a may be a group another server is still
// running: the server is live, in the life it recorded a in (it has not
// restarted since), and a is younger than the longest a group may run here
// (twice GroupDuration and the largest runtime guard, and ServerTimeout for
// the clocks' difference). started is when this client started (zero: it
// did not, as `prescient sweep`, which may share a server's name).
//
// Such an attempt cannot be told from one the server left when it died a
// moment ago (it is live until its heartbeat is judged stale): it counts
// toward running its jobs on their own, or alone, which
// isolates a culprit at once, and not toward ending a job failed without
// running, which a group at work must never cause (with MaxUnfinished 2, a
// crash and another server's group at work ended a job that crashed
// nothing, in the moment between that group's attempt and its claim).
func (c *Client) mayRun(a *driver.Attempt, servers []*driver.Server, now, started time.Time) bool {
	if a.Server == c.cfg.Server && !started.IsZero() {
		// A running server's own: those it runs are not counted at all
		// (Client.attempts), so this one was left behind.
		return false
	}
	// Another server's, or the running server's whose name a command
	// (`prescient sweep`) shares.
	i := slices.IndexFunc(servers, func(s *driver.Server) bool { return s.Name == a.Server })
	if i < 0 {
		return false
	}
	s := servers[i]
	// A group that fails optimistically runs again under the same attempt:
	// twice its time, and the clocks' difference.
	longest := 2*(c.cfg.GroupDuration+max(c.cfg.Guards.Runtime, c.cfg.Checks.MaxRuntime())) + c.cfg.ServerTimeout
	return s.Live(now, c.cfg.ServerTimeout) && !a.StartedAt.Before(s.StartedAt) && now.Sub(a.StartedAt) < longest
}

// sortUnfinished splits due jobs by the attempts left behind that name them:
// those named by none; the suspects to run on their own, side by side; those
// to run alone, which one more crash would condemn; and the condemned, named
// by at least max attempts surely left behind. A job that max attempts name
// only with those that may be groups at work runs alone.
func sortUnfinished(due []*driver.DueJob, left leftBehind, max int) (clean, suspects, alone, condemned []*driver.DueJob) {
	if len(left.all) == 0 {
		return due, nil, nil, nil
	}
	for _, d := range due {
		switch n := left.all[d.ID]; {
		case n == 0:
			clean = append(clean, d)
		case left.sure[d.ID] >= max:
			condemned = append(condemned, d)
		case n+1 >= max:
			alone = append(alone, d)
		default:
			suspects = append(suspects, d)
		}
	}
	return clean, suspects, alone, condemned
}

// abandon is the decision for a job whose check started `attempts` times and
// never finished: it ends failed, without running again.
func (p policy) abandon(j *checks.Job, attempts int) driver.Decision {
	return driver.Decision{
		ID:       j.ID,
		Outcome:  history.Failed,
		Lateness: j.Lateness(),
		Err: fmt.Sprintf("its check started %d times and never finished: the server running it died or lost the database "+
			"each time (retry.max_unfinished is %d); look in the servers' logs for the crash, with the job at debug level",
			attempts, p.maxUnfinished),
	}
}

// startAttempt records that the client is about to run the checks of ids.
func (c *Client) startAttempt(ctx context.Context, slot time.Time, ids []int64) (int64, error) {
	id, err := c.drv.AttemptStart(ctx, &driver.AttemptStartParams{Server: c.cfg.Server, Slot: slot, StartedAt: c.now(), IDs: ids})
	if err != nil {
		return 0, err
	}
	c.attempts.Store(id, struct{}{})
	return id, nil
}

// endAttempt forgets a running attempt; with drop, it also deletes its row
// (the engine rolled its transaction back on purpose, and nothing ran).
func (c *Client) endAttempt(hard context.Context, id int64, drop bool) {
	if id == 0 {
		return
	}
	c.attempts.Delete(id)
	if !drop {
		return
	}
	ctx, cancel := finishCtx(hard)
	defer cancel()
	if err := c.drv.AttemptEnd(ctx, id); err != nil {
		c.log.Warn("could not delete an attempt rolled back on purpose; its jobs will run on their own next time", "attempt", id, "error", err)
	}
}
