package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
)

// historyOpts are the flags of `prescient history`.
type historyOpts struct {
	entity, key, check string
	outcomes           []string
	since, until       string
	limit              int
	json               bool

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
	if o.key != "" && o.entity == "" {
		return fmt.Errorf("--key %q needs --entity: keys are unique only within an entity", o.key)
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
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%s %q is neither an RFC 3339 time (e.g. 2030-06-01T15:04:05Z) nor a duration ago (e.g. 24h)", flag, s)
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

The default output is a table for people, after the database it read; --json
prints one JSON array of records for scripts. history only reads: with SQLite,
a database.path that names no file is an error, not a new empty database.`,
		Example: `  prescient history --entity order --key 42
  prescient history --check order_unshipped --outcome failed,guard_horizon --since 24h
  prescient history --limit 1000 --json | jq '.[].key'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{readOnly: true})
			if err != nil {
				return err
			}
			defer s.close()
			if !o.json {
				s.header(cmd.OutOrStdout())
			}
			return printHistory(cmd.Context(), cmd.OutOrStdout(), s.client, o.filter, o.json)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.entity, "entity", "", "only this `ENTITY` name")
	fl.StringVar(&o.key, "key", "", "only this entity `KEY` (needs --entity)")
	fl.StringVar(&o.check, "check", "", "only this `CHECK` name")
	fl.StringSliceVar(&o.outcomes, "outcome", nil, "only these `OUTCOME`s (repeat or comma-separate)")
	fl.StringVar(&o.since, "since", "", "finished at or after `TIME` (RFC 3339, or a duration ago: 24h)")
	fl.StringVar(&o.until, "until", "", "finished before `TIME` (RFC 3339, or a duration ago)")
	fl.IntVar(&o.limit, "limit", 0, fmt.Sprintf("at most `N` records (0 means %d)", history.LimitDefault))
	fl.BoolVar(&o.json, "json", false, "print JSON for scripts")
	return cmd
}

func printHistory(ctx context.Context, out io.Writer, c *prescient.Client, f history.Filter, asJSON bool) error {
	recs, err := c.History(ctx, f)
	if err != nil {
		return err
	}
	if asJSON {
		if recs == nil {
			recs = []*history.Record{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(recs)
	}
	writeHistoryTable(out, recs)
	return nil
}

// writeHistoryTable prints records as a table for people.
func writeHistoryTable(out io.Writer, recs []*history.Record) {
	if len(recs) == 0 {
		fmt.Fprintln(out, "no history records match")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FINISHED\tENTITY\tKEY\tCHECK\tOUTCOME\tCHECKS\tFIRST SLOT\tLAST SLOT\tBY\tLAST ERROR")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			fmtTime(r.FinishedAt), r.Entity, r.Key, r.Check, r.Outcome, r.CheckCount,
			fmtTime(r.FirstCheckAt), fmtTime(r.LastCheckAt), r.FinishedBy, truncate(r.LastError, 60))
	}
	tw.Flush()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
