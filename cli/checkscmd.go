package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient/guards"
)

// checksOpts are the flags of `prescient checks`.
type checksOpts struct {
	json    bool
	prepare bool
}

// Validate accepts every checksOpts.
func (o *checksOpts) Validate() error { return nil }

func (e *env) checksCommand() *cobra.Command {
	o := &checksOpts{}
	cmd := &cobra.Command{
		Use:   "checks",
		Short: "List the checks this binary knows: its Go checks and those the configuration declares in SQL",
		Long: `checks lists every check a server started with this binary and configuration
runs: the Go checks built into the binary (kind go, or go batch for a batch
check) and the checks the configuration's checks section declares in SQL
(kind sql), each with the entity it watches (sql, or a Go check that sets
checks.Opts.Entity; - for any), the events it awaits
(what resolve settles it with), the sinks its events go to, its batch size
(jobs per call, for batch checks) and its guards as they apply to it: its
own where it sets them, the server's otherwise. Each sql check is then shown
with its anchor, its ladder of stages and its query.

It validates the configuration, but does not use the database. --prepare
also prepares each declared query against the database, as run does at
start-up, and shows the columns it returns: a query that would fail there
fails here, naming the check and its line.

--json prints one JSON array of the checks for scripts.`,
		Example: `  prescient checks --config prescient.yaml
  prescient checks --config prescient.yaml --prepare
  prescient checks --json | jq -r '.[] | select(.kind == "sql") | .name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			if !o.prepare {
				// The declared checks against the binary's Go checks, as
				// every command that opens the database checks them.
				if err := e.declare(cmd.Context(), nil, cfg, false); err != nil {
					return err
				}
			} else {
				st, err := openStore(cmd.Context(), cfg, false, false)
				if err != nil {
					return err
				}
				defer st.Close()
				if !o.json {
					// First, so that a failure below still says where.
					fmt.Fprintf(cmd.OutOrStdout(), "database: %s\n", describeOpen(cmd.Context(), st, cfg))
				}
				if err := e.declare(cmd.Context(), st, cfg, true); err != nil {
					return err
				}
			}
			list := e.checkList(cfg)
			if o.json {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			return printChecks(cmd.OutOrStdout(), list, o.prepare)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON for scripts")
	cmd.Flags().BoolVar(&o.prepare, "prepare", false, "prepare the declared queries against the database, as run does")
	cmd.AddCommand(e.retireCommand())
	return cmd
}

// checkInfo is one check as `prescient checks` lists it.
type checkInfo struct {
	Name string `json:"name"`
	// Kind is go, go batch or sql.
	Kind string `json:"kind"`
	// Entity is the entity a sql check watches, or a Go check that sets
	// checks.Opts.Entity; empty for any.
	Entity string   `json:"entity,omitempty"`
	Awaits []string `json:"awaits"`
	Sinks  []string `json:"sinks"`
	// BatchSize is the jobs per call of a batch check; 0 for a single-job
	// check.
	BatchSize int        `json:"batch_size,omitempty"`
	Guards    guardsInfo `json:"guards"`
	// The declaration of a sql check.
	Anchor string      `json:"anchor,omitempty"`
	Stages []stageInfo `json:"stages,omitempty"`
	Query  string      `json:"query,omitempty"`
	// Columns are the columns of the prepared query (--prepare).
	Columns []string `json:"columns,omitempty"`
}

// guardsInfo are the guards that apply to a check; Own names those it sets
// itself (the others are the server's).
type guardsInfo struct {
	MaxChecks int      `json:"max_checks"`
	Runtime   string   `json:"runtime"`
	Horizon   string   `json:"horizon"`
	Own       []string `json:"own,omitempty"`
}

type stageInfo struct {
	After    string `json:"after"`
	Event    string `json:"event"`
	Stage    string `json:"stage"`
	Severity string `json:"severity,omitempty"`
}

// checkList returns the checks of the binary and of cfg, sorted by name.
func (e *env) checkList(cfg *Config) []checkInfo {
	goChecks := e.opts.Checks
	if e.declared != nil {
		goChecks = e.declared.goChecks
	}
	server := cfg.clientConfig()
	var out []checkInfo
	for _, c := range goChecks.All() {
		info := checkInfo{Name: c.Name, Kind: "go", Entity: c.Opts.Entity, Awaits: nonNil(c.Opts.Awaits), Sinks: nonNil(c.Opts.Sinks),
			Guards: guardsOf(server.Guards, c.Opts.Guards)}
		if c.Batch != nil {
			info.Kind = "go batch"
			info.BatchSize = batchOf(server.BatchSize, c.Opts.BatchSize)
		}
		out = append(out, info)
	}
	for _, name := range cfg.checkNames() {
		spec := cfg.spec(name)
		info := checkInfo{Name: name, Kind: "sql", Entity: spec.Entity, Awaits: nonNil(spec.Awaits), Sinks: nonNil(spec.Sinks),
			BatchSize: batchOf(server.BatchSize, spec.BatchSize), Guards: guardsOf(server.Guards, spec.Guards),
			Anchor: spec.Anchor, Query: strings.TrimSpace(spec.Query)}
		for _, st := range spec.Stages {
			info.Stages = append(info.Stages, stageInfo{After: st.After.String(), Event: st.Event, Stage: st.StageName(), Severity: st.Severity})
		}
		if e.declared != nil {
			if chk, ok := e.declared.prepared[name]; ok {
				for _, col := range chk.Columns() {
					info.Columns = append(info.Columns, col.Name)
				}
			}
		}
		out = append(out, info)
	}
	sortChecks(out)
	return out
}

func sortChecks(list []checkInfo) {
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func batchOf(server, own int) int {
	if own > 0 {
		return own
	}
	return server
}

func guardsOf(server, own guards.Limits) guardsInfo {
	l := server.Override(own)
	g := guardsInfo{MaxChecks: l.MaxChecks, Runtime: l.Runtime.String(), Horizon: limitText(l.Horizon)}
	if own.MaxChecks != 0 {
		g.Own = append(g.Own, "max_checks")
	}
	if own.Runtime != 0 {
		g.Own = append(g.Own, "runtime")
	}
	if own.Horizon != 0 {
		g.Own = append(g.Own, "horizon")
	}
	return g
}

// limitText writes a duration guard as the configuration does: -1 for no
// limit.
func limitText(d time.Duration) string {
	if d == -1 {
		return "-1"
	}
	return d.String()
}

// printChecks writes the list for people: a table of every check, then the
// declaration of each sql check.
func printChecks(out io.Writer, list []checkInfo, prepared bool) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(out, "no checks: this binary has no Go checks, and the configuration declares none (see the checks section of config.example.yaml)")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tKIND\tENTITY\tAWAITS\tSINKS\tBATCH\tMAX CHECKS\tRUNTIME\tHORIZON")
	starred := false
	for _, c := range list {
		starred = starred || len(c.Guards.Own) > 0
		batch := "-"
		if c.BatchSize > 0 {
			batch = fmt.Sprint(c.BatchSize)
		}
		maxChecks := fmt.Sprint(c.Guards.MaxChecks)
		runtime, horizon := c.Guards.Runtime, c.Guards.Horizon
		for _, own := range c.Guards.Own {
			switch own {
			case "max_checks":
				maxChecks += "*"
			case "runtime":
				runtime += "*"
			case "horizon":
				horizon += "*"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Kind, dash(c.Entity), dash(strings.Join(c.Awaits, ",")),
			dash(strings.Join(c.Sinks, ",")), batch, maxChecks, runtime, horizon)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if starred {
		fmt.Fprintln(out, "(* the check's own guard; the others are the server's; -1: no limit)")
	} else {
		fmt.Fprintln(out, "(every guard is the server's; -1: no limit)")
	}
	for _, c := range list {
		if c.Kind != "sql" {
			continue
		}
		anchor := "the job's first check"
		if c.Anchor != "" {
			anchor = "column " + c.Anchor
		}
		fmt.Fprintf(out, "\n%s: entity %s, stages counted from %s\n", c.Name, c.Entity, anchor)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  AFTER\tEVENT\tSEVERITY\tSTAGE")
		for _, st := range c.Stages {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", st.After, st.Event, dash(st.Severity), st.Stage)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out, "  query:")
		for _, l := range strings.Split(c.Query, "\n") {
			fmt.Fprintf(out, "    %s\n", l)
		}
		if prepared {
			fmt.Fprintf(out, "  prepared: returns %s\n", strings.Join(c.Columns, ", "))
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
