package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// scheduleOpts are the arguments and flags of `prescient schedule`.
type scheduleOpts struct {
	entity, key, check string
	at, in             string // the raw flags
	payload            string
	onConflict         string
	requireKnown       bool
	json               bool
	payloadGiven       bool // --payload was given, if empty

	// Set by Validate.
	when    time.Time     // from --at
	after   time.Duration // from --in
	rule    prescient.ConflictRule
	rawJSON json.RawMessage
}

// Validate checks the flags and parses them; errors name the flag and value.
func (o *scheduleOpts) Validate() error {
	var err error
	if o.when, o.after, err = parseAtIn(o.at, o.in, true); err != nil {
		return err
	}
	if o.payloadGiven && o.payload == "" {
		// Most likely an unset shell variable (--payload "$PAYLOAD"):
		// read as no payload, the job would keep the one it had.
		return fmt.Errorf(`--payload is empty: give JSON ('{"amount": 42}'), or leave --payload out to keep the pending job's payload`)
	}
	if o.payload != "" {
		if !json.Valid([]byte(o.payload)) {
			var v any
			err := json.Unmarshal([]byte(o.payload), &v)
			return fmt.Errorf("--payload %q is not valid JSON: %v (want e.g. '{\"amount\": 42}')", o.payload, err)
		}
		o.rawJSON = json.RawMessage(o.payload)
	}
	switch r := prescient.ConflictRule(o.onConflict); r {
	case prescient.ConflictReplace, prescient.ConflictKeep:
		o.rule = r
	default:
		return fmt.Errorf("--on-conflict %q is not a conflict rule (want %s or %s)", o.onConflict, prescient.ConflictReplace, prescient.ConflictKeep)
	}
	return nil
}

func (e *env) scheduleCommand() *cobra.Command {
	o := &scheduleOpts{}
	cmd := &cobra.Command{
		Use:   "schedule ENTITY KEY CHECK (--at TIME | --in DURATION)",
		Short: "Schedule a check of an entity, and print the slot it landed in",
		Long: `schedule upserts the job (ENTITY, KEY, CHECK): its check runs in the first slot
at or after the requested time (times are rounded up to the slot grid; a time
that has passed moves to the next slot).

If the job is already pending, --on-conflict says what happens: replace (the
default) moves it to the new time, and replaces its payload when --payload is
given; keep leaves it untouched.

Times are rounded to the slot grid the servers recorded in the database, when
the configuration does not set slots.resolution or slots.offset; a
configuration that sets a different grid is refused, since the job would land
in a slot no server fires.

A CHECK that no server has registered (it is not in the check catalog that
every starting server and migrate record) is scheduled with a warning naming
the known checks: its job waits until a server that runs it starts.
--require-known-check refuses it instead.

--json prints the scheduled job (with the position of its slot) as JSON for
scripts.`,
		Example: `  prescient schedule order 42 order_unshipped --in 3h
  prescient schedule order 42 order_unshipped --at 2030-06-01T15:00:00Z --payload '{"amount": 42}'
  prescient schedule order 42 order_unshipped --in 3h --on-conflict keep
  prescient schedule order 42 order_unshipped --in 3h --require-known-check
  prescient schedule order 42 order_unshipped --in 3h --json`,
		Args: positionalArgs("ENTITY", "KEY", "CHECK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.entity, o.key, o.check = args[0], args[1], args[2]
			o.payloadGiven = cmd.Flags().Changed("payload")
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			if o.requireKnown {
				if err := knownCheck(cmd.Context(), cmd.ErrOrStderr(), s.client, o.check, true); err != nil {
					return err
				}
			}
			if err := schedule(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), s.client, o); err != nil {
				return err
			}
			// Warned once the job exists: not of a job refused for its
			// key or payload (found by a new user's trial).
			return knownCheck(cmd.Context(), cmd.ErrOrStderr(), s.client, o.check, false)
		},
	}
	cmd.Flags().StringVar(&o.at, "at", "", "check at or after `TIME` (RFC 3339)")
	cmd.Flags().StringVar(&o.in, "in", "", "check after `DURATION` from now (Go duration: 90s, 15m, 3h)")
	cmd.Flags().StringVar(&o.payload, "payload", "", "`JSON` handed to the check")
	cmd.Flags().StringVar(&o.onConflict, "on-conflict", string(prescient.ConflictReplace), "what to do when the job is already pending: replace or keep")
	cmd.Flags().BoolVar(&o.requireKnown, "require-known-check", false, "refuse a CHECK that no server has registered (not in the check catalog), rather than warn")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the scheduled job as JSON for scripts")
	e.completeArgs(cmd, argEntity, argNone, argCheck)
	completeWords(cmd, "on-conflict",
		cobra.CompletionWithDesc(string(prescient.ConflictReplace), "move the pending job to the new time"),
		cobra.CompletionWithDesc(string(prescient.ConflictKeep), "leave the pending job untouched"))
	return cmd
}

