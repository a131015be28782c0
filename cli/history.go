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
	"github.com/prescient-dev/prescient/slots"
)

// historyOpts are the flags of `prescient history`.
type historyOpts struct {
	entity, key, check string
	outcomes           []string
	since, until       string
	afterAt            string
	afterID            int64
	limit              int
	json               bool
	full               bool

	filter history.Filter // set by Validate
	now    func() time.Time
}

// Validate parses the flags into a history.Filter; errors name the flag and
// the value.
func (o *historyOpts) Validate() error {
	f := history.Filter{Entity: o.entity, Key: o.key, Check: o.check, Limit: o.limit}
	for _, s := range o.outcomes {
		oc, err := history.ParseOutcome(s)
		if err != nil {
			return fmt.Errorf("--outcome: %w", err)
		}
		f.Outcomes = append(f.Outcomes, oc)
	}
	var err error
	if f.Since, err = parseWhen("--since", o.since, o.now()); err != nil {
		return err
	}
	if f.Until, err = parseWhen("--until", o.until, o.now()); err != nil {
		return err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		why := ""
		if _, err := time.ParseDuration(o.since); err == nil {
			why = ": a duration means that long ago, so --since takes the longer one"
		}
		return fmt.Errorf("--since %q (%s) is not before --until %q (%s)%s",
			o.since, f.Since.Format(time.RFC3339), o.until, f.Until.Format(time.RFC3339), why)
	}
	if o.key != "" && o.entity == "" {
		return fmt.Errorf("--key %q needs --entity: keys are unique only within an entity", o.key)
	}
	if t, ok, err := parseAfter(o.afterAt, o.afterID, "record", "finished time"); err != nil {
		return err
	} else if ok {
		f.AfterAt, f.AfterID = t, o.afterID
	}
	if o.limit < 0 || o.limit > history.LimitMax {
		return fmt.Errorf("--limit %d must be between 1 and %d (0 means %d)", o.limit, history.LimitMax, history.LimitDefault)
	}
	if err := f.Validate(); err != nil {
		return err
	}
	o.filter = f
	return nil
}

// parseWhen reads an RFC 3339 time, or a duration meaning that long before
// now. Empty is the zero time (no bound).
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		t := now.Add(-d)
		if t.Before(slots.MinTime) {
			t = slots.MinTime // nothing finished before: as far back as that is all
		}
		return t.UTC(), nil
	}
	// Outside the supported range, refused: the zero time read as no
	// bound, --until 0001-01-01T00:00:00Z listed everything.
	if t, err := parseTimeFlag(flag, s); !errors.Is(err, errNotRFC3339) {
		return t.UTC(), err
	}
	return time.Time{}, fmt.Errorf("%s %q is neither an RFC 3339 time (e.g. 2030-06-01T15:04:05Z) nor a duration ago (e.g. 24h)%s", flag, s, durationHint(s))
}

