package prescient

import (
	"fmt"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// policy is the part of the configuration that decides a job's new state
// from what its check returned.
type policy struct {
	grid        slots.Grid
	maxFailures int
	backoffMax  time.Duration
	// maxUnfinished is Config.MaxUnfinished, for abandon.
	maxUnfinished int
}

func (c *Client) policy() policy {
	return policy{grid: c.cfg.Grid, maxFailures: c.cfg.MaxFailures, backoffMax: c.cfg.RetryBackoffMax,
		maxUnfinished: c.cfg.MaxUnfinished}
}

// decide turns what a check returned for one job into the job's new state,
// under limits. j.Slot is the slot the job was due in and j.Now when its
// check started. It reads nothing else: the same inputs give the same
// decision.
//
//   - an error: a failure, retried at retrySlot, or the job ends failed once
//     it has failed maxFailures times in a row, or at once when the check
//     marked it permanent (checks.Permanent);
//   - no next time: the job is done;
//   - a next time: judged by the guards as asked, then rounded up to the
//     grid; a time that has passed meanwhile (a check run late) lands in
//     the first slot after j.Now, as when scheduling: "not before X". A
//     time whose slot is at or after slots.MaxTime ends the job as
//     guard_horizon, even with no horizon: the engine cannot represent it.
func (p policy) decide(limits guards.Limits, j *checks.Job, r checks.Result) driver.Decision {
	d := driver.Decision{ID: j.ID, Lateness: j.Lateness()}
	if r.Err != nil {
		d.Err = errText(r.Err)
		failures := j.FailureCount + 1
		if failures >= p.maxFailures {
			d.Outcome = history.Failed
			return d
		}
		if checks.IsPermanent(r.Err) {
			d.Outcome = history.Failed
			d.Err += " (not retried: the check marked its failure permanent)"
			return d
		}
		d.Next = p.retrySlot(j.Slot, j.Now, failures)
		if !d.Next.Before(slots.MaxTime) {
			d.Outcome, d.Next = history.Failed, time.Time{}
			d.Err += fmt.Sprintf(" (not retried: the retry's slot is beyond the supported range %s)", slots.Range())
		}
		return d
	}
	d.Checked = true
	if r.Next.IsZero() {
		d.Outcome = history.Done
		return d
	}
	if !r.Next.Before(slots.MaxTime) {
		d.Outcome = history.GuardHorizon
		d.Reason = fmt.Sprintf("next check %s is beyond the supported range %s", r.Next.UTC().Format(time.RFC3339Nano), slots.Range())
		return d
	}
	next := p.grid.Ceil(r.Next)
	if !next.Before(slots.MaxTime) {
		d.Outcome = history.GuardHorizon
		d.Reason = fmt.Sprintf("next check %s rounds up to %s, beyond the supported range %s",
			r.Next.UTC().Format(time.RFC3339Nano), next.Format(time.RFC3339Nano), slots.Range())
		return d
	}
	// The horizon is judged on the time the check asked for, as
	// guards.horizon says ("farthest ahead of its slot, or of its start if
	// later, a check may ask to run again"), not on the slot that time
	// rounds up to; a time not after the slot is not after it either way.
	if v := limits.Judge(j.CheckCount+1, j.Slot, j.Now, r.Next); !v.OK() {
		d.Outcome, d.Reason = v.Outcome, v.Reason
		return d
	}
	if !next.After(j.Now) {
		next = p.grid.Next(j.Now)
	}
	d.Next = next
	return d
}

// errText is the text a check's error records: never empty (both stores
// read an empty text as "no error", so the failure would not count),
// valid UTF-8 without NUL (PostgreSQL's text refuses both, failing the
// apply of the whole group, every time), and read under recover (the Error
// method of a typed nil error may panic, on the goroutine applying the
// group).
func errText(err error) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s = fmt.Sprintf("the check's error (%T) has an Error method that panicked: %v", err, r)
		}
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		if s == "" {
			s = fmt.Sprintf("the check returned an error (%T) with an empty message", err)
		}
	}()
	return err.Error()
}

// retrySlot is when a job due in slot that has now failed `failures` times in
// a row runs again: 1, 2, 4, … slots after slot, the delay capped at
// backoffMax (and never less than one slot), and never before the first slot
// after now (a check that ran late, in a catch-up or a sweep, is retried in
// the next slot).
func (p policy) retrySlot(slot, now time.Time, failures int) time.Time {
	res := p.grid.Resolution
	delay := res
	for i := 1; i < failures && delay < p.backoffMax; i++ {
		delay *= 2
	}
	delay = max(min(delay, p.backoffMax), res)
	next := p.grid.Ceil(slot.Add(delay))
	if !next.After(now) {
		next = p.grid.Next(now)
	}
	return next
}
