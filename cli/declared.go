package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// CheckConfig is one entry of the `checks` section: a check declared in
// SQL, with no Go (package sqlcheck). The entry's key is the check's name.
//
// In query, $1 is the SQL parameter holding the due keys: a $ followed by a
// digit is kept as it is there, where elsewhere in the file it is an error;
// ${NAME} and $NAME are still environment variables, and $$ a literal $.
type CheckConfig struct {
	// Entity is the entity the check watches ("order").
	Entity string `yaml:"entity"`
	// Query returns, for the due keys in $1, a row per key still not there
	// yet: a column named key, and any columns to carry into the events.
	Query string `yaml:"query"`
	// Anchor names the timestamp column the stages count from. Empty: the
	// job's first check.
	Anchor string `yaml:"anchor"`
	// Stages is the ladder, in strictly increasing order of after.
	Stages []StageConfig `yaml:"stages"`
	// Awaits lists the events that settle the check (resolve).
	Awaits []string `yaml:"awaits"`
	// Sinks names the sinks the events go to.
	Sinks []string `yaml:"sinks"`
	// BatchSize caps the due jobs one query is run for. Left out: the
	// server's batch_size.
	BatchSize int `yaml:"batch_size"`
	// Guards override the server's guards for this check; a key left out
	// keeps the server's value.
	Guards GuardsConfig `yaml:"guards"`
}

// StageConfig is one stage of a declared check.
type StageConfig struct {
	// After is the stage's time from the anchor: 0s or more, each stage
	// after the one before.
	After Duration `yaml:"after"`
	// Event names the event raised.
	Event string `yaml:"event"`
	// Stage names the stage in the events' idempotency key; default: the
	// event's name.
	Stage string `yaml:"stage"`
	// Severity is free text for the receivers ("warning", "critical").
	Severity string `yaml:"severity"`
}

// spec returns the declared check name as sqlcheck reads it.
func (c *Config) spec(name string) sqlcheck.Spec {
	cc := c.Checks[name]
	s := sqlcheck.Spec{
		Name:      name,
		Entity:    cc.Entity,
		Query:     cc.Query,
		Anchor:    cc.Anchor,
		Awaits:    cc.Awaits,
		Sinks:     cc.Sinks,
		BatchSize: cc.BatchSize,
		Guards: guards.Limits{
			MaxChecks: cc.Guards.MaxChecks,
			Runtime:   time.Duration(cc.Guards.Runtime),
			Horizon:   time.Duration(cc.Guards.Horizon),
		},
	}
	for _, st := range cc.Stages {
		s.Stages = append(s.Stages, sqlcheck.Stage{After: time.Duration(st.After), Event: st.Event, Name: st.Stage, Severity: st.Severity})
	}
	return s
}

// DeclaredChecks returns the checks section as sqlcheck specs, sorted by
// name: what a Go program needs to run the same declarations itself
// (sqlcheck.Prepare). Call Validate first.
func (c *Config) DeclaredChecks() []sqlcheck.Spec {
	out := make([]sqlcheck.Spec, 0, len(c.Checks))
	for _, name := range c.checkNames() {
		out = append(out, c.spec(name))
	}
	return out
}

