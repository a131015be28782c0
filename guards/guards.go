// Package guards holds the limits the engine enforces whatever a check
// returns: how many times a job may be checked, how long one check may run,
// and how far ahead a next check may be asked for.
package guards

import (
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/history"
)

// Defaults for Limits. They are deliberately generous: a guard is a backstop
// against a check that misbehaves, not a scheduling policy.
const (
	MaxChecksDefault = 100
	RuntimeDefault   = 30 * time.Second
	HorizonDefault   = 90 * 24 * time.Hour
)

// Limits are the guards applied to a job's checks. A zero field means "use
// the default" in WithDefaults; -1 disables that guard (except Runtime, which
// cannot be disabled: a hung check must never hold its slot forever).
type Limits struct {
	// MaxChecks caps the number of checks a job may run. A check that asks to
	// run again after its MaxChecks-th run ends the job as guard_max_checks.
	MaxChecks int `json:"max_checks"`
	// Runtime caps one check's run (one batch call for batch checks). A check
	// that overruns counts as a failure.
	Runtime time.Duration `json:"runtime"`
	// Horizon caps how far after the slot being checked (or after the
	// check's start, when it runs later than its slot) a next check may be.
	// A later time ends the job as guard_horizon.
	Horizon time.Duration `json:"horizon"`
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxChecks == 0 {
		l.MaxChecks = MaxChecksDefault
	}
	if l.Runtime == 0 {
		l.Runtime = RuntimeDefault
	}
	if l.Horizon == 0 {
		l.Horizon = HorizonDefault
	}
	return l
}

// Override returns l with every non-zero field of o applied on top.
func (l Limits) Override(o Limits) Limits {
	if o.MaxChecks != 0 {
		l.MaxChecks = o.MaxChecks
	}
	if o.Runtime != 0 {
		l.Runtime = o.Runtime
	}
	if o.Horizon != 0 {
		l.Horizon = o.Horizon
	}
	return l
}

// Validate reports a limit that makes no sense, naming it.
func (l Limits) Validate() error {
	switch {
	case l.MaxChecks < -1:
		return fmt.Errorf("guards: max_checks %d must be positive, or -1 for no limit", l.MaxChecks)
	case l.Runtime < 0:
		return fmt.Errorf("guards: runtime %s must be positive", l.Runtime)
	case l.Horizon < 0 && l.Horizon != -1:
		return fmt.Errorf("guards: horizon %s must be positive, or -1 for no limit", l.Horizon)
	}
	return nil
}

// Verdict is a guard's ruling on a check's result: the outcome that ends the
// job, and why. The zero Verdict lets the result stand.
type Verdict struct {
	Outcome history.Outcome
	Reason  string
}

// OK reports whether no guard objected.
func (v Verdict) OK() bool { return v.Outcome == "" }

// Judge rules on a check that ran in slot, starting at ran, and asked to run
// again at next (the time it asked for, before the engine rounds it up to
// the grid). checks is how many checks the job has run, counting this one.
// A next time that is not after the slot is guard_past (it would loop in
// place), one further than the horizon ahead of the slot, or of ran when the
// check ran later than its slot (a catch-up after an outage), is
// guard_horizon, and a job that has used all its checks is
// guard_max_checks. Counted from the slot alone, a check run a day late in
// a catch-up that asked for "in an hour" was 25h ahead, and a horizon of
// 12h ended its job, for the outage's sake (found by a trial of catch-up
// after downtime).
func (l Limits) Judge(checks int, slot, ran, next time.Time) Verdict {
	from, what := slot, "the slot"
	if ran.After(slot) {
		from, what = ran, "the check's start (its slot was "+slot.Format(time.RFC3339Nano)+")"
	}
	switch {
	case !next.After(slot):
		return Verdict{history.GuardPast, fmt.Sprintf("next check %s is not after the slot %s", next.Format(time.RFC3339Nano), slot.Format(time.RFC3339Nano))}
	case l.Horizon > 0 && next.Sub(from) > l.Horizon:
		return Verdict{history.GuardHorizon, fmt.Sprintf("next check %s is %s after %s, beyond the horizon %s", next.Format(time.RFC3339Nano), next.Sub(from), what, l.Horizon)}
	case l.MaxChecks > 0 && checks >= l.MaxChecks:
		return Verdict{history.GuardMaxChecks, fmt.Sprintf("asked for check %d, more than max_checks %d", checks+1, l.MaxChecks)}
	}
	return Verdict{}
}
