package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
)

// deliveriesOpts are the flags of `prescient deliveries`.
type deliveriesOpts struct {
	sink, state string
	limit       int
	json, full  bool
	// afterEvent and afterSink continue a listing after its last delivery
	// (the hint a full page prints).
	afterEvent int64
	afterSink  string
}

// deliveriesLimitMax is the most deliveries listed at once.
const deliveriesLimitMax = 1000

// Validate checks the state and the limit.
func (o *deliveriesOpts) Validate() error {
	if o.state != "" && !prescient.DeliveryState(o.state).Valid() {
		return fmt.Errorf("--state %q: want pending, delivered or dead", o.state)
	}
	if o.limit < 1 || o.limit > deliveriesLimitMax {
		return fmt.Errorf("--limit %d must be between 1 and %d", o.limit, deliveriesLimitMax)
	}
	switch {
	case o.afterEvent < 0:
		return fmt.Errorf("--after-event %d must be an event id (positive)", o.afterEvent)
	case o.afterSink != "" && o.afterEvent == 0:
		return fmt.Errorf("--after-sink needs --after-event, an event id (positive): the event id and sink of the last delivery of the previous page, as its last line gives them")
	case o.afterEvent > 0 && o.afterSink == "":
		return fmt.Errorf("--after-event needs --after-sink: the event id and sink of the last delivery of the previous page, as its last line gives them")
	}
	return nil
}

func (e *env) deliveriesCommand() *cobra.Command {
	o := &deliveriesOpts{}
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "List the deliveries of events to sinks: pending, delivered, dead",
		Long: `deliveries lists the deliveries of the events checks raised to their sinks,
newest event first: the event's id, the sink, the state (pending, delivered
or dead), the attempts made, when the next attempt is due (pending) or when
it was delivered, the last status the sink answered (an HTTP status), the
idempotency key (entity/key/check/stage), the event, and the last error. A
pending delivery whose attempt is under way shows the server that holds it.
An error is cut to 60 characters in the table; --full prints it whole, and
--json always does.

At most --limit deliveries are printed. When more match, a last line says so
and how to get the next page: the same command with --after-event and
--after-sink, the event id and sink of the page's last delivery (with --json,
the line goes to stderr, and the next page starts after the array's last
delivery).

A dead delivery is not tried again by the servers: its sink refused or
failed it max_attempts times. The event stays in prescient_outbox, and
'prescient deliveries retry' queues the delivery again.

deliveries only reads: with SQLite, a database.path that names no file is
an error, not a new empty database.`,
		Example: `  prescient deliveries --state dead
  prescient deliveries --sink ops --limit 200 --json | jq '.[] | select(.attempts > 3)'
  prescient deliveries --limit 100 --after-event 1187 --after-sink ops`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := emptyFilter(cmd, "sink", "state"); err != nil {
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
			n, err := printDeliveries(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), s.client, o)
			if err != nil {
				return err
			}
			if _, ok := s.cfg.Sinks[o.sink]; n == 0 && o.sink != "" && !ok {
				// Not an error, but most likely a misspelt name (a sink
				// removed from the configuration keeps its deliveries, and
				// lists them).
				fmt.Fprintf(cmd.ErrOrStderr(), "note: the configuration has no sink named %q (its sinks: %s)\n", o.sink, sinksText(s.cfg))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.sink, "sink", "", "only this `SINK`")
	fl.StringVar(&o.state, "state", "", "only this `STATE`: pending, delivered or dead")
	fl.IntVar(&o.limit, "limit", 50, fmt.Sprintf("at most `N` deliveries (at most %d)", deliveriesLimitMax))
	fl.BoolVar(&o.json, "json", false, "print JSON for scripts (errors whole)")
	fl.BoolVar(&o.full, "full", false, "print each last error whole, not cut to 60 characters")
	fl.Int64Var(&o.afterEvent, "after-event", 0, "continue after the delivery of the event with this `ID` (with --after-sink; the hint of a full page gives both)")
	fl.StringVar(&o.afterSink, "after-sink", "", "continue after the delivery to this `SINK` (with --after-event)")
	cmd.AddCommand(e.deliveriesRetryCommand())
	return cmd
}

// deliveriesRetryOpts are the flags of `prescient deliveries retry`.
type deliveriesRetryOpts struct {
	sink  string
	event int64
	json  bool
}

// Validate refuses an event id that names no event.
func (o *deliveriesRetryOpts) Validate() error {
	if o.event < 0 {
		return fmt.Errorf("--event %d must be an event id (positive)", o.event)
	}
	return nil
}

