package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
)

// sweepOpts are the flags of `prescient sweep`.
type sweepOpts struct {
	mode string // empty: sweep.mode from the configuration
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
built into this binary run; others stay pending). With --mode reslot it moves
them to the next slot, where its owner fires them. The default is sweep.mode
from the configuration.`,
		Example: `  prescient sweep
  prescient sweep --mode reslot`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{rounds: true})
			if err != nil {
				return err
			}
			defer s.close()
			s.header(cmd.OutOrStdout())
			mode := prescient.SweepMode(s.cfg.Sweep.Mode)
			if o.mode != "" {
				mode = prescient.SweepMode(o.mode)
			}
			return sweep(cmd.Context(), cmd.OutOrStdout(), s.client, mode)
		},
	}
	cmd.Flags().StringVar(&o.mode, "mode", "", "run (check overdue jobs now) or reslot (move them to the next slot); default sweep.mode")
	return cmd
}

func sweep(ctx context.Context, out io.Writer, c *prescient.Client, mode prescient.SweepMode) error {
	res, err := c.Sweep(ctx, mode)
	if err != nil {
		return err
	}
	switch res.Mode {
	case prescient.SweepReslot:
		fmt.Fprintf(out, "sweep (reslot): moved %d overdue job(s) to slot %s\n", res.Jobs, res.To.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(out, "sweep (run): fired %d overdue slot(s), checked %d job(s)\n", res.Slots, res.Jobs)
	}
	return nil
}
