package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// jobsListLimitDefault is how many jobs `prescient jobs list` prints by
// default.
const jobsListLimitDefault = 100

// jobsShowHistoryDefault is how many history records `prescient jobs show`
// prints by default.
const jobsShowHistoryDefault = 10

func (e *env) jobsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List pending jobs, or show one entity's jobs and history",
		Long: `jobs lists the pending jobs (jobs list) or shows the pending jobs of one
entity key with its recent history (jobs show).`,
		Example: `  prescient jobs list --check order_unshipped --overdue
  prescient jobs show order 42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(e.jobsListCommand(), e.jobsShowCommand())
	return cmd
}

// jobsListOpts are the flags of `prescient jobs list`.
type jobsListOpts struct {
	entity, key, check string
	slot               string
	overdue            bool
	limit              int
	afterAt            string
	afterID            int64
	json               bool

	params prescient.JobsParams // set by Validate
}

// Validate parses the flags into JobsParams; errors name the flag and value.
func (o *jobsListOpts) Validate() error {
	p := prescient.JobsParams{Entity: o.entity, Key: o.key, Check: o.check, Overdue: o.overdue, Limit: o.limit}
	if o.key != "" && o.entity == "" {
		return fmt.Errorf("--key %q needs --entity: keys are unique only within an entity", o.key)
	}
	if o.limit < 1 || o.limit > prescient.JobsLimitMax {
		return fmt.Errorf("--limit %d must be between 1 and %d", o.limit, prescient.JobsLimitMax)
	}
	if o.slot != "" {
		t, err := parseTimeFlag("--slot", o.slot)
		if err != nil {
			return err
		}
		p.Slot = t
	}
	if t, ok, err := parseAfter(o.afterAt, o.afterID, "job", "next check time"); err != nil {
		return err
	} else if ok {
		p.After = &prescient.Job{ID: o.afterID, NextCheckAt: t}
	}
	o.params = p
	return nil
}

func (e *env) jobsListCommand() *cobra.Command {
	o := &jobsListOpts{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List pending jobs, soonest due first",
		Long: `jobs list prints pending jobs, soonest due first (then by id): when each is
due (or how long it is overdue), its check and failure counts and the start of
its last error. Filters combine: --entity (and --key), --check, --slot (the
jobs due in that slot, an RFC 3339 time on the grid), --overdue (due in a slot
that has passed without being processed).

At most --limit jobs are printed. When more match, a last line says how to
get the next page: the same command with --after-at and --after-id set to the
last job's next check and id (a page continues after a position, so jobs
that are checked or rescheduled meanwhile are neither repeated nor skipped
for that reason).

--json prints one JSON document for scripts: {"jobs": [...], "more": bool,
"next": {"after_at": ..., "after_id": ...}} (next only when more match).`,
		Example: `  prescient jobs list
  prescient jobs list --check order_unshipped --overdue
  prescient jobs list --entity order --key 42
  prescient jobs list --slot 2030-06-01T15:00:00Z --limit 1000
  prescient jobs list --limit 2 --after-at 2030-06-01T15:00:00Z --after-id 17
  prescient jobs list --json | jq '.jobs[].key'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := emptyFilter(cmd, "entity", "key", "check", "slot"); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{readOnly: true, rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			return listJobs(cmd.Context(), cmd.OutOrStdout(), s.client, o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.entity, "entity", "", "only this `ENTITY` name")
	fl.StringVar(&o.key, "key", "", "only this entity `KEY` (needs --entity)")
	fl.StringVar(&o.check, "check", "", "only this `CHECK` name")
	fl.StringVar(&o.slot, "slot", "", "only the jobs due in this slot (RFC 3339 `TIME` on the grid)")
	fl.BoolVar(&o.overdue, "overdue", false, "only the jobs due in a slot that has passed")
	fl.IntVar(&o.limit, "limit", jobsListLimitDefault, fmt.Sprintf("print at most `N` jobs (at most %d)", prescient.JobsLimitMax))
	fl.StringVar(&o.afterAt, "after-at", "", "continue after the job due at `TIME` (with --after-id; the hint of a full page gives both)")
	fl.Int64Var(&o.afterID, "after-id", 0, "continue after the job of this `ID` (with --after-at)")
	fl.BoolVar(&o.json, "json", false, "print JSON for scripts")
	e.completeFlag(cmd, "entity", argEntity)
	e.completeFlag(cmd, "check", argCheck)
	return cmd
}

// jobsPage is the --json output of jobs list.
type jobsPage struct {
	Jobs []*prescient.Job `json:"jobs"`
	// More says more jobs match than were printed; Next is where the next
	// page starts.
	More bool      `json:"more"`
	Next *jobsNext `json:"next,omitempty"`
}

// jobsNext is the position a next page of jobs list starts after.
type jobsNext struct {
	AfterAt time.Time `json:"after_at"`
	AfterID int64     `json:"after_id"`
}

