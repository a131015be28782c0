package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
)

// retryOpts are the flags of `prescient retry`.
type retryOpts struct {
	entity, key, check string
	since              string
	at, in             string
	limit              int
	dryRun             bool
	json               bool

	now    func() time.Time
	params prescient.RetryParams // set by Validate
	after  time.Duration         // from --in, set by Validate
}

// Validate parses the flags; errors name the flag and the value.
func (o *retryOpts) Validate() error {
	p := prescient.RetryParams{Entity: o.entity, Key: o.key, Check: o.check, Limit: o.limit, DryRun: o.dryRun}
	if o.key != "" && o.entity == "" {
		return fmt.Errorf("--key %q needs --entity: keys are unique only within an entity", o.key)
	}
	if o.limit < 0 || o.limit > history.LimitMax {
		return fmt.Errorf("--limit %d must be between 1 and %d (0 means %d)", o.limit, history.LimitMax, history.LimitDefault)
	}
	var err error
	if p.Since, err = parseWhen("--since", o.since, o.now()); err != nil {
		return err
	}
	if p.At, o.after, err = parseAtIn(o.at, o.in, false); err != nil {
		return err
	}
	o.params = p
	return nil
}

func (e *env) retryCommand() *cobra.Command {
	o := &retryOpts{now: time.Now}
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Schedule again the jobs that ended failed",
		Long: `retry schedules again the jobs whose history ends with outcome failed (their
check failed retry.max_failures times in a row, or never finished), from their
history records: same entity, key, check and payload, due in the next slot, or
at --at / --in. Filters combine: --entity (and --key), --check, --since (an
RFC 3339 time, or a duration before now: 24h). At most --limit failed records
are read, newest first.

Only a job's latest end counts: a failed record is skipped, with the reason,
when the job is pending again (retried already, or scheduled anew) or has
finished again since, so running retry twice does not run a job twice, or
when it cannot be scheduled again (its check now watches another entity).
--dry-run says what would be retried and changes nothing. It prints what was
retried and what was skipped and why; --json prints the same as one JSON
document: {"retried": [...], "skipped": [...]}.`,
		Example: `  prescient retry --dry-run
  prescient retry --check order_unshipped --since 24h
  prescient retry --entity order --key 42 --in 1h
  prescient retry --json | jq '.retried | length'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A filter given empty must not widen to every record.
			if err := emptyFilter(cmd, "check", "entity", "key", "since"); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{existing: true, rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			return retry(cmd.Context(), cmd.OutOrStdout(), s.client, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.entity, "entity", "", "only jobs of this `ENTITY` name")
	fl.StringVar(&o.key, "key", "", "only jobs of this entity `KEY` (needs --entity)")
	fl.StringVar(&o.check, "check", "", "only jobs of this `CHECK`")
	fl.StringVar(&o.since, "since", "", "only jobs that failed at or after `TIME` (RFC 3339, or a duration ago: 24h)")
	fl.StringVar(&o.at, "at", "", "check them at or after `TIME` (RFC 3339; default: the next slot)")
	fl.StringVar(&o.in, "in", "", "check them after `DURATION` from now (Go duration: 90s, 15m, 3h)")
	fl.IntVar(&o.limit, "limit", 0, fmt.Sprintf("read at most `N` failed records, newest first (0 means %d)", history.LimitDefault))
	fl.BoolVar(&o.dryRun, "dry-run", false, "say what would be retried; schedule nothing")
	fl.BoolVar(&o.json, "json", false, "print JSON for scripts")
	e.completeFlag(cmd, "entity", argEntity)
	e.completeFlag(cmd, "check", argCheck)
	return cmd
}

func retry(ctx context.Context, out io.Writer, c *prescient.Client, o *retryOpts) error {
	p := o.params
	if o.in != "" {
		p.At = c.Config().Now().Add(o.after)
	}
	res, err := c.Retry(ctx, p)
	if err != nil {
		if o.json {
			// stdout holds one JSON document: what was done before the
			// error, if anything was.
			if res != nil && len(res.Retried) > 0 && !o.dryRun {
				if werr := writeJSON(out, res); werr != nil {
					return errors.Join(err, werr)
				}
			}
			return err
		}
		if res != nil && len(res.Retried) > 0 && !o.dryRun {
			// Some were scheduled before the failure: say which, then fail.
			fmt.Fprintf(out, "retried %d job(s) before the error:\n", len(res.Retried))
			writeRetried(out, res.Retried, true)
		}
		return err
	}
	if o.json {
		return writeJSON(out, res)
	}
	if len(res.Retried) == 0 && len(res.Skipped) == 0 {
		fmt.Fprintln(out, "no failed jobs match")
		return nil
	}
	verb := "retried"
	if o.dryRun {
		verb = "would retry (--dry-run: nothing scheduled)"
	}
	fmt.Fprintf(out, "%s %d job(s)", verb, len(res.Retried))
	if len(res.Retried) == 0 {
		fmt.Fprintln(out)
	} else {
		fmt.Fprintln(out, ":")
		writeRetried(out, res.Retried, !o.dryRun)
	}
	if len(res.Skipped) > 0 {
		fmt.Fprintf(out, "skipped %d failed job(s):\n", len(res.Skipped))
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ENTITY\tKEY\tCHECK\tFAILED AT\tWHY SKIPPED")
		for _, r := range res.Skipped {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", safeText(r.Failed.Entity), safeText(r.Failed.Key), safeText(r.Failed.Check),
				fmtTime(r.Failed.FinishedAt), safeText(r.Skipped))
		}
		tw.Flush()
	}
	return nil
}

// writeRetried lists retried jobs: with their new slot when scheduled, and
// the error they failed with.
func writeRetried(out io.Writer, rs []*prescient.RetriedJob, scheduled bool) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if scheduled {
		fmt.Fprintln(tw, "  ENTITY\tKEY\tCHECK\tFAILED AT\tNEXT CHECK\tFAILED WITH")
	} else {
		fmt.Fprintln(tw, "  ENTITY\tKEY\tCHECK\tFAILED AT\tFAILED WITH")
	}
	wasCut := false
	for _, r := range rs {
		msg, c := cut(safeText(r.Failed.LastError), historyErrorWidth)
		wasCut = wasCut || c
		if msg == "" {
			msg = "-"
		}
		if scheduled && r.Job != nil {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", safeText(r.Failed.Entity), safeText(r.Failed.Key), safeText(r.Failed.Check),
				fmtTime(r.Failed.FinishedAt), fmtSlot(r.Job.NextCheckAt), msg)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", safeText(r.Failed.Entity), safeText(r.Failed.Key), safeText(r.Failed.Check), fmtTime(r.Failed.FinishedAt), msg)
	}
	tw.Flush()
	if wasCut {
		fmt.Fprintf(out, "  errors cut to %d characters (…): prescient history --outcome failed --full prints them whole, as --json does\n", historyErrorWidth)
	}
}
