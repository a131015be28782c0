package checks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/guards"
)

// Func is a check run on one job. It returns the time the job should be
// checked again, or the zero time when the job is done. An error (or a panic,
// or running past the runtime guard) counts as a failure: the job is kept and
// retried at a later slot, and whatever the check wrote through job.Tx is
// rolled back.
//
// The returned time is judged by the guards, then rounded up to the slot
// grid.
type Func func(ctx context.Context, job *Job) (next time.Time, err error)

// Result is a batch check's answer for one job: the next check time (zero when
// done), or Err when that job failed. A job's Err counts a failure for that
// job (it is retried, and ends failed after too many), but the batch is one
// transaction: what the batch wrote through job.Tx commits with the other
// jobs' results. Write a job's effect only once it has succeeded, or return
// an error from the BatchFunc to roll back every write of the batch.
type Result struct {
	Next time.Time
	Err  error
}

// BatchFunc is a check run on many due jobs of one check at once, so that it
// can look their entities up in one query. It returns one Result per job, in
// the order of jobs. A returned error (or a panic, or overrunning the runtime
// guard) fails the whole batch: every job counts a failure and the batch's
// writes through the transaction are rolled back. See Result for per-job
// errors, whose batch's writes are kept.
type BatchFunc func(ctx context.Context, jobs []*Job) ([]Result, error)

// Opts are a check's optional settings.
type Opts struct {
	// Awaits lists the events whose resolution settles this check: resolving
	// (entity, key, event) finishes every pending job of this check for that
	// entity with outcome resolved.
	Awaits []string
	// Guards override the engine's guards for this check; zero fields keep the
	// engine's values.
	Guards guards.Limits
	// BatchSize caps the jobs handed to one call of a batch check. Zero means
	// the engine's batch size. A job that failed before (FailureCount > 0)
	// is handed alone, so that the one that made its batch fail as one
	// does not fail the others again.
	BatchSize int
	// Sinks names the sinks the check's events (Job.Emit) are delivered to.
	// A check that emits with no sinks still records its events, for
	// readers of the outbox.
	Sinks []string
	// Entity, when set, is the one entity the check watches: a client that
	// runs the check refuses to schedule it for another (its job could
	// only fail). Empty: any entity.
	Entity string
}

// Check is a registered check.
type Check struct {
	Name  string
	Func  Func      // set for single-job checks
	Batch BatchFunc // set for batch checks
	Opts  Opts
}

// ErrDuplicate is returned when a name is registered twice.
var ErrDuplicate = errors.New("check already registered")

// Registry maps check names to checks. The zero Registry is empty and ready
// to use; it is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	checks map[string]*Check
	// maxRuntime is the largest runtime guard a registered check sets.
	maxRuntime time.Duration
}

// Register adds a single-job check under name. opts may be nil.
func (r *Registry) Register(name string, fn Func, opts *Opts) error {
	if fn == nil {
		return fmt.Errorf("register check %q: nil function", name)
	}
	return r.add(&Check{Name: name, Func: fn}, opts)
}

// RegisterBatch adds a batch check under name. opts may be nil.
func (r *Registry) RegisterBatch(name string, fn BatchFunc, opts *Opts) error {
	if fn == nil {
		return fmt.Errorf("register check %q: nil function", name)
	}
	return r.add(&Check{Name: name, Batch: fn}, opts)
}

func (r *Registry) add(c *Check, opts *Opts) error {
	if err := ValidateName("check", c.Name); err != nil {
		return fmt.Errorf("register check: %w", err)
	}
	if opts != nil {
		c.Opts = *opts
		c.Opts.Awaits = append([]string(nil), opts.Awaits...)
		c.Opts.Sinks = nil
		for _, s := range opts.Sinks { // each sink once: one delivery per sink
			if !slices.Contains(c.Opts.Sinks, s) {
				c.Opts.Sinks = append(c.Opts.Sinks, s)
			}
		}
	}
	if c.Opts.Entity != "" {
		if err := ValidateName("entity", c.Opts.Entity); err != nil {
			return fmt.Errorf("register check %q: %w", c.Name, err)
		}
	}
	for _, ev := range c.Opts.Awaits {
		if err := ValidateName("event", ev); err != nil {
			return fmt.Errorf("register check %q: %w", c.Name, err)
		}
	}
	for _, s := range c.Opts.Sinks {
		if err := ValidateName("sink", s); err != nil {
			return fmt.Errorf("register check %q: %w", c.Name, err)
		}
	}
	if err := c.Opts.Guards.Validate(); err != nil {
		return fmt.Errorf("register check %q: %w", c.Name, err)
	}
	if c.Opts.BatchSize < 0 {
		return fmt.Errorf("register check %q: batch size %d must not be negative", c.Name, c.Opts.BatchSize)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checks == nil {
		r.checks = make(map[string]*Check)
	}
	if _, ok := r.checks[c.Name]; ok {
		return fmt.Errorf("register check %q: %w", c.Name, ErrDuplicate)
	}
	r.checks[c.Name] = c
	r.maxRuntime = max(r.maxRuntime, c.Opts.Guards.Runtime)
	return nil
}

// MaxRuntime returns the largest runtime guard a registered check sets of
// its own (Opts.Guards.Runtime); 0 when none does.
func (r *Registry) MaxRuntime() time.Duration {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.maxRuntime
}

// Lookup returns the check registered under name.
func (r *Registry) Lookup(name string) (*Check, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c, ok := r.checks[name]
	return c, ok
}

// All returns the registered checks, sorted by name.
func (r *Registry) All() []*Check {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Check, 0, len(r.checks))
	for _, c := range r.checks {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
