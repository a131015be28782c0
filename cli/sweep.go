package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
)

// sweepOpts are the flags of `prescient sweep`.
type sweepOpts struct {
	mode string // empty: sweep.mode from the configuration
	json bool
}

// Validate checks --mode.
func (o *sweepOpts) Validate() error {
	if o.mode == "" {
		return nil
	}
	if _, err := prescient.ParseSweepMode(o.mode); err != nil {
		return fmt.Errorf("--mode: %w", err)
	}
	return nil
}

func (e *env) sweepCommand() *cobra.Command {
	o := &sweepOpts{}
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Take the overdue jobs now: run them, or move them to the next slot",
		Long: `sweep takes the overdue jobs: those due in a slot before the one in progress
that no server processed (downtime, a crash). With --mode run it fires their
slots now, oldest first, running the checks in this process (so only checks
built into this binary run; others stay pending), under the configuration's
server name, which the ledger and history record; the events the checks
raise are delivered by the servers, once one runs. With --mode reslot it moves
them to the next slot, where its owner fires them. The default is sweep.mode
from the configuration.

When stderr is a terminal, a progress line there counts the slots fired and
the jobs checked while the sweep runs. --json prints the result as one JSON
document for scripts ({"mode", "slots", "jobs", "to"}).`,
		Example: `  prescient sweep
  prescient sweep --mode reslot
  prescient sweep --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			prog := newProgress(cmd.ErrOrStderr(), "sweep")
			e.progress = prog
			var counts *sweepProgress
			if prog != nil {
				// Only this command's client is built from e: the counts
				// are this sweep's.
				counts = &sweepProgress{p: prog}
				e.observer = counts
			}
			// Only a sweep in run mode runs checks; one that reslots (an
			// operator's tool for when checks are broken) prepares no query.
			cfg, err := e.config()
			if err != nil {
				return err
			}
			runs := o.mode != string(prescient.SweepReslot) && (o.mode != "" || cfg.Sweep.Mode != string(prescient.SweepReslot))
			s, err := e.open(cmd.Context(), access{existing: true, runsChecks: runs, rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			mode := prescient.SweepMode(s.cfg.Sweep.Mode)
			if o.mode != "" {
				mode = prescient.SweepMode(o.mode)
			}
			if mode == prescient.SweepReslot {
				prog.set("moving the overdue jobs to the next slot")
			} else {
				prog.set("looking for overdue slots")
			}
			res, err := s.client.Sweep(cmd.Context(), mode)
			if err != nil {
				prog.clear()
				return err
			}
			prog.done("%s", sweepText(res))
			if o.json {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "sweep "+sweepText(res))
			return nil
		},
	}
	cmd.Flags().StringVar(&o.mode, "mode", "", "run (check overdue jobs now) or reslot (move them to the next slot); default sweep.mode")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON for scripts")
	completeWords(cmd, "mode",
		cobra.CompletionWithDesc(string(prescient.SweepRun), "check the overdue jobs now, in this process"),
		cobra.CompletionWithDesc(string(prescient.SweepReslot), "move the overdue jobs to the next slot"))
	return cmd
}

// sweepText says what a sweep did: "(run): fired 2 overdue slot(s), checked
// 40 job(s)".
func sweepText(res *prescient.SweepResult) string {
	if res.Mode == prescient.SweepReslot {
		return fmt.Sprintf("(reslot): moved %d overdue job(s) to slot %s", res.Jobs, fmtSlot(res.To))
	}
	return fmt.Sprintf("(run): fired %d overdue slot(s), checked %d job(s)", res.Slots, res.Jobs)
}