// knownCheck warns on errOut when no server has registered check: it is
// not in the check catalog, which every starting server (and `prescient
// migrate`) records, so its job would wait until a server that runs it
// starts, which may be never (a misspelt name). With require it refuses
// instead, as River refuses a job kind no worker handles. A check this
// binary runs itself (a Go check, or one declared in its configuration) is
// known too: a server of this binary runs it, though none has started on
// this database yet.
func knownCheck(ctx context.Context, errOut io.Writer, c *prescient.Client, check string, require bool) error {
	err := c.KnownCheck(ctx, check)
	var unknown *prescient.UnknownCheckError
	if !errors.As(err, &unknown) {
		return err
	}
	what := unknown.Error()
	if require {
		return fmt.Errorf("%s: not scheduled (--require-known-check; check the name, or start a server that runs the check first)", what)
	}
	fmt.Fprintf(errOut, "warning: %s: the job waits until a server that runs it starts (check the name; --require-known-check refuses instead)\n", what)
	return nil
}

func schedule(ctx context.Context, out, errOut io.Writer, c *prescient.Client, o *scheduleOpts) error {
	now := c.Config().Now()
	at := o.when
	if at.IsZero() {
		at = now.Add(o.after)
	}
	p := prescient.ScheduleParams{Entity: o.entity, Key: o.key, Check: o.check, At: at, OnConflict: o.rule}
	if o.rawJSON != nil {
		p.Payload = o.rawJSON
	}
	job, err := c.Schedule(ctx, p)
	if err != nil {
		return err
	}
	if job.Inserted || o.rule != prescient.ConflictKeep { // a job kept as it was took no time from --at
		notePassed(errOut, o.at, o.when, now, job)
	}
	g := c.Config().Grid
	if o.json {
		return writeJSON(out, scheduledJob{Job: job, Position: g.Position(job.NextCheckAt), Created: &job.Inserted})
	}
	did := "created"
	switch {
	case job.Inserted:
	case o.rule == prescient.ConflictKeep:
		did = "already pending, kept as it was (--on-conflict keep)"
	default:
		did = "already pending, replaced"
	}
	fmt.Fprintf(out, "%s/%s %s: %s; next check in slot %s (position %d, %s); first check %s, %d check(s) so far\n",
		job.Entity, job.Key, job.Check, did, fmtSlot(job.NextCheckAt),
		g.Position(job.NextCheckAt), positionLabel(g, g.Position(job.NextCheckAt)),
		fmtSlot(job.FirstCheckAt), job.CheckCount)
	return nil
}

// notePassed says on errOut when --at (at, parsed as when) had passed
// before now and the job's check was moved to a later slot: a wrong year or
// day would otherwise run the check at once, with no word of it.
func notePassed(errOut io.Writer, at string, when, now time.Time, job *prescient.Job) {
	if when.IsZero() || !when.Before(now) || !job.NextCheckAt.After(when) {
		return
	}
	fmt.Fprintf(errOut, "note: --at %s has passed (it is %s): the check runs in slot %s instead\n",
		at, now.UTC().Format(time.RFC3339), fmtSlot(job.NextCheckAt))
}

// scheduledJob is the --json output of schedule and reschedule: the pending
// job and the position of its slot in the ownership cycle.
type scheduledJob struct {
	*prescient.Job
	Position int `json:"position"`
	// Created says, for schedule, whether the job was created (true) or
	// was pending already (false: replaced, or kept with --on-conflict
	// keep); reschedule leaves it out.
	Created *bool `json:"created,omitempty"`
}

// cancelOpts are the arguments and flags of `prescient cancel`.
type cancelOpts struct {
	entity, key, check string
	// checkGiven says CHECK was given, even as "": an empty CHECK (an
	// unset shell variable, "$CHECK") must not cancel every check.
	checkGiven bool
	json       bool
}

// Validate refuses an empty CHECK; the client checks the names.
func (o *cancelOpts) Validate() error {
	if o.checkGiven && o.check == "" {
		return errors.New(`CHECK is empty: name the check to cancel, or leave CHECK out to cancel every pending check of the entity`)
	}
	return nil
}

