package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// migrateOpts are the options of `prescient migrate`.
type migrateOpts struct {
	json bool
}

// Validate accepts every migrateOpts.
func (o *migrateOpts) Validate() error { return nil }

func (e *env) migrateCommand() *cobra.Command {
	o := &migrateOpts{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or update prescient's tables and record the slot grid and check catalog",
		Long: `migrate brings the database schema up to date (it is safe to run repeatedly,
and from several processes at once) and records in the database the configured
slot grid, so that the SQL function prescient_schedule rounds check times
exactly as the engine does, and the catalog of this binary's checks and the
events they await, so that prescient_resolve (and resolve from any client)
knows which checks an event settles before any server has started.

Run it again after changing slots.resolution or slots.offset, or deploying
checks that await new events. (A starting server records both too.) A
configuration that sets neither keeps the grid already recorded.

When stderr is a terminal, a progress line there says which step runs. --json
prints what was done as one JSON document for scripts.`,
		Example: `  PRESCIENT_DATABASE_URL=postgres://app@localhost:5432/app prescient migrate
  prescient migrate --config /etc/prescient.yaml
  prescient migrate --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			prog := newProgress(cmd.ErrOrStderr(), "migrate")
			e.progress = prog
			prog.set("opening the database")
			st, err := openStore(cmd.Context(), cfg, false, false)
			if err != nil {
				prog.clear()
				return err
			}
			defer st.Close()
			if !o.json {
				// First, so that a failure below still says where; on a line
				// of its own when stdout is the progress line's terminal.
				prog.clear()
				fmt.Fprintf(cmd.OutOrStdout(), "database: %s\n", describeOpen(cmd.Context(), st, cfg))
			}
			if _, others := otherInstalls(cmd.Context(), st); len(others) > 0 {
				prog.clear()
				what := "schema %s of this database holds"
				if len(others) > 1 {
					what = "schemas %s of this database hold"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: "+what+" prescient's tables already; this migrate makes another, empty set: "+
					"if your jobs are there (a store `prescient copy --to-schema` copied), set database.schema instead\n", strings.Join(others, ", "))
			}
			res, err := e.migrate(cmd.Context(), st, cfg, prog)
			if err != nil {
				prog.clear()
				return err
			}
			prog.done("migrated; %d check(s) recorded", res.Checks)
			if o.json {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			kept := ""
			if res.GridKept {
				kept = " (kept from the database: the configuration does not set slots.resolution or slots.offset)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrated; slot grid %s%s and %d check(s) recorded\n", res.grid, kept, res.Checks)
			if res.Replaced != "" {
				// Said once more, for the operator who changed it by
				// mistake: the servers and the SQL functions follow it.
				sqlFollows := ""
				if _, ok := st.(*postgres.Store); ok {
					sqlFollows = "prescient_schedule rounds to the new one now, "
				}
				fmt.Fprintf(cmd.OutOrStdout(), "the slot grid recorded before, %s, is replaced: %s"+
					"restart the servers with it, and their sweep moves the jobs scheduled on the old one onto it\n", res.Replaced, sqlFollows)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print what was done as JSON for scripts")
	return cmd
}

// migrateResult is what migrate did; its --json output.
type migrateResult struct {
	// Database names the database, without any password.
	Database string `json:"database"`
	// Resolution and Offset are the slot grid recorded.
	Resolution string `json:"grid_resolution"`
	Offset     string `json:"grid_offset"`
	// GridKept says the grid is the one already recorded in the database:
	// the configuration sets neither slots.resolution nor slots.offset.
	GridKept bool `json:"grid_kept"`
	// Checks counts the checks of this binary recorded in the catalog.
	Checks int `json:"checks_recorded"`
	// Replaced is the grid recorded before, when this one replaced it
	// ("every 15m0s"); empty otherwise.
	Replaced string `json:"grid_replaced,omitempty"`

	grid slots.Grid
}

// migrate runs the store's migrations and saves the grid and the catalog of
// the options' checks. A configuration that does not set the grid keeps the
// one recorded in the database (see useRecordedGrid): only a configuration
// that sets it changes it.
func (e *env) migrate(ctx context.Context, st prescient.Store, cfg *Config, prog *progress) (*migrateResult, error) {
	res := &migrateResult{Database: describeOpen(ctx, st, cfg)}
	prog.set("applying the schema migrations")
	// A schema a newer prescient migrated is refused here, where the point
	// is to bring it to this binary's version (run only warns of it).
	if sv, ok := st.(schemaVersioner); ok {
		if current, latest, err := sv.SchemaVersion(ctx); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		} else if current > latest {
			return nil, fmt.Errorf("migrate: %w (its version is %d, this one's last is %d)", prescient.ErrSchemaNewer, current, latest)
		}
	}
	// The store's errors say "migrate", "save grid" and "save catalog".
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	recorded, err := useRecordedGrid(ctx, st.Driver(), cfg, false)
	if err != nil {
		return nil, err
	}
	grid := cfg.clientConfig().Grid
	if old, err := st.Driver().GridGet(ctx); err == nil && (old.Resolution != grid.Resolution || old.Offset != grid.Offset) {
		res.Replaced = gridText(old)
	}
	prog.set("recording the slot grid %s", gridText(grid))
	if err := st.Driver().GridSave(ctx, grid); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	// The declared checks' names and awaited events, for the catalog; their
	// queries are prepared by the commands that run them.
	if err := e.declare(ctx, st, cfg, false); err != nil {
		return nil, err
	}
	pc := e.clientConfig(cfg, e.logger(cfg))
	client, err := prescient.NewClient(st, &pc)
	if err != nil {
		return nil, contextError{"migrate", err}
	}
	prog.set("recording the check catalog")
	if err := client.SyncCatalog(ctx); err != nil {
		return nil, contextError{"migrate", err}
	}
	res.grid, res.GridKept, res.Checks = grid, recorded, len(e.opts.Checks.All())
	res.Resolution, res.Offset = grid.Resolution.String(), grid.Offset.String()
	return res, nil
}
