package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
)

// rescheduleOpts are the arguments and flags of `prescient reschedule`.
type rescheduleOpts struct {
	entity, key, check string
	at, in             string // the raw flags
	json               bool

	when  time.Time     // from --at, set by Validate
	after time.Duration // from --in, set by Validate
}

// Validate parses --at or --in; errors name the flag and value.
func (o *rescheduleOpts) Validate() error {
	var err error
	o.when, o.after, err = parseAtIn(o.at, o.in, true)
	return err
}

func (e *env) rescheduleCommand() *cobra.Command {
	o := &rescheduleOpts{}
	cmd := &cobra.Command{
		Use:   "reschedule ENTITY KEY CHECK (--at TIME | --in DURATION)",
		Short: "Move a pending job's next check, and print its new slot",
		Long: `reschedule moves the next check of the pending job (ENTITY, KEY, CHECK) to the
first slot at or after the time given (rounded up to the grid as schedule
does; a time that has passed moves to the next slot). Until a check of the job
has run to a result, its first check moves with it.

Unlike schedule it never creates a job: when none is pending it says so and
exits with status 1. --json prints the moved job for scripts.`,
		Example: `  prescient reschedule order 42 order_unshipped --in 30m
  prescient reschedule order 42 order_unshipped --at 2030-06-01T15:00:00Z
  prescient reschedule order 42 order_unshipped --in 1h --json`,
		Args: positionalArgs("ENTITY", "KEY", "CHECK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.entity, o.key, o.check = args[0], args[1], args[2]
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{existing: true, rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			return reschedule(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), s.client, o)
		},
	}
	cmd.Flags().StringVar(&o.at, "at", "", "check at or after `TIME` (RFC 3339)")
	cmd.Flags().StringVar(&o.in, "in", "", "check after `DURATION` from now (Go duration: 90s, 15m, 3h)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the moved job as JSON for scripts")
	e.completeArgs(cmd, argEntity, argNone, argCheck)
	return cmd
}

func reschedule(ctx context.Context, out, errOut io.Writer, c *prescient.Client, o *rescheduleOpts) error {
	now := c.Config().Now()
	at := o.when
	if at.IsZero() {
		at = now.Add(o.after)
	}
	job, err := c.Reschedule(ctx, o.entity, o.key, o.check, at)
	if errors.Is(err, prescient.ErrNotFound) {
		return fmt.Errorf("reschedule: no pending job %s/%s/%s, so nothing was moved (prescient jobs show %s %s lists what the entity has; prescient schedule creates a job)",
			o.entity, safeText(o.key), o.check, o.entity, safeText(o.key))
	}
	if err != nil {
		return err // the client says "reschedule" and names the job
	}
	notePassed(errOut, o.at, o.when, now, job)
	g := c.Config().Grid
	p := g.Position(job.NextCheckAt)
	if o.json {
		return writeJSON(out, scheduledJob{Job: job, Position: p})
	}
	fmt.Fprintf(out, "%s/%s %s: next check moved to slot %s (position %d, %s); first check %s, %d check(s) so far\n",
		job.Entity, safeText(job.Key), job.Check, fmtSlot(job.NextCheckAt), p, positionLabel(g, p),
		fmtSlot(job.FirstCheckAt), job.CheckCount)
	return nil
}