// listJobs prints one page of jobs. It asks for one job more than --limit to
// know whether another page follows.
func listJobs(ctx context.Context, out io.Writer, c *prescient.Client, o *jobsListOpts) error {
	p := o.params
	p.Limit = min(o.limit+1, prescient.JobsLimitMax)
	jobs, err := c.Jobs(ctx, p)
	if err != nil {
		if o.slot != "" && strings.Contains(err.Error(), "is not on the grid") {
			return fmt.Errorf("--slot %q: %w", o.slot, err)
		}
		return err
	}
	page := &jobsPage{Jobs: jobs}
	switch {
	case len(jobs) > o.limit:
		page.Jobs, page.More = jobs[:o.limit], true
	case len(jobs) == prescient.JobsLimitMax:
		page.More = true // cannot tell: the next page may be empty
	}
	if page.More {
		last := page.Jobs[len(page.Jobs)-1]
		page.Next = &jobsNext{AfterAt: last.NextCheckAt.UTC(), AfterID: last.ID}
	}
	if page.Jobs == nil {
		page.Jobs = []*prescient.Job{}
	}
	if o.json {
		return writeJSON(out, page)
	}
	if len(page.Jobs) == 0 {
		fmt.Fprintln(out, "no pending jobs match")
		return nil
	}
	now := c.Config().Now()
	current := c.Config().Grid.Floor(now)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NEXT CHECK\tDUE\tENTITY\tKEY\tCHECK\tCHECKS\tFAILURES\tFIRST CHECK\tID\tLAST ERROR")
	wasCut := false
	for _, j := range page.Jobs {
		msg, c := cut(safeText(j.LastError), historyErrorWidth)
		wasCut = wasCut || c
		if msg == "" {
			msg = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\t%s\n",
			fmtSlot(j.NextCheckAt), dueText(j.NextCheckAt, now, current), safeText(j.Entity), safeText(j.Key), safeText(j.Check),
			j.CheckCount, j.FailureCount, fmtSlot(j.FirstCheckAt), j.ID, msg)
	}
	tw.Flush()
	if wasCut {
		fmt.Fprintf(out, "errors cut to %d characters (…): prescient jobs show ENTITY KEY prints them whole, as --json does\n", historyErrorWidth)
	}
	if page.More {
		fmt.Fprintf(out, "more jobs match: for the next page, run the same command with --after-at %s --after-id %d\n",
			page.Next.AfterAt.Format(time.RFC3339Nano), page.Next.AfterID)
	}
	return nil
}

// dueText says when a job is due, for people: "in 2h15m", "now" (in the
// slot in progress) or "overdue 3h" (due in a slot that has passed).
func dueText(next, now, current time.Time) string {
	switch {
	case next.Before(current):
		return "overdue " + roughDuration(now.Sub(next))
	case next.After(now):
		return "in " + roughDuration(next.Sub(now))
	}
	return "now"
}

// roughDuration writes d for people, to two units at most: "45s", "12m30s",
// "5h12m", "3d4h".
func roughDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// jobsShowOpts are the arguments and flags of `prescient jobs show`.
type jobsShowOpts struct {
	entity, key, check string
	history            int
	json               bool
}

// Validate checks --history.
func (o *jobsShowOpts) Validate() error {
	if o.history < 0 || o.history > history.LimitMax-1 {
		return fmt.Errorf("--history %d must be between 0 and %d", o.history, history.LimitMax-1)
	}
	return nil
}

func (e *env) jobsShowCommand() *cobra.Command {
	o := &jobsShowOpts{}
	cmd := &cobra.Command{
		Use:   "show ENTITY KEY [CHECK]",
		Short: "Show the pending jobs of an entity key, and its recent history",
		Long: `jobs show prints everything stored about the pending job (ENTITY, KEY, CHECK),
or about every pending job of the entity key when CHECK is left out: its next,
first and last check, counts, last error (whole), payload, runtime, lateness
and times; then its most recent history records (--history of them, newest
first, errors whole). Text that came from a check is shown escaped (\n, \x1b).

It is an error (exit status 1) when nothing is pending and no history is kept
for what was named. --json prints one JSON document for scripts:
{"pending": [...], "history": [...], "more_history": bool}.`,
		Example: `  prescient jobs show order 42
  prescient jobs show order 42 order_unshipped --history 50
  prescient jobs show order 42 --json`,
		Args: positionalArgs("ENTITY", "KEY", "[CHECK]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.entity, o.key = args[0], args[1]
			if len(args) == 3 {
				o.check = args[2]
			}
			// A shell variable not set: never every job of the entity.
			switch {
			case o.entity == "":
				return errors.New("ENTITY is empty: name the entity")
			case o.key == "":
				return errors.New("KEY is empty: name the entity key")
			case len(args) == 3 && o.check == "":
				return errors.New("CHECK is empty: name the check, or leave CHECK out to show every pending check of the entity key")
			}
			if err := o.Validate(); err != nil {
				return err
			}
			s, err := e.open(cmd.Context(), access{readOnly: true, rounds: true, header: forPeople(cmd, o.json)})
			if err != nil {
				return err
			}
			defer s.close()
			return showJobs(cmd.Context(), cmd.OutOrStdout(), s.client, o)
		},
	}
	cmd.Flags().IntVar(&o.history, "history", jobsShowHistoryDefault, "show the `N` most recent history records")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON for scripts")
	e.completeArgs(cmd, argEntity, argNone, argCheck)
	return cmd
}