func (e *env) cancelCommand() *cobra.Command {
	o := &cancelOpts{}
	cmd := &cobra.Command{
		Use:   "cancel ENTITY KEY [CHECK]",
		Short: "Cancel a pending check of an entity, or all of them",
		Long: `cancel moves the pending job (ENTITY, KEY, CHECK), or every pending job of the
entity when CHECK is left out, to history with outcome cancelled, and prints
how many it cancelled. Cancelling what is not pending is not an error.
--json prints {"cancelled": N} for scripts.`,
		Example: `  prescient cancel order 42 order_unshipped
  prescient cancel order 42
  prescient cancel order 42 --json`,
		Args: positionalArgs("ENTITY", "KEY", "[CHECK]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.entity, o.key = args[0], args[1]
			if len(args) == 3 {
				o.check, o.checkGiven = args[2], true
			}
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{existing: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			n, err := s.client.Cancel(cmd.Context(), o.entity, o.key, o.check)
			if err != nil {
				return err
			}
			if n == 0 && o.check != "" {
				// Nothing to cancel is no error, but a check no one knows
				// is most likely a misspelt one, and the job meant stays.
				var unknown *prescient.UnknownCheckError
				if errors.As(s.client.KnownCheck(cmd.Context(), o.check), &unknown) {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %s: is the name right?\n", unknown)
				}
			}
			if o.json {
				return writeJSON(cmd.OutOrStdout(), map[string]int{"cancelled": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelled %d job(s)\n", n)
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print the count as JSON for scripts")
	e.completeArgs(cmd, argEntity, argNone, argCheck)
	return cmd
}

// resolveOpts are the arguments and flags of `prescient resolve`.
type resolveOpts struct {
	entity, key, event string
	json               bool
}

// Validate accepts any arguments; the client checks the names.
func (o *resolveOpts) Validate() error { return nil }

func (e *env) resolveCommand() *cobra.Command {
	o := &resolveOpts{}
	cmd := &cobra.Command{
		Use:   "resolve ENTITY KEY EVENT",
		Short: "Say that an event happened to an entity, settling the checks that awaited it",
		Long: `resolve moves every pending job of the entity whose check awaits EVENT to
history with outcome resolved, and prints how many. Which checks await which
events comes from the check catalog, recorded by every server at start-up
(and by this command for the checks built into this binary). --json prints
{"resolved": N} for scripts.`,
		Example: `  prescient resolve order 42 shipped
  prescient resolve order 42 shipped --json`,
		Args: positionalArgs("ENTITY", "KEY", "EVENT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.entity, o.key, o.event = args[0], args[1], args[2]
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{existing: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			if err := addMissingCatalog(cmd.Context(), s.client.Store().Driver(), e.opts.Checks); err != nil {
				return err
			}
			n, err := s.client.Resolve(cmd.Context(), o.entity, o.key, o.event)
			if err != nil {
				return err
			}
			if n == 0 {
				// Nothing to settle is no error, but an event no check
				// awaits is most likely a misspelt one, and the alert it
				// should have stopped will fire.
				if note := unawaitedNote(cmd.Context(), s.client.Store().Driver(), o.event); note != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "note: "+note)
				}
			}
			if o.json {
				return writeJSON(cmd.OutOrStdout(), map[string]int{"resolved": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resolved %d job(s)\n", n)
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print the count as JSON for scripts")
	e.completeArgs(cmd, argEntity, argNone, argEvent)
	return cmd
}

// unawaitedNote says that no check of the catalog awaits event, naming the
// events they do await; "" when one does, or the catalog cannot be read.
func unawaitedNote(ctx context.Context, drv driver.Driver, event string) string {
	entries, err := drv.CatalogList(ctx)
	if err != nil {
		return ""
	}
	var awaited []string
	for _, e := range entries {
		if slices.Contains(e.Awaits, event) {
			return ""
		}
		awaited = append(awaited, e.Awaits...)
	}
	slices.Sort(awaited)
	known := "none"
	if awaited = slices.Compact(awaited); len(awaited) > 0 {
		known = strings.Join(awaited, ", ")
	}
	return fmt.Sprintf("no check awaits event %q (the events checks await: %s): is the name right?", event, known)
}

// addMissingCatalog records the catalog entries of this binary's checks that
// the store does not have yet, so that resolve works on a database no server
// or migrate has seen, without overwriting what the servers that run those
// checks recorded (their Awaits are the ones that count).
func addMissingCatalog(ctx context.Context, st driver.Driver, reg *checks.Registry) error {
	have, err := st.CatalogList(ctx)
	if err != nil {
		return err
	}
	known := make(map[string]bool, len(have))
	for _, e := range have {
		known[e.Check] = true
	}
	var missing []driver.CatalogEntry
	for _, c := range reg.All() {
		if !known[c.Name] {
			missing = append(missing, driver.CatalogEntry{Check: c.Name, Awaits: c.Opts.Awaits, Entity: c.Opts.Entity})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return st.CatalogSave(ctx, missing)
}