// checkNames returns the names of the declared checks, sorted.
func (c *Config) checkNames() []string {
	names := make([]string, 0, len(c.Checks))
	for n := range c.Checks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ladderChecks replays, as the engine runs it, a job whose first check is
// at its anchor (on a slot boundary): each check raises the stages due by
// its slot and asks for the next stage's time, or for horizon ahead when
// that is further, which the engine rounds up to the grid of res. It
// returns the first stage the job would reach after maxChecks checks and
// the check that reaches it (counted on, up to a million, for a message),
// or -1 when every stage is reached within them.
func ladderChecks(stages []StageConfig, horizon, res time.Duration, maxChecks int) (stage, check int) {
	at, i, late := time.Duration(0), 0, -1
	for n := 1; n <= 1_000_000; n++ {
		for i < len(stages) && time.Duration(stages[i].After) <= at {
			i++ // raised at this check
		}
		switch {
		case late >= 0 && i > late:
			return late, n
		case i == len(stages):
			return -1, 0
		case n == maxChecks:
			late = i
		}
		at = ladderNext(time.Duration(stages[i].After), at, horizon)
		if res > 0 {
			at = (at + res - 1) / res * res
		}
	}
	return late, 1_000_000
}

// ladderNext is the time a check at at asks for, the next stage being at
// stage: the stage's time, or at+horizon when that is sooner (a horizon of
// 0 or less sets no limit).
func ladderNext(stage, at, horizon time.Duration) time.Duration {
	if horizon <= 0 {
		return stage
	}
	return min(stage, at+horizon)
}

// checksErrors returns what is wrong with the checks section without a
// database, each a *ConfigError naming the key path and its line: the spec
// (sqlcheck.Spec.Validate), a stage without after or whose after, counted
// from now, is past the supported range of check times, a guard or batch size
// written as 0 (which would silently mean the server's value), a batch size
// over jobsPerGroupMax, a runtime under 10ms, a horizon under the slot resolution, and sinks that are not
// configured. The queries are prepared against the database when a command
// opens it (declare).
func (c *Config) checksErrors() []error {
	var errs []error
	bad := func(key string, err error) {
		errs = append(errs, &ConfigError{File: c.file, Line: c.lineFor(key), Key: key, Err: err})
	}
	for _, name := range c.checkNames() {
		cc, base := c.Checks[name], join("checks", name)
		spec := c.spec(name)
		for _, fe := range sqlcheck.FieldErrors(spec.Validate()) {
			bad(fieldKey(base, fe.Field), fe.Err)
		}
		// A stage whose time, counted from now, is past the range of check
		// times is refused as --in is (parseAtIn): the check would ask for
		// it, and the engine ends the job as guard_horizon instead, never
		// raising the stage (a ladder that far off is a typo: 2000000h).
		now, pastRange := time.Now(), false
		for i, st := range cc.Stages {
			key := fmt.Sprintf("%s.stages[%d].after", base, i)
			if c.lines[key] == 0 && st.After == 0 {
				bad(key, errors.New("is missing: say when the stage is due, counted from the anchor (e.g. after: 3h; 0s for at once)"))
			}
			if t := now.Add(time.Duration(st.After)); st.After > 0 && !slots.InRange(t) {
				bad(key, fmt.Errorf("%s from a job anchored now reaches %s, past the supported range %s: its jobs would end guard_horizon "+
					"instead of raising the stage", st.After, t.UTC().Format(time.RFC3339), slots.Range()))
				pastRange = true
			}
		}
		// A stage further off than the horizon is no error: the check asks
		// for the horizon and looks again then (sqlcheck, checks.Job.Horizon).
		// But each such check counts against max_checks: a ladder its
		// jobs cannot climb within it is refused. Counted from the job's
		// first check at the anchor (or, without one, the anchor itself).
		written := func(field string) bool { return c.lines[base+"."+field] > 0 }
		horizon, horizonKey := time.Duration(c.Guards.Horizon), "guards.horizon"
		if written("guards.horizon") {
			horizon, horizonKey = time.Duration(cc.Guards.Horizon), base+".guards.horizon"
		}
		maxChecks, maxKey := c.Guards.MaxChecks, "guards.max_checks"
		if written("guards.max_checks") {
			maxChecks, maxKey = cc.Guards.MaxChecks, base+".guards.max_checks"
		}
		if maxChecks > 0 && !pastRange { // raising a guard would not help
			if i, n := ladderChecks(cc.Stages, horizon, time.Duration(c.Slots.Resolution), maxChecks); i >= 0 {
				how, raise := fmt.Sprintf("or %s (%s) ahead at most, ", horizon, horizonKey), horizonKey+" or "+maxKey
				if horizon <= 0 {
					how, raise = "", maxKey
				}
				bad(fmt.Sprintf("%s.stages[%d].after", base, i), fmt.Errorf("is reached at the job's check %d at the earliest (each check asks "+
					"for the next stage, %srounded up to the slots): more than %s (%d), so its jobs would end "+
					"guard_max_checks first; raise %s", n, how, maxKey, maxChecks, raise))
			}
		}
		if written("batch_size") && cc.BatchSize == 0 {
			bad(base+".batch_size", errors.New("must be at least 1, got 0 (leave it out for the server's batch_size)"))
		}
		if cc.BatchSize > jobsPerGroupMax {
			bad(base+".batch_size", fmt.Errorf("must be at most %d (a server lists at most that many due jobs at a time, so no query "+
				"is run for more), got %d", jobsPerGroupMax, cc.BatchSize))
		}
		g := cc.Guards
		if written("guards.max_checks") && g.MaxChecks == 0 {
			bad(base+".guards.max_checks", errors.New("must be a positive number, or -1 for no limit, got 0 (leave it out for the server's guards.max_checks)"))
		}
		if written("guards.runtime") {
			switch {
			case g.Runtime == 0:
				bad(base+".guards.runtime", errors.New("must be positive, got 0s (leave it out for the server's guards.runtime)"))
			case g.Runtime == -1:
				bad(base+".guards.runtime", errors.New("must be positive (it cannot be disabled), got -1"))
			case g.Runtime > 0 && g.Runtime < runtimeMin:
				bad(base+".guards.runtime", fmt.Errorf("must be at least %s (a check runs in a database transaction), got %s", runtimeMin, g.Runtime))
			}
		}
		if written("guards.horizon") && g.Horizon == 0 {
			bad(base+".guards.horizon", errors.New("must be positive, or -1 for no limit, got 0s (leave it out for the server's guards.horizon)"))
		}
		known := c.sinkSet()
		if !written("sinks") {
			// Every stage raises an event: with no sink it is recorded in
			// prescient_outbox and never delivered (nor later, when a sink
			// is added: deliveries are made as the event is). Only an
			// application that reads that table itself wants that, and
			// says so with sinks: [].
			bad(base+".sinks", fmt.Errorf("is missing: the check's stages raise events (%s), which would be recorded and never delivered; "+
				"name the sinks they go to (configured: %s), or write sinks: [] to have them only recorded in prescient_outbox, "+
				"for a reader of your own", stageEvents(cc.Stages), sinkList(known)))
		}
		for i, s := range cc.Sinks {
			if !known[s] {
				bad(fmt.Sprintf("%s.sinks[%d]", base, i), fmt.Errorf("no sink named %q is configured (configured: %s): add it to the sinks section, or remove it here",
					s, sinkList(known)))
			}
		}
	}
	return errs
}

// stageEvents lists the events of stages, each once, in their order.
func stageEvents(stages []StageConfig) string {
	var names []string
	for _, st := range stages {
		if !slices.Contains(names, st.Event) {
			names = append(names, st.Event)
		}
	}
	return strings.Join(names, ", ")
}

// sinkSet returns the names of the configured sinks (SinkNames, in
// sinks.go).
func (c *Config) sinkSet() map[string]bool {
	known := make(map[string]bool)
	for _, n := range c.SinkNames() {
		known[n] = true
	}
	return known
}

func sinkList(known map[string]bool) string {
	if len(known) == 0 {
		return "none"
	}
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// fieldTailRE matches the last step of a key path: ".name" or "[3]".
var fieldTailRE = regexp.MustCompile(`(\.[^.\[\]]+|\[\d+\])$`)

// fieldKey is the key path of field of the declared check at base.
func fieldKey(base, field string) string {
	if field == "" {
		return base
	}
	return base + "." + field
}

// lineFor returns the line of key path in the file; for a key the file
// leaves out (stages of a check that has none) or a list item, the first
// line of what the file writes of it, or of the nearest key around it.
func (c *Config) lineFor(key string) int {
	for {
		if l := c.lines[key]; l > 0 {
			return l
		}
		best := 0
		for k, l := range c.lines {
			if (strings.HasPrefix(k, key+".") || strings.HasPrefix(k, key+"[")) && (best == 0 || l < best) {
				best = l
			}
		}
		if best > 0 {
			return best
		}
		tail := fieldTailRE.FindString(key)
		if tail == "" {
			return 0
		}
		key = strings.TrimSuffix(key, tail)
	}
}

// declaredQueryRE matches the key path of a declared check's query.
var declaredQueryRE = regexp.MustCompile(`^checks\.[^.]+\.query$`)

// sqlParams returns v, the value at key path of the file, with the SQL
// parameters of a declared check's query ($1) put back where expandEnv left
// a marker for "a $ that starts no variable": there they are meant.
func (r *envRefErrors) sqlParams(re *regexp.Regexp, path, v string) string {
	if !declaredQueryRE.MatchString(path) {
		return v
	}
	return re.ReplaceAllStringFunc(v, func(m string) string {
		var i int
		fmt.Sscanf(strings.TrimPrefix(m, r.marker), "%d_", &i)
		if i < len(r.errs) && r.errs[i].param {
			return "$"
		}
		return m
	})
}

// declared is what declare compiled last: the binary's own Go checks, and
// the declared checks it added to them.
type declared struct {
	goChecks *checks.Registry
	// prepared are the declared checks whose query was prepared, by name.
	prepared map[string]*sqlcheck.Check
}

// declare adds the declared checks of cfg to the checks the commands use
// (e.opts.Checks becomes the binary's Go checks plus those), once the store
// is open. With prepare, each query is prepared against st (see
// sqlcheck.Prepare): a query the database refuses, or that cannot work, is a
// *ConfigError naming the check's key and line; a database that cannot be
// reached is returned as it is, so that run tries again. Without prepare
// (commands that never run a check) the checks are registered for their
// names, awaited events and options only.
func (e *env) declare(ctx context.Context, st prescient.Store, cfg *Config, prepare bool) error {
	if e.declared == nil {
		e.declared = &declared{goChecks: e.opts.Checks}
	}
	d := &declared{goChecks: e.declared.goChecks, prepared: make(map[string]*sqlcheck.Check)}
	reg := &checks.Registry{}
	for _, c := range d.goChecks.All() {
		var err error
		if c.Batch != nil {
			err = reg.RegisterBatch(c.Name, c.Batch, &c.Opts)
		} else {
			err = reg.Register(c.Name, c.Func, &c.Opts)
		}
		if err != nil {
			return err
		}
	}
	var db sqlcheck.Database
	if prepare && len(cfg.Checks) > 0 {
		var err error
		if db, err = sqlcheck.ForStore(st); err != nil {
			return err
		}
	}
	var errs []error
	for _, name := range cfg.checkNames() {
		base := join("checks", name)
		spec := cfg.spec(name)
		if _, ok := reg.Lookup(name); ok {
			errs = append(errs, &ConfigError{File: cfg.file, Line: cfg.lineFor(base), Key: base,
				Err: fmt.Errorf("this binary has a Go check named %s already: give the declared check another name", name)})
			continue
		}
		if !prepare {
			if err := reg.RegisterBatch(name, unprepared(name), spec.Opts()); err != nil {
				return err
			}
			continue
		}
		runtime := time.Duration(cfg.Guards.Runtime)
		if spec.Guards.Runtime > 0 {
			runtime = spec.Guards.Runtime
		}
		pctx, cancel := context.WithTimeout(ctx, runtime)
		chk, err := sqlcheck.Prepare(pctx, db, spec)
		cancel()
		if fes := sqlcheck.FieldErrors(err); len(fes) > 0 {
			for _, fe := range fes {
				key := fieldKey(base, fe.Field)
				errs = append(errs, &ConfigError{File: cfg.file, Line: cfg.lineFor(key), Key: key, Err: fe.Err})
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", base, err)
		}
		if err := chk.Register(reg); err != nil {
			return err
		}
		d.prepared[name] = chk
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	e.declared = d
	e.opts.Checks = reg
	return nil
}

// unprepared is the function of a declared check registered without its
// query prepared, by a command that never runs a check.
func unprepared(name string) checks.BatchFunc {
	return func(context.Context, []*checks.Job) ([]checks.Result, error) {
		return nil, fmt.Errorf("declared check %s was registered without preparing its query: only commands that run checks prepare it", name)
	}
}

// startupError is err from declare as run's start-up sees it: a
// configuration error is permanent, anything else is tried again.
func startupError(err error) error {
	var ce *ConfigError
	if errors.As(err, &ce) {
		return permanentError{err}
	}
	return err
}