// jobsShown is the --json output of jobs show.
type jobsShown struct {
	Pending     []*prescient.Job  `json:"pending"`
	History     []*history.Record `json:"history"`
	MoreHistory bool              `json:"more_history"`
}

// showJobs prints the pending jobs and recent history o names.
func showJobs(ctx context.Context, out io.Writer, c *prescient.Client, o *jobsShowOpts) error {
	what := o.entity + "/" + o.key
	if o.check != "" {
		what += "/" + o.check
	}
	what = safeText(what)
	shown := &jobsShown{Pending: []*prescient.Job{}, History: []*history.Record{}}
	if o.check != "" {
		j, err := c.Job(ctx, o.entity, o.key, o.check)
		switch {
		case err == nil:
			shown.Pending = append(shown.Pending, j)
		case !errors.Is(err, prescient.ErrNotFound):
			return fmt.Errorf("show %s: %w", what, err)
		}
	} else {
		jobs, err := c.Jobs(ctx, prescient.JobsParams{Entity: o.entity, Key: o.key, Limit: prescient.JobsLimitMax})
		if err != nil {
			return fmt.Errorf("show %s: %w", what, err)
		}
		shown.Pending = append(shown.Pending, jobs...)
	}
	if o.history > 0 {
		recs, err := c.History(ctx, history.Filter{Entity: o.entity, Key: o.key, Check: o.check, Limit: o.history + 1})
		if err != nil {
			return fmt.Errorf("show %s: %w", what, err)
		}
		if len(recs) > o.history {
			recs, shown.MoreHistory = recs[:o.history], true
		}
		shown.History = append(shown.History, recs...)
	}
	if len(shown.Pending) == 0 && len(shown.History) == 0 {
		return fmt.Errorf("show %s: no pending job and no history record (check the names; prescient jobs list --entity %s lists the pending jobs of that entity)",
			what, safeText(o.entity))
	}
	if o.json {
		return writeJSON(out, shown)
	}
	if len(shown.Pending) == 0 {
		fmt.Fprintf(out, "%s: nothing pending\n", what)
	}
	g := c.Config().Grid
	now := c.Config().Now()
	for _, j := range shown.Pending {
		writeJob(out, g, now, j)
	}
	if o.history == 0 {
		return nil
	}
	fmt.Fprintf(out, "\nhistory of %s, newest first:\n", what)
	writeHistoryRecords(out, shown.History, true)
	if shown.MoreHistory {
		more := "prescient history --entity " + safeText(o.entity) + " --key " + shellWord(o.key)
		if o.check != "" {
			more += " --check " + shellWord(o.check)
		}
		fmt.Fprintf(out, "older records exist: --history %d shows more, or %s\n", min(o.history*10, history.LimitMax-1), more)
	}
	return nil
}

// writeJob prints one pending job, one field a line.
func writeJob(out io.Writer, g slots.Grid, now time.Time, j *prescient.Job) {
	fmt.Fprintf(out, "\n%s/%s %s: pending (id %d)\n", safeText(j.Entity), safeText(j.Key), safeText(j.Check), j.ID)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "  %s\t%s\n", k, fmt.Sprintf(format, args...)) }
	p := g.Position(j.NextCheckAt)
	row("next check", "%s (position %d, %s; %s)", fmtSlot(j.NextCheckAt), p, positionLabel(g, p), dueText(j.NextCheckAt, now, g.Floor(now)))
	row("first check", "%s", fmtSlot(j.FirstCheckAt))
	if j.LastCheckAt.IsZero() {
		row("last check", "- (no check has run to a result yet)")
	} else {
		row("last check", "%s", fmtSlot(j.LastCheckAt))
	}
	row("checks", "%d run, %d failure(s) in a row", j.CheckCount, j.FailureCount)
	if j.LastError == "" {
		row("last error", "-")
	} else {
		row("last error", "%s", safeText(j.LastError))
	}
	if len(j.Payload) == 0 {
		row("payload", "-")
	} else {
		row("payload", "%s", safeText(string(j.Payload)))
	}
	row("runtime", "%s in all checks; last check %s late", j.Runtime, j.Lateness)
	row("created", "%s", fmtTime(j.CreatedAt))
	row("updated", "%s", fmtTime(j.UpdatedAt))
	tw.Flush()
}

// shellWord quotes s for a POSIX shell, so that a command printed for the
// user to paste passes s as one word, as it is: unquoted when it holds only
// characters no shell treats specially, else in single quotes, inside which
// a shell takes every character literally (a single quote inside written
// '\”). Keys hold no control character (checks.ValidateKey), so the quoted
// word prints as it is.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/@%+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
