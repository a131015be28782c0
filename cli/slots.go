package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient/slots"
)

// slotsOpts are the options of `prescient slots`.
type slotsOpts struct {
	json bool
}

// Validate accepts every slotsOpts.
func (o *slotsOpts) Validate() error { return nil }

func (e *env) slotsCommand() *cobra.Command {
	o := &slotsOpts{}
	cmd := &cobra.Command{
		Use:   "slots",
		Short: "Print the slot grid and the ownership table, and check the configuration",
		Long: `slots validates the whole configuration, then prints the slot grid
(resolution, offset, ownership cycle), each position of the cycle with the
clock time its slots start at, and which servers fire each position.
Overlapping owners are reported as warnings (safe, but usually a mistake); a
position that no server fires, a webhook sink whose secret_env is not set in
the environment (run refuses to start then too), or any other invalid
setting, is an error: every error is reported, nothing else is printed, and
the exit status is non-zero. It needs no database.

--json prints the same as one JSON document for scripts: the grid, each
position with its start and servers, the warnings, and "valid" with the
configuration's error, if any (the exit status is non-zero then too).`,
		Example: `  prescient slots --config /etc/prescient.yaml
  prescient slots --json | jq '.positions[] | select(.servers == [])'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := loadConfig(e.configPath, e.opts.lookupEnv)
			if err != nil {
				return err
			}
			// The whole configuration, as every command that opens the
			// database validates it: declared checks included (a name a Go
			// check of this binary has already), with no query prepared;
			// and what run refuses before it serves anything, in its words
			// (sinkSecrets): a webhook sink whose secret_env is not set, a
			// sink a Go check names that is not configured. A configuration
			// slots passed must not be one run refuses.
			validate := func() error {
				if err := cfg.Validate(); err != nil {
					return err
				}
				_, sinkErr := e.sinkSecrets(cfg, slog.New(slog.DiscardHandler))
				return errors.Join(e.declare(cmd.Context(), nil, cfg, false), sinkErr)
			}
			if o.json {
				return printSlotsJSON(cmd.OutOrStdout(), cfg, validate)
			}
			return printSlots(cmd.OutOrStdout(), cfg, validate)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON for scripts")
	return cmd
}

// slotsReport is the --json output of slots.
type slotsReport struct {
	Resolution string `json:"resolution"`
	Offset     string `json:"offset"`
	Cycle      string `json:"cycle"`
	// Ownership is "static", "auto" (spread over the live servers) or
	// "every" (no static map: every server fires every position).
	Ownership string          `json:"ownership"`
	Positions []slotsPosition `json:"positions"`
	Warnings  []string        `json:"warnings"`
	// Valid says the whole configuration is valid; Error says why not.
	Valid bool   `json:"valid"`
	Error string `json:"error,omitempty"`
}

// slotsPosition is one position of the cycle in slotsReport.
type slotsPosition struct {
	Position int    `json:"position"`
	Starts   string `json:"starts"`
	// Servers lists the static owners; empty with another Ownership, and
	// for a position no server fires.
	Servers []string `json:"servers"`
}

// printSlotsJSON is printSlots as one JSON document. A configuration whose
// grid is invalid has no positions to print: its error alone is returned.
func printSlotsJSON(out io.Writer, cfg *Config, validate func() error) error {
	pc := cfg.clientConfig()
	g := pc.Grid
	if err := g.Validate(); err != nil {
		return cfg.Validate()
	}
	n := g.Positions()
	rep := &slotsReport{Resolution: g.Resolution.String(), Offset: g.Offset.String(), Cycle: cycleOf(g).String(),
		Ownership: "static", Positions: make([]slotsPosition, n), Warnings: []string{}}
	switch {
	case pc.AutoOwnership:
		rep.Ownership = "auto"
	case len(pc.Ownership) == 0:
		rep.Ownership = "every"
	}
	for p := range n {
		rep.Positions[p] = slotsPosition{Position: p, Starts: positionLabel(g, p), Servers: []string{}}
		if rep.Ownership == "static" {
			rep.Positions[p].Servers = append(rep.Positions[p].Servers, pc.Ownership.Owners(p)...)
		}
	}
	rep.Warnings = append(rep.Warnings, slotsWarnings(cfg)...)
	verr := validate()
	rep.Valid = verr == nil
	if verr != nil {
		rep.Error = verr.Error()
	}
	if err := writeJSON(out, rep); err != nil {
		return err
	}
	return verr
}

// slotsWarnings are the warnings of `prescient slots`, in its text and in
// its --json alike: the positions several servers fire, and a server name
// the static map leaves out.
func slotsWarnings(cfg *Config) []string {
	pc := cfg.clientConfig()
	out := overlapWarnings(cfg)
	if len(pc.Ownership) > 0 && !pc.AutoOwnership && len(pc.Ownership[pc.Server]) == 0 {
		out = append(out, fmt.Sprintf("this configuration's server name, %q (server, PRESCIENT_SERVER or the host name), is not in ownership.static: "+
			"a server started with it would fire no slot", pc.Server))
	}
	return out
}

// overlapWarnings says which positions several servers fire.
func overlapWarnings(cfg *Config) []string {
	pc := cfg.clientConfig()
	g := pc.Grid
	n := g.Positions()
	rep := pc.Ownership.Check(n)
	var out []string
	for p := range n {
		if s, ok := rep.Overlaps[p]; ok {
			out = append(out, fmt.Sprintf("position %d (%s) is fired by %d servers: %s (safe, but each slot is fired twice)",
				p, positionLabel(g, p), len(s), strings.Join(s, ", ")))
		}
	}
	return out
}

// printSlots validates the configuration with validate and returns its
// errors, or prints the grid and the ownership table of cfg. Errors come
// alone: printed after a table, they read as a footnote to a grid that looks
// fine, and a long table scrolls them off the screen.
func printSlots(out io.Writer, cfg *Config, validate func() error) error {
	if err := validate(); err != nil {
		return err
	}
	pc := cfg.clientConfig()
	g := pc.Grid
	fmt.Fprintf(out, "grid: resolution %s, offset %s, cycle %s: %d position(s)\n",
		g.Resolution, g.Offset, cycleOf(g), g.Positions())
	n := g.Positions()
	var labels []string
	for p := range n {
		if n > shortGrid && p == 3 {
			// A fine grid: the first positions, then the last.
			labels = append(labels, "…")
			p = n - 1
			labels = append(labels, fmt.Sprintf("%d %s (one every %s)", p, positionLabel(g, p), g.Resolution))
			break
		}
		labels = append(labels, fmt.Sprintf("%d %s", p, positionLabel(g, p)))
	}
	fmt.Fprintf(out, "positions: %s\n\n", strings.Join(labels, ", "))

	own := pc.Ownership
	serversOf := func(p int) string {
		switch {
		case pc.AutoOwnership:
			return "automatic: spread over the live servers"
		case len(own) == 0:
			return "every server (no static ownership)"
		case len(own.Owners(p)) > 0:
			return strings.Join(own.Owners(p), ", ")
		}
		return "(none: its jobs would never fire)"
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POSITION\tSTARTS\tSERVERS")
	for p := 0; p < n; {
		servers, end := serversOf(p), p+1
		if n > shortGrid {
			// A fine grid: one row per run of positions with the same
			// servers.
			for end < n && serversOf(end) == servers {
				end++
			}
		}
		if end-p == 1 {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", p, positionLabel(g, p), servers)
		} else {
			fmt.Fprintf(tw, "%d-%d\t%s-%s\t%s\n", p, end-1, positionLabel(g, p), positionLabel(g, end-1), servers)
		}
		p = end
	}
	tw.Flush()

	for _, w := range slotsWarnings(cfg) {
		fmt.Fprintln(out, "warning: "+w)
	}
	fmt.Fprintln(out, "configuration OK")
	return nil
}

// shortGrid is the most positions `prescient slots` lists one by one; a
// finer grid's are listed by runs.
const shortGrid = 24

func cycleOf(g slots.Grid) time.Duration {
	if g.Cycle == 0 {
		return g.Resolution
	}
	return g.Cycle
}

// positionLabel names the clock time at which position p's first slot in
// each hour, day or week starts: ":15" for a cycle that divides an hour,
// "06:00" for a cycle of whole hours that divides a day, "Mon 06:00" for a
// cycle of whole days that divides a week; otherwise the offset into the
// cycle ("+45m0s"). Grids finer than a minute show seconds.
func positionLabel(g slots.Grid, p int) string {
	cycle := cycleOf(g)
	t := time.Unix(0, 0).UTC().Add(g.Offset + time.Duration(p)*g.Resolution)
	secs := g.Resolution%time.Minute != 0 || g.Offset%time.Minute != 0
	sub := g.Resolution%time.Second != 0 || g.Offset%time.Second != 0
	const week = 7 * 24 * time.Hour
	var layout string
	switch {
	case sub:
		// Below a second the clock says little; the offset says it exactly.
	case time.Hour%cycle == 0 && !secs:
		layout = ":04"
	case time.Hour%cycle == 0:
		layout = ":04:05"
	case 24*time.Hour%cycle == 0 && cycle%time.Hour == 0 && !secs:
		layout = "15:04"
	case 24*time.Hour%cycle == 0 && cycle%time.Hour == 0:
		layout = "15:04:05"
	case week%cycle == 0 && cycle%(24*time.Hour) == 0:
		layout = "Mon 15:04"
	}
	if layout == "" {
		return "+" + (g.Offset + time.Duration(p)*g.Resolution).String()
	}
	return t.Format(layout)
}
