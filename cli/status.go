package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
)

// statusOpts are the flags of `prescient status`.
type statusOpts struct {
	json     bool
	upcoming int
	recent   int
}

// Validate checks the counts.
func (o *statusOpts) Validate() error {
	if o.upcoming < 1 || o.upcoming > 1000 {
		return fmt.Errorf("--upcoming %d must be between 1 and 1000", o.upcoming)
	}
	if o.recent < 1 || o.recent > 1000 {
		return fmt.Errorf("--recent %d must be between 1 and 1000", o.recent)
	}
	return nil
}

func (e *env) statusCommand() *cobra.Command {
	o := &statusOpts{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is pending, overdue and recently fired",
		Long: `status prints a snapshot for operators: the pending total; the load of the
upcoming slots (jobs per slot, before they fire); overdue jobs (due in a slot
that has passed without being processed) and the oldest of them; pending jobs
per check; the latest slots fired, with their lag (how long after the slot
boundary firing started) and counts; history outcomes over the last 24 hours;
and the registered servers. --json prints the same for scripts.

The output starts with the database it read. status only reads: with SQLite,
a database.path that names no file is an error, not a new empty database.`,
		Example: `  prescient status
  prescient status --upcoming 20 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{readOnly: true, rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			return printStatus(cmd.Context(), cmd.OutOrStdout(), s.client, o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON for scripts")
	cmd.Flags().IntVar(&o.upcoming, "upcoming", 10, "list at most `N` upcoming slots")
	cmd.Flags().IntVar(&o.recent, "recent", 10, "list at most `N` recently fired slots")
	return cmd
}

func printStatus(ctx context.Context, out io.Writer, c *prescient.Client, o *statusOpts) error {
	st, err := c.Status(ctx, &prescient.StatusOpts{Upcoming: o.upcoming, Recent: o.recent})
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(out, st)
	}
	writeStatus(out, st, c.Config().SweepSchedule == "-")
	return nil
}

// writeStatus prints st for people; noSweep says the configuration
// schedules no sweep, for the advice on overdue jobs.
func writeStatus(out io.Writer, st *prescient.Status, noSweep bool) {
	j := st.Jobs
	fmt.Fprintf(out, "now %s, slot %s in progress (grid %s)\n\n", fmtTime(st.Now), fmtSlot(st.Current), st.Grid)
	fmt.Fprintf(out, "pending: %d\n", j.Pending)
	if j.Overdue > 0 {
		// Slots fired past their end: their jobs are overdue and being
		// taken, which no sweep would speed up.
		var firing []string
		for _, r := range st.Recent {
			if r.State == prescient.SlotRunning && r.Slot.Before(st.Current) {
				firing = append(firing, fmtSlot(r.Slot)+" by "+safeText(r.Server))
			}
		}
		advice := "the servers' next sweep takes them (`prescient sweep` now), but jobs of a check no server runs wait for one that does"
		if noSweep {
			advice = "no sweep is scheduled (sweep.schedule: - in this configuration): `prescient sweep` takes them, " +
				"and a server that starts (sweep.on_start) or takes positions over; jobs of a check no server runs wait for one that does"
		}
		if len(firing) > 0 {
			advice = "slot(s) " + strings.Join(firing, ", ") + " still being fired, past their end, take their own; " + advice
		}
		// Truncated, as the times printed are: "oldest due 10:00:00 (3s
		// ago)" under "now 10:00:03".
		fmt.Fprintf(out, "overdue: %d, oldest due %s (%s ago); %s\n",
			j.Overdue, fmtSlot(j.OldestOverdue), st.Now.Sub(j.OldestOverdue).Truncate(time.Second), advice)
	} else {
		fmt.Fprintln(out, "overdue: 0")
	}

	fmt.Fprintln(out, "\nupcoming slots:")
	if len(j.Upcoming) == 0 {
		fmt.Fprintln(out, "  (none)")
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SLOT\tIN\tJOBS\tFIRED BY")
		for i, l := range j.Upcoming {
			in := "in progress" // the slot in progress, due already
			if l.Slot.After(st.Now) {
				in = l.Slot.Sub(st.Now).Round(time.Second).String()
			}
			by := "no live server (a sweep takes its jobs once due)"
			if i < len(st.FiredBy) && len(st.FiredBy[i]) > 0 {
				by = strings.Join(st.FiredBy[i], ", ")
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", fmtSlot(l.Slot), in, l.Jobs, by)
		}
		tw.Flush()
	}

	fmt.Fprintln(out, "\npending per check:")
	if len(j.ByCheck) == 0 {
		fmt.Fprintln(out, "  (none)")
	} else {
		names := make([]string, 0, len(j.ByCheck))
		for n := range j.ByCheck {
			names = append(names, n)
		}
		slices.Sort(names)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, n := range names {
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", safeText(n), j.ByCheck[n], runners(st, n))
		}
		tw.Flush()
	}

	switch {
	case st.Incomplete > 0 && noSweep:
		fmt.Fprintf(out, "\nrecent slots (%d incomplete: no sweep is scheduled; their owner's catch-up, `prescient sweep` or a server that starts takes their jobs):\n", st.Incomplete)
	case st.Incomplete > 0:
		fmt.Fprintf(out, "\nrecent slots (%d incomplete: catch-up or the sweep takes their jobs):\n", st.Incomplete)
	default:
		fmt.Fprintln(out, "\nrecent slots:")
	}
	if len(st.Recent) == 0 {
		fmt.Fprintln(out, "  (none fired yet)")
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SLOT\tSERVER\tKIND\tLAG\tSTATE\tCHECKED\tRESCHEDULED\tFAILURES\tUNKNOWN\tOUTCOMES")
		for _, r := range st.Recent {
			state := string(r.State)
			if r.State == prescient.SlotDone {
				state = "done in " + r.Took.Round(time.Millisecond).String()
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n",
				fmtSlot(r.Slot), safeText(r.Server), r.Kind, r.StartedAt.Sub(r.Slot).Round(time.Millisecond), state,
				r.Checked, r.Rescheduled, r.Failures, r.Unknown, outcomeCounts(r.Outcomes, "-"))
		}
		tw.Flush()
	}

	fmt.Fprintf(out, "\nhistory (24h): %s\n", outcomeCounts(st.Outcomes, "none"))
	fmt.Fprintf(out, "deliveries: %s\n", deliveryCounts(st.Deliveries))

	fmt.Fprintln(out, "\nservers:")
	if len(st.Servers) == 0 {
		fmt.Fprintln(out, "  (none registered)")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tSTATE\tSTARTED\tLAST HEARTBEAT\tPOSITIONS")
	for _, s := range st.Servers {
		state := "live"
		if !s.Alive {
			state = "gone"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s ago\t%v\n", safeText(s.Name), state, fmtTime(s.StartedAt), st.Now.Sub(s.HeartbeatAt).Round(time.Second), s.Positions)
	}
	tw.Flush()
}

// runners says which live servers run check (Status.RunBy), or that none
// does; nothing when a live server does not say (an older prescient).
func runners(st *prescient.Status, check string) string {
	if st.RunBy == nil {
		return ""
	}
	live := slices.ContainsFunc(st.Servers, func(s *prescient.ServerStatus) bool { return s.Alive })
	switch by := st.RunBy[check]; {
	case len(by) > 0:
		return "run by " + strings.Join(by, ", ")
	case !live:
		return "no live server"
	}
	return "no live server runs it: its jobs wait (prescient checks retire, if it is gone for good)"
}

// outcomeCounts prints counts in the order of history.Outcomes, e.g.
// "done 3, resolved 1".
func outcomeCounts(m map[history.Outcome]int, none string) string {
	var parts []string
	for _, o := range history.Outcomes {
		if n := m[o]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, ", ")
}