func (e *env) deliveriesRetryCommand() *cobra.Command {
	o := &deliveriesRetryOpts{}
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Queue dead deliveries again, once their receiver is fixed",
		Long: `deliveries retry queues dead deliveries again: every dead delivery, those
of one sink (--sink), or one event's (--event, its id as deliveries lists
it). Each is pending again with no attempts and due at once, so a running
server delivers it with max_attempts attempts as for a new event; its last
status and error stay until the next attempt. Deliveries that are pending
or delivered are left alone.`,
		Example: `  prescient deliveries --state dead
  prescient deliveries retry --sink ops
  prescient deliveries retry --event 1187`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// An empty --sink must not queue every dead delivery again.
			if err := emptyFilter(cmd, "sink"); err != nil {
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
			n, err := s.client.RetryDeliveries(cmd.Context(), o.sink, o.event)
			if err != nil {
				return err
			}
			if n == 0 && o.sink != "" {
				// Nothing queued is no error, but a sink that never had a
				// delivery is most likely a misspelt one.
				if ds, err := s.client.Deliveries(cmd.Context(), &prescient.DeliveriesParams{Sink: o.sink, Limit: 1}); err == nil && len(ds) == 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: no delivery was ever made to a sink named %q (the configuration's sinks: %s): is the name right?\n", o.sink, sinksText(s.cfg))
				}
			}
			if n == 0 && o.event > 0 {
				// And an event with no delivery, most likely a mistyped id.
				ds, err := s.client.Deliveries(cmd.Context(), &prescient.DeliveriesParams{Sink: o.sink, BeforeEventID: o.event + 1, Limit: 1})
				if err == nil && (len(ds) == 0 || ds[0].Event.ID != o.event) {
					to := ""
					if o.sink != "" {
						to = fmt.Sprintf(" to the sink %q", o.sink)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "note: event %d has no delivery%s (deliveries lists the events' ids): is the id right?\n", o.event, to)
				}
			}
			if o.json {
				return writeJSON(cmd.OutOrStdout(), map[string]int{"queued": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "queued %d dead deliver%s again\n", n, map[bool]string{true: "y", false: "ies"}[n == 1])
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.sink, "sink", "", "only the dead deliveries of this `SINK`")
	fl.Int64Var(&o.event, "event", 0, "only the dead deliveries of the event with this `ID`")
	fl.BoolVar(&o.json, "json", false, "print the count as JSON for scripts")
	return cmd
}

// sinksText names the configured sinks, "none" when there are none.
func sinksText(cfg *Config) string {
	if len(cfg.Sinks) == 0 {
		return "none"
	}
	return strings.Join(cfg.SinkNames(), ", ")
}

// deliveriesErrorWidth is where the table cuts an error, without --full.
const deliveriesErrorWidth = 60

// printDeliveries prints one page of the deliveries o selects and returns
// how many it printed.
func printDeliveries(ctx context.Context, out, errOut io.Writer, c *prescient.Client, o *deliveriesOpts) (int, error) {
	// One more than --limit says whether more match.
	ds, err := c.Deliveries(ctx, &prescient.DeliveriesParams{Sink: o.sink, State: prescient.DeliveryState(o.state),
		BeforeEventID: o.afterEvent, AfterSink: o.afterSink, Limit: o.limit + 1})
	if err != nil {
		return 0, err
	}
	more := ""
	if len(ds) > o.limit {
		ds = ds[:o.limit]
		last := ds[len(ds)-1]
		more = fmt.Sprintf("more deliveries match than the %d shown: for the next page, run the same command with --after-event %d --after-sink %s "+
			"(or narrow them with --sink and --state, or raise --limit, at most %d)", o.limit, last.Event.ID, last.Sink, deliveriesLimitMax)
	}
	if o.json {
		if ds == nil {
			ds = []*prescient.Delivery{}
		}
		if more != "" {
			fmt.Fprintln(errOut, "note: "+more)
		}
		return len(ds), writeJSON(out, ds)
	}
	if len(ds) == 0 {
		fmt.Fprintln(out, "no deliveries match")
		return 0, nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tSINK\tSTATE\tATTEMPTS\tWHEN\tSTATUS\tIDEMPOTENCY KEY\tEVENT NAME\tLAST ERROR")
	wasCut := false
	for _, d := range ds {
		when := ""
		switch d.State {
		case prescient.DeliveryPending:
			when = "next " + fmtTime(d.NextAttemptAt)
			if d.LeaseOwner != "" {
				when = "sending (" + safeText(d.LeaseOwner) + ") until " + fmtTime(d.NextAttemptAt)
			}
		case prescient.DeliveryDelivered:
			when = fmtTime(d.DeliveredAt)
		default:
			when = "since " + fmtTime(d.UpdatedAt)
		}
		status := "-"
		if d.LastStatus != 0 {
			status = fmt.Sprint(d.LastStatus)
		}
		msg := safeText(d.LastError)
		if !o.full {
			var c bool
			msg, c = cut(msg, deliveriesErrorWidth)
			wasCut = wasCut || c
		}
		if msg == "" {
			msg = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", d.Event.ID, safeText(d.Sink), d.State, d.Attempts, when, status,
			safeText(d.Event.IdempotencyKey), safeText(d.Event.Event), msg)
	}
	tw.Flush()
	if wasCut {
		fmt.Fprintf(out, "errors cut to %d characters (…): --full prints them whole, as --json does\n", deliveriesErrorWidth)
	}
	if more != "" {
		fmt.Fprintln(out, more)
	}
	return len(ds), nil
}

// deliveryCounts prints the per-sink counts of Status.Deliveries for
// `prescient status`: "ops 2 pending, 10 delivered (24h), 1 dead; audit …",
// or "none".
func deliveryCounts(m map[string]*prescient.DeliveryCount) string {
	if len(m) == 0 {
		return "none"
	}
	sinks := make([]string, 0, len(m))
	for s := range m {
		sinks = append(sinks, s)
	}
	slices.Sort(sinks)
	parts := make([]string, len(sinks))
	for i, s := range sinks {
		c := m[s]
		parts[i] = fmt.Sprintf("%s %d pending, %d delivered (24h), %d dead", s, c.Pending, c.Delivered, c.Dead)
	}
	return strings.Join(parts, "; ")
}
