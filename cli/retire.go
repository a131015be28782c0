package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
)

// retireOpts are the arguments and flags of `prescient checks retire`.
type retireOpts struct {
	check, entity string
	batch         int
	json, force   bool
}

// Validate refuses a batch size below 1; the client checks the names.
func (o *retireOpts) Validate() error {
	if o.batch < 1 {
		return fmt.Errorf("--batch %d: must be at least 1", o.batch)
	}
	return nil
}

// retireResult is the --json output of `prescient checks retire`.
type retireResult struct {
	Check     string `json:"check"`
	Entity    string `json:"entity,omitempty"`
	Cancelled int    `json:"cancelled"`
	// Uncataloged: the check's catalog entry was removed.
	Uncataloged bool `json:"uncataloged"`
}

func (e *env) retireCommand() *cobra.Command {
	o := &retireOpts{}
	cmd := &cobra.Command{
		Use:   "retire CHECK",
		Short: "Cancel every pending job of a check no server runs any more, and drop it from the catalog",
		Long: `retire is for a check taken out of every server: its pending jobs would stay
due forever, unknown to all of them (status and the status page list them as
unknown). It moves every pending job of CHECK to history with outcome
cancelled, finished by retire, --batch jobs per transaction, and removes the
check from the catalog (which resolve reads and the status page lists).
--entity limits it to that entity's jobs and leaves the catalog alone.

A check this binary or configuration runs is refused, and so is one a live
server runs (its heartbeat lists the checks it runs; beside a live server of
an older prescient, which does not, every check is refused until --force):
take it out of every server first (and stop the application scheduling it),
then retire it. Jobs scheduled for it afterwards are pending again; retire
again. Retiring a check with no pending job and no catalog entry does
nothing and says so.
--json prints {"check", "cancelled", "uncataloged"} for scripts.`,
		Example: `  prescient checks retire order_unpaid_legacy --config prescient.yaml
  prescient checks retire order_unpaid_legacy --entity order --json`,
		Args: positionalArgs("CHECK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.check = args[0]
			// An empty --entity must not retire the check for every entity.
			if err := emptyFilter(cmd, "entity"); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{existing: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			if _, ok := s.client.Config().Checks.Lookup(o.check); ok {
				return fmt.Errorf("check %s is one this binary or configuration runs (see `prescient checks`): "+
					"take it out of every server first, then retire it", o.check)
			}
			n, removed, err := s.client.RetireCheck(cmd.Context(), o.check, &prescient.RetireOpts{Entity: o.entity, BatchSize: o.batch, Force: o.force})
			if err != nil {
				return err
			}
			if o.json {
				if n == 0 && !removed {
					// Not an error (retiring twice is not), but a typo
					// must not pass for success unseen.
					fmt.Fprintf(cmd.ErrOrStderr(), "note: check %s: nothing to retire (is the name right?)\n", o.check)
				}
				return writeJSON(cmd.OutOrStdout(), retireResult{Check: o.check, Entity: o.entity, Cancelled: n, Uncataloged: removed})
			}
			out := cmd.OutOrStdout()
			switch {
			case o.entity != "":
				fmt.Fprintf(out, "check %s: cancelled %d pending job(s) of entity %s (history: cancelled, by retire)\n", o.check, n, o.entity)
			case n == 0 && !removed:
				fmt.Fprintf(out, "check %s: nothing to retire: no pending job, and no catalog entry (is the name right? `prescient status` lists the pending jobs per check)\n", o.check)
			default:
				note := "removed from the catalog"
				if !removed {
					note = "it was not in the catalog"
				}
				fmt.Fprintf(out, "check %s retired: cancelled %d pending job(s) (history: cancelled, by retire); %s\n", o.check, n, note)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.entity, "entity", "", "retire only this entity's jobs of the check (the catalog entry stays)")
	cmd.Flags().IntVar(&o.batch, "batch", prescient.RetireBatchDefault, "jobs cancelled per transaction")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON for scripts")
	cmd.Flags().BoolVar(&o.force, "force", false, "retire the check even though a live server runs it, or may (one of an older prescient)")
	e.completeArgs(cmd, argCheck)
	return cmd
}