func (e *env) historyCommand() *cobra.Command {
	o := &historyOpts{now: time.Now}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List finished jobs and why they finished",
		Long: `history lists the records of jobs that left the pending table, newest first:
entity, key, check, outcome (done, resolved, cancelled, guard_max_checks,
guard_horizon, guard_past, failed), how many checks ran and when it finished.
Filters combine; --outcome may be repeated or comma-separated. --since and
--until take an RFC 3339 time or a duration before now (24h).

The default output is a table for people, after the database it read, with
the failures in a row each job ended with and its last error. An error is cut
to 60 characters in the table; --full prints it whole, and --json always
does. Errors come from checks: control characters in them (newline, escape…)
are shown escaped (\n, \x1b), never sent to the terminal. When more records
match than --limit, a last line says so and how to get the next page
(--after-at and --after-id: the finished time and id of the last record
shown). --json prints one JSON array of records for scripts, and says on
stderr when more records match; the next page starts after the array's last
record.

history only reads: with SQLite, a database.path that names no file is an
error, not a new empty database.`,
		Example: `  prescient history --entity order --key 42 --full
  prescient history --check order_unshipped --outcome failed,guard_horizon --since 24h
  prescient history --limit 1000 --json | jq '.[].key'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := emptyFilter(cmd, "entity", "key", "check", "outcome", "since", "until"); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{readOnly: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			return printHistory(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), s.client, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.entity, "entity", "", "only this `ENTITY` name")
	fl.StringVar(&o.key, "key", "", "only this entity `KEY` (needs --entity)")
	fl.StringVar(&o.check, "check", "", "only this `CHECK` name")
	fl.StringSliceVar(&o.outcomes, "outcome", nil, "only these `OUTCOME`s (repeat or comma-separate)")
	fl.StringVar(&o.since, "since", "", "finished at or after `TIME` (RFC 3339, or a duration ago: 24h)")
	fl.StringVar(&o.until, "until", "", "finished before `TIME` (RFC 3339, or a duration ago)")
	fl.StringVar(&o.afterAt, "after-at", "", "continue after the record that finished at `TIME` (the previous page's hint; needs --after-id)")
	fl.Int64Var(&o.afterID, "after-id", 0, "continue after the record with this `ID` (the previous page's hint; needs --after-at)")
	fl.IntVar(&o.limit, "limit", 0, fmt.Sprintf("at most `N` records (0 means %d)", history.LimitDefault))
	fl.BoolVar(&o.json, "json", false, "print JSON for scripts (errors whole)")
	fl.BoolVar(&o.full, "full", false, "print each last error whole, not cut to 60 characters")
	e.completeFlag(cmd, "entity", argEntity)
	e.completeFlag(cmd, "check", argCheck)
	completeOutcomes(cmd, "outcome")
	return cmd
}

// historyErrorWidth is where the history table cuts an error, without
// --full.
const historyErrorWidth = 60

// printHistory prints the records o selects, as a table or as JSON, and
// says when more records match than were asked for: it reads one record
// more than --limit to know.
func printHistory(ctx context.Context, out, errOut io.Writer, c *prescient.Client, o *historyOpts) error {
	f := o.filter
	limit := f.EffectiveLimit()
	f.Limit = min(limit+1, history.LimitMax)
	recs, err := c.History(ctx, f)
	if err != nil {
		return err
	}
	more := ""
	switch {
	case len(recs) > limit:
		recs = recs[:limit]
		more = fmt.Sprintf("more records match than the %d shown", limit)
	case len(recs) == history.LimitMax:
		more = fmt.Sprintf("%d records shown, the most history lists at once: more may match", limit)
	}
	if more != "" {
		last := recs[len(recs)-1]
		more += fmt.Sprintf(": for the next page, run the same command with --after-at %s --after-id %d",
			last.FinishedAt.UTC().Format(time.RFC3339Nano), last.ID)
	}
	if now := o.now(); len(recs) == 0 && f.Since.After(now) {
		// A mistyped year or an offset the wrong way: "no records" alone
		// reads as "nothing finished".
		defer fmt.Fprintf(errOut, "note: --since %s is in the future (now is %s): no record finished after it yet\n",
			f.Since.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if o.json {
		if recs == nil {
			recs = []*history.Record{}
		}
		if more != "" {
			fmt.Fprintln(errOut, "note: "+more)
		}
		return writeJSON(out, recs)
	}
	writeHistoryRecords(out, recs, o.full)
	if more != "" {
		fmt.Fprintln(out, more)
	}
	return nil
}

// writeHistoryTable prints records as a table for people, errors cut.
func writeHistoryTable(out io.Writer, recs []*history.Record) {
	writeHistoryRecords(out, recs, false)
}

// writeHistoryRecords prints records as a table for people; full prints
// every error whole. Text that came from a check is escaped (safeText).
func writeHistoryRecords(out io.Writer, recs []*history.Record, full bool) {
	if len(recs) == 0 {
		fmt.Fprintln(out, "no history records match")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FINISHED\tENTITY\tKEY\tCHECK\tOUTCOME\tCHECKS\tFAILURES\tFIRST SLOT\tLAST SLOT\tBY\tLAST ERROR")
	wasCut := false
	for _, r := range recs {
		msg := safeText(r.LastError)
		if !full {
			var c bool
			msg, c = cut(msg, historyErrorWidth)
			wasCut = wasCut || c
		}
		if msg == "" {
			msg = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n",
			fmtTime(r.FinishedAt), safeText(r.Entity), safeText(r.Key), safeText(r.Check), r.Outcome, r.CheckCount, r.FailureCount,
			fmtSlot(r.FirstCheckAt), fmtSlot(r.LastCheckAt), safeText(r.FinishedBy), msg)
	}
	tw.Flush()
	if wasCut {
		fmt.Fprintf(out, "errors cut to %d characters (…): --full prints them whole, as --json does\n", historyErrorWidth)
	}
}

func fmtTime(t time.Time) string { return fmtAt(t, time.RFC3339) }

// fmtSlot is fmtTime for a slot (or a check time, which is one): to the
// second on a grid of whole seconds, and with the fraction on a finer one,
// whose slots a second holds several of.
func fmtSlot(t time.Time) string { return fmtAt(t, time.RFC3339Nano) }

func fmtAt(t time.Time, layout string) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(layout)
}
