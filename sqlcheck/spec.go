package sqlcheck

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
)

// KeyColumn is the name of the column a query returns the key in.
const KeyColumn = "key"

// SeverityMax is the longest severity, in bytes.
const SeverityMax = 100

// Spec declares a check: the query that finds the due keys still "not there
// yet", and the ladder of stages they raise (see the package documentation).
type Spec struct {
	// Name names the check, as jobs are scheduled with it.
	Name string
	// Entity is the entity the check watches ("order"). A job of another
	// entity scheduled with this check fails, saying so.
	Entity string
	// Query is run for each batch of due jobs, with the due keys as $1.
	Query string
	// Anchor names the timestamp column of the query that stages count from.
	// Empty means the job's first check.
	Anchor string
	// Stages is the ladder, in strictly increasing order of After; at least
	// one.
	Stages []Stage
	// Awaits lists the events that settle the check when resolved.
	Awaits []string
	// Sinks names the sinks the events are delivered to.
	Sinks []string
	// BatchSize caps the jobs one query is run for. Zero means the engine's
	// batch size.
	BatchSize int
	// Guards override the engine's guards for this check; zero fields keep
	// the engine's values.
	Guards guards.Limits
}

// Stage is one step of a ladder: After this long from the anchor, the
// check raises Event.
type Stage struct {
	// After is the stage's time from the anchor; at least 0.
	After time.Duration
	// Event names the event raised ("order.unshipped").
	Event string
	// Name names the stage in the event's idempotency key
	// (entity/key/check/stage): each stage is raised once per job. Default:
	// Event. Two stages raising the same event need names of their own.
	Name string
	// Severity is free text for the receiver ("warning", "critical"),
	// at most SeverityMax bytes, without control characters.
	Severity string
}

// StageName returns the stage's name: Name, or Event when Name is empty.
func (s Stage) StageName() string {
	if s.Name != "" {
		return s.Name
	}
	return s.Event
}

// FieldError is a problem with one field of a Spec. Field is the path of the
// field as the configuration file writes it ("stages[1].after"), empty for
// the spec as a whole.
type FieldError struct {
	Field string
	Err   error
}

// Error reads "field: what was wrong".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// FieldErrors returns the *FieldError values in err, which Validate and
// Prepare join: one for each problem found.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var visit func(error)
	visit = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				visit(e)
			}
			return
		}
		if e := errors.Unwrap(err); e != nil {
			visit(e)
		}
	}
	visit(err)
	return out
}

// Validate reports every problem of s that needs no database to see, each
// as a *FieldError (joined with errors.Join): names, a query without $1,
// the ladder, guards and batch size. Prepare calls it.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(field string, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	badErr := func(field string, err error) {
		errs = append(errs, &FieldError{Field: field, Err: err})
	}
	if err := checks.ValidateName("check", s.Name); err != nil {
		badErr("", err)
	}
	switch {
	case s.Entity == "":
		bad("entity", "is missing: name the entity the check watches, e.g. entity: order")
	default:
		if err := checks.ValidateName("entity", s.Entity); err != nil {
			badErr("entity", err)
		}
	}
	switch {
	case strings.TrimSpace(s.Query) == "":
		bad("query", "is missing: a SELECT that returns a key column for the due keys in $1 that are still not there yet")
	case !strings.Contains(s.Query, "$1"):
		// Only a query with no "$1" anywhere: one with it in a comment or
		// a string alone is found when the query is prepared.
		bad("query", "does not use $1: it must select the due keys passed as $1 that are still not there yet "+
			"(PostgreSQL: WHERE id = ANY($1); SQLite: WHERE id IN (SELECT value FROM json_each($1)))")
	}
	switch {
	case s.Anchor == KeyColumn:
		bad("anchor", "cannot be the key column: name a timestamp column of the query, or leave anchor out to count from the job's first check")
	case s.Anchor != "" && strings.TrimSpace(s.Anchor) != s.Anchor:
		bad("anchor", "%q has spaces around it", s.Anchor)
	}
	if len(s.Stages) == 0 {
		bad("stages", "is missing or empty: at least one stage, e.g. - {after: 3h, event: order.unshipped}")
	}
	names := make(map[string]int)
	for i, st := range s.Stages {
		field := fmt.Sprintf("stages[%d]", i)
		switch {
		case st.After < 0:
			bad(field+".after", "%s is negative: a stage is at or after its anchor (0s or more)", st.After)
		case i > 0 && st.After <= s.Stages[i-1].After:
			bad(field+".after", "%s is not after the stage before it (%s): stages go in strictly increasing order of after", st.After, s.Stages[i-1].After)
		}
		if st.Event == "" {
			bad(field+".event", "is missing: name the event the stage raises, e.g. order.unshipped")
		} else if err := checks.ValidateName("event", st.Event); err != nil {
			badErr(field+".event", err)
		}
		if st.Name != "" {
			if err := checks.ValidateName("stage", st.Name); err != nil {
				badErr(field+".stage", err)
			}
		}
		if name := st.StageName(); name != "" {
			if j, ok := names[name]; ok {
				f := field + ".stage"
				if st.Name == "" {
					f = field + ".event"
				}
				bad(f, "stage name %q is already used by stages[%d]: each stage is raised once per job under its name "+
					"(entity/key/check/stage), so give one of them a stage: of its own", name, j)
			} else {
				names[name] = i
			}
		}
		if err := validateSeverity(st.Severity); err != nil {
			badErr(field+".severity", err)
		}
	}
	seen := make(map[string]bool)
	for i, ev := range s.Awaits {
		field := fmt.Sprintf("awaits[%d]", i)
		if err := checks.ValidateName("event", ev); err != nil {
			badErr(field, err)
		} else if seen[ev] {
			bad(field, "%q is listed twice", ev)
		}
		seen[ev] = true
	}
	seen = make(map[string]bool)
	for i, sink := range s.Sinks {
		field := fmt.Sprintf("sinks[%d]", i)
		if err := checks.ValidateName("sink", sink); err != nil {
			badErr(field, err)
		} else if seen[sink] {
			bad(field, "%q is listed twice", sink)
		}
		seen[sink] = true
	}
	if s.BatchSize < 0 {
		bad("batch_size", "%d must be positive (or left out for the server's batch_size)", s.BatchSize)
	}
	g := s.Guards
	if g.MaxChecks < -1 {
		bad("guards.max_checks", "%d must be positive, or -1 for no limit", g.MaxChecks)
	}
	if g.Runtime < 0 {
		bad("guards.runtime", "%s must be positive", g.Runtime)
	}
	if g.Horizon < 0 && g.Horizon != -1 {
		bad("guards.horizon", "%s must be positive, or -1 for no limit", g.Horizon)
	}
	return errors.Join(errs...)
}

func validateSeverity(s string) error {
	if len(s) > SeverityMax {
		return fmt.Errorf("is %d bytes, more than the %d allowed", len(s), SeverityMax)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q holds a control character", s)
		}
	}
	return nil
}

// Opts returns the checks.Opts the check registers with.
func (s Spec) Opts() *checks.Opts {
	return &checks.Opts{
		Awaits:    append([]string(nil), s.Awaits...),
		Guards:    s.Guards,
		BatchSize: s.BatchSize,
		Sinks:     append([]string(nil), s.Sinks...),
		Entity:    s.Entity,
	}
}
